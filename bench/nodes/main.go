package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/internal/benchproc"
	"github.com/ufp-dev/ufp/internal/kubetest"
)

// Limits of the phases, within -timeout.
const (
	buildTimeout = 10 * time.Minute // go build of ufpd and the agent
	startTimeout = 60 * time.Second // ufpd answering on its socket
	syncTimeout  = 2 * time.Minute  // the first sync
	joinTimeout  = 30 * time.Second // one join or leave reaching ufpd
)

type options struct {
	nodes, joins int
	timeout      time.Duration
	md           string
	verbose      bool
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fl := flag.NewFlagSet("nodes", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.IntVar(&o.nodes, "nodes", 100, "other ufp Nodes the cluster has before the joins")
	fl.IntVar(&o.joins, "joins", 20, "Nodes to join (and then leave) one at a time, timed")
	fl.DurationVar(&o.timeout, "timeout", 10*time.Minute, "bound of the whole run")
	fl.StringVar(&o.md, "md", "", "also write the results as Markdown to `file`")
	fl.BoolVar(&o.verbose, "v", false, "pass the agent's and ufpd's logs through")
	if err := fl.Parse(args); err != nil {
		return o, err
	}
	if fl.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fl.Arg(0))
	}
	if o.nodes < 0 || o.joins < 1 || o.nodes+o.joins > maxNodes {
		return o, fmt.Errorf("-nodes %d, -joins %d: want -joins 1 or more and at most %d Nodes in all", o.nodes, o.joins, maxNodes)
	}
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "nodes:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	res, err := bench(ctx, o, stderr)
	if res != nil {
		out := res.markdown()
		stdout.Write(out)
		if o.md != "" {
			if werr := os.WriteFile(o.md, out, 0o644); werr != nil {
				err = errors.Join(err, werr)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "nodes:", err)
		return 1
	}
	return 0
}

// results are what a run measured.
type results struct {
	args         []string
	load         string
	nodes        int
	sync         time.Duration
	joins, leave []time.Duration
}

func (r *results) markdown() []byte {
	var b bytes.Buffer
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "`go run ./bench/nodes %s` on %s (%d CPUs, %s, kube-apiserver %s), load average at the start: %s\n\n",
		strings.Join(r.args, " "), host, runtime.NumCPU(), runtime.Version(), kubetest.Version, r.load)
	b.WriteString("| measure | figure |\n| --- | --- |\n")
	fmt.Fprintf(&b, "| first sync: network and %d routes (%d Nodes) | %s |\n", 2*r.nodes, r.nodes, dur(r.sync))
	for _, m := range []struct {
		what string
		l    []time.Duration
	}{{fmt.Sprintf("join: Node created to its 2 routes in ufpd (%d joins)", len(r.joins)), r.joins},
		{fmt.Sprintf("leave: Node deleted to its 2 routes gone (%d leaves)", len(r.leave)), r.leave}} {
		if len(m.l) == 0 {
			continue
		}
		s := slices.Clone(m.l)
		slices.Sort(s)
		fmt.Fprintf(&b, "| %s: p50 / p90 / max | %s / %s / %s |\n", m.what, dur(percentile(s, 50)), dur(percentile(s, 90)), dur(s[len(s)-1]))
	}
	return b.Bytes()
}

// percentile returns the p-th percentile (0-100) of sorted d, by the
// nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p/100*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(rank, len(sorted)-1))]
}

func dur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	default:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	}
}

