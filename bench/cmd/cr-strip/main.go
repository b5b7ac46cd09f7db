// Command cr-strip is the benchmark's ConfigMap controller written with
// controller-runtime, its cache dropping managedFields
// (cache.TransformStripManagedFields). See package harness for its flags and
// protocol.
package main

import "github.com/typedctrl/ctrl/bench/internal/crctl"

func main() { crctl.Main("cr-strip", true) }
