// Package proc runs a benchmark binary that reads commands, a line each,
// on its standard input and writes values of E, as JSON, on its standard
// output; its standard error goes to a log file.
package proc

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Process is a running binary. Its methods may be called from one
// goroutine at a time, except Kill.
type Process[E any] struct {
	Spawned time.Time // just before it started
	Log     string    // the path of its standard error
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	out     chan E
	exited  chan struct{}
	err     error // Wait's result, set before exited is closed
	// readErr is why reading its output stopped before the end, set
	// before out is closed.
	readErr error
}

// Start runs bin with args and extra environment variables (such as
// GOGC=50), its standard error going to logPath.
func Start[E any](bin string, args, env []string, logPath string) (*Process[E], error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = logFile
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
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
	p := &Process[E]{Log: logPath, cmd: cmd, stdin: stdin, out: make(chan E, 16), exited: make(chan struct{})}
	p.Spawned = time.Now()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	// Wait closes the standard output, so it comes after the last read:
	// a binary that exits right after its last value would lose it.
	go func() {
		dec := json.NewDecoder(stdout)
		for {
			var v E
			if err := dec.Decode(&v); err != nil {
				if err != io.EOF {
					p.readErr = err
				}
				_, _ = io.Copy(io.Discard, stdout)
				break
			}
			p.out <- v
		}
		close(p.out)
		p.err = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// Send writes one command.
func (p *Process[E]) Send(command string) error {
	_, err := io.WriteString(p.stdin, command+"\n")
	return err
}

// Next returns the next value the binary writes, waiting up to timeout;
// what names what the caller waits for, in its errors.
func (p *Process[E]) Next(what string, timeout time.Duration) (E, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case v, ok := <-p.out:
		if !ok {
			<-p.exited
			if p.readErr != nil {
				return v, fmt.Errorf("reading its output while waiting for %s: %w; log: %s", what, p.readErr, p.Log)
			}
			return v, fmt.Errorf("exited (%v) while waiting for %s; log: %s\n%s", p.err, what, p.Log, Tail(p.Log, 20))
		}
		return v, nil
	case <-t.C:
		var zero E
		return zero, fmt.Errorf("no %s after %s; log: %s", what, timeout, p.Log)
	}
}

// Wait waits up to timeout for the binary to exit, then kills it.
func (p *Process[E]) Wait(timeout time.Duration) error {
	select {
	case <-p.exited:
		return p.err
	case <-time.After(timeout):
		p.Kill()
		return fmt.Errorf("did not exit within %s", timeout)
	}
}

// Exited is closed once the binary has exited.
func (p *Process[E]) Exited() <-chan struct{} { return p.exited }

// Kill ends the binary if it still runs.
func (p *Process[E]) Kill() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// Tail returns the last n lines of the file at path.
func Tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
