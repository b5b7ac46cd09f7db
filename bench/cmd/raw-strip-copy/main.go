// Command raw-strip-copy is raw-strip with a DeepCopy of each object before
// reconcile, the copy ctrl and controller-runtime make: it separates the cost
// of that guarantee from the rest of a library. It is not run by default.
// See package harness for its flags and protocol.
package main

import "github.com/typedctrl/ctrl/bench/internal/rawmain"

func main() { rawmain.Main("raw-strip-copy", rawmain.Options{Strip: true, Copy: true}) }
