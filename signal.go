package ctrl

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

var signalOnce = sync.OnceValue(func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ch
		cancel()
		<-ch
		os.Exit(1) // a second signal: the operator does not want to wait
	}()
	return ctx
})

// SignalContext returns a context that is canceled on the first SIGINT or
// SIGTERM, for [Manager.Start]; a second signal exits the process with
// status 1 at once. Every call returns the same context.
func SignalContext() context.Context { return signalOnce() }
