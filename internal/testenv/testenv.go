// Package testenv runs a real kube-apiserver and etcd on loopback for tests.
//
// The binaries are built by hack/controlplane/build.sh (`make controlplane`)
// into <repo>/bin. A test package usually starts one Env in TestMain with
// [Run] and shares it between its tests; a missing binary is a test failure,
// not a skip:
//
//	var env *testenv.Env
//
//	func TestMain(m *testing.M) {
//		os.Exit(testenv.Run(m, testenv.Options{}, func(e *testenv.Env) error {
//			env = e
//			return nil
//		}))
//	}
package testenv

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
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ModulePath is the module whose root holds the bin directory that Start uses
// by default.
const ModulePath = "github.com/typedctrl/ctrl"

// BinDirEnv is the environment variable that overrides the default BinDir.
const BinDirEnv = "CTRL_CONTROLPLANE_BIN"

const (
	apiserverBinary = "kube-apiserver"
	etcdBinary      = "etcd"

	defaultStartTimeout = 60 * time.Second
	stopGracePeriod     = 5 * time.Second
	logTailLines        = 40
	startAttempts       = 3

	tempDirPattern = "ctrl-testenv-*"
	ownerFile      = "owner.pid"
)

// Options configures Start. The zero value is ready to use.
type Options struct {
	// BinDir holds kube-apiserver and etcd; default: $CTRL_CONTROLPLANE_BIN
	// or <repo root>/bin, where the repo root is found by walking up from the
	// working directory to the directory whose go.mod declares module
	// github.com/typedctrl/ctrl.
	BinDir string

	// ExtraAPIServerFlags are appended to kube-apiserver's command line (e.g.
	// "--watch-cache-sizes=configmaps#0", "--etcd-compaction-interval=5s").
	// They come after the flags Start sets: a single-valued flag given again
	// overrides Start's value, a list-valued one adds to it.
	ExtraAPIServerFlags []string

	// CRDs are manifests (YAML or JSON, possibly multi-document, possibly
	// kind List) of apiextensions.k8s.io/v1 CustomResourceDefinitions
	// installed once the server is ready; Start waits until each is
	// Established and its resources are served (discovery shows them).
	CRDs [][]byte

	// Stdout and Stderr, when set, also receive the child processes' standard
	// output and standard error. The logs always go to files in the
	// environment's temporary directory as well, so that a failed start can
	// report the last lines of the apiserver log in its error.
	Stdout io.Writer
	Stderr io.Writer

	// StartTimeout bounds each wait for etcd or the apiserver to become ready
	// and for CRDs to be served; default: 60s.
	StartTimeout time.Duration
}

// Env is a running etcd and kube-apiserver on 127.0.0.1, with an admin
// identity. Its methods are safe for concurrent use.
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

// Run starts a control plane with opts, hands it to setup (which keeps it
// and makes clients), runs the package's tests and stops the control plane.
// It returns the exit code for os.Exit: a control plane that fails to start
// or to stop, or a setup that fails, fails the package. m is the package's
// *testing.M; taking only its Run keeps package testing out of the programs
// that use testenv.
func Run(m interface{ Run() int }, opts Options, setup func(*Env) error) int {
	env, err := Start(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}
	code := 1
	if err := setup(env); err != nil {
		fmt.Fprintln(os.Stderr, "testenv: setup:", err)
	} else {
		code = m.Run()
	}
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		code = 1
	}
	return code
}

