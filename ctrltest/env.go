package ctrltest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/typedctrl/ctrl/internal/binaries"
)

const (
	defaultStartTimeout = 60 * time.Second
	stopGracePeriod     = 5 * time.Second
	logTailLines        = 40
	startAttempts       = 3

	tempDirPattern = "ctrltest-*"
	ownerFile      = "owner.pid"
)

// Options configures a control plane. The zero value starts one with no
// CRDs, from the binaries in the default place.
type Options struct {
	// CRDs are manifests of apiextensions.k8s.io/v1
	// CustomResourceDefinitions to install once the API server is ready:
	// YAML or JSON, with several documents or of kind List.
	// Default: none.
	CRDs [][]byte

	// GenerateCRDs installs a CRD for each resource registered with
	// ctrl.Register that no manifest of CRDs defines: its registered group,
	// version, resource (the plural) and kind, namespaced unless registered
	// ClusterScoped, a status subresource when the registration declares one
	// or the type has a status field, and a schema that keeps any field
	// (x-kubernetes-preserve-unknown-fields), so the API server validates
	// nothing in the object but its metadata. Types registered at more than
	// one version of a resource make one CRD, stored at the highest version.
	// It is for quick tests of a controller's logic; once the type has a
	// CRD generated from it (controller-gen), install that with CRDs, so
	// that the server validates, prunes and defaults as in production.
	// Default: false, only the CRDs of manifests.
	GenerateCRDs bool

	// APIServerFlags are added to kube-apiserver's command line, such as
	// "--watch-cache-sizes=configmaps#0". They come after ctrltest's own
	// flags: a single-valued flag given again overrides ctrltest's value.
	// Default: none.
	APIServerFlags []string

	// BinDir is the directory that holds kube-apiserver and etcd.
	// Default: $CTRL_CONTROLPLANE_BIN if set; else the directory that
	// `go run github.com/typedctrl/ctrl/ctrltest/cmd/controlplane` fills for
	// the k8s.io/client-go the test binary is built with, if it holds both;
	// else the bin directory (`make controlplane`) of the checkout of ctrl
	// that ctrltest is compiled from (a replace directive's target), or of
	// the one that holds the working directory; else, if the test binary's
	// release cannot be told, the newest release the command built.
	BinDir string

	// Stdout and Stderr also receive the output of etcd and kube-apiserver,
	// which always goes to log files in the control plane's temporary
	// directory. Start's errors quote the last lines of the log.
	// Default: nil, the log files only.
	Stdout, Stderr io.Writer

	// StartTimeout bounds each wait for etcd or kube-apiserver to be ready
	// and for CRDs to be served.
	// Default: 60s.
	StartTimeout time.Duration
}

// Env is a running etcd and kube-apiserver on 127.0.0.1, with an admin
// identity (group system:masters). Its methods are safe for concurrent use.
type Env struct {
	opts    Options
	binDir  string
	dir     string
	timeout time.Duration

	etcdPort, etcdPeerPort, apiPort int

	caPEM, adminCertPEM, adminKeyPEM []byte
	kubeconfig                       string

	out *syncWriters

	mu        sync.Mutex
	etcd      *process
	apiserver *process
	stopped   bool
}

// Start starts a control plane for the test tb and stops it once tb and its
// subtests have finished (with tb.Cleanup). It blocks until the control
// plane is ready, a few seconds. If the control plane cannot start, for
// example because the binaries are missing, Start fails tb with tb.Fatal,
// saying what to run. Call it from the test's goroutine.
func Start(tb testing.TB, opts Options) *Env {
	tb.Helper()
	env, err := New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := env.Stop(); err != nil {
			tb.Error(err)
		}
	})
	return env
}

// Run is for TestMain: it starts a control plane, hands it to setup, which
// keeps it for the tests and may install more in it, runs the tests with
// m.Run and stops the control plane. It blocks until then and returns the
// exit code for os.Exit: a failure when the control plane does not start or
// stop or setup fails, with the error on standard error.
func Run(m *testing.M, opts Options, setup func(*Env) error) int {
	env, err := New(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := 1
	if err := setup(env); err != nil {
		fmt.Fprintln(os.Stderr, "ctrltest: setup:", err)
	} else {
		code = m.Run()
	}
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	return code
}

// New starts a control plane for a program that is not a test, such as a
// demo; tests use Start or Run. It launches etcd and kube-apiserver on free
// loopback ports in a fresh temporary directory, waits until the API server
// is ready and installs the CRDs of opts. If a port picked turns out to be
// taken by the time a process binds it, New tries again with new ports. On
// error nothing is left running or on disk; on success the caller must call
// Stop.
func New(opts Options) (*Env, error) {
	binDir := opts.BinDir
	if binDir == "" {
		var err error
		if binDir, err = defaultBinDir(); err != nil {
			return nil, err
		}
	} else if missing := binaries.Missing(binDir); missing != "" {
		return nil, fmt.Errorf("ctrltest: %s not found in %s (Options.BinDir): build it there with `%s -o %s`",
			missing, binDir, binaries.Command, binDir)
	}
	var err error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		var e *Env
		e, err = start(opts, binDir)
		if err == nil {
			return e, nil
		}
		if !errors.Is(err, errAddressInUse) {
			break
		}
	}
	return nil, err
}

