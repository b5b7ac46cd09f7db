package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Webhooks are the webhook server's metrics, with controller-runtime's
// names, labels and buckets.
type Webhooks struct {
	latency  *prometheus.HistogramVec
	requests *prometheus.CounterVec
	inFlight *prometheus.GaugeVec
	panics   prometheus.Counter
}

// NewWebhooks registers the webhook metrics with reg, reusing collectors
// already there.
func NewWebhooks(reg prometheus.Registerer) (*Webhooks, error) {
	w := &Webhooks{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "controller_runtime_webhook_latency_seconds",
			Help:    "Histogram of the latency of processing admission requests",
			Buckets: prometheus.ExponentialBuckets(10e-9, 10, 12),
		}, []string{"webhook"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "controller_runtime_webhook_requests_total",
			Help: "Total number of admission requests by HTTP status code.",
		}, []string{"webhook", "code"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "controller_runtime_webhook_requests_in_flight",
			Help: "Current number of admission requests being served.",
		}, []string{"webhook"}),
	}
	var err error
	if w.latency, err = register(reg, w.latency); err != nil {
		return nil, err
	}
	if w.requests, err = register(reg, w.requests); err != nil {
		return nil, err
	}
	if w.inFlight, err = register(reg, w.inFlight); err != nil {
		return nil, err
	}
	panics := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "controller_runtime_webhook_panics_total",
		Help: "Total number of webhook panics",
	}, nil)
	if panics, err = register(reg, panics); err != nil {
		return nil, err
	}
	w.panics = panics.WithLabelValues()
	return w, nil
}

// Webhook is the series of one webhook path, resolved once.
type Webhook struct {
	Latency  prometheus.Observer
	InFlight prometheus.Gauge
	Panics   prometheus.Counter
	ok       prometheus.Counter
	requests *prometheus.CounterVec
	path     string
}

// Webhook returns the series of the webhook served at path. As in
// controller-runtime, the counts of codes 200 and 500 exist from the start.
func (w *Webhooks) Webhook(path string) Webhook {
	w.requests.WithLabelValues(path, "500")
	return Webhook{
		Latency:  w.latency.WithLabelValues(path),
		InFlight: w.inFlight.WithLabelValues(path),
		Panics:   w.panics,
		ok:       w.requests.WithLabelValues(path, "200"),
		requests: w.requests,
		path:     path,
	}
}

// Served counts a request answered with the HTTP status code.
func (w Webhook) Served(code int) {
	if code == 200 {
		w.ok.Inc()
		return
	}
	w.requests.WithLabelValues(w.path, strconv.Itoa(code)).Inc()
}
