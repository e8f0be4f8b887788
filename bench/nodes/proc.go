package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// proc is a program the harness started, its output in a log file (and,
// verbose, passed through).
type proc struct {
	name    string
	cmd     *exec.Cmd
	log     string
	exited  chan struct{}
	err     error     // once exited is closed
	started time.Time // just before the exec
}

// start starts argv with its output in dir/name.log, and also to logw
// if verbose.
func start(dir, name string, verbose bool, logw io.Writer, argv ...string) (*proc, error) {
	p := &proc{name: name, log: filepath.Join(dir, name+".log"), exited: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	var out io.Writer = f
	if verbose {
		out = io.MultiWriter(f, logw)
	}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	p.cmd.SysProcAttr = childAttr()
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	return p, nil
}

// alive reports an error if p has exited.
func (p *proc) alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited (%v): %s", p.name, p.err, p.logTail())
	default:
		return nil
	}
}

// stop ends p by its PID: SIGTERM, then SIGKILL after stopGrace.
func (p *proc) stop() error {
	if p.alive() != nil {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("stopping %s (pid %d): %w", p.name, p.cmd.Process.Pid, err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(stopGrace):
	}
	p.cmd.Process.Kill()
	<-p.exited
	return fmt.Errorf("%s (pid %d) ignored SIGTERM for %v and was killed", p.name, p.cmd.Process.Pid, stopGrace)
}

// logTail is the end of p's log.
func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.log)
	const keep = 3000
	if len(b) > keep {
		b = b[len(b)-keep:]
	}
	return string(bytes.TrimSpace(b))
}