func start(opts Options, binDir string) (_ *Env, err error) {
	e := &Env{
		opts:    opts,
		binDir:  binDir,
		timeout: opts.StartTimeout,
		out:     newSyncWriters(opts.Stdout, opts.Stderr),
	}
	if e.timeout <= 0 {
		e.timeout = defaultStartTimeout
	}
	crds, err := parseCRDs(opts.CRDs)
	if err != nil {
		return nil, err
	}
	if opts.GenerateCRDs {
		generated, err := generateCRDs(crds)
		if err != nil {
			return nil, err
		}
		crds = append(crds, generated...)
	}
	removeAbandonedDirs()
	if e.dir, err = os.MkdirTemp("", tempDirPattern); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = e.Stop()
		}
	}()
	if err := os.WriteFile(e.path(ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return nil, err
	}
	ports, err := pickPorts(3)
	if err != nil {
		return nil, err
	}
	e.etcdPort, e.etcdPeerPort, e.apiPort = ports[0], ports[1], ports[2]
	if err := e.writeCerts(); err != nil {
		return nil, err
	}
	if err := e.writeKubeconfig(); err != nil {
		return nil, err
	}
	if err := e.startEtcd(); err != nil {
		return nil, err
	}
	if err := e.StartAPIServer(); err != nil {
		return nil, err
	}
	if err := e.waitForNamespace("default"); err != nil {
		return nil, err
	}
	if err := e.installCRDs(crds); err != nil {
		return nil, err
	}
	return e, nil
}

// Config returns a new rest.Config for the API server, authenticated as the
// admin user (group system:masters), verifying the serving certificate, with
// QPS and Burst raised so that tests are not throttled on the client side.
// Each call returns a fresh copy that the caller may modify.
func (e *Env) Config() *rest.Config {
	return &rest.Config{
		Host: e.host(),
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   bytes.Clone(e.caPEM),
			CertData: bytes.Clone(e.adminCertPEM),
			KeyData:  bytes.Clone(e.adminKeyPEM),
		},
		QPS:   1000,
		Burst: 2000,
	}
}

// KubeconfigPath returns the path of a kubeconfig file for the admin user,
// for kubectl (`kubectl --kubeconfig <path> get widgets`) or a controller
// under test in another process. Stop removes the file.
func (e *Env) KubeconfigPath() string {
	return e.kubeconfig
}

// StopAPIServer kills the API server with SIGKILL and waits for it to exit,
// leaving etcd running, so that a test can exercise clients losing the
// server. StartAPIServer brings it back on the same address.
func (e *Env) StopAPIServer() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.apiserver == nil {
		return errors.New("ctrltest: StopAPIServer: kube-apiserver is not running")
	}
	p := e.apiserver
	e.apiserver = nil
	p.kill()
	return nil
}

// StartAPIServer starts the API server again after StopAPIServer, on the
// same port, with the same certificates and etcd, and waits until it is
// ready, so that clients made from earlier Configs reconnect.
func (e *Env) StartAPIServer() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return errors.New("ctrltest: StartAPIServer: the control plane is stopped")
	}
	if e.apiserver != nil {
		return errors.New("ctrltest: StartAPIServer: kube-apiserver is already running")
	}
	p, err := startProcess(filepath.Join(e.binDir, binaries.APIServer), e.apiserverArgs(),
		filepath.Join(e.dir, "kube-apiserver.log"), e.out)
	if err != nil {
		return fmt.Errorf("ctrltest: starting kube-apiserver: %w", err)
	}
	if err := e.waitReady(p, "kube-apiserver", e.host()+"/readyz"); err != nil {
		p.kill()
		return err
	}
	e.apiserver = p
	return nil
}

// Stop stops the API server and then etcd, each with SIGTERM and, after 5
// seconds, SIGKILL to its process group, and removes the temporary
// directory. Start and Run call it; calling it again does nothing.
func (e *Env) Stop() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return nil
	}
	e.stopped = true
	if e.apiserver != nil {
		e.apiserver.stop(stopGracePeriod)
		e.apiserver = nil
	}
	if e.etcd != nil {
		e.etcd.stop(stopGracePeriod)
		e.etcd = nil
	}
	if e.dir == "" {
		return nil
	}
	if err := os.RemoveAll(e.dir); err != nil {
		return fmt.Errorf("ctrltest: removing %s: %w", e.dir, err)
	}
	return nil
}

func (e *Env) host() string {
	return "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(e.apiPort))
}

func (e *Env) etcdURL(port int) string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

func (e *Env) path(name string) string {
	return filepath.Join(e.dir, name)
}

