package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
)

// writeText writes t as aligned columns.
func writeText(w io.Writer, t table) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(t.header, "\t"))
	for _, row := range t.rows {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
}

// writeMarkdown writes t as a Markdown table.
func writeMarkdown(w io.Writer, t table) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(t.header, " | "))
	fmt.Fprintf(w, "|%s\n", strings.Repeat(" --- |", len(t.header)))
	for _, row := range t.rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
}

// runInfo describes a run for its report.
type runInfo struct {
	date    string
	command string
	rounds  int
	seconds int
	machine string
	ovs     string // Open vSwitch's version; empty when not measured
}

// describeRun returns what the report says about the run, started at
// start, the machine and Open vSwitch's version.
func describeRun(o options, start time.Time, ovs ovsVersion) runInfo {
	ri := runInfo{
		date:    start.UTC().Format("2006-01-02 15:04 UTC"),
		command: strings.TrimSpace("go run ./bench/e2e " + strings.Join(o.args, " ")),
		rounds:  o.rounds,
		seconds: o.seconds,
		machine: machine(),
	}
	if ovs.known() {
		ri.ovs = ovs.String()
	}
	return ri
}

// machine describes this machine: CPUs, CPU model, kernel, Go.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel := "Linux"
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel += " " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%d vCPUs (%s), %s, %s", runtime.NumCPU(), model, kernel, runtime.Version())
}

// loadAverage returns the 1, 5 and 15 minute load averages.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// markdownReport returns the results of each topology as Markdown: how
// the run was made, the medians and ratios, the CPU use, every round and
// any failure.
func markdownReport(all []*results, ri runInfo) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Run started %s, as root: `%s` (rounds: %d, interleaved; %d s per iperf3 test).\n",
		ri.date, ri.command, ri.rounds, ri.seconds)
	fmt.Fprintf(&b, "Machine: %s.", ri.machine)
	if ri.ovs != "" {
		fmt.Fprintf(&b, " %s.", ri.ovs)
	}
	b.WriteString("\n")
	for _, res := range all {
		fmt.Fprintf(&b, "\n## %s\n\n", topologyTitle(res.topology))
		fmt.Fprintf(&b, "Rounds interleaved %s. Load average (1, 5, 15 min): %s at the start, %s at the end.\n\n",
			bedOrder(res), res.loadStart, res.loadEnd)
		fmt.Fprintf(&b, "Medians over the rounds (%d), and the ratios of %s's to each other switch's:\n\n", ri.rounds, res.beds[0].name)
		writeMarkdown(&b, res.medianRows())
		b.WriteString("\nThe switch's CPU use (utime+stime of its processes over the test, all nodes), median, in cores:\n\n")
		writeMarkdown(&b, res.cpuRows())
		b.WriteString("\nEvery round, in the order run:\n\n")
		writeMarkdown(&b, res.roundRows())
		var failures []string
		for _, br := range res.beds {
			for _, e := range br.errs {
				failures = append(failures, fmt.Sprintf("- %s %s", br.name, e))
			}
		}
		if len(failures) > 0 {
			fmt.Fprintf(&b, "\nFailures (their figures are left out of the medians):\n\n%s\n", strings.Join(failures, "\n"))
		}
		if len(res.skipped) > 0 {
			fmt.Fprintf(&b, "\nNot measured:\n\n- %s\n", strings.Join(res.skipped, "\n- "))
		}
	}
	return b.String()
}

// bedOrder returns the testbeds' names in the order they ran in a round.
func bedOrder(res *results) string {
	names := make([]string, len(res.beds))
	for i, br := range res.beds {
		names[i] = br.name
	}
	return strings.Join(names, ", ")
}
