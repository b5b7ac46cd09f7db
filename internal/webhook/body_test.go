package webhook

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// chunks reads data a few bytes at a time, as a slow client sends it.
type chunks struct {
	data []byte
	size int
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.size)], c.data)
	c.data = c.data[n:]
	return n, nil
}

// checkReadBody reads body, sent size bytes at a time, from a request
// declaring declared bytes: within the limit it comes back whole, over it
// or empty it is an error, and the buffer holding it is sized by what
// came, never by what was declared.
func checkReadBody(t *testing.T, body []byte, declared int64, size int) {
	t.Helper()
	r := &http.Request{ContentLength: declared, Body: io.NopCloser(&chunks{data: body, size: max(size, 1)})}
	got, err := readBody(r)
	switch {
	case declared > maxBody:
		if err == nil || !strings.Contains(err.Error(), "over the limit") {
			t.Fatalf("declared %d: got %v, want an error saying it is over the limit", declared, err)
		}
	case len(body) > maxBody:
		if err == nil || !strings.Contains(err.Error(), "over the limit") {
			t.Fatalf("a body of %d bytes: got %v, want an error saying it is over the limit", len(body), err)
		}
	case len(body) == 0:
		if err == nil || !strings.Contains(err.Error(), "empty") {
			t.Fatalf("an empty body: got %v, want an error saying so", err)
		}
	case err != nil:
		t.Fatalf("a body of %d bytes declared as %d: got %v", len(body), declared, err)
	case !bytes.Equal(got, body):
		t.Fatalf("a body of %d bytes: got %d other bytes", len(body), len(got))
	case cap(got) > 2*len(body)+1024:
		t.Fatalf("a body of %d bytes declared as %d: held in %d bytes, want at most twice what came", len(body), declared, cap(got))
	}
}

func TestReadBody(t *testing.T) {
	review := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1"}}`)
	for _, tt := range []struct {
		name     string
		body     []byte
		declared int64
		size     int
	}{
		{"declared", review, int64(len(review)), 4096},
		{"unknown length", review, -1, 4096},
		{"a byte at a time", review, int64(len(review)), 1},
		{"declares the limit, sends a little", review, maxBody, 7},
		{"declares over the limit", review, maxBody + 1, 4096},
		{"empty", nil, 0, 4096},
		{"at the limit", bytes.Repeat([]byte{' '}, maxBody), maxBody, 64 << 10},
		{"over the limit, length unknown", bytes.Repeat([]byte{' '}, maxBody+1), -1, 64 << 10},
	} {
		t.Run(tt.name, func(t *testing.T) { checkReadBody(t, tt.body, tt.declared, tt.size) })
	}
}

// FuzzReadBody reads any body, sent any number of bytes at a time, from a
// request declaring any length: see checkReadBody.
func FuzzReadBody(f *testing.F) {
	f.Add([]byte(`{"kind":"AdmissionReview"}`), int64(26), 4096)
	f.Add([]byte(`{}`), int64(maxBody), 1)
	f.Add([]byte{}, int64(-1), 512)
	f.Add([]byte("x"), int64(maxBody+1), 1)
	f.Fuzz(func(t *testing.T, body []byte, declared int64, size int) {
		if size <= 0 {
			size = 1
		}
		checkReadBody(t, body, declared, size)
	})
}
