package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/internal/benchproc"
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
		if err := benchproc.Build(ctx, p.bin, p.pkg); err != nil {
			return b, err
		}
	}
	return b, nil
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
func startUFPD(ctx context.Context, bin, dir, sock string, s shape, verbose bool, logw io.Writer) (*benchproc.Proc, error) {
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
	p, err := benchproc.Start(dir, "ufpd", passthrough(verbose, "ufpd", logw), bin, "-config", path)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := benchproc.WaitUFPD(ctx, p, sock); err != nil {
		return nil, err
	}
	return p, nil
}

// passthrough is where a program's output goes besides its log: verbose,
// to logw, each line after the program's name.
func passthrough(verbose bool, name string, logw io.Writer) io.Writer {
	if !verbose {
		return nil
	}
	return benchproc.PrefixWriter{Prefix: name + ": ", W: logw}
}

// startAgent runs the agent as node-1 against kubeconfig and ufpd's
// socket, its logs at debug (the per-update trace) and, if metrics is
// not empty, its metrics and profiles on that loopback address.
func startAgent(bin, dir, kubeconfig, sock, metrics string, verbose bool, logw io.Writer) (*benchproc.Proc, error) {
	args := []string{"--metrics-bind-address="}
	if metrics != "" {
		args = []string{"--metrics-bind-address=" + metrics, "--profiling"}
	}
	return benchproc.Start(dir, "ufp-agent", passthrough(verbose, "ufp-agent", logw), append([]string{bin,
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
func traceUpdates(p *benchproc.Proc, ups []update) error {
	for try := 0; ; try++ {
		b, err := os.ReadFile(p.Log)
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
