// Command raw is the benchmark's ConfigMap controller written directly with
// client-go: shared informer, typed work queue, lister. See package harness
// for its flags and protocol.
package main

import "github.com/typedctrl/ctrl/bench/internal/rawmain"

func main() { rawmain.Main("raw", rawmain.Options{}) }
