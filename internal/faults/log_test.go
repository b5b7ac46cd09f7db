package faults_test

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// logLines is a logger that writes one line per entry to w, with the time.
func logLines(w io.Writer) logr.Logger {
	var mu sync.Mutex
	return funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "%s %s\n", time.Now().Format("15:04:05.000"), args)
	}, funcr.Options{Verbosity: 0})
}
