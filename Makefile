# ctrl's build. `make test` is what CI runs (.ci/run).
GO ?= go
export GOFLAGS ?= -buildvcs=false

# controller-gen, built from the tools module at the version its go.mod
# names, fetched from the module proxy like everything else.
CONTROLLER_GEN := $(CURDIR)/bin/controller-gen

.PHONY: test testbins check controlplane explore demo bench bench-shapes bench-faults bench-webhooks generate check-generated fuzz test-skew

## test: build the control plane, vet, check that generated files are
## current, and run every test under -race, the integration suite against a
## real kube-apiserver included. The control plane, the checks and the test
## binaries build side by side, each target's output printed whole when it
## is done. -short: the searches of ctrltest.Explore run a sample of their
## plans (`make explore` runs them all).
test:
	$(MAKE) --jobs=3 --output-sync=target controlplane check check-generated testbins
	$(GO) test -race -short -count=1 -timeout 25m ./...
	$(GO) test -C hack/apicheck -count=1 ./...

## test-skew: run the suites that start a real API server (internal/integration,
## internal/production, internal/faults, ctrltest, examples) against each
## supported Kubernetes release, 1.34 to 1.37, building each release's control
## plane first (hack/skew.sh; README's "Supported Kubernetes versions"). Not part
## of `make test`: on 2 cores it takes about 20 minutes with the four control
## planes built (4 to 6 minutes per release), plus a cold kube-apiserver build of
## 10 to 20 minutes for each release not built yet. SKEW_RELEASES="1.34" runs one.
test-skew:
	GO=$(GO) bash hack/skew.sh

## explore: run every plan of the searches of ctrltest.Explore over the
## examples, and ctrltest's own test of the search (a few minutes). The test
## binaries are built together, then run in their packages' directories, two
## at a time, each output printed whole, passing or not: the line each
## search ends with says what it tested.
EXPLORE := ctrltest examples/provisioner examples/quickstart examples/widget
explore: controlplane
	@mkdir -p $(TESTBINS)/explore
	$(GO) test -race -c -o $(TESTBINS)/explore/ $(addprefix ./,$(EXPLORE))
	$(MAKE) --jobs=2 --output-sync=target $(addprefix explore/,$(EXPLORE))
explore/%:
	cd $* && $(TESTBINS)/explore/$(notdir $*).test -test.count=1 -test.timeout=30m -test.run 'Plans|SearchFindsBugs'

