package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command line's settings.
type options struct {
	switches   []string // the switches under test, in round order
	explicit   bool     // -switches named them (not "all")
	topologies []string // pair, overlay or both, in that order
	rounds     int
	seconds    int    // iperf3 -t of each throughput test
	mdPath     string // Markdown report; empty: none
	verbose    bool
	args       []string // the flags as given, for the report
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	o := options{args: args}
	fl := flag.NewFlagSet("e2e", flag.ContinueOnError)
	fl.SetOutput(stderr)
	switches := fl.String("switches", "all", "the `switches` under test, comma-separated, in round order: "+strings.Join(switchNames, ", ")+"; all: every one whose tools are installed")
	topology := fl.String("topology", "both", "pair (pods on one node), overlay (pods on two nodes, VXLAN) or both")
	fl.IntVar(&o.rounds, "rounds", 3, "rounds per switch, interleaved (ufpd, bridge, ovs-tap, ..., ufpd, ...)")
	fl.IntVar(&o.seconds, "t", 5, "seconds of each iperf3 test (TCP 1 stream, TCP 4 streams, UDP)")
	fl.StringVar(&o.mdPath, "md", "", "also write the results as Markdown to this `file`")
	fl.BoolVar(&o.verbose, "v", false, "print every command the harness runs")
	fl.Usage = func() {
		fmt.Fprintf(stderr, "usage: sudo go run ./bench/e2e [-switches LIST] [-topology pair|overlay|both] [-rounds N] [-t SECONDS] [-md FILE] [-v]\n\n"+
			"Builds pod namespaces (ufpb-*) wired through ufpd, a Linux bridge and Open vSwitch's\n"+
			"userspace datapath, on one node and across two nodes over VXLAN, measures TCP,\n"+
			"64-byte UDP frames and ping from pod A to pod B on each, prints the medians and\n"+
			"ratios, and removes everything it made.\n\n")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		return o, err
	}
	var err error
	if o.switches, o.explicit, err = parseSwitches(*switches); err != nil {
		return o, err
	}
	if o.topologies, err = parseTopology(*topology); err != nil {
		return o, err
	}
	switch {
	case fl.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fl.Args(), " "))
	case o.rounds < 1:
		return o, fmt.Errorf("-rounds %d: need at least 1", o.rounds)
	case o.seconds < 2:
		return o, fmt.Errorf("-t %d: need at least 2 seconds (the UDP count skips the first and last part of the run)", o.seconds)
	}
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "e2e: %v\n", err)
		return 2
	}
	if runtime.GOOS != "linux" {
		fmt.Fprintln(stderr, "e2e: needs Linux (network namespaces, veth, TAP)")
		return 2
	}
	avail, notes, err := checkPrerequisites(o.switches, o.explicit, os.Geteuid() == 0, exec.LookPath)
	for _, n := range notes {
		fmt.Fprintf(stderr, "e2e: %s\n", n)
	}
	if err != nil {
		fmt.Fprintf(stderr, "e2e: %v\n", err)
		return 2
	}
	o.switches = avail
	ctx, stop := cancelOnSignal(stderr)
	defer stop()
	if err := bench(ctx, o, stdout, stderr); err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintf(stderr, "e2e: interrupted, no results: %v\n", err)
			return 1
		}
		fmt.Fprintf(stderr, "e2e: %v\n", err)
		return 1
	}
	return 0
}

// cancelOnSignal returns a context that SIGINT, SIGTERM or SIGHUP cancels,
// so that the run stops and its teardown removes what it made. Later
// signals are reported and otherwise ignored until stop is called, so that
// a second Ctrl-C does not cut the teardown short.
func cancelOnSignal(stderr io.Writer) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				if ctx.Err() == nil {
					fmt.Fprintf(stderr, "\ne2e: %v: stopping and removing what the run made\n", s)
					cancel()
				} else {
					fmt.Fprintf(stderr, "e2e: %v: still removing what the run made\n", s)
				}
			case <-done:
				return
			}
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}

// pause is the rest between two tests, so that one's queues drain before
// the next starts.
const pause = 500 * time.Millisecond

// bench runs each topology in turn and reports.
func bench(ctx context.Context, o options, stdout, stderr io.Writer) (err error) {
	r := &runner{verbose: o.verbose, log: stderr}
	var td teardown
	defer func() { err = errors.Join(err, td.run()) }()

	work, err := os.MkdirTemp("", "ufpb-")
	if err != nil {
		return fmt.Errorf("temporary directory: %w", err)
	}
	td.push("remove "+work, func() error { return os.RemoveAll(work) })
	id := newRunID()
	fmt.Fprintf(stdout, "e2e: run %s: namespaces %s-*, work directory %s\n", id, namePrefix+id, work)

	l := &lab{r: r, id: id, work: work}
	if slices.Contains(o.switches, swUFPD) {
		if l.ufpd, err = buildUFPD(ctx, r, work); err != nil {
			return err
		}
	}
	if slices.ContainsFunc(o.switches, isOVS) {
		if l.ovs, err = readOVSVersion(ctx, r); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "e2e: %s\n", l.ovs)
	}
	var all []*results
	for _, topo := range o.topologies {
		res, err := benchTopology(ctx, l, topo, o, stdout)
		if err != nil {
			return fmt.Errorf("%s topology: %w", topo, err)
		}
		all = append(all, res)
	}
	return report(all, o, l.ovs, stdout)
}

