package metrics

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/inspect"
	"github.com/ufp-dev/ufp/vswitch"
)

// What an idle switch costs: an expiry pass and a scrape against the
// flow table's size, and (opt-in) a serving switch's CPU and memory with
// a million flows and no traffic.

// idlePolicy: pod-b takes UDP to ports 1000-1999 (a counted rule); a
// table of up to maxFlows flows.
const idlePolicy = `{
  "switch": {"flowTable": {"maxFlows": %d, "maxFlowsPerPort": %[1]d, "timeouts": {"udpUnreplied": "1h"}}},
  "ports": [
    {"name": "pod-a", "mac": "02:00:00:00:00:0a", "ips": ["10.0.0.10"]},
    {"name": "pod-b", "mac": "02:00:00:00:00:0b", "ips": ["10.0.0.11"],
     "layers": [{"name": "acl", "default": {"in": "block"}, "groups": [{"name": "in", "rules": [
       {"name": "udp", "priority": 1, "match": {"direction": "in", "protocols": ["udp"], "dstPorts": ["1000-1999"]}, "action": {"type": "allow"}}]}]}]}
  ]
}`

// idleSwitch returns a switch serving with no devices (its expiry loop
// running) and a stop function.
func idleSwitch(tb testing.TB, maxFlows int) (*vswitch.Switch, func()) {
	tb.Helper()
	cfg, err := vswitch.ParseConfig(fmt.Appendf(nil, idlePolicy, maxFlows))
	if err != nil {
		tb.Fatal(err)
	}
	sw, err := vswitch.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sw.Serve(ctx) }()
	return sw, func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("Serve: %v", err)
		}
	}
}

// fill puts n flows in sw's table through the real insert path: UDP
// datagrams from pod-a to pod-b's counted rule (one flow each, by source
// and destination port), decided by the slow path in batches of 64.
func fill(tb testing.TB, sw *vswitch.Switch, n int) {
	tb.Helper()
	mac := func(s string) net.HardwareAddr { m, _ := net.ParseMAC(s); return m }
	eth := &layers.Ethernet{SrcMAC: mac("02:00:00:00:00:0a"), DstMAC: mac("02:00:00:00:00:0b"), EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.IP{10, 0, 0, 10}, DstIP: net.IP{10, 0, 0, 11}}
	l4 := &layers.UDP{SrcPort: 1, DstPort: 1000}
	if err := l4.SetNetworkLayerForChecksum(ip); err != nil {
		tb.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, l4, gopacket.Payload("idle")); err != nil {
		tb.Fatal(err)
	}
	frame := buf.Bytes()
	const udp = 14 + 20
	binary.BigEndian.PutUint16(frame[udp+6:], 0) // no checksum: ports vary
	in, out := sw.Port("pod-a").ID, sw.Port("pod-b").ID
	w := sw.Pipeline().NewWorker()
	defer w.Release()
	pkts := make([]*dataplane.Packet, 64)
	for i := range pkts {
		pkts[i] = dataplane.NewPacket(dataplane.BufferSize)
	}
	for i := 0; i < n; i += len(pkts) {
		k := min(len(pkts), n-i)
		for j, p := range pkts[:k] {
			p.SetFrame(frame)
			p.InPort = in
			b := p.Bytes()
			binary.BigEndian.PutUint16(b[udp:], uint16(1+(i+j)%65535))
			binary.BigEndian.PutUint16(b[udp+2:], uint16(1000+(i+j)/65535))
		}
		w.Process(pkts[:k], sw.Now())
		for _, p := range pkts[:k] {
			if p.OutPort != out {
				tb.Fatalf("datagram %d: out %d, drop %s", i, p.OutPort, p.Drop)
			}
		}
	}
	if got := sw.Pipeline().FlowTable().Len(); got != n {
		tb.Fatalf("%d flows in the table, want %d", got, n)
	}
}

var tableSizes = []int{1_000, 10_000, 100_000, 1_000_000}

