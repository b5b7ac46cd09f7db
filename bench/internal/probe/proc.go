package probe

import (
	"fmt"
	"time"

	"github.com/typedctrl/ctrl/bench/internal/proc"
)

// Proc is a probe binary run by a driver. Its methods may be called from
// one goroutine at a time, except Kill.
type Proc struct{ *proc.Process[Answer] }

// Start runs bin with args and extra environment variables (such as
// GOGC=50), its standard error going to logPath.
func Start(bin string, args, env []string, logPath string) (*Proc, error) {
	p, err := proc.Start[Answer](bin, args, env, logPath)
	if err != nil {
		return nil, err
	}
	return &Proc{p}, nil
}

// Do sends one command and waits for its answer.
func (p *Proc) Do(command string) (Answer, error) {
	if err := p.Send(command); err != nil {
		return Answer{}, fmt.Errorf("%s: %w", command, err)
	}
	a, err := p.Next("the answer", 20*time.Minute)
	switch {
	case err != nil:
		return a, fmt.Errorf("%s: %w", command, err)
	case a.Error != "":
		return a, fmt.Errorf("%s: %s; log %s", command, a.Error, p.Log)
	}
	return a, nil
}

// Exit asks the process to stop and waits for it.
func (p *Proc) Exit() error {
	if _, err := p.Do("exit"); err != nil {
		p.Kill()
		return err
	}
	return p.Wait(time.Minute)
}