# testbins compiles the test binaries without running them, so that the work
# overlaps the control plane's build, which uses one core for much of its time;
# only of packages with tests, since two packages of one name (cmd/scaffold,
# internal/scaffold) would both write scaffold.test.
testbins:
	@mkdir -p $(TESTBINS)
	$(GO) test -race -c -o $(TESTBINS)/ $$($(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./...)
TESTBINS ?= $(or $(TMPDIR),/tmp)/ctrl-testbins

## check: gofmt, go vet, and the API-compatibility gate: the exported API of
## ctrl and ctrltest against the last release (hack/apicheck/baseline), which
## fails on an incompatible change that CHANGELOG.md's Unreleased section does
## not name in an entry marked **Breaking:**. `make test` also runs the gate's
## own tests, which plant such a change.
check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run -C hack/apicheck . -root ../..

## fuzz: run each fuzz target for FUZZTIME (10 minutes unless set, as in
## `make fuzz FUZZTIME=30s`), one after another. `make test` runs their
## seed corpora (the f.Add calls and testdata/fuzz) as ordinary tests. A
## failing input is written to the package's testdata/fuzz/<target>/:
## commit it with the fix.
FUZZTIME ?= 10m
# Go minimizes each input that reaches new code for up to a minute; the
# generated protobuf code is so large that new inputs come often, and with
# that default a short run spends most of its time minimizing.
FUZZMINIMIZETIME ?= 5s
FUZZ_TARGETS := \
	./internal/binding:FuzzFilter \
	./internal/binding:FuzzStream \
	./internal/webhook:FuzzAdmissionReview \
	./internal/webhook:FuzzConversionReview \
	./internal/webhook:FuzzReadBody \
	./internal/provider:FuzzKubeconfigDir \
	./internal/provider:FuzzKubeconfig \
	./internal/access:FuzzBearer
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "$(GO) test -run='^$$' -fuzz='^'$$name'$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=$(FUZZMINIMIZETIME) $$pkg"; \
		$(GO) test -run='^$$' -fuzz="^$$name\$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=$(FUZZMINIMIZETIME) $$pkg; \
	done

## controlplane: build kube-apiserver and etcd from the Go module proxy into bin/.
controlplane:
	bash hack/controlplane/build.sh

## demo: run the example Widget controller against a real control plane.
demo: controlplane
	$(GO) build -o bin/demo ./examples/demo
	./bin/demo

## bench: compare ctrl with controller-runtime and client-go on a real control
## plane (bench/ is its own module); writes its section of BENCHMARKS.md.
bench: controlplane
	cd bench && $(GO) run ./cmd/run -write

## bench-shapes: how long a controller takes to see a write while another
## on the same cache spends 5 to 200 ms, or 10 ms of CPU, in each reconcile,
## with ctrl, controller-runtime and client-go; writes its section of
## BENCHMARKS.md (about 12 minutes).
bench-shapes: controlplane
	cd bench && $(GO) run ./cmd/shapes -write

## bench-faults: how fast ctrl, controller-runtime and client-go converge after
## API server kills and paused watches that come back to 410 Gone, after a kill
## with no write after it, and after connections go silent; writes its section
## of BENCHMARKS.md.
bench-faults: controlplane
	cd bench && $(GO) run ./cmd/faults -write

## bench-webhooks: admission requests per second through ctrl's webhook
## server and controller-runtime's; writes its section of BENCHMARKS.md.
bench-webhooks:
	cd bench && $(GO) run ./cmd/webhooks -write

## bench-scale: memory of ctrl, controller-runtime and client-go caching 10k
## to 100k Pods (whole, metadata only, projected), CPU per update, GOGC and
## GOMEMLIMIT, and a sharded controller at 1-3 replicas; writes its section
## of BENCHMARKS.md and charts in bench/charts (about 40 minutes).
.PHONY: bench-scale bench-fleet
bench-scale: controlplane
	cd bench && $(GO) run ./cmd/scale -write

## bench-fleet: memory and goroutines per member cluster, ctrl's fleet
## against one controller-runtime cluster.Cluster per member; writes its
## section of BENCHMARKS.md.
bench-fleet: controlplane
	cd bench && $(GO) run ./cmd/fleet -write

## generate: regenerate the table of built-in resources, and the example
## Widget's deep copies and CustomResourceDefinition from its types, with
## controller-gen.
generate: $(CONTROLLER_GEN)
	$(GO) generate ./internal/builtin
	$(call widget-gen,examples/widget)

## check-generated: fail if `make generate` would change the Widget's
## generated files (the built-in table has a test of its own:
## TestTableCoversClientset). It compares with the working tree, not a
## commit, so it holds on a clean checkout and on one being edited alike.
check-generated: $(CONTROLLER_GEN)
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(call widget-gen,$$tmp) && \
	for f in zz_generated.deepcopy.go crd.yaml; do \
		diff -u examples/widget/$$f "$$tmp/$$f" || { echo "examples/widget/$$f is stale: run make generate"; exit 1; }; \
	done

# widget-gen writes the Widget's zz_generated.deepcopy.go and crd.yaml into
# the directory $(1).
widget-gen = $(CONTROLLER_GEN) object paths=./examples/widget output:object:dir=$(1) && \
	$(CONTROLLER_GEN) crd paths=./examples/widget output:crd:stdout > $(1)/crd.yaml

$(CONTROLLER_GEN): hack/tools/go.mod hack/tools/go.sum
	$(GO) build -C hack/tools -o $(CONTROLLER_GEN) sigs.k8s.io/controller-tools/cmd/controller-gen
