// Command cr-default is the benchmark's ConfigMap controller written with
// controller-runtime and its default cache. See package harness for its
// flags and protocol.
package main

import "github.com/typedctrl/ctrl/bench/internal/crctl"

func main() { crctl.Main("cr-default", false) }
