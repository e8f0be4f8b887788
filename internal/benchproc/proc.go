package benchproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ufp-dev/ufp/api"
)

// StopGrace is how long Stop waits from SIGTERM to SIGKILL.
const StopGrace = 10 * time.Second

// Proc is a program a harness started, its output in a log file (and,
// if asked, passed through).
type Proc struct {
	Name    string
	Log     string    // the log file's path
	Started time.Time // just before the exec

	cmd    *exec.Cmd
	exited chan struct{}
	err    error // once exited is closed
}

// Start starts argv with its output in dir/name.log and, if pass is not
// nil, also to pass. The kernel kills the child if the harness dies
// without stopping it (on Linux).
func Start(dir, name string, pass io.Writer, argv ...string) (*Proc, error) {
	p := &Proc{Name: name, Log: filepath.Join(dir, name+".log"), exited: make(chan struct{})}
	f, err := os.Create(p.Log)
	if err != nil {
		return nil, err
	}
	var out io.Writer = f
	if pass != nil {
		out = io.MultiWriter(f, pass)
	}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	p.cmd.SysProcAttr = childAttr()
	p.Started = time.Now()
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		// Passed through, the output is copied through a pipe until
		// Wait: the file stays open until then.
		p.err = p.cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	return p, nil
}

// PrefixWriter writes each Write to W with Prefix (the programs write a
// line at a time).
type PrefixWriter struct {
	Prefix string
	W      io.Writer
}

func (pw PrefixWriter) Write(b []byte) (int, error) {
	if _, err := io.WriteString(pw.W, pw.Prefix+string(b)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// PID is p's process ID.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Alive reports an error, with the end of p's log, if p has exited.
func (p *Proc) Alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited (%v): %s", p.Name, p.err, p.LogTail())
	default:
		return nil
	}
}

// Stop ends p by its PID: SIGTERM, then SIGKILL after StopGrace.
func (p *Proc) Stop() error {
	if p.Alive() != nil {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("stopping %s (pid %d): %w", p.Name, p.PID(), err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(StopGrace):
	}
	p.cmd.Process.Kill()
	<-p.exited
	return fmt.Errorf("%s (pid %d) ignored SIGTERM for %v and was killed", p.Name, p.PID(), StopGrace)
}

// LogTail is the end of p's log.
func (p *Proc) LogTail() string {
	b, _ := os.ReadFile(p.Log)
	const keep = 3000
	if len(b) > keep {
		b = b[len(b)-keep:]
	}
	return string(bytes.TrimSpace(b))
}

// WaitUFPD waits until the ufpd p answers on its API socket sock, until
// ctx is done (then it stops p) or p exits.
func WaitUFPD(ctx context.Context, p *Proc, sock string) error {
	c := api.NewClient(sock)
	for {
		if _, err := c.Status(ctx); err == nil {
			return nil
		}
		if err := p.Alive(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("ufpd did not answer on %s: %w: %s", sock, ctx.Err(), p.LogTail()), p.Stop())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Build builds the package pkg into the binary bin (the harness runs
// inside the ufp module).
func Build(ctx context.Context, bin, pkg string) error {
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build %s (run the harness inside the ufp module): %w: %s", pkg, err, bytes.TrimSpace(out))
	}
	return nil
}

// LoadAverage returns /proc/loadavg's 1, 5 and 15 minute figures.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
