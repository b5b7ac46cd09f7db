package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/typedctrl/ctrl/bench/internal/shapes"
)

// process is a running implementation binary.
type process struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan shapes.Event
	exited chan struct{}
	err    error // Wait's result, set before exited is closed
	// decodeErr is why reading its standard output stopped before the
	// end, set before events is closed.
	decodeErr error
	log       string
}

// eventTimeout bounds every wait for an event: the binary gives up on its
// own waits after 10 minutes.
const eventTimeout = 12 * time.Minute

func startProcess(bin, logPath string, args []string) (*process, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = logFile
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
	p := &process{cmd: cmd, stdin: stdin, events: make(chan shapes.Event, 4), exited: make(chan struct{}), log: logPath}
	// Wait closes the process's standard output, so it comes after the
	// last read: a process that exits right after its report would
	// otherwise lose it.
	go func() {
		dec := json.NewDecoder(stdout)
		for {
			var e shapes.Event
			if err := dec.Decode(&e); err != nil {
				if err != io.EOF {
					p.decodeErr = err
				}
				_, _ = io.Copy(io.Discard, stdout)
				break
			}
			p.events <- e
		}
		close(p.events)
		p.err = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// expect waits for the event named want.
func (p *process) expect(want string) (shapes.Event, error) {
	select {
	case e, ok := <-p.events:
		if !ok {
			<-p.exited
			if p.decodeErr != nil {
				return e, fmt.Errorf("reading its output while waiting for %q: %w; log: %s", want, p.decodeErr, p.log)
			}
			return e, fmt.Errorf("exited (%v) while waiting for %q; log: %s\n%s", p.err, want, p.log, tail(p.log, 20))
		}
		if e.Event != want {
			return e, fmt.Errorf("got event %q, want %q", e.Event, want)
		}
		return e, nil
	case <-time.After(eventTimeout):
		return shapes.Event{}, fmt.Errorf("no %q after %s; log: %s", want, eventTimeout, p.log)
	}
}

func (p *process) send(cmd string) error {
	_, err := io.WriteString(p.stdin, cmd+"\n")
	return err
}

// kill ends the process if it is still running.
func (p *process) kill() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

func (p *process) wait() error {
	select {
	case <-p.exited:
		return p.err
	case <-time.After(time.Minute):
		p.kill()
		return errors.New("did not exit within a minute of its report")
	}
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
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
