// Command raw-strip is the raw client-go controller with an informer
// transform that drops managedFields: the floor of the benchmark. See
// package harness for its flags and protocol.
package main

import "github.com/typedctrl/ctrl/bench/internal/rawmain"

func main() { rawmain.Main("raw-strip", rawmain.Options{Strip: true}) }