func (e *Env) startEtcd() error {
	clientURL, peerURL := e.etcdURL(e.etcdPort), e.etcdURL(e.etcdPeerPort)
	args := []string{
		"--name=ctrltest",
		"--data-dir=" + e.path("etcd"),
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=ctrltest=" + peerURL,
		"--initial-cluster-state=new",
		"--unsafe-no-fsync",
		"--log-level=error",
	}
	p, err := startProcess(filepath.Join(e.binDir, binaries.Etcd), args, e.path("etcd.log"), e.out)
	if err != nil {
		return fmt.Errorf("ctrltest: starting etcd: %w", err)
	}
	e.etcd = p
	return e.waitReady(p, "etcd", clientURL+"/health")
}

func (e *Env) apiserverArgs() []string {
	args := []string{
		"--etcd-servers=" + e.etcdURL(e.etcdPort),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// The lease endpoint reconciler refuses a loopback advertise address,
		// and there is no cluster to point the kubernetes Service at anyway.
		"--endpoint-reconciler-type=none",
		"--secure-port=" + strconv.Itoa(e.apiPort),
		"--tls-cert-file=" + e.path("serving.crt"),
		"--tls-private-key-file=" + e.path("serving.key"),
		"--client-ca-file=" + e.path("ca.crt"),
		"--service-account-key-file=" + e.path("sa.pub"),
		"--service-account-signing-key-file=" + e.path("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--disable-admission-plugins=ServiceAccount",
		"--allow-privileged=true",
		"--profiling=false",
	}
	return append(args, e.opts.APIServerFlags...)
}

// waitReady polls url until it answers 200, failing early if p exits.
func (e *Env) waitReady(p *process, name, url string) error {
	client, closeIdle, err := e.httpClient()
	if err != nil {
		return err
	}
	defer closeIdle()
	client.Timeout = 2 * time.Second
	deadline := time.Now().Add(e.timeout)
	var last string
	for {
		resp, err := client.Get(url)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, failedChecks(body))
		} else {
			last = err.Error()
		}
		select {
		case <-p.done:
			return e.exitError(p, name)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ctrltest: %s not ready after %s (last: %s); log tail:\n%s",
				name, e.timeout, last, p.logTail(logTailLines))
		}
	}
}

// failedChecks keeps the failing lines of a verbose /readyz answer.
func failedChecks(body []byte) string {
	var failed []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "[-]") {
			failed = append(failed, strings.TrimSpace(line))
		}
	}
	if len(failed) == 0 {
		return strings.TrimSpace(string(body))
	}
	return strings.Join(failed, "; ")
}

var errAddressInUse = errors.New("address already in use")

func (e *Env) exitError(p *process, name string) error {
	tail := p.logTail(logTailLines)
	err := fmt.Errorf("ctrltest: %s exited during start (%v); log tail:\n%s", name, p.err, tail)
	if strings.Contains(tail, "address already in use") {
		return fmt.Errorf("%w (%w)", err, errAddressInUse)
	}
	return err
}

// httpClient returns a client with the admin identity on its own transport,
// so that nothing Env does leaves idle connections in client-go's shared
// transport cache; closeIdle releases its connections.
func (e *Env) httpClient() (*http.Client, func(), error) {
	tlsConfig, err := rest.TLSConfigFor(e.Config())
	if err != nil {
		return nil, nil, err
	}
	tr := &http.Transport{
		TLSClientConfig:     tlsConfig,
		ForceAttemptHTTP2:   true,
		TLSHandshakeTimeout: 5 * time.Second,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}
	return &http.Client{Transport: tr}, tr.CloseIdleConnections, nil
}

func (e *Env) waitForNamespace(name string) error {
	client, closeIdle, err := e.httpClient()
	if err != nil {
		return err
	}
	defer closeIdle()
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	url := e.host() + "/api/v1/namespaces/" + name
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ctrltest: namespace %q not created within %s", name, e.timeout)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (e *Env) writeKubeconfig() error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["ctrltest"] = &clientcmdapi.Cluster{
		Server:                   e.host(),
		CertificateAuthorityData: e.caPEM,
	}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: e.adminCertPEM,
		ClientKeyData:         e.adminKeyPEM,
	}
	cfg.Contexts["ctrltest"] = &clientcmdapi.Context{Cluster: "ctrltest", AuthInfo: "admin", Namespace: "default"}
	cfg.CurrentContext = "ctrltest"
	e.kubeconfig = e.path("kubeconfig")
	return clientcmd.WriteToFile(*cfg, e.kubeconfig)
}

// pickPorts is freePorts, replaced in tests.
var pickPorts = freePorts

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// removeAbandonedDirs removes the temporary directories of environments whose
// test binary died without calling Stop (its children die with it, but the
// directory stays). A directory whose owner cannot be told is left alone.
func removeAbandonedDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempDirPattern))
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(dir)
		}
	}
}
