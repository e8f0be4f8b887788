package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/internal/testenv"
	"github.com/ufp-dev/ufp/vswitch"
)

// The tests run ufpctl against a real ufpd: the binary, built once, on
// the demo's policy without devices (no root needed), its API on a
// socket in a temporary directory.

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

var ufpdBuild struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if ufpdBuild.dir != "" {
		os.RemoveAll(ufpdBuild.dir)
	}
	os.Exit(code)
}

// ufpdBinary builds cmd/ufpd once and returns its path. It skips t
// without the go command (or fails it under CI=true).
func ufpdBinary(t *testing.T) string {
	t.Helper()
	testenv.NeedTool(t, "go")
	b := &ufpdBuild
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "ufpctl-test-"); b.err != nil {
			return
		}
		b.bin = filepath.Join(b.dir, "ufpd")
		out, err := exec.Command("go", "build", "-o", b.bin, "github.com/ufp-dev/ufp/cmd/ufpd").CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("building ufpd: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

// ufpd is a running ufpd.
type ufpd struct {
	socket string
	log    string // its standard error
}

// startUfpd runs ufpd on policy (a policy document) with no devices, its
// API on a socket in a new temporary directory, and stops it with
// SIGTERM when the test ends.
func startUfpd(t *testing.T, policy []byte) *ufpd {
	t.Helper()
	bin := ufpdBinary(t)
	// Not t.TempDir: a Unix socket's path must be short.
	dir, err := os.MkdirTemp("", "ufpctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := &ufpd{socket: filepath.Join(dir, "ufpd.sock"), log: filepath.Join(dir, "ufpd.log")}
	cfg, err := json.Marshal(map[string]any{"policy": json.RawMessage(policy), "api": map[string]string{"socket": d.socket}})
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "ufpd.json")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(d.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "-config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("ufpd (pid %d) exited with %v after SIGTERM\n%s", cmd.Process.Pid, err, d.readLog())
			}
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("ufpd (pid %d) did not stop within 10s of SIGTERM; killed\n%s", cmd.Process.Pid, d.readLog())
		}
		if t.Failed() {
			t.Logf("ufpd's log:\n%s", d.readLog())
		}
	})
	c := api.NewClient(d.socket)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Status(ctx)
		cancel()
		if err == nil {
			return d
		}
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			t.Fatalf("ufpd exited at start: %v\n%s", err, d.readLog())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("ufpd did not answer on %s within 20s: %v\n%s", d.socket, err, d.readLog())
		}
	}
}

func (d *ufpd) readLog() string {
	b, _ := os.ReadFile(d.log)
	return string(b)
}

// result is what one ufpctl run printed.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// ctl runs ufpctl with args against d (through $UFPCTL_SOCKET; d nil:
// none set), with stdin as its standard input.
func ctl(t *testing.T, d *ufpd, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	c := &cli{ctx: context.Background(), stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb,
		getenv: func(k string) string {
			if k == "UFPCTL_SOCKET" && d != nil {
				return d.socket
			}
			return ""
		}}
	code := c.main(args)
	return result{code, out.String(), errb.String()}
}

// ok runs ufpctl and fails the test unless it succeeds quietly; it
// returns the standard output.
func ok(t *testing.T, d *ufpd, args ...string) string {
	t.Helper()
	r := ctl(t, d, "", args...)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("ufpctl %s: %v", strings.Join(args, " "), r)
	}
	return r.stdout
}

// demoPolicy is the policy of ufpd's demo (cmd/ufpd/demo.json).
func demoPolicy(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "ufpd", "demo.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Policy json.RawMessage `json:"policy"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Policy
}

// twoNodePolicy is the demo's policy on a node with a neighbour: node 2
// (192.168.50.2) hosts pod subnet 10.244.2.0/24 over VXLAN, and the pods
// have IPv6 addresses besides.
func twoNodePolicy(t *testing.T) []byte {
	t.Helper()
	var pol vswitch.Config
	if err := json.Unmarshal(demoPolicy(t), &pol); err != nil {
		t.Fatal(err)
	}
	if pol.Uplink == nil || len(pol.Networks) != 1 || len(pol.Networks[0].Ipams) == 0 {
		t.Fatalf("the demo's policy changed shape: %+v", pol)
	}
	pol.Uplink.Neighbors = append(pol.Uplink.Neighbors, hns.NeighborConfig{IpAddress: "192.168.50.2", MacAddress: "02:00:00:00:00:02"})
	n := &pol.Networks[0]
	n.Ipams[0].Subnets = append(n.Ipams[0].Subnets, hns.SubnetConfig{
		IpAddressPrefix: "fd00:244:1::/64",
		Routes:          []hns.RouteConfig{{NextHop: "fd00:244:1::1", DestinationPrefix: "::/0"}},
		Policies:        []hns.PolicyConfig{{Type: "VSID", Settings: json.RawMessage(`{"IsolationId": 4096}`)}},
	})
	n.Policies = append(n.Policies, hns.PolicyConfig{Type: "RemoteSubnetRoute", Settings: json.RawMessage(
		`{"DestinationPrefix": "10.244.2.0/24", "IsolationId": 4096, "ProviderAddress": "192.168.50.2", "DistributedRouterMacAddress": "02:00:00:00:02:01"}`)})
	v6 := map[string]string{"pod-a": "fd00:244:1::10", "pod-b": "fd00:244:1::11"}
	for i := range pol.Endpoints {
		e := &pol.Endpoints[i]
		if a, ok := v6[e.Name]; ok {
			e.IpConfigurations = append(e.IpConfigurations, hns.IpConfigConfig{IpAddress: a})
			delete(v6, e.Name)
		}
	}
	if len(v6) > 0 {
		t.Fatalf("the demo's policy has no endpoints %v", v6)
	}
	b, err := json.Marshal(&pol)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// golden compares got with testdata/NAME, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if d := diffLines(string(want), got); d != "" {
		t.Errorf("output differs from %s (- want, + got; go test -update rewrites it):\n%s", path, d)
	}
}

// diffLines is a line diff of want and got ("" if equal): the lines of
// each that the other lacks, from a longest common subsequence.
func diffLines(want, got string) string {
	if want == got {
		return ""
	}
	a, b := strings.Split(want, "\n"), strings.Split(got, "\n")
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var d strings.Builder
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			fmt.Fprintf(&d, "  %s\n", a[i])
			i++
			j++
		case j < len(b) && (i == len(a) || lcs[i][j+1] >= lcs[i+1][j]):
			fmt.Fprintf(&d, "+ %s\n", b[j])
			j++
		default:
			fmt.Fprintf(&d, "- %s\n", a[i])
			i++
		}
	}
	return d.String()
}

// fakeUfpd serves the two calls a capture makes, GET /v1/ports and GET
// /v1/ports/{name}/capture, with capture answering the request, and the
// further routes of more; it returns the socket. ufpd itself captures
// only ports with devices, and has flows only with traffic, which the
// tests here cannot make: this checks ufpctl's side.
func fakeUfpd(t *testing.T, capture http.HandlerFunc, more ...any) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ufpctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "ufpd.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/ports", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `[{"name": "pod-a", "mac": "02:00:00:00:01:0a", "id": 0, "underlay": "none", "layers": [], "device": {"serving": true, "rxFrames": 0, "txFrames": 0, "txErrors": 0}}]`)
	})
	if capture != nil {
		mux.HandleFunc("GET /v1/ports/{name}/capture", capture)
	}
	for i := 0; i+1 < len(more); i += 2 {
		mux.HandleFunc(more[i].(string), more[i+1].(func(http.ResponseWriter, *http.Request)))
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}