// BenchmarkScrape is one scrape of the switch's collector against the
// flow table's size, the flows idle.
func BenchmarkScrape(b *testing.B) {
	for _, n := range tableSizes {
		b.Run(fmt.Sprintf("flows=%d", n), func(b *testing.B) {
			if n > 100_000 && testing.Short() {
				b.Skip("1M flows under -short")
			}
			sw, stop := idleSwitch(b, n)
			defer stop()
			fill(b, sw, n)
			reg := prometheus.NewRegistry()
			reg.MustRegister(NewCollector(sw))
			b.ReportAllocs()
			for b.Loop() {
				mfs, err := reg.Gather()
				if err != nil || len(mfs) == 0 {
					b.Fatalf("Gather: %d families, %v", len(mfs), err)
				}
			}
		})
	}
}

// TestIdleCost measures a serving switch holding a million flows with no
// traffic: the CPU it uses over 10 s (its expiry loop, and a scrape
// every UFP_IDLE_SCRAPE, 5s unless set), and its RSS empty, full and
// after a flush. Opt-in (UFP_IDLE=1): it takes about half a minute and
// a gigabyte; its figures are in docs/PERFORMANCE.md.
func TestIdleCost(t *testing.T) {
	if os.Getenv("UFP_IDLE") == "" {
		t.Skip("set UFP_IDLE=1 to measure an idle switch with 1M flows")
	}
	const n = 1_000_000
	scrape := 5 * time.Second
	if s := os.Getenv("UFP_IDLE_SCRAPE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		scrape = d
	}
	settle := func() {
		runtime.GC()
		debug.FreeOSMemory()
	}
	sw, stop := idleSwitch(t, n)
	defer stop()
	settle()
	rssEmpty := rss(t)
	fill(t, sw, n)
	settle()
	rssFull := rss(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(sw))
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
	// The first window takes in the flows' first possible expiry (10 s
	// after their last packet, when the wheel looks at each once); the
	// second is the steady state.
	first, scrapes1 := idleCPU(t, reg, 12*time.Second, scrape)
	steady, scrapes2 := idleCPU(t, reg, 10*time.Second, scrape)
	if got := sw.Pipeline().FlowTable().Len(); got != n {
		t.Errorf("%d flows after the idle window, want %d", got, n)
	}
	removed := sw.FlushFlows(inspect.FlowFilter{})
	// The expiry loop (once a second) notices the drop; then the
	// collector runs and the runtime returns what it freed.
	time.Sleep(3 * time.Second)
	runtime.GC()
	rssFlushed := rss(t)
	const mb = 1 << 20
	t.Logf("flows=%d idle-cpu-first-12s=%.2f%% (%d scrapes) idle-cpu-next-10s=%.2f%% (%d scrapes) rss-empty=%.1fMB rss-full=%.1fMB rss-flushed=%.1fMB (flushed %d)",
		n, 100*first, scrapes1, 100*steady, scrapes2, float64(rssEmpty)/mb, float64(rssFull)/mb, float64(rssFlushed)/mb, removed)
}

// idleCPU returns the share of a core the process used over window,
// gathering reg every scrape, and how many times it did.
func idleCPU(t *testing.T, reg *prometheus.Registry, window, scrape time.Duration) (float64, int) {
	cpu0, start := cpuTime(t), time.Now()
	tick := time.NewTicker(scrape)
	defer tick.Stop()
	scrapes := 0
	for end := time.After(window); ; {
		select {
		case <-tick.C:
			if _, err := reg.Gather(); err != nil {
				t.Fatal(err)
			}
			scrapes++
			continue
		case <-end:
		}
		break
	}
	return float64(cpuTime(t)-cpu0) / float64(time.Since(start)), scrapes
}

// rss returns the process's resident set size (VmRSS).
func rss(t *testing.T) uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for line := range bytes.Lines(b) {
		if f := bytes.Fields(line); len(f) >= 2 && string(f[0]) == "VmRSS:" {
			kb, err := strconv.ParseUint(string(f[1]), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// cpuTime returns the process's user and system CPU time (utime + stime
// of /proc/self/stat).
func cpuTime(t *testing.T) time.Duration {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skipf("no /proc/self/stat: %v", err)
	}
	// Fields after the command name, which is in parentheses.
	f := bytes.Fields(b[bytes.LastIndexByte(b, ')')+2:])
	// utime and stime are fields 14 and 15 of stat, 12 and 13 here, in
	// clock ticks (100 per second on Linux).
	ut, err1 := strconv.ParseUint(string(f[11]), 10, 64)
	st, err2 := strconv.ParseUint(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/self/stat: %v %v", err1, err2)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond
}