// Start launches etcd and kube-apiserver on free loopback ports in a fresh
// temporary directory, waits until the apiserver's /readyz succeeds and the
// default namespace exists, and installs opts.CRDs. If a port picked turns out
// to be taken by the time a process binds it, Start tries again with new
// ports. On error nothing is left running or on disk.
func Start(opts Options) (*Env, error) {
	binDir := opts.BinDir
	if binDir == "" {
		var err error
		if binDir, err = defaultBinDir(); err != nil {
			return nil, err
		}
	}
	for _, name := range []string{apiserverBinary, etcdBinary} {
		if _, err := os.Stat(filepath.Join(binDir, name)); err != nil {
			return nil, fmt.Errorf("%s not found in %s: run `make controlplane`", name, binDir)
		}
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
	if len(opts.CRDs) > 0 {
		if err := e.InstallCRDs(opts.CRDs...); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// Config returns a new rest.Config for the apiserver, authenticated as the
// admin user (group system:masters), verifying the serving certificate, with
// QPS and Burst raised so tests are not throttled on the client side. Each
// call returns a fresh copy that the caller may modify.
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
// usable by kubectl, in the environment's temporary directory. The file is
// removed by Stop.
func (e *Env) KubeconfigPath() string {
	return e.kubeconfig
}

// StopAPIServer kills the apiserver with SIGKILL and waits for it to exit,
// leaving etcd running, so tests can exercise clients losing the server.
// StartAPIServer brings it back on the same address.
func (e *Env) StopAPIServer() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.apiserver == nil {
		return errors.New("testenv: apiserver is not running")
	}
	p := e.apiserver
	e.apiserver = nil
	p.kill()
	return nil
}

// StartAPIServer starts the apiserver on the same port, with the same
// certificates and etcd as before, and waits for /readyz to succeed, so that
// clients made from earlier Configs reconnect. Start calls it for the first
// start; afterwards it is only valid after StopAPIServer.
func (e *Env) StartAPIServer() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return errors.New("testenv: environment is stopped")
	}
	if e.apiserver != nil {
		return errors.New("testenv: apiserver is already running")
	}
	p, err := startProcess(filepath.Join(e.binDir, apiserverBinary), e.apiserverArgs(),
		filepath.Join(e.dir, "kube-apiserver.log"), e.out)
	if err != nil {
		return fmt.Errorf("testenv: starting kube-apiserver: %w", err)
	}
	if err := e.waitReady(p, "kube-apiserver", e.host()+"/readyz"); err != nil {
		p.kill()
		return err
	}
	e.apiserver = p
	return nil
}

// Stop stops the apiserver and then etcd, each with SIGTERM and, after a few
// seconds, SIGKILL to its process group, and removes the temporary directory.
// Calling it again does nothing.
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
		return fmt.Errorf("testenv: removing %s: %w", e.dir, err)
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
		"--name=testenv",
		"--data-dir=" + e.path("etcd"),
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=testenv=" + peerURL,
		"--initial-cluster-state=new",
		"--unsafe-no-fsync",
		"--log-level=error",
	}
	p, err := startProcess(filepath.Join(e.binDir, etcdBinary), args, e.path("etcd.log"), e.out)
	if err != nil {
		return fmt.Errorf("testenv: starting etcd: %w", err)
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
	return append(args, e.opts.ExtraAPIServerFlags...)
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
			return fmt.Errorf("testenv: %s not ready after %s (last: %s); log tail:\n%s",
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
	err := fmt.Errorf("testenv: %s exited during start (%v); log tail:\n%s", name, p.err, tail)
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
			return fmt.Errorf("testenv: namespace %q not created within %s", name, e.timeout)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (e *Env) writeKubeconfig() error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["testenv"] = &clientcmdapi.Cluster{
		Server:                   e.host(),
		CertificateAuthorityData: e.caPEM,
	}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: e.adminCertPEM,
		ClientKeyData:         e.adminKeyPEM,
	}
	cfg.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: "admin", Namespace: "default"}
	cfg.CurrentContext = "testenv"
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

// defaultBinDir returns $CTRL_CONTROLPLANE_BIN or <repo root>/bin.
func defaultBinDir() (string, error) {
	if dir := os.Getenv(BinDirEnv); dir != "" {
		return dir, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; {
		if modulePath(filepath.Join(dir, "go.mod")) == ModulePath {
			return filepath.Join(dir, "bin"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("testenv: no go.mod for module %s above %s; set %s", ModulePath, wd, BinDirEnv)
		}
		dir = parent
	}
}

// modulePath returns the module path declared in the go.mod file at path, or
// "" if there is none.
func modulePath(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(data)) {
		line, _, _ = strings.Cut(line, "//")
		fields := strings.Fields(line)
		if len(fields) == 2 && fields[0] == "module" {
			return strings.Trim(fields[1], "\"`")
		}
	}
	return ""
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
