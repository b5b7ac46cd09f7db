// Command ctrl-copy is ctrl with ControllerOptions.CopyObject: reconcile
// gets its own deep copy of the cached object, as controller-runtime's
// client.Get makes and as ctrl did by default before it shared the cache's
// object. It is a diagnostic. See package harness for its flags and
// protocol.
package main

import "github.com/typedctrl/ctrl/bench/internal/ctrlmain"

func main() { ctrlmain.Main("ctrl-copy", true) }
