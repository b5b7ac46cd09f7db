package probe

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Proc is a probe binary run by a driver. Its methods may be called from
// one goroutine at a time, except Kill.
type Proc struct {
	Spawned time.Time
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	answers chan Answer
	exited  chan struct{}
	err     error // Wait's result, set before exited is closed
	log     string
}

// Start runs bin with args and extra environment variables (such as
// GOGC=50), its standard error going to logPath.
func Start(bin string, args, env []string, logPath string) (*Proc, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = logFile
	cmd.Env = append(os.Environ(), env...)
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
	p := &Proc{cmd: cmd, stdin: stdin, answers: make(chan Answer, 4), exited: make(chan struct{}), log: logPath}
	p.Spawned = time.Now()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	go func() {
		defer close(p.answers)
		dec := json.NewDecoder(stdout)
		for {
			var a Answer
			if err := dec.Decode(&a); err != nil {
				_, _ = io.Copy(io.Discard, stdout)
				return
			}
			p.answers <- a
		}
	}()
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// Do sends one command and waits for its answer.
func (p *Proc) Do(command string) (Answer, error) {
	if _, err := io.WriteString(p.stdin, command+"\n"); err != nil {
		return Answer{}, fmt.Errorf("%s: %w", command, err)
	}
	select {
	case a, ok := <-p.answers:
		if !ok {
			<-p.exited
			return a, fmt.Errorf("%s: exited (%v); log %s:\n%s", command, p.err, p.log, tail(p.log, 20))
		}
		if a.Error != "" {
			return a, fmt.Errorf("%s: %s; log %s", command, a.Error, p.log)
		}
		return a, nil
	case <-time.After(20 * time.Minute):
		return Answer{}, fmt.Errorf("%s: no answer after 20 minutes; log %s", command, p.log)
	}
}

// Exit asks the process to stop and waits for it.
func (p *Proc) Exit() error {
	if _, err := p.Do("exit"); err != nil {
		p.Kill()
		return err
	}
	select {
	case <-p.exited:
		return p.err
	case <-time.After(time.Minute):
		p.Kill()
		return errors.New("did not exit within a minute")
	}
}

// Kill ends the process if it still runs.
func (p *Proc) Kill() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

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
