package ctrltest

import (
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is a child started in its own process group, with its output
// appended to a log file.
type process struct {
	cmd     *exec.Cmd
	logPath string
	// logStart is the size of the log file when this process started, so
	// that its tail does not show an earlier run's lines.
	logStart int64
	done     chan struct{} // closed once the process has exited and been reaped
	err      error         // Wait's result, set before done is closed
}

// startProcess starts path with args. Its output goes to logPath and, when
// set, to out's writers.
//
// The child gets SIGKILL when the thread that started it exits (Pdeathsig on
// Linux), so it cannot outlive a killed test binary. Go may end a thread that
// a goroutine left locked, so the child is started and waited for on a
// dedicated locked thread that lives exactly as long as the child.
func startProcess(path string, args []string, logPath string, out *syncWriters) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	info, err := logFile.Stat()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = out.wrap(logFile)
	cmd.SysProcAttr = sysProcAttr()
	// Bounds the wait for output copying should the process leave its pipes
	// open to someone else.
	cmd.WaitDelay = time.Second
	p := &process{cmd: cmd, logPath: logPath, logStart: info.Size(), done: make(chan struct{})}

	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			logFile.Close()
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// signal sends sig to the process group unless the process has been reaped.
func (p *process) signal(sig syscall.Signal) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
}

// kill sends SIGKILL to the process group and waits for the process to exit.
func (p *process) kill() {
	p.signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM to the process group, then SIGKILL if the process has not
// exited after grace, and waits for it to exit.
func (p *process) stop(grace time.Duration) {
	p.signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.kill()
	}
}

// logTail returns up to n last lines this process wrote to its log.
func (p *process) logTail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if p.logStart <= int64(len(data)) {
		data = data[p.logStart:]
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// syncWriters holds the optional extra destinations of the children's
// output. Several children write at once, so writes are serialized.
type syncWriters struct {
	mu             sync.Mutex
	stdout, stderr io.Writer
}

func newSyncWriters(stdout, stderr io.Writer) *syncWriters {
	return &syncWriters{stdout: stdout, stderr: stderr}
}

// wrap returns the stdout and stderr for a child logging to logFile.
func (s *syncWriters) wrap(logFile *os.File) (stdout, stderr io.Writer) {
	stdout, stderr = logFile, logFile
	if s.stdout != nil {
		stdout = &lockedWriter{mu: &s.mu, w: io.MultiWriter(logFile, s.stdout)}
	}
	if s.stderr != nil {
		stderr = &lockedWriter{mu: &s.mu, w: io.MultiWriter(logFile, s.stderr)}
	}
	return stdout, stderr
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