// bench runs the whole measurement and removes what it made. It returns
// what it measured so far also with an error.
func bench(ctx context.Context, o options, logw io.Writer) (res *results, err error) {
	res = &results{args: os.Args[1:], load: benchproc.LoadAverage(), nodes: o.nodes}
	if err := kubetest.CheckAssets(); err != nil {
		return nil, fmt.Errorf("%w: run tools/build-kube first", err)
	}
	dir, err := os.MkdirTemp("", "ufp-bench-nodes-")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	say := func(format string, args ...any) {
		fmt.Fprintf(logw, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
	say("building cmd/ufpd and cmd/ufp-agent")
	ufpdBin, agentBin := filepath.Join(dir, "ufpd"), filepath.Join(dir, "ufp-agent")
	if err := build(ctx, map[string]string{ufpdBin: "github.com/ufp-dev/ufp/cmd/ufpd", agentBin: "github.com/ufp-dev/ufp/cmd/ufp-agent"}); err != nil {
		return nil, err
	}
	say("starting etcd and kube-apiserver (%s)", kubetest.AssetsDir())
	cluster, err := kubetest.New()
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, cluster.Stop()) }()

	say("creating the agent's Node and %d others", o.nodes)
	if err := createNode(ctx, cluster.Client, ownNode()); err != nil {
		return res, err
	}
	for k := range o.nodes {
		if err := createNode(ctx, cluster.Client, otherNode(k)); err != nil {
			return res, err
		}
	}
	sock := filepath.Join(dir, "ufpd.sock")
	ufpd, err := startUFPD(ctx, ufpdBin, dir, sock, o.verbose, logw)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, ufpd.Stop()) }()
	c := api.NewClient(sock)

	say("starting the agent")
	agent, err := benchproc.Start(dir, "ufp-agent", passthrough(o.verbose, logw), agentBin,
		"--kubeconfig="+cluster.Kubeconfig, "--hostname-override="+selfName, "--pod-network", "--network="+network,
		"--node-ip="+underlay(self).String()+","+underlay6(self).String(), "--cluster-cidr=10.244.0.0/16,fd00:10:244::/48",
		"--ufpd-socket="+sock, "--subnet-file="+filepath.Join(dir, "subnet.env"),
		"--healthz-bind-address=", "--metrics-bind-address=")
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, agent.Stop()) }()
	h := &harness{c: c, procs: []*benchproc.Proc{agent, ufpd}}
	if res.sync, err = h.firstSync(ctx, agent.Started, 2*o.nodes); err != nil {
		return res, fmt.Errorf("first sync: %w", err)
	}
	say("first sync in %v", res.sync.Round(time.Millisecond))

	say("timing %d joins", o.joins)
	for i := range o.joins {
		k := o.nodes + i
		n := otherNode(k)
		t0 := time.Now()
		if err := createNode(ctx, cluster.Client, n); err != nil {
			return res, err
		}
		d, err := h.wait(ctx, t0, routeNames(k), true)
		if err != nil {
			return res, fmt.Errorf("join %d: %w", i, err)
		}
		res.joins = append(res.joins, d)
	}
	say("timing %d leaves", o.joins)
	for i := range o.joins {
		k := o.nodes + i
		t0 := time.Now()
		if err := deleteNode(ctx, cluster.Client, nodeName(k)); err != nil {
			return res, err
		}
		d, err := h.wait(ctx, t0, routeNames(k), false)
		if err != nil {
			return res, fmt.Errorf("leave %d: %w", i, err)
		}
		res.leave = append(res.leave, d)
	}
	return res, nil
}

// build builds each package into its binary (run the harness inside the
// ufp module).
func build(ctx context.Context, bins map[string]string) error {
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	for bin, pkg := range bins {
		if err := benchproc.Build(ctx, bin, pkg); err != nil {
			return err
		}
	}
	return nil
}

// startUFPD runs ufpd with its API on sock, and waits for it to answer.
func startUFPD(ctx context.Context, bin, dir, sock string, verbose bool, logw io.Writer) (*benchproc.Proc, error) {
	cfg, err := json.MarshalIndent(map[string]any{
		"policy": map[string]any{"Uplink": uplink(), "Networks": []hns.NetworkConfig{placeholder()}},
		"log":    map[string]string{"level": "warn"},
		"api":    map[string]string{"socket": sock},
		"holder": "off",
	}, "", "  ")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "ufpd.json")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		return nil, err
	}
	p, err := benchproc.Start(dir, "ufpd", passthrough(verbose, logw), bin, "-config", path)
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
// to logw.
func passthrough(verbose bool, logw io.Writer) io.Writer {
	if !verbose {
		return nil
	}
	return logw
}
