package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/typedctrl/ctrl/bench/internal/breakdown"
	"github.com/typedctrl/ctrl/bench/internal/controlplane"
	"github.com/typedctrl/ctrl/bench/internal/harness"
	"github.com/typedctrl/ctrl/bench/internal/proc"
)

// controller is a running implementation binary.
type controller struct{ *proc.Process[harness.Event] }

// eventTimeout bounds every wait for an event.
const eventTimeout = 20 * time.Minute

// expect waits for the event named want.
func (c controller) expect(want string) (harness.Event, error) {
	e, err := c.Next(fmt.Sprintf("%q", want), eventTimeout)
	if err == nil && e.Event != want {
		err = fmt.Errorf("got event %q, want %q", e.Event, want)
	}
	return e, err
}

// runImpl runs one implementation through the protocol of package harness.
func runImpl(ctx context.Context, cs kubernetes.Interface, cp *controlplane.ControlPlane, cfg config, impl, bin string, rep, base int, profileDir string) (runResult, error) {
	rr := runResult{impl: impl, rep: rep}
	args := []string{
		"-kubeconfig", cfg.kubeconfig,
		"-namespace", cfg.namespace,
		"-n", strconv.Itoa(cfg.n),
		"-round-base", strconv.Itoa(base),
		"-rounds", strconv.Itoa(cfg.g),
	}
	if profileDir != "" {
		args = append(args, "-profile-dir", profileDir, "-profile-tag", "r"+strconv.Itoa(rep))
	}
	logPath := filepath.Join(cfg.work, "logs", fmt.Sprintf("%s-r%d.log", impl, rep))
	p, err := proc.Start[harness.Event](bin, args, nil, logPath)
	if err != nil {
		return rr, err
	}
	defer p.Kill()
	c := controller{p}
	if _, err := c.expect("synced"); err != nil {
		return rr, err
	}
	if _, err := c.expect("ready"); err != nil {
		return rr, err
	}
	api0, etcd0, err := serverCPU(cp)
	if err != nil {
		return rr, err
	}
	if err := c.Send("begin"); err != nil {
		return rr, err
	}
	serverProfiled := make(chan error, 1)
	serverProfile := filepath.Join(cfg.profileDir, fmt.Sprintf("%s-r%d-apiserver.pprof", impl, rep))
	if cfg.apiserverProfile > 0 {
		go func() { serverProfiled <- profileServer(ctx, cs, serverProfile, cfg.apiserverProfile) }()
	} else {
		serverProfiled <- nil
	}
	if _, err := c.expect("begun"); err != nil {
		return rr, err
	}
	var patchSeconds float64
	for g := base + 1; g <= base+cfg.g; g++ {
		t0 := time.Now()
		if err := patchAll(ctx, cs, cfg, g); err != nil {
			return rr, err
		}
		patchSeconds += time.Since(t0).Seconds()
		if err := c.Send("wait " + strconv.Itoa(g)); err != nil {
			return rr, err
		}
		if _, err := c.expect("round"); err != nil {
			return rr, err
		}
		rr.roundSeconds = append(rr.roundSeconds, time.Since(t0).Seconds())
	}
	rr.patchRate = float64(cfg.n*cfg.g) / patchSeconds
	api1, etcd1, err := serverCPU(cp)
	if err != nil {
		return rr, err
	}
	rr.apiserverSeconds, rr.etcdSeconds = (api1 - api0).Seconds(), (etcd1 - etcd0).Seconds()
	if err := <-serverProfiled; err != nil {
		return rr, fmt.Errorf("profiling the API server: %w", err)
	}
	if cfg.apiserverProfile > 0 {
		if rr.server, err = breakdown.ServerFile(serverProfile); err != nil {
			return rr, err
		}
		rr.serverProfiled = true
	}
	if err := c.Send("end"); err != nil {
		return rr, err
	}
	e, err := c.expect("report")
	if err != nil {
		return rr, err
	}
	if e.Report == nil {
		return rr, errors.New("report event without a report")
	}
	rr.report = *e.Report
	rr.initSeconds = time.Unix(0, rr.report.MainUnixNano).Sub(c.Spawned).Seconds()
	if err := c.Wait(time.Minute); err != nil {
		return rr, fmt.Errorf("after its report: %w", err)
	}
	if profileDir != "" {
		// The name harness.Harness gives it.
		path := filepath.Join(profileDir, fmt.Sprintf("%s-r%d-cpu-update.pprof", impl, rep))
		if rr.cpu, err = breakdown.File(path); err != nil {
			return rr, err
		}
		rr.profiled = true
	}
	return rr, nil
}

// profileServer writes a CPU profile of the API server, taken over d, to
// path.
func profileServer(ctx context.Context, cs kubernetes.Interface, path string, d time.Duration) error {
	data, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
		Param("seconds", strconv.Itoa(int(d.Seconds()))).Timeout(d + time.Minute).DoRaw(ctx)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// serverCPU returns the CPU time the API server and etcd have used.
func serverCPU(cp *controlplane.ControlPlane) (apiserver, etcd time.Duration, err error) {
	if apiserver, err = cp.CPU("kube-apiserver"); err != nil {
		return 0, 0, err
	}
	if etcd, err = cp.CPU("etcd"); err != nil {
		return 0, 0, err
	}
	return apiserver, etcd, nil
}
