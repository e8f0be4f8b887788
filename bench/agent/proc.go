package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
)

// binaries are the programs built from the tree.
type binaries struct{ ufpd, agent string }

// build builds cmd/ufpd and, unless agent names a binary, cmd/ufp-agent
// into dir (run the harness inside the ufp module).
func build(ctx context.Context, dir, agent string) (binaries, error) {
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	b := binaries{ufpd: filepath.Join(dir, "ufpd"), agent: agent}
	todo := []struct{ bin, pkg string }{{b.ufpd, "github.com/ufp-dev/ufp/cmd/ufpd"}}
	if agent == "" {
		b.agent = filepath.Join(dir, "ufp-agent")
		todo = append(todo, struct{ bin, pkg string }{b.agent, "github.com/ufp-dev/ufp/cmd/ufp-agent"})
	}
	for _, p := range todo {
		out, err := exec.CommandContext(ctx, "go", "build", "-o", p.bin, p.pkg).CombinedOutput()
		if err != nil {
			return b, fmt.Errorf("go build %s (run the harness inside the ufp module): %w: %s", p.pkg, err, bytes.TrimSpace(out))
		}
	}
	return b, nil
}

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
		out = io.MultiWriter(f, prefixWriter{name + ": ", logw})
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
		// Verbose, the output is copied through a pipe until Wait:
		// the file stays open until then.
		p.err = p.cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	return p, nil
}

// prefixWriter writes each Write to w with a prefix (the programs write
// a line at a time).
type prefixWriter struct {
	prefix string
	w      io.Writer
}

func (pw prefixWriter) Write(b []byte) (int, error) {
	if _, err := io.WriteString(pw.w, pw.prefix+string(b)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// pid is p's process ID.
func (p *proc) pid() int { return p.cmd.Process.Pid }

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
		return fmt.Errorf("stopping %s (pid %d): %w", p.name, p.pid(), err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(stopGrace):
	}
	p.cmd.Process.Kill()
	<-p.exited
	return fmt.Errorf("%s (pid %d) ignored SIGTERM for %v and was killed", p.name, p.pid(), stopGrace)
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

// ufpdFile is ufpd's configuration file (docs/UFPD.md).
type ufpdFile struct {
	Policy any               `json:"policy"`
	Log    map[string]string `json:"log"`
	API    map[string]string `json:"api"`
	State  string            `json:"state"`
	Holder string            `json:"holder"`
}

// hnsPolicy is a policy document of the HNS level as ufpd reads one
// (vswitch.Config's HNS fields).
type hnsPolicy struct {
	Uplink    *hns.UplinkConfig    `json:"Uplink"`
	Networks  []hns.NetworkConfig  `json:"Networks"`
	Endpoints []hns.EndpointConfig `json:"Endpoints"`
}

// startUFPD runs ufpd on s's document with its API on sock and a state
// file in dir, and waits for it to answer.
func startUFPD(ctx context.Context, bin, dir, sock string, s shape, verbose bool, logw io.Writer) (*proc, error) {
	d := s.document()
	cfg, err := json.MarshalIndent(ufpdFile{
		Policy: hnsPolicy{Uplink: d.Uplink, Networks: d.Networks, Endpoints: d.Endpoints},
		Log:    map[string]string{"level": "warn"},
		API:    map[string]string{"socket": sock},
		State:  filepath.Join(dir, "ufpd.state"),
		Holder: "off",
	}, "", "  ")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "ufpd.json")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		return nil, err
	}
	p, err := start(dir, "ufpd", verbose, logw, bin, "-config", path)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	c := api.NewClient(sock)
	for {
		if _, err := c.Status(ctx); err == nil {
			return p, nil
		}
		if err := p.alive(); err != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(fmt.Errorf("ufpd did not answer on %s: %w: %s", sock, ctx.Err(), p.logTail()), p.stop())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startAgent runs the agent as node-1 against kubeconfig and ufpd's
// socket, its logs at debug (the per-update trace) and, if metrics is
// not empty, its metrics and profiles on that loopback address.
func startAgent(bin, dir, kubeconfig, sock, metrics string, verbose bool, logw io.Writer) (*proc, error) {
	args := []string{"--metrics-bind-address="}
	if metrics != "" {
		args = []string{"--metrics-bind-address=" + metrics, "--profiling"}
	}
	return start(dir, "ufp-agent", verbose, logw, append([]string{bin,
		"--kubeconfig=" + kubeconfig,
		"--hostname-override=" + nodeName,
		"--node-ip=" + nodeIP.String(),
		"--cluster-cidr=" + localNet.String() + "," + remoteNet.String(),
		"--source-vip=" + sourceVIP.String(),
		"--network=" + network,
		"--ufpd-socket=" + sock,
		"--healthz-bind-address=",
		"--log-level=debug",
	}, args...)...)
}

// freePort returns a loopback address with a port free a moment ago.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// traceUpdates reads the agent's per-sync trace from its log and gives
// each update the sync that served it. The agent writes a sync's line
// after ufpd answered, which the harness may have seen first: the log
// is read again for a while until the last update has its line.
func (p *proc) traceUpdates(ups []update) error {
	for try := 0; ; try++ {
		b, err := os.ReadFile(p.log)
		if err != nil {
			return err
		}
		lines, err := parseTrace(bytes.NewReader(b))
		if err != nil {
			return err
		}
		match(ups, lines)
		if len(ups) == 0 || ups[len(ups)-1].traced || try == 20 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// saveProfile writes the Go heap profile of the program serving
// profiles at addr to file.
func saveProfile(ctx context.Context, addr, file string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("heap profile: %s", resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	return os.WriteFile(file, b, 0o644)
}

// memory is a process's resident set: now and at its peak, in bytes.
type memory struct{ rss, hwm int64 }

// readMemory reads VmRSS and VmHWM from /proc/PID/status.
func readMemory(pid int) (memory, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return memory{}, err
	}
	defer f.Close()
	var m memory
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *int64
		switch k {
		case "VmRSS":
			dst = &m.rss
		case "VmHWM":
			dst = &m.hwm
		default:
			continue
		}
		f := strings.Fields(v) // "123456 kB"
		if len(f) != 2 || f[1] != "kB" {
			return m, fmt.Errorf("/proc/%d/status: %s: %q", pid, k, v)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return m, fmt.Errorf("/proc/%d/status: %s: %w", pid, k, err)
		}
		*dst = kb << 10
	}
	return m, sc.Err()
}
