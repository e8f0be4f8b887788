package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/ufp-dev/ufp/internal/kubetest"
)

// results are what a run measured; zero fields were not reached.
type results struct {
	shape
	args    []string
	load    string          // /proc/loadavg's first three, at the start
	create  time.Duration   // Services and EndpointSlices created
	sync    time.Duration   // agent start to ufpd programmed
	updates []update        // per update, to ufpd applying it, with the agent's trace
	direct  []time.Duration // per one-load-balancer batch sent to ufpd alone
	memSync memories        // right after the full sync
	mem     memories        // at the end
}

// Targets of issue 22, beside what is measured. The issue states its
// memory targets in MB (10^6 bytes).
const (
	targetSync      = 10 * time.Second
	targetUpdateP99 = 100 * time.Millisecond
	targetAgentRSS  = 300e6
	targetUfpdRSS   = 500e6
)

// percentile returns the p-th percentile (0-100) of sorted d, by the
// nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p/100*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(rank, len(sorted)-1))]
}

// row is one line of the report: what, the figure, the target.
type row struct{ what, value, target string }

func (r *results) rows() []row {
	rows := []row{
		{"Services x backends", fmt.Sprintf("%d x %d (%d remote nodes, every %d-th Service one local backend)", r.Services, r.Endpoints, r.Nodes, r.LocalEvery), ""},
		{"create Services + EndpointSlices", dur(r.create), ""},
	}
	if r.sync > 0 {
		rows = append(rows, row{"full sync: agent start to ufpd programmed", dur(r.sync), target(dur(targetSync), r.sync < targetSync)})
	}
	if n := len(r.updates); n > 0 {
		sorted := sortedOf(r.updates, update.total)
		rows = append(rows,
			row{fmt.Sprintf("EndpointSlice update to ufpd, p50 (%d updates)", n), dur(percentile(sorted, 50)), ""},
			row{"EndpointSlice update to ufpd, p99", dur(percentile(sorted, 99)), target(dur(targetUpdateP99), percentile(sorted, 99) < targetUpdateP99)},
			row{"EndpointSlice update to ufpd, max", dur(sorted[n-1]), ""})
		rows = append(rows, r.stageRows()...)
	}
	if n := len(r.direct); n > 0 {
		sorted := slices.Sorted(slices.Values(r.direct))
		rows = append(rows, row{fmt.Sprintf("ufpd alone: one-load-balancer batch, p50 / max (%d)", n),
			dur(percentile(sorted, 50)) + " / " + dur(sorted[n-1]), ""})
	}
	if r.mem.agent.hwm > 0 {
		rows = append(rows,
			row{"agent peak RSS (VmHWM)", mb(r.mem.agent.hwm), target(mb(targetAgentRSS), r.mem.agent.hwm < targetAgentRSS)},
			row{"ufpd peak RSS (VmHWM)", mb(r.mem.ufpd.hwm), target(mb(targetUfpdRSS), r.mem.ufpd.hwm < targetUfpdRSS)},
			row{"agent / ufpd RSS after the sync", mb(r.memSync.agent.rss) + " / " + mb(r.memSync.ufpd.rss), ""},
			row{"kube-apiserver / etcd peak RSS", mb(r.mem.apiserver.hwm) + " / " + mb(r.mem.etcd.hwm), ""})
	}
	return rows
}

// stageRows split the traced updates' latency by stage: p50 / p99 /
// max of each.
func (r *results) stageRows() []row {
	var traced []update
	for _, u := range r.updates {
		if u.traced {
			traced = append(traced, u)
		}
	}
	if len(traced) == 0 {
		return []row{{"update stages", "no update traced in the agent's log", ""}}
	}
	rows := []row{{"update stages, p50 / p99 / max", fmt.Sprintf("%d of %d updates traced in the agent's log", len(traced), len(r.updates)), ""}}
	for _, st := range stages {
		sorted := sortedOf(traced, st.of)
		rows = append(rows, row{"- " + st.name,
			dur(percentile(sorted, 50)) + " / " + dur(percentile(sorted, 99)) + " / " + dur(sorted[len(sorted)-1]), ""})
	}
	return rows
}

// sortedOf returns f of each update, sorted.
func sortedOf(ups []update, f func(update) time.Duration) []time.Duration {
	d := make([]time.Duration, len(ups))
	for i, u := range ups {
		d[i] = f(u)
	}
	slices.Sort(d)
	return d
}

// target writes a target (a bound the figure must stay under) and
// whether the figure met it.
func target(bound string, met bool) string {
	if met {
		return "< " + bound + ": met"
	}
	return "< " + bound + ": NOT met"
}

func dur(d time.Duration) string {
	if d < 0 {
		return "-" + dur(-d)
	}
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	default:
		return d.Round(time.Microsecond).String()
	}
}

// mb writes a size in MB (10^6 bytes), as issue 22 states its targets,
// with MiB beside it.
func mb(b int64) string {
	return fmt.Sprintf("%.0f MB (%.0f MiB)", float64(b)/1e6, float64(b)/(1<<20))
}

// print writes the results as aligned text.
func (r *results) print(w io.Writer) {
	for _, row := range r.rows() {
		t := ""
		if row.target != "" {
			t = "  (target " + row.target + ")"
		}
		fmt.Fprintf(w, "%-52s %s%s\n", row.what, row.value, t)
	}
}

// markdown returns the results as a Markdown table with the command and
// the machine.
func (r *results) markdown() []byte {
	var b bytes.Buffer
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "`go run ./bench/agent %s` on %s (%d CPUs, %s, kube-apiserver %s), load average at the start: %s\n\n",
		strings.Join(r.args, " "), host, runtime.NumCPU(), runtime.Version(), kubetest.Version, r.load)
	b.WriteString("| measure | figure | target |\n| --- | --- | --- |\n")
	for _, row := range r.rows() {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", row.what, row.value, row.target)
	}
	return b.Bytes()
}
