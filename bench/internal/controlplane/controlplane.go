// Package controlplane runs ../internal/cmd/runcontrolplane, a real
// etcd and kube-apiserver on loopback, for the benchmark drivers, and sends it
// the commands that kill and restart the API server.
package controlplane

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Build builds the controlplane command of the ctrl module at repo into out.
func Build(repo, out string) error {
	cmd := exec.Command("go", "build", "-o", out, "./internal/cmd/runcontrolplane")
	cmd.Dir = repo
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build ./internal/cmd/runcontrolplane: %w", err)
	}
	return nil
}

// ControlPlane is a running controlplane process. Its methods may be called
// from one goroutine at a time, except Stop.
type ControlPlane struct {
	cmd        *exec.Cmd
	stdin      io.WriteCloser
	answers    chan string // the lines it prints after the kubeconfig
	kubeconfig string
	logPath    string
	done       chan struct{}
	stopOnce   sync.Once
}

// Start runs the command bin with the extra kube-apiserver flags, logging to
// logPath, and returns once the API server is ready.
func Start(bin, logPath string, apiserverFlags []string) (*ControlPlane, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	var args []string
	for _, f := range apiserverFlags {
		args = append(args, "-apiserver-flag="+f)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = logFile
	// Closing stdin stops the control plane too, which also happens when the
	// driver dies.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	cp := &ControlPlane{cmd: cmd, stdin: stdin, answers: make(chan string, 1), logPath: logPath, done: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		for sc.Scan() {
			cp.answers <- sc.Text()
		}
		close(cp.answers)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(cp.done)
	}()
	select {
	case line, ok := <-lines:
		if !ok || line == "" {
			<-cp.done
			return nil, fmt.Errorf("control plane did not start; see %s", logPath)
		}
		cp.kubeconfig = strings.TrimSpace(line)
		return cp, nil
	case <-time.After(3 * time.Minute):
		cp.Stop()
		return nil, fmt.Errorf("control plane not ready after 3 minutes; see %s", logPath)
	}
}

// Kubeconfig returns the path of the admin kubeconfig.
func (cp *ControlPlane) Kubeconfig() string { return cp.kubeconfig }

// StopAPIServer kills the API server with SIGKILL, leaving etcd running, and
// returns once it has exited.
func (cp *ControlPlane) StopAPIServer() error { return cp.command("stop-apiserver") }

// StartAPIServer starts the API server again on the same port and returns
// once it is ready.
func (cp *ControlPlane) StartAPIServer() error { return cp.command("start-apiserver") }

func (cp *ControlPlane) command(cmd string) error {
	if _, err := io.WriteString(cp.stdin, cmd+"\n"); err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	select {
	case answer, ok := <-cp.answers:
		switch {
		case !ok:
			return fmt.Errorf("%s: the control plane exited; see %s", cmd, cp.logPath)
		case answer != "ok "+cmd:
			return fmt.Errorf("%s: %s", cmd, answer)
		}
		return nil
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("%s: no answer within 2 minutes; see %s", cmd, cp.logPath)
	}
}

// Stop stops the control plane and waits for it to exit. It is safe to call
// more than once and concurrently with the other methods.
func (cp *ControlPlane) Stop() {
	cp.stopOnce.Do(func() {
		_ = cp.cmd.Process.Signal(syscall.SIGTERM)
		cp.stdin.Close()
	})
	select {
	case <-cp.done:
	case <-time.After(30 * time.Second):
		_ = cp.cmd.Process.Kill()
		<-cp.done
	}
}
