// Command runcontrolplane runs a ctrltest control plane (etcd and
// kube-apiserver on loopback) in a process of its own, for the benchmark
// drivers in bench/, which kill and restart the API server through it.
//
// Once the API server is ready it prints the path of an admin kubeconfig as
// one line on standard output. It then reads commands from standard input,
// one per line, and answers each with one line on standard output once it is
// done:
//
//	stop-apiserver    kill the API server with SIGKILL, leaving etcd running: "ok stop-apiserver"
//	start-apiserver   start it again on the same port and wait until it is ready: "ok start-apiserver"
//
// A command that fails, or an unknown one, is answered with "error <command>:
// <reason>". It stops the control plane and exits on SIGINT or SIGTERM, or
// when its standard input reaches end of file, so a parent that dies without
// signaling still does not leave it running.
//
//	go build -o /tmp/runcontrolplane ./internal/cmd/runcontrolplane
//	/tmp/runcontrolplane -apiserver-flag=--max-requests-inflight=800
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/typedctrl/ctrl/ctrltest"
)

// flagList collects a repeatable string flag.
type flagList []string

func (l *flagList) String() string     { return strings.Join(*l, " ") }
func (l *flagList) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var extra flagList
	binDir := flag.String("bin", "", "directory holding kube-apiserver and etcd (default: ctrltest's)")
	flag.Var(&extra, "apiserver-flag", "extra kube-apiserver flag, such as --max-requests-inflight=800 (repeatable)")
	flag.Parse()

	env, err := ctrltest.New(ctrltest.Options{BinDir: *binDir, APIServerFlags: extra})
	if err != nil {
		fmt.Fprintln(os.Stderr, "runcontrolplane:", err)
		os.Exit(1)
	}
	fmt.Println(env.KubeconfigPath())

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	eof := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			cmd := strings.TrimSpace(sc.Text())
			if cmd == "" {
				continue
			}
			if err := run(env, cmd); err != nil {
				fmt.Printf("error %s: %v\n", cmd, err)
			} else {
				fmt.Printf("ok %s\n", cmd)
			}
		}
		close(eof)
	}()
	select {
	case <-stop:
	case <-eof:
	}
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "runcontrolplane:", err)
		os.Exit(1)
	}
}

// run carries out one command read from standard input.
func run(env *ctrltest.Env, cmd string) error {
	switch cmd {
	case "stop-apiserver":
		return env.StopAPIServer()
	case "start-apiserver":
		return env.StartAPIServer()
	default:
		return errors.New("unknown command")
	}
}
