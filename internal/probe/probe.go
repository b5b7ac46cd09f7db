// Package probe tells a manager when API servers that its requests could
// not reach answer again. A cache whose watch reconnects tells it too; the
// probe covers the servers whose watches never broke, or that no cache
// watches: while any reconcile waits for a server, it asks that server's
// /readyz every half second or so. [Tag] marks the errors of the requests
// that could not reach a server, so that only those wait for it.
package probe

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// Prober runs at most one probe loop at a time. The zero value is ready.
type Prober struct {
	mu      sync.Mutex
	running bool
}

// Funcs are what the loop asks and tells its manager.
type Funcs struct {
	// Waited returns the clusters whose servers reconciles wait for; the
	// loop ends when none are.
	Waited func() []string
	// Ready reports whether the server of cluster answers.
	Ready func(ctx context.Context, cluster string) bool
	// Answered is called for each cluster whose server answered.
	Answered func(cluster string)
}

// Start runs the loop with run (such as a WaitGroup's Go) unless it runs
// already; it ends when ctx is done or nothing is waited for.
func (p *Prober) Start(ctx context.Context, run func(func()), f Funcs) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running {
		return
	}
	p.running = true
	run(func() {
		defer func() {
			p.mu.Lock()
			p.running = false
			p.mu.Unlock()
		}()
		loop(ctx, f)
	})
}

func loop(ctx context.Context, f Funcs) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		t.Reset(250*time.Millisecond + rand.N(500*time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		clusters := f.Waited()
		if len(clusters) == 0 {
			return
		}
		for _, cluster := range clusters {
			if f.Ready(ctx, cluster) {
				f.Answered(cluster)
			}
		}
	}
}

// Ready asks the /readyz of the API server cfg reaches, through hc, which
// every authenticated client may read, and reports whether it answered
// 200 within two seconds.
func Ready(ctx context.Context, cfg *rest.Config, hc *http.Client) bool {
	u, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return false
	}
	u.Path = "/readyz"
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
