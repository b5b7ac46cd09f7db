// Command ctrl is the benchmark's ConfigMap controller written with ctrl,
// with its defaults: reconcile gets its own deep copy of the cached object.
// See package harness for its flags and protocol.
package main

import "github.com/typedctrl/ctrl/bench/internal/ctrlmain"

func main() { ctrlmain.Main("ctrl", false) }
