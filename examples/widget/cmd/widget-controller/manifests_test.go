package main

import (
	"flag"
	"testing"

	"github.com/typedctrl/ctrl/ctrltest"
	"github.com/typedctrl/ctrl/examples/widget"
)

// TestManifests checks that examples/widget/config holds what this program
// needs to run in a cluster, from its wiring (widget.Setup) and its options
// with the flags' defaults: the Widget's CRD, the ServiceAccount and its
// roles, the Deployment and the metrics Service. To write them:
//
//	CTRL_MANIFESTS=write go test -run '^TestManifests$' ./examples/widget/cmd/widget-controller
func TestManifests(t *testing.T) {
	var defaults flags
	defaults.register(flag.NewFlagSet("defaults", flag.ContinueOnError))
	ctrltest.Manifests(t, "../../config", ctrltest.Deployment{
		Name:    "widget-controller",
		Options: options(defaults),
		Setup:   widget.Setup,
	})
}
