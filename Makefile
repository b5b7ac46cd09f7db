# ctrl's build. `make test` is what CI runs (.ci/run).
GO ?= go
export GOFLAGS ?= -buildvcs=false

.PHONY: test check controlplane demo bench generate

## test: build the control plane, vet, and run every test under -race,
## the integration suite against a real kube-apiserver included.
test: controlplane check
	$(GO) test -race -count=1 -timeout 25m ./...

## check: gofmt and go vet.
check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## controlplane: build kube-apiserver and etcd from the Go module proxy into bin/.
controlplane:
	bash hack/controlplane/build.sh

## demo: run the example Widget controller against a real control plane.
demo: controlplane
	$(GO) run ./examples/demo

## bench: compare ctrl with controller-runtime and client-go on a real control
## plane (bench/ is its own module); writes BENCHMARKS.md.
bench: controlplane
	cd bench && $(GO) run ./cmd/run -write

## generate: regenerate the table of built-in resources.
generate:
	$(GO) generate ./internal/builtin
