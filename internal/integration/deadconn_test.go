package integration_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl"
)

// blackhole is a TCP proxy to the API server that can make every open
// connection go silent, as a load balancer or NAT that drops its state
// does: the sockets stay open, nothing more comes back, and (unless only
// the replies are lost) what the client sends is read and thrown away. New
// connections pass.
type blackhole struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []*proxied
	wg    sync.WaitGroup
}

type proxied struct {
	client, server net.Conn
	up, down       atomic.Bool // set: that direction is dropped
	http1          bool        // the client offered HTTP/1.1 only: a connection of its own
	closed         atomic.Bool // the client closed it
}

func newBlackhole(t *testing.T, target string) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	b := &blackhole{ln: ln, target: target}
	b.wg.Go(b.accept)
	t.Cleanup(b.close)
	return b
}

func (b *blackhole) addr() string { return b.ln.Addr().String() }

func (b *blackhole) accept() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", b.target)
		if err != nil {
			c.Close()
			continue
		}
		hello, err := readRecord(c)
		if err == nil {
			_, err = s.Write(hello)
		}
		if err != nil {
			c.Close()
			s.Close()
			continue
		}
		protos := offeredProtocols(hello)
		p := &proxied{client: c, server: s, http1: len(protos) > 0 && !slices.Contains(protos, "h2")}
		b.mu.Lock()
		b.conns = append(b.conns, p)
		b.mu.Unlock()
		b.wg.Go(func() {
			pipe(p.server, p.client, &p.up)
			p.closed.Store(true)
		})
		b.wg.Go(func() { pipe(p.client, p.server, &p.down) })
	}
}

// pipe copies src to dst until src ends; while drop is set it reads and
// throws away.
func pipe(dst, src net.Conn, drop *atomic.Bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !drop.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !drop.Load() {
				dst.Close()
			}
			return
		}
	}
}

// silence drops what the open connections carry: replies only, or both
// ways.
func (b *blackhole) silence(bothWays bool) { b.silenceFrom(0, bothWays) }

// silenceFrom silences the connections opened after the first n.
func (b *blackhole) silenceFrom(n int, bothWays bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.conns[min(n, len(b.conns)):] {
		p.down.Store(true)
		p.up.Store(bothWays)
	}
}

// silenceOwn silences, both ways, the open connections whose client
// offered HTTP/1.1 only (a watch's connection of its own; the shared one
// offers h2), and returns how many.
func (b *blackhole) silenceOwn() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, p := range b.conns {
		if p.http1 && !p.closed.Load() {
			p.down.Store(true)
			p.up.Store(true)
			n++
		}
	}
	return n
}

// readRecord reads the first TLS record a client sends: its ClientHello
// (every client of the proxy speaks TLS, as the API server does).
func readRecord(c net.Conn) ([]byte, error) {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	rec := make([]byte, 5)
	if _, err := io.ReadFull(c, rec); err != nil {
		return nil, err
	}
	rec = append(rec, make([]byte, binary.BigEndian.Uint16(rec[3:5]))...)
	_, err := io.ReadFull(c, rec[5:])
	return rec, err
}

// offeredProtocols returns the ALPN protocols of a ClientHello record, or
// nil if it has none or cannot be read.
func offeredProtocols(rec []byte) []string {
	// The record header (5), the handshake header (4), the version (2) and
	// the random (32); then session id, cipher suites and compression
	// methods, each prefixed by its length.
	b := rec[min(len(rec), 5+4+2+32):]
	skip := func(lenBytes int) bool {
		if len(b) < lenBytes {
			return false
		}
		n := 0
		for _, c := range b[:lenBytes] {
			n = n<<8 | int(c)
		}
		if len(b) < lenBytes+n {
			return false
		}
		b = b[lenBytes+n:]
		return true
	}
	if !skip(1) || !skip(2) || !skip(1) || len(b) < 2 {
		return nil
	}
	b = b[2:] // the extensions' length
	for len(b) >= 4 {
		typ, n := binary.BigEndian.Uint16(b), int(binary.BigEndian.Uint16(b[2:]))
		if len(b) < 4+n {
			return nil
		}
		ext := b[4 : 4+n]
		b = b[4+n:]
		if typ != 16 || len(ext) < 2 { // application_layer_protocol_negotiation
			continue
		}
		var protos []string
		for l := ext[2:]; len(l) > 0 && len(l) > int(l[0]); l = l[1+int(l[0]):] {
			protos = append(protos, string(l[1:1+int(l[0])]))
		}
		return protos
	}
	return nil
}

// opened returns how many connections the proxy has accepted.
func (b *blackhole) opened() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.conns)
}

