// Package admission measures validating admission requests answered by
// ctrl's webhook server and by controller-runtime's, with the same
// validator, the same payload and the same client: HTTPS over loopback,
// HTTP/2 with keep-alive, as the API server calls webhooks. A third server,
// the floor, answers every request with a fixed response from a bare
// net/http TLS server: what the transport and the client cost by
// themselves.
//
// Benchmark is the body of both the Go benchmark (../../webhook_test.go)
// and the driver that writes BENCHMARKS.md (../../cmd/webhooks).
package admission

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/typedctrl/ctrl"
)

// Implementations, in the order they are reported.
var Implementations = []string{"ctrl", "controller-runtime", "floor"}

// Path is where every implementation serves the validator:
// controller-runtime's path for ConfigMaps, which ctrl derives too.
const Path = "/validate--v1-configmap"

// validate is the validator of every implementation: a few map lookups,
// so that the servers, not the validator, are measured.
func validate(cm *corev1.ConfigMap) error {
	if _, ok := cm.Data["password"]; ok {
		return errors.New("passwords belong in Secrets")
	}
	if cm.Labels["app"] == "" {
		return errors.New("the app label is required")
	}
	return nil
}

// Payload returns the AdmissionReview every request sends: the creation of
// a ConfigMap with a few labels and annotations and 1 KiB of data, about
// 2 KiB in all with the user info, which the validator allows.
func Payload() []byte {
	cm := &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "bench", Name: "settings", UID: "8f0a4a4e-6a4e-4c2b-9d2c-2f1e8c1d7b10",
			Labels:      map[string]string{"app": "shop", "tier": "web", "team": "payments"},
			Annotations: map[string]string{"example.com/owner": "payments", "example.com/revision": "42"},
		},
		Data: map[string]string{},
	}
	for i := range 16 {
		cm.Data["key-"+strconv.Itoa(i)] = string(bytes.Repeat([]byte{'a' + byte(i)}, 64))
	}
	raw, err := json.Marshal(cm)
	if err != nil {
		panic(err)
	}
	review, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       "5c2d0b1e-3f4a-4b6c-8d7e-9f0a1b2c3d4e",
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"},
			Namespace: "bench", Name: "settings",
			Operation: admissionv1.Create,
			UserInfo: authenticationv1.UserInfo{
				Username: "system:serviceaccount:bench:deployer", UID: "0b9e2f4c-1d3a-4e5b-8c7d-6f5e4d3c2b1a",
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:bench", "system:authenticated"},
			},
			Object: runtime.RawExtension{Raw: raw},
		},
	})
	if err != nil {
		panic(err)
	}
	return review
}

// Server is a running webhook server.
type Server struct {
	URL  string // of the validator, with the API server's timeout parameter
	stop func()
}

// Close stops the server.
func (s *Server) Close() { s.stop() }

