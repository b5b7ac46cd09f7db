module github.com/typedctrl/ctrl

go 1.26.0

require (
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/prometheus/client_golang v1.23.2 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	k8s.io/api v0.37.2 // indirect
	k8s.io/apimachinery v0.37.2 // indirect
	k8s.io/client-go v0.37.2 // indirect
)