func (b *blackhole) close() {
	b.ln.Close()
	b.mu.Lock()
	for _, p := range b.conns {
		p.client.Close()
		p.server.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// throughBlackhole returns env's Config, reaching the API server through b.
func throughBlackhole(t *testing.T) (*blackhole, func() *ctrl.Manager) {
	return throughBlackholeChecked(t, 0)
}

// throughBlackholeChecked is throughBlackhole with the managers'
// Options.ConnectionCheck (0: the default).
func throughBlackholeChecked(t *testing.T, check time.Duration) (*blackhole, func() *ctrl.Manager) {
	t.Helper()
	u, err := url.Parse(env.Config().Host)
	must(t, err)
	b := newBlackhole(t, u.Host)
	return b, func() *ctrl.Manager {
		cfg := env.Config()
		cfg.Host = "https://" + b.addr()
		mgr, err := ctrl.NewManager(ctrl.Options{Config: cfg, Namespace: "", ShutdownTimeout: time.Second, ConnectionCheck: check})
		must(t, err)
		return mgr
	}
}

// TestDeadConnectionNoticed cuts every connection of a controller silently,
// then changes all its objects, so that the reconciles' writes too go out
// on a dead connection: the controller must notice, reconnect and converge
// within its ConnectionCheck (6 s here) and a margin of 4 s for what
// follows (a new connection, the watch resumed, 50 reconciles and their
// writes, on a loaded machine), not the minute that client-go's default
// health checks take, nor twice ConnectionCheck (a ping sent only after a
// whole ConnectionCheck without a frame, which converged in 13 s).
func TestDeadConnectionNoticed(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	const n = 50
	for i := range n {
		_, err := clientset.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%02d", i)},
			Data: map[string]string{"v": "1"}}, metav1.CreateOptions{})
		must(t, err)
	}
	const check = 6 * time.Second
	b, newMgr := throughBlackholeChecked(t, check)
	mgr := newMgr()
	configMaps := newClient[*corev1.ConfigMap](t, mgr)
	_, err := ctrl.NewController(mgr, "mirror", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		if cm.Annotations["observed-v"] == cm.Data["v"] {
			return ctrl.Result{}, nil
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"observed-v":%q}}}`, cm.Data["v"])
		_, err := configMaps.Patch(ctx, ctrl.KeyOf(cm), types.MergePatchType, []byte(patch))
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{Workers: 4, Cache: ctrl.CacheOptions{Namespaces: []string{ns}}})
	must(t, err)
	start(t, mgr)
	waitIdle(t, mgr)

	mirrored := func(v string) func() error {
		return func() error {
			list, err := clientset.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			behind := 0
			for _, cm := range list.Items {
				if cm.Annotations["observed-v"] != v {
					behind++
				}
			}
			if behind > 0 {
				return fmt.Errorf("%d of %d ConfigMaps not mirrored at v=%s", behind, len(list.Items), v)
			}
			return nil
		}
	}
	b.silence(true)
	began := time.Now()
	for i := range n {
		_, err := clientset.CoreV1().ConfigMaps(ns).Patch(ctx, fmt.Sprintf("cm-%02d", i), types.MergePatchType,
			[]byte(`{"data":{"v":"2"}}`), metav1.PatchOptions{})
		must(t, err)
	}
	took := eventually(t, 30*time.Second, mirrored("2"))
	t.Logf("converged %s after the connections went silent", time.Since(began).Round(time.Millisecond))
	if bound := check + 4*time.Second; took > bound {
		t.Errorf("converged %s after the connections went silent, want within %s (ConnectionCheck %s and a margin of 4 s)", took.Round(time.Millisecond), bound, check)
	}
	if got := blindObservations(t, mgr); got == 0 {
		t.Error("ctrl_cache_blind_seconds has no observation: the dead connection's blindness is not reported")
	}
}

func blindObservations(t *testing.T, mgr *ctrl.Manager) uint64 {
	t.Helper()
	mfs, err := mgr.Registry().Gather()
	must(t, err)
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() == "ctrl_cache_blind_seconds" {
			for _, m := range mf.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}

// TestLostCreateReply loses the replies of creates that reached the API
// server: the connection carries requests up but nothing back, until its
// health check closes it. The creates fail as unreachable and are retried;
// a retry that finds the object this manager created must not fail with
// AlreadyExists, and every object is created once.
func TestLostCreateReply(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	const n = 10
	b, newMgr := throughBlackhole(t)
	mgr := newMgr()
	configMaps := newClient[*corev1.ConfigMap](t, mgr)
	var (
		entered atomic.Int32
		gate    = make(chan struct{})
		mu      sync.Mutex
		exists  []string
	)
	_, err := ctrl.NewController(mgr, "copier", func(ctx context.Context, src *corev1.ConfigMap) (ctrl.Result, error) {
		if entered.Add(1) <= n {
			<-gate // every first reconcile waits here until the replies are lost
		}
		key := ctrl.Key{Namespace: src.Namespace, Name: "copy-" + src.Name}
		if _, err := configMaps.Get(ctx, key); !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		_, err := configMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			Data: map[string]string{"from": src.Name}})
		if apierrors.IsAlreadyExists(err) {
			mu.Lock()
			exists = append(exists, key.Name)
			mu.Unlock()
		}
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{Workers: n, Cache: ctrl.CacheOptions{Namespaces: []string{ns},
		LabelSelector: labels.SelectorFromSet(labels.Set{"role": "src"})}})
	must(t, err)
	_, err = ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{Namespaces: []string{ns}})
	must(t, err)
	start(t, mgr)
	for i := range n {
		_, err := clientset.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("src-%d", i),
			Labels: map[string]string{"role": "src"}}}, metav1.CreateOptions{})
		must(t, err)
	}
	eventually(t, 30*time.Second, func() error {
		if got := entered.Load(); got < n {
			return fmt.Errorf("%d of %d reconciles waiting", got, n)
		}
		return nil
	})
	b.silence(false) // requests still reach the server; replies are lost
	close(gate)
	eventually(t, 30*time.Second, func() error {
		list, err := clientset.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		copies := 0
		for _, cm := range list.Items {
			if strings.HasPrefix(cm.Name, "copy-") {
				copies++
			}
		}
		if copies != n {
			return fmt.Errorf("%d copies, want %d", copies, n)
		}
		return nil
	})
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	must(t, mgr.WaitIdle(waitCtx, time.Minute))
	mu.Lock()
	defer mu.Unlock()
	if len(exists) > 0 {
		t.Errorf("creates retried after a lost reply failed with AlreadyExists: %v", exists)
	}
}