// Start starts impl's server on loopback, serving the certificate in dir.
func Start(impl, dir string) (*Server, error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var addr string
	switch impl {
	case "ctrl":
		// A manager with no caches never calls the API server. HTTP/2 is
		// offered, as controller-runtime's server and the floor offer it.
		mgr, err := ctrl.NewManager(ctrl.Options{Config: &rest.Config{Host: "https://127.0.0.1:1"}, WebhookAddress: "127.0.0.1:0", WebhookCertDir: dir,
			TLS: ctrl.TLSOptions{HTTP2: true}})
		if err != nil {
			cancel()
			return nil, err
		}
		err = ctrl.Validate(mgr, ctrl.Validator[*corev1.ConfigMap]{
			Create: func(_ context.Context, cm *corev1.ConfigMap) error { return validate(cm) },
		})
		if err != nil {
			cancel()
			return nil, err
		}
		go func() { done <- mgr.Start(ctx) }()
		if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
			cancel()
			return nil, err
		}
		addr = mgr.Endpoints().Webhook
	case "controller-runtime":
		ctrllog.SetLogger(logr.Discard())
		port, err := freePort()
		if err != nil {
			cancel()
			return nil, err
		}
		srv := crwebhook.NewServer(crwebhook.Options{Host: "127.0.0.1", Port: port, CertDir: dir})
		srv.Register(Path, admission.WithValidator[*corev1.ConfigMap](clientgoscheme.Scheme, crValidator{}))
		go func() { done <- srv.Start(ctx) }()
		addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if err := waitForTLS(addr); err != nil {
			cancel()
			return nil, err
		}
	case "floor":
		cert, err := tls.LoadX509KeyPair(dir+"/tls.crt", dir+"/tls.key")
		if err != nil {
			cancel()
			return nil, err
		}
		ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}})
		if err != nil {
			cancel()
			return nil, err
		}
		answer, _ := json.Marshal(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Response: &admissionv1.AdmissionResponse{UID: "5c2d0b1e-3f4a-4b6c-8d7e-9f0a1b2c3d4e", Allowed: true},
		})
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(answer)
		})}
		go func() {
			err := srv.Serve(ln)
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			done <- err
		}()
		go func() {
			<-ctx.Done()
			_ = srv.Close()
		}()
		addr = ln.Addr().String()
	default:
		cancel()
		return nil, fmt.Errorf("unknown implementation %q", impl)
	}
	return &Server{
		URL: "https://" + addr + Path + "?timeout=10s",
		stop: func() {
			cancel()
			<-done
		},
	}, nil
}

// crValidator is the validator for controller-runtime.
type crValidator struct{}

func (crValidator) ValidateCreate(_ context.Context, cm *corev1.ConfigMap) (admission.Warnings, error) {
	return nil, validate(cm)
}

func (crValidator) ValidateUpdate(_ context.Context, _, cm *corev1.ConfigMap) (admission.Warnings, error) {
	return nil, validate(cm)
}

func (crValidator) ValidateDelete(context.Context, *corev1.ConfigMap) (admission.Warnings, error) {
	return nil, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitForTLS waits until addr completes a TLS handshake.
func waitForTLS(addr string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only waiting for the server
		if err == nil {
			return conn.Close()
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond) // polling a server that is starting
	}
}

// Client returns an HTTP/2 client that trusts only the CA in caPEM and
// keeps its connection alive, as the API server's webhook client does.
func Client(caPEM []byte) *http.Client {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: roots},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 64,
	}}
}

// Check sends one request and returns an error unless the answer is an
// allowed AdmissionReview over HTTP/2.
func Check(client *http.Client, url string, payload []byte) error {
	resp, err := client.Post(url, "application/json", bytes.NewReader(payload))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&review); err != nil {
		return err
	}
	switch {
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("got HTTP %d", resp.StatusCode)
	case resp.ProtoMajor != 2:
		return fmt.Errorf("got %s, want HTTP/2", resp.Proto)
	case review.Response == nil || !review.Response.Allowed || review.Response.UID == "":
		return fmt.Errorf("got %+v, want an allowed answer with the request's uid", review.Response)
	}
	return nil
}

// Benchmark measures one admission request per op through impl's server:
// serially (one request at a time: the round trip) or in parallel (8
// requests in flight per CPU: the throughput). It reports requests/s and
// the process's CPU time per request (cpu-ns/op).
func Benchmark(b *testing.B, impl string, parallel bool) {
	dir, err := os.MkdirTemp("", "admission-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ca, err := ctrl.WriteWebhookCerts(dir)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := Start(impl, dir)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	client := Client(ca)
	defer client.CloseIdleConnections()
	payload := Payload()
	if err := Check(client, srv.URL, payload); err != nil {
		b.Fatalf("%s: %v", impl, err)
	}

	post := func() error {
		resp, err := client.Post(srv.URL, "application/json", bytes.NewReader(payload))
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("got HTTP %d", resp.StatusCode)
		}
		return err
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	if parallel {
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := post(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	} else {
		for b.Loop() {
			if err := post(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
}

// cpuTime returns the user and system CPU time the process has used: per
// op, it is what a request costs client and server together, which other
// processes on a shared machine disturb less than the wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
