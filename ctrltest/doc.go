// Package ctrltest runs a real kube-apiserver and etcd on loopback for the
// tests of controllers, as net/http/httptest runs an HTTP server for the
// tests of handlers. Client-go's fakes serve fast unit tests; a real API
// server serves the semantics they only imitate: resource versions and
// conflicts, generation, the status subresource, finalizers, server-side
// apply, validation.
//
// # Unit tests on fakes
//
// [NewFakeDynamic] is client-go's fake dynamic client set up to serve every
// type registered with ctrl.Register, for ctrl.Options.FakeDynamic, with no
// map of list kinds to write. [StartManager] runs a manager for the test's
// life, its log sent to the test by [Logger]:
//
//	mgr := ctrltest.StartManager(t, ctrl.Options{
//		FakeClientset: fake.NewClientset(),
//		FakeDynamic:   ctrltest.NewFakeDynamic(&Widget{...}),
//	}, widget.Setup)
//	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
//	defer cancel()
//	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
//		t.Fatal(err) // names each failing key with its last error
//	}
//
// # Binaries
//
// kube-apiserver and etcd are built from the Go module proxy, no downloads,
// by one command run in your module's directory:
//
//	go run github.com/typedctrl/ctrl/ctrltest/cmd/controlplane
//
// It builds the Kubernetes release that matches your k8s.io/client-go (v1.37.2
// for v0.37.2) into the user cache directory, where ctrltest looks for it
// from any module; $CTRL_CONTROLPLANE_BIN names another directory to both.
// A module whose go.mod replaces ctrl with a checkout also finds what `make
// controlplane` built in that checkout's bin directory. The first build
// takes several minutes; later runs return at once. A test that finds no
// binaries fails, saying which command to run: it is not skipped.
//
// # One control plane per test, or one per test binary
//
// [Start] gives a test its own control plane and stops it when the test
// ends:
//
//	func TestWidget(t *testing.T) {
//		env := ctrltest.Start(t, ctrltest.Options{CRDs: [][]byte{widget.CRD}})
//		mgr, err := ctrl.NewManager(ctrl.Options{Config: env.Config()})
//		...
//	}
//
// [Run] shares one between the tests of a package, from TestMain; they then
// keep apart by working in namespaces of their own:
//
//	var env *ctrltest.Env
//
//	func TestMain(m *testing.M) {
//		os.Exit(ctrltest.Run(m, ctrltest.Options{GenerateCRDs: true}, func(e *ctrltest.Env) error {
//			env = e
//			return nil
//		}))
//	}
//
// # Crashes, stale views, missed events
//
// [Explore] searches for the states production brings that a controller
// does not tolerate, as Sieve does: it runs a workload (the steps a user
// takes, with [Workload.Settle] between them) unperturbed, then once per
// plan drawn from that run: the manager crashed right after one of its
// writes, a resource's events held back so its view goes stale, a
// restarted manager served an older state (time travel), an event
// coalesced into the next. A plan whose end state differs from the
// unperturbed run's, or that does not settle, fails its subtest with the
// difference, what happened around the injection and the command that
// replays it; the search ends with a line of what it tested:
//
//	func TestWidgetPlans(t *testing.T) {
//		env := ctrltest.Start(t, ctrltest.Options{CRDs: [][]byte{widget.CRD}})
//		ctrltest.Explore(t, env, ctrltest.Exploration{Setup: widget.Setup, Workload: workload})
//	}
//
// [Search] returns the findings instead, for a test that expects some.
//
// # Manifests
//
// [Manifests] writes, from a program's own options and setup function and
// with no API server, the manifests that deploy it in kubebuilder's config/
// layout: its CRDs, ServiceAccount and exactly the RBAC rules its wiring
// needs, its Deployment and Services, and its webhooks' configurations and
// certificate. A test keeps them: it fails while they are stale.
//
//	func TestManifests(t *testing.T) {
//		ctrltest.Manifests(t, "../config", ctrltest.Deployment{Name: "backup-operator", Options: options(defaults), Setup: controller.Setup})
//	}
//
// # Guarantees
//
//   - Real: the API server is kube-apiserver of the release, on etcd, with
//     RBAC and the default admission plugins but ServiceAccount; /version
//     reports the release.
//   - Ready: Start, Run and New return once /readyz succeeds, the default
//     namespace exists and every CRD is served, past the two seconds in which
//     the API server holds back creates of a new CRD's resources.
//   - Private: each control plane has its own ports, certificates and
//     temporary directory; tests in parallel do not share state.
//   - Clean: stopping removes the processes and the directory. On Linux the
//     processes die with the test binary however it ends; the directory of
//     an ended test binary is removed by the next start.
//
// Only the API server and etcd run: no controller manager, no scheduler, no
// kubelet. Nothing garbage-collects the objects an owner leaves behind, a
// deleted namespace stays Terminating, and Pods are never scheduled.
package ctrltest
