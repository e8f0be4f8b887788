package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/internal/benchproc"
	"github.com/ufp-dev/ufp/internal/kubetest"
)

// Limits of the phases, within -timeout.
const (
	buildTimeout  = 10 * time.Minute // go build of ufpd and the agent
	startTimeout  = 60 * time.Second // ufpd answering on its socket
	updateTimeout = 30 * time.Second // one update reaching ufpd
)

type options struct {
	shape
	workers     int
	timeout     time.Duration
	syncTimeout time.Duration
	md          string
	profiles    string
	agentBin    string
	verbose     bool
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fl := flag.NewFlagSet("agent", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.IntVar(&o.Services, "services", 10000, "Services to create")
	fl.IntVar(&o.Endpoints, "endpoints", 10, "backends per Service")
	fl.IntVar(&o.Updates, "updates", 500, "EndpointSlice updates to time, one at a time")
	fl.IntVar(&o.Nodes, "nodes", 100, "remote nodes the backends are spread over")
	fl.IntVar(&o.Locals, "locals", 20, "local pods (ufpd endpoints without devices)")
	fl.IntVar(&o.LocalEvery, "local-every", 10, "every `N`-th Service has one local backend (0: none)")
	fl.IntVar(&o.workers, "workers", 32, "parallel creates")
	fl.DurationVar(&o.timeout, "timeout", 30*time.Minute, "bound of the whole run")
	fl.DurationVar(&o.syncTimeout, "sync-timeout", 10*time.Minute, "bound of the full sync")
	fl.StringVar(&o.agentBin, "agent", "", "run this ufp-agent `binary` rather than one built from the tree")
	fl.StringVar(&o.md, "md", "", "also write the results as Markdown to `file`")
	fl.StringVar(&o.profiles, "profiles", "", "save the agent's Go heap profiles after the full sync and at the end into `dir`")
	fl.BoolVar(&o.verbose, "v", false, "pass the agent's and ufpd's logs through")
	if err := fl.Parse(args); err != nil {
		return o, err
	}
	if fl.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fl.Arg(0))
	}
	if o.workers < 1 {
		return o, fmt.Errorf("-workers %d: want 1 or more", o.workers)
	}
	return o, o.validate()
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "agent:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	res, err := bench(ctx, o, stderr)
	if res != nil {
		res.print(stdout)
		if o.md != "" {
			if werr := os.WriteFile(o.md, res.markdown(), 0o644); werr != nil {
				err = errors.Join(err, werr)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "agent:", err)
		return 1
	}
	return 0
}

// bench runs the whole measurement and removes what it made. It returns
// what it measured so far also with an error.
func bench(ctx context.Context, o options, logw io.Writer) (res *results, err error) {
	load := benchproc.LoadAverage()
	if err := kubetest.CheckAssets(); err != nil {
		return nil, fmt.Errorf("%w: run tools/build-kube first", err)
	}
	dir, err := os.MkdirTemp("", "ufp-bench-agent-")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	say := func(format string, args ...any) {
		fmt.Fprintf(logw, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}

	say("building cmd/ufpd and cmd/ufp-agent")
	bins, err := build(ctx, dir, o.agentBin)
	if err != nil {
		return nil, err
	}

	say("starting etcd and kube-apiserver (%s)", kubetest.AssetsDir())
	cluster, err := kubetest.New()
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, cluster.Stop()) }()
	res = &results{shape: o.shape, args: os.Args[1:], load: load}

	say("creating %d Services and their EndpointSlices (%d backends each)", o.Services, o.Endpoints)
	objs, took, err := create(ctx, cluster.Client, o.shape, o.workers)
	if err != nil {
		return res, err
	}
	res.create = took
	say("created in %v", took.Round(time.Millisecond))

	sock := filepath.Join(dir, "ufpd.sock")
	ufpd, err := startUFPD(ctx, bins.ufpd, dir, sock, o.shape, o.verbose, logw)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, ufpd.Stop()) }()
	client := api.NewClient(sock)

	say("starting the agent")
	metrics := ""
	if o.profiles != "" {
		if metrics, err = freePort(); err != nil {
			return res, err
		}
	}
	agent, err := startAgent(bins.agent, dir, cluster.Kubeconfig, sock, metrics, o.verbose, logw)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, agent.Stop()) }()
	h := &harness{cs: cluster.Client, ufpdc: client, s: o.shape, o: objs, agent: agent, ufpd: ufpd, verbose: o.verbose, say: say}
	res.sync, err = h.waitProgrammed(ctx, o.syncTimeout)
	if err != nil {
		return res, fmt.Errorf("full sync: %w", err)
	}
	say("ufpd programmed %v after the agent's start", res.sync.Round(time.Millisecond))
	if res.memSync, err = readMemories(agent, ufpd, cluster); err != nil {
		return res, err
	}
	if o.profiles != "" {
		if err := saveProfile(ctx, metrics, filepath.Join(o.profiles, "agent-heap-sync.pb.gz")); err != nil {
			return res, err
		}
	}

	if o.Updates > 0 {
		say("timing %d EndpointSlice updates", o.Updates)
		res.updates, err = h.timeUpdates(ctx)
		if err != nil {
			return res, fmt.Errorf("updates: %w", err)
		}
		if err := traceUpdates(agent, res.updates); err != nil {
			return res, err
		}
	}
	if res.mem, err = readMemories(agent, ufpd, cluster); err != nil {
		return res, err
	}
	if o.profiles != "" {
		if err := saveProfile(ctx, metrics, filepath.Join(o.profiles, "agent-heap-end.pb.gz")); err != nil {
			return res, err
		}
	}

	// ufpd's share of an update: the agent stopped, the same kind of
	// one-load-balancer batch sent straight to ufpd.
	if err := agent.Stop(); err != nil {
		return res, err
	}
	say("timing %d one-load-balancer batches sent to ufpd directly", directApplies)
	res.direct, err = h.timeDirect(ctx)
	return res, err
}
