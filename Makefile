# ctrl's build. `make test` is what CI runs (.ci/run).
GO ?= go
export GOFLAGS ?= -buildvcs=false

.PHONY: test testbins check controlplane demo bench bench-faults bench-webhooks generate

## test: build the control plane, vet, and run every test under -race,
## the integration suite against a real kube-apiserver included.
## The control plane, the vet and the test binaries build side by side, each
## target's output printed whole when it is done.
test:
	$(MAKE) --jobs=3 --output-sync=target controlplane check testbins
	$(GO) test -race -count=1 -timeout 25m ./...

# testbins compiles the test binaries without running them, so that the work
# overlaps the control plane's build, which uses one core for much of its time.
testbins:
	@mkdir -p $(TESTBINS)
	$(GO) test -race -c -o $(TESTBINS)/ ./...
TESTBINS ?= $(or $(TMPDIR),/tmp)/ctrl-testbins

## check: gofmt and go vet.
check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

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

## generate: regenerate the table of built-in resources.
generate:
	$(GO) generate ./internal/builtin