// benchTopology builds the testbeds of topology topo, runs the
// interleaved rounds, and removes the testbeds before it returns.
func benchTopology(ctx context.Context, l *lab, topo string, o options, stdout io.Writer) (res *results, err error) {
	var td teardown
	defer func() { err = errors.Join(err, td.run()) }()
	l.td = &td
	defer func() { l.td = nil }()

	var beds []*testbed
	var skipped []string
	for _, sw := range o.switches {
		b, err := setups(topo, sw)(ctx, l)
		var se *skipError
		if errors.As(err, &se) {
			note := fmt.Sprintf("%s: %v", sw, err)
			fmt.Fprintf(stdout, "e2e: %s: %s\n", topo, note)
			skipped = append(skipped, note)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s testbed: %w", sw, err)
		}
		if err := b.prepare(ctx, l.r, &td, l.work, topo); err != nil {
			return nil, fmt.Errorf("%s testbed: %w", sw, err)
		}
		if b.idle != nil {
			if err := b.idle(); err != nil {
				return nil, fmt.Errorf("%s testbed: %w", sw, err)
			}
		}
		beds = append(beds, b)
	}
	if len(beds) == 0 {
		return nil, errors.New("no testbed to measure")
	}

	res = newResults(topo, beds)
	res.skipped = skipped
	res.started, res.loadStart = time.Now(), loadAverage()
	fmt.Fprintf(stdout, "e2e: %s: %d rounds of %d s tests on %s, load average %s\n", topo, o.rounds, o.seconds, bedOrder(res), res.loadStart)
	for round := 1; round <= o.rounds; round++ {
		for _, b := range beds {
			s, errs := measureAwake(ctx, l.r, b, o.seconds)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			res.add(b.name, s, errs)
			fmt.Fprintf(stdout, "%s round %d %-9s %s\n", topo, round, b.name, s.brief())
			for _, e := range errs {
				fmt.Fprintf(stdout, "%s round %d %-9s failed: %v\n", topo, round, b.name, e)
			}
		}
	}
	res.loadEnd = loadAverage()
	return res, nil
}

// measureAwake measures a round on b, waking it first and parking it
// after if it polls (testbed.idle).
func measureAwake(ctx context.Context, r *runner, b *testbed, seconds int) (sample, []error) {
	if b.wake != nil {
		if err := b.wake(); err != nil {
			return newSample(), []error{err}
		}
		if err := sleep(ctx, pause); err != nil {
			return newSample(), []error{err}
		}
	}
	var before uint64
	if b.datapath != nil {
		var err error
		if before, err = b.datapath(ctx); err != nil {
			return newSample(), []error{err}
		}
	}
	s, errs := measureRound(ctx, r, b, seconds)
	if b.datapath != nil {
		after, err := b.datapath(ctx)
		switch {
		case err != nil:
			errs = append(errs, err)
		case after <= before:
			errs = append(errs, fmt.Errorf("%s's datapath looked up no packet during the round", b.name))
		case r.verbose:
			fmt.Fprintf(r.log, "e2e: %s's datapath looked up %d packets during the round\n", b.name, after-before)
		}
	}
	if b.idle != nil {
		if err := b.idle(); err != nil {
			errs = append(errs, err)
		}
	}
	return s, errs
}

// report prints the results of each topology and writes the Markdown
// file if asked.
func report(all []*results, o options, ovs ovsVersion, stdout io.Writer) error {
	for _, res := range all {
		fmt.Fprintf(stdout, "\n%s: load average %s at the start, %s at the end\n\n", topologyTitle(res.topology), res.loadStart, res.loadEnd)
		writeText(stdout, res.medianRows())
		fmt.Fprintln(stdout)
		writeText(stdout, res.cpuRows())
		for _, n := range res.skipped {
			fmt.Fprintf(stdout, "not measured: %s\n", n)
		}
	}
	if o.mdPath == "" {
		return nil
	}
	md := markdownReport(all, describeRun(o, all[0].started, ovs))
	if err := os.WriteFile(o.mdPath, []byte(md), 0o644); err != nil {
		return fmt.Errorf("-md: %w", err)
	}
	fmt.Fprintf(stdout, "\nwrote %s\n", o.mdPath)
	return nil
}
