// Command e2e measures pod-to-pod performance through ufpd and, on the
// same topology, through a Linux bridge, and compares them.
//
//	sudo go run ./bench/e2e [-rounds 3] [-t 5] [-md FILE] [-v]
//
// For each switch under test it builds two pod namespaces (and, for the
// bridge, a switch namespace), all named ufpb-<run id>-..., with no route
// out of them. ufpd is built with `go build` into a temporary directory
// and run as a child process on a generated configuration (ufpd-policy.json:
// an Overlay network, two endpoints with OutBoundNAT exceptions and ACLs).
//
// Rounds are interleaved (ufpd, bridge, ufpd, bridge, ...). Each round
// measures, from pod A to pod B: ping latency, iperf3 TCP with 1 and 4
// streams, and 64-byte UDP frames delivered per second, counted at pod B's
// interface, with the switch's CPU time per delivered frame (ufpd's
// utime+stime; the bridge's is the kernel's, not measured). The medians go
// to standard output and, with -md, to a Markdown file.
//
// Everything the harness makes (namespaces, processes, files) is removed at
// the end, also after an error or on SIGINT or SIGTERM. Processes are
// stopped by their PID, and namespaces deleted by their exact names.
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
	rounds  int
	seconds int    // iperf3 -t of each throughput test
	mdPath  string // Markdown report; empty: none
	verbose bool
	args    []string // the flags as given, for the report
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	o := options{args: args}
	fl := flag.NewFlagSet("e2e", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.IntVar(&o.rounds, "rounds", 3, "rounds per switch, interleaved (ufpd, bridge, ufpd, ...)")
	fl.IntVar(&o.seconds, "t", 5, "seconds of each iperf3 test (TCP 1 stream, TCP 4 streams, UDP)")
	fl.StringVar(&o.mdPath, "md", "", "also write the results as Markdown to this `file`")
	fl.BoolVar(&o.verbose, "v", false, "print every command the harness runs")
	fl.Usage = func() {
		fmt.Fprintf(stderr, "usage: sudo go run ./bench/e2e [-rounds N] [-t SECONDS] [-md FILE] [-v]\n\n"+
			"Builds pod namespaces (ufpb-*) wired through ufpd and through a Linux bridge,\n"+
			"measures TCP, 64-byte UDP frames and ping from pod A to pod B on each,\n"+
			"prints the medians and removes everything it made.\n\n")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
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
	if err := checkPrerequisites(); err != nil {
		fmt.Fprintf(stderr, "e2e: %v\n", err)
		return 2
	}
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

// requiredTools are the programs the harness runs, with the Debian
// package that has each.
var requiredTools = []struct{ cmd, pkg string }{
	{"ip", "iproute2"},
	{"ss", "iproute2"},
	{"iperf3", "iperf3"},
	{"ping", "iputils-ping"},
	{"go", "golang (the Go toolchain that builds ufpd)"},
}

// checkPrerequisites reports what is missing to run the benchmark: root,
// and the programs it runs, with what to install.
func checkPrerequisites() error {
	if runtime.GOOS != "linux" {
		return errors.New("needs Linux (network namespaces, veth, TAP)")
	}
	var errs []error
	if os.Geteuid() != 0 {
		errs = append(errs, errors.New("needs root (it creates network namespaces and runs ufpd): run it with sudo"))
	}
	var pkgs []string
	for _, t := range requiredTools {
		if _, err := exec.LookPath(t.cmd); err != nil {
			errs = append(errs, fmt.Errorf("%s not found (package %s)", t.cmd, t.pkg))
			if t.cmd != "go" && !slices.Contains(pkgs, t.pkg) {
				pkgs = append(pkgs, t.pkg)
			}
		}
	}
	if len(pkgs) > 0 {
		errs = append(errs, fmt.Errorf("install with: apt-get install -y %s", strings.Join(pkgs, " ")))
	}
	return errors.Join(errs...)
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

// bench builds both testbeds, runs the interleaved rounds and reports.
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

	bin, err := buildUFPD(ctx, r, work)
	if err != nil {
		return err
	}
	ufpd, err := setupUFPD(ctx, r, &td, id, work, bin)
	if err != nil {
		return fmt.Errorf("ufpd testbed: %w", err)
	}
	bridge, err := setupBridge(ctx, r, &td, id)
	if err != nil {
		return fmt.Errorf("bridge testbed: %w", err)
	}
	beds := []*testbed{ufpd, bridge}
	for _, b := range beds {
		if err := b.prepare(ctx, r, &td, work); err != nil {
			return fmt.Errorf("%s testbed: %w", b.name, err)
		}
	}

	res := newResults(beds)
	res.started, res.loadStart = time.Now(), loadAverage()
	fmt.Fprintf(stdout, "e2e: %d rounds of %d s tests, load average %s\n", o.rounds, o.seconds, res.loadStart)
	for round := 1; round <= o.rounds; round++ {
		for _, b := range beds {
			s, errs := measureRound(ctx, r, b, o.seconds)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			res.add(b.name, s, errs)
			fmt.Fprintf(stdout, "round %d %-6s %s\n", round, b.name, s.brief())
			for _, e := range errs {
				fmt.Fprintf(stdout, "round %d %-6s failed: %v\n", round, b.name, e)
			}
		}
	}
	res.loadEnd = loadAverage()
	return report(res, o, stdout)
}

// report prints the results and writes the Markdown file if asked.
func report(res *results, o options, stdout io.Writer) error {
	fmt.Fprintf(stdout, "\nload average %s at the start, %s at the end\n\n", res.loadStart, res.loadEnd)
	writeText(stdout, res.medianRows())
	fmt.Fprintln(stdout)
	writeText(stdout, res.cpuRows())
	if o.mdPath == "" {
		return nil
	}
	md := markdownReport(res, describeRun(o, res.started))
	if err := os.WriteFile(o.mdPath, []byte(md), 0o644); err != nil {
		return fmt.Errorf("-md: %w", err)
	}
	fmt.Fprintf(stdout, "\nwrote %s\n", o.mdPath)
	return nil
}
