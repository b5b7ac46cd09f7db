package webhook_test

import (
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/typedctrl/ctrl/internal/webhook"
)

// TestDeclaredBodiesPinNoMemory: 40 clients each declare a body of nearly
// the limit (7 MiB) and send none of it, as a client may until the
// server's read timeout. While their requests wait for the bodies, the
// server holds memory for what came (headers), not for what was declared:
// 280 MB if it did.
func TestDeclaredBodiesPinNoMemory(t *testing.T) {
	f := newFixture(t)
	if err := webhook.AddAdmission(f.Server, validator()); err != nil {
		t.Fatal(err)
	}
	const clients, declared = 40, 7_000_000
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	addr := strings.TrimPrefix(f.url, "http://")
	for range clients {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", validatePath, declared)
		if err != nil {
			t.Fatal(err)
		}
	}
	// Every request is reading its body: its goroutine is in readBody.
	for deadline := time.Now().Add(time.Minute); readingBodies() < clients; time.Sleep(10 * time.Millisecond) { // polling goroutines
		if time.Now().After(deadline) {
			t.Fatalf("after a minute, %d of %d requests read their bodies", readingBodies(), clients)
		}
	}
	runtime.GC()
	var during runtime.MemStats
	runtime.ReadMemStats(&during)
	grew := int64(during.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d requests waiting for %d declared bytes each: the heap grew by %d bytes", clients, declared, grew)
	if limit := int64(clients * declared / 10); grew > limit {
		t.Errorf("%d requests that declared %d bytes and sent none hold %d bytes of heap, want under %d", clients, declared, grew, limit)
	}
}

// readingBodies counts the goroutines in readBody.
func readingBodies() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "internal/webhook.readBody(")
		}
		buf = make([]byte, 2*len(buf))
	}
}
