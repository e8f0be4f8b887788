package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Time limits of the commands the harness runs.
const (
	ipTimeout    = 10 * time.Second // one ip, ss or ethtool command
	ovsTimeout   = 20 * time.Second // one ovs-vsctl, ovs-appctl or ovsdb-tool command
	buildTimeout = 5 * time.Minute  // go build of ufpd
	stopGrace    = 5 * time.Second  // from SIGTERM to SIGKILL
)

// runner runs the harness's commands, each in its own process group (so
// that a Ctrl-C at the terminal reaches only the harness, which then stops
// them in order) and each bounded in time. With verbose it echoes them to
// log. The zero value runs quietly; one goroutine uses a runner at a time.
type runner struct {
	verbose bool
	log     io.Writer
}

// command returns the command argv, in its own process group, with env
// (NAME=value entries) added to the harness's environment.
func (r *runner) command(env, argv []string) *exec.Cmd {
	if r.verbose {
		fmt.Fprintf(r.log, "+ %s\n", strings.Join(append(slices.Clip(env), argv...), " "))
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = ownProcessGroup()
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	return cmd
}

// output runs argv to completion, within timeout and until ctx ends, and
// returns its standard output. The error names the command and carries
// its standard error.
func (r *runner) output(ctx context.Context, timeout time.Duration, argv ...string) ([]byte, error) {
	return r.outputEnv(ctx, timeout, nil, argv...)
}

// outputEnv is output with env (NAME=value entries) added to the
// command's environment.
func (r *runner) outputEnv(ctx context.Context, timeout time.Duration, env []string, argv ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	c, err := r.startEnv(env, argv, &stdout, &stderr)
	if err != nil {
		return nil, err
	}
	if err := c.wait(ctx, timeout); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// ip runs the ip command with args.
func (r *runner) ip(ctx context.Context, args ...string) error {
	_, err := r.output(ctx, ipTimeout, append([]string{"ip"}, args...)...)
	return err
}

// child is a process the harness started. It is stopped only through its
// own PID.
type child struct {
	argv []string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited and err is set
	err  error
}

// start starts argv with its output going to stdout and stderr (nil:
// discarded).
func (r *runner) start(argv []string, stdout, stderr io.Writer) (*child, error) {
	return r.startEnv(nil, argv, stdout, stderr)
}

// startEnv is start with env (NAME=value entries) added to the child's
// environment.
func (r *runner) startEnv(env, argv []string, stdout, stderr io.Writer) (*child, error) {
	cmd := r.command(env, argv)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	c := &child{argv: argv, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// pid returns the child's process ID.
func (c *child) pid() int { return c.cmd.Process.Pid }

// exited reports whether the child has exited.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// errTimedOut is the error of a child stopped because it ran too long.
var errTimedOut = errors.New("timed out")

// wait waits for the child to exit and returns its exit error. When
// timeout passes first, or ctx ends, it stops the child and says so.
func (c *child) wait(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.done:
		return c.err
	case <-t.C:
		c.stop()
		return fmt.Errorf("%w after %v", errTimedOut, timeout)
	case <-ctx.Done():
		c.stop()
		return ctx.Err()
	}
}

// stop sends SIGTERM to the child's PID and, if it has not exited within
// stopGrace, SIGKILL. It returns an error only when it had to kill the
// child; how the child exited is in its err once stop returns.
func (c *child) stop() error {
	if c.exited() {
		return nil
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return nil
	case <-time.After(stopGrace):
	}
	_ = c.cmd.Process.Kill()
	<-c.done
	return fmt.Errorf("pid %d did not stop within %v of SIGTERM; killed", c.pid(), stopGrace)
}

// pause stops the child with SIGSTOP (it keeps its state and uses no CPU)
// until resume; a no-op once it has exited.
func (c *child) pause() error {
	if c.exited() {
		return nil
	}
	if err := stopProcess(c.cmd.Process); err != nil {
		return fmt.Errorf("pausing pid %d: %w", c.pid(), err)
	}
	return nil
}

// resume continues a child that pause stopped (SIGCONT); a no-op for a
// running or exited child.
func (c *child) resume() error {
	if c.exited() {
		return nil
	}
	if err := continueProcess(c.cmd.Process); err != nil {
		return fmt.Errorf("resuming pid %d: %w", c.pid(), err)
	}
	return nil
}
