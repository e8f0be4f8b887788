package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// results are the samples of every round of one topology, per testbed,
// in the order the testbeds ran. The first testbed is the one under study
// (ufpd); the ratios are of its figures to each other testbed's.
type results struct {
	topology           string // topoPair or topoOverlay
	beds               []*bedResults
	skipped            []string  // switches not measured, and why
	started            time.Time // when the first round started
	loadStart, loadEnd string    // /proc/loadavg's three averages
}

// bedResults are one testbed's rounds.
type bedResults struct {
	name    string
	kernel  bool // the switch is the kernel's: no CPU figures
	samples []sample
	errs    []string // "round N: test: error"
}

func newResults(topology string, beds []*testbed) *results {
	res := &results{topology: topology}
	for _, b := range beds {
		res.beds = append(res.beds, &bedResults{name: b.name, kernel: len(b.switchPIDs) == 0})
	}
	return res
}

// topologyTitle describes a topology in a line.
func topologyTitle(topo string) string {
	if topo == topoOverlay {
		return "overlay: pod A on node 1, pod B on node 2, VXLAN (VNI 4096, UDP 4789) over an underlay veth"
	}
	return "pair: pod A, switch, pod B on one node"
}

// add records a round of the testbed name.
func (res *results) add(name string, s sample, errs []error) {
	for _, br := range res.beds {
		if br.name != name {
			continue
		}
		br.samples = append(br.samples, s)
		for _, e := range errs {
			br.errs = append(br.errs, fmt.Sprintf("round %d: %v", len(br.samples), e))
		}
	}
}

// medians returns the median of each figure over the rounds.
func (br *bedResults) medians() sample {
	var m sample
	for i := range m {
		xs := make([]float64, len(br.samples))
		for j, s := range br.samples {
			xs[j] = s[i]
		}
		m[i] = median(xs)
	}
	return m
}

// median returns the median of the numbers in xs that are not NaN (the
// mean of the middle two for an even count), or NaN if there are none.
func median(xs []float64) float64 {
	v := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// ratio returns a/b, or NaN when either is NaN or b is 0.
func ratio(a, b float64) float64 {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return a / b
}

// table is a header and rows of cells, rendered as text or Markdown.
type table struct {
	header []string
	rows   [][]string
}

// Cell formats; NaN is "-".
func fmtGbps(x float64) string  { return orDash(x, "%.2f Gb/s") }
func fmtRate(x float64) string  { return orDash(x/1e3, "%.0fk") }
func fmtUs(x float64) string    { return orDash(x, "%.2f µs") }
func fmtCores(x float64) string { return orDash(x, "%.2f") }
func fmtMs(x float64) string    { return orDash(x, "%.3f ms") }
func fmtRatio(x float64) string { return orDash(x, "%.2f×") }
func orDash(x float64, f string) string {
	if math.IsNaN(x) {
		return "-"
	}
	return fmt.Sprintf(f, x)
}

// mainColumns are the figures of the median table, in order.
var mainColumns = []struct {
	head   string
	m      metric
	format func(float64) string
	cpu    bool // the switch's CPU: "kernel" for the bridge, a ratio only between processes
}{
	{"TCP 1 stream", tcp1Gbps, fmtGbps, false},
	{"TCP 4 streams", tcp4Gbps, fmtGbps, false},
	{"64 B frames delivered/s", framesDelivered, fmtRate, false},
	{"64 B frames sent by pod A/s", framesSent, fmtRate, false},
	{"switch CPU per delivered frame", cpuPerFrameUs, fmtUs, true},
	{"ping avg RTT", pingMs, fmtMs, false},
}

// cpuColumns are the figures of the CPU table.
var cpuColumns = []struct {
	head string
	m    metric
}{
	{"during TCP 1 stream", cpuCoresTCP1},
	{"during TCP 4 streams", cpuCoresTCP4},
	{"during 64 B UDP", cpuCoresUDP},
}

// medianRows returns the medians of each testbed and the ratios of the
// first testbed's to each other's. A ratio of CPU figures is given only
// when both switches are processes.
func (res *results) medianRows() table {
	t := table{header: []string{"switch"}}
	for _, c := range mainColumns {
		t.header = append(t.header, c.head)
	}
	for _, br := range res.beds {
		med := br.medians()
		row := []string{br.name}
		for _, c := range mainColumns {
			row = append(row, br.cell(med, c.m, c.format, c.cpu))
		}
		t.rows = append(t.rows, row)
	}
	if len(res.beds) < 2 {
		return t
	}
	a := res.beds[0]
	ma := a.medians()
	for _, b := range res.beds[1:] {
		mb := b.medians()
		row := []string{a.name + "/" + b.name}
		for _, c := range mainColumns {
			if c.cpu && (a.kernel || b.kernel) {
				row = append(row, "-")
				continue
			}
			row = append(row, fmtRatio(ratio(ma[c.m], mb[c.m])))
		}
		t.rows = append(t.rows, row)
	}
	return t
}

// cell formats figure m of s, "kernel" for a CPU figure of the kernel's
// switch.
func (br *bedResults) cell(s sample, m metric, format func(float64) string, cpu bool) string {
	if cpu && br.kernel {
		return "kernel"
	}
	return format(s[m])
}

// cpuRows returns the median CPU use, in cores, of each switch that is a
// process.
func (res *results) cpuRows() table {
	t := table{header: []string{"switch CPU (cores)"}}
	for _, c := range cpuColumns {
		t.header = append(t.header, c.head)
	}
	for _, br := range res.beds {
		med := br.medians()
		row := []string{br.name}
		for _, c := range cpuColumns {
			row = append(row, br.cell(med, c.m, fmtCores, true))
		}
		t.rows = append(t.rows, row)
	}
	return t
}

// roundRows returns every round's figures, in the order they ran.
func (res *results) roundRows() table {
	t := table{header: []string{"round", "switch"}}
	for _, c := range mainColumns {
		t.header = append(t.header, c.head)
	}
	for _, c := range cpuColumns {
		t.header = append(t.header, "CPU "+strings.TrimPrefix(c.head, "during "))
	}
	rounds := 0
	for _, br := range res.beds {
		rounds = max(rounds, len(br.samples))
	}
	for i := range rounds {
		for _, br := range res.beds {
			if i >= len(br.samples) {
				continue
			}
			s := br.samples[i]
			row := []string{fmt.Sprint(i + 1), br.name}
			for _, c := range mainColumns {
				row = append(row, br.cell(s, c.m, c.format, c.cpu))
			}
			for _, c := range cpuColumns {
				row = append(row, br.cell(s, c.m, fmtCores, true))
			}
			t.rows = append(t.rows, row)
		}
	}
	return t
}

// brief is a one-line summary of a round, for progress output.
func (s sample) brief() string {
	line := fmt.Sprintf("TCP %s / %s, %s frames/s delivered (%s sent), ping %s",
		fmtGbps(s[tcp1Gbps]), fmtGbps(s[tcp4Gbps]), fmtRate(s[framesDelivered]), fmtRate(s[framesSent]), fmtMs(s[pingMs]))
	if !math.IsNaN(s[cpuPerFrameUs]) {
		line += fmt.Sprintf(", switch CPU %s/frame", fmtUs(s[cpuPerFrameUs]))
	}
	return line
}
