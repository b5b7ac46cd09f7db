// Command raw-strip-nogzip is raw-strip with rest.Config.DisableCompression,
// so that the API server sends its responses and watch streams uncompressed,
// as it does to ctrl by default: it separates what that default buys from
// the rest of a library. It is a diagnostic. See package harness for its
// flags and protocol.
package main

import "github.com/typedctrl/ctrl/bench/internal/rawmain"

func main() { rawmain.Main("raw-strip-nogzip", rawmain.Options{Strip: true, NoCompression: true}) }
