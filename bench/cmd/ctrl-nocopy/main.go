// Command ctrl-nocopy is ctrl with ControllerOptions.UnsafeDisableDeepCopy:
// reconcile reads the cached object itself, as raw-strip's lister Get does.
// It is a diagnostic, not run by default. See package harness for its flags
// and protocol.
package main

import "github.com/typedctrl/ctrl/bench/internal/ctrlmain"

func main() { ctrlmain.Main("ctrl-nocopy", true) }
