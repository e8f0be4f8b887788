package e2e

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/device"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/inspect"
)

// The flood test's bounds: a 10k-flow table, 200k spoofed SYNs from
// outside and 50k from a pod, each flood at a rate of at most
// floodExtRate or floodPodRate, and no faster than ufpd takes them in; a
// flood goes on past its count only while the legitimate checks still
// run, up to floodMaxFactor times its count, and stops at floodMaxTime.
const (
	floodMaxFlows = 10000
	floodNATShare = 1024 // TCP ports of the node's pool per pod address
	floodExtSYNs  = 200000
	floodExtRate  = 40000 // SYNs per second
	floodPodSYNs  = 50000
	floodPodRate  = 10000
	floodMaxTime  = 60 * time.Second
	// floodMaxFactor bounds a flood that goes on while the checks run:
	// at most this many times its count.
	floodMaxFactor = 10
)

// TestUfpdSYNFlood proves, with ufpd on real devices and the kernel's
// stack everywhere, that floods of spoofed SYNs lock nobody out. The
// flow table holds 10,000 flows (so a port's share is 2,500, a quarter)
// and each pod address may hold 1,024 TCP ports of the node's NAT pool.
// The outside host sends SYNs from random spoofed addresses to the node's
// port 8100, a PortMapping to pod-b; at the same time pod-f sends SYNs to
// random outside addresses through outbound NAT. Nobody answers either
// flood's connections: the backend's SYN-ACKs go to addresses that do not
// exist, the outside host forwards nothing.
//
// While both floods run, new connections succeed: pod-a to pod-c, pod-a
// to the outside host (translated, in the pool pod-f floods), again and
// again, and the outside host to the mapped port (its SYN takes the place
// of one of the flood's half-open connections, by early drop). A NATed
// connection pod-a opened before the floods, idle during them, carries
// data afterwards. Sampled through ufpd's API during the floods, the
// table never holds more than its flows, the uplink and pod-f never more
// than their share of them, and pod-f never more than its share of the
// pool's ports. Afterwards the refusals are counted with their reasons,
// on the ports that caused them (pod-f's NAT refusals, the uplink's flow
// share), the per-port counts add up to the switch's, and the Prometheus
// endpoint says the same.
//
// pod-b, the flood's target, answers: its kernel retransmits SYN-ACKs
// for a second and more, long after the flood's connection left the
// table by early drop. Such a SYN-ACK belongs to no connection and cannot
// open one (Linux conntrack calls it invalid): the switch drops it as
// tcp-no-connection, counted on pod-b, rather than take it up as a
// translated connection charged to pod-b's share, so pod-b's share holds
// its own connections only and none of its new flows is refused.
//
// The test runs twice: with the shares as they are by default, and with
// one port allowed the whole table (maxFlowsPerPort = maxFlows), where the
// flood from outside fills the table and every new flow, the flood's and
// the legitimate ones, takes the place of a half-open connection by
// early drop (as Linux conntrack's early drop does). In a full table a
// few new flows of any port are refused (flow-table-full, about 1 in
// 1,000 inserts): the place early drop made for one worker's flow is
// taken by another worker's before it retries. A legitimate client's
// retransmitted SYN gets in.
func TestUfpdSYNFlood(t *testing.T) {
	t.Run("shares", func(t *testing.T) { synFloodRun(t, 0) })
	t.Run("whole-table", func(t *testing.T) { synFloodRun(t, floodMaxFlows) })
}

// synFloodRun is TestUfpdSYNFlood with the table's maxFlowsPerPort set to
// perPort (0: the default, a quarter).
func synFloodRun(t *testing.T, perPort int) {
	l := newLab(t, "ping")
	o := &oneNode{l: l, node: l.netns("node"), ext: l.netns("ext"), pods: map[string]string{}}
	l.veth(o.node, "eth0", "", o.ext, "eth0", oneExtMAC)
	l.ip("-n", o.ext, "addr", "add", oneExtIP+"/24", "dev", "eth0")
	a, b, c, f := onePod{"pod-a", 0x10}, onePod{"pod-b", 0x11}, onePod{"pod-c", 0x12}, onePod{"pod-f", 0x13}
	cfg := o.config([]onePod{a, b, c, f}, nil)
	cfg.Policy.Switch.FlowTable.MaxFlows = floodMaxFlows
	cfg.Policy.Switch.FlowTable.MaxFlowsPerPort = perPort
	for i := range cfg.Policy.Endpoints {
		ep := &cfg.Policy.Endpoints[i]
		for j, p := range ep.Policies {
			if p.Type != "OutBoundNAT" {
				continue
			}
			var s hns.OutBoundNATSettings
			if err := json.Unmarshal(p.Settings, &s); err != nil {
				t.Fatal(err)
			}
			s.PortShare = floodNATShare
			ep.Policies[j] = pol("OutBoundNAT", s)
		}
		if ep.Name == b.name {
			ep.Policies = append(ep.Policies, pol("PortMapping", hns.PortMappingSettings{Protocol: 6, InternalPort: 7100, ExternalPort: 8100}))
		}
	}
	nsA, nsB, nsC, nsF := o.pods[a.name], o.pods[b.name], o.pods[c.name], o.pods[f.name]

	dir := t.TempDir()
	metricsAddr := "127.0.0.1:9464" // in the node's namespace
	fc := floodConfig{
		restartConfig: restartConfig{ufpdConfig: cfg, API: restartAPI{Socket: filepath.Join(dir, "ufpd.sock")}},
		Metrics:       floodMetrics{Listen: metricsAddr},
	}
	cfgPath := filepath.Join(dir, "ufpd.json")
	raw, err := json.MarshalIndent(fc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	// ufpd as it ships: a race-detector build reads about a tenth of the
	// frames per second, and on a loaded machine the checks outlast the
	// floods' time bound (ufpdPlainBinary).
	l.plainUfpd = true
	l.runUfpd(o.node, cfgPath, cfg)
	cl := api.NewClient(fc.API.Socket)
	for _, w := range []struct{ ns, dst string }{
		{nsA, c.ip4()}, {nsA, oneExtIP}, {nsB, oneExtIP}, {nsF, oneExtIP}, {o.ext, oneNodeIP},
	} {
		if err := l.waitPing(w.ns, w.dst, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}

	// Servers: sinks on pod-c and the outside host; pod-b echoes behind
	// the mapping; the outside host's end of the idle connection.
	l.tcpSink(nsC, ":7000")
	l.tcpSink(o.ext, ":7000")
	echoOn(t, listenNoKeepAlive(t, nsB, ":7100"))
	idleLn := listenNoKeepAlive(t, o.ext, oneExtIP+":9001")

	// The idle NATed connection: pod-a dials out and echoes, the outside
	// host pushes.
	pc, err := dialNoKeepAlive(nsA, oneExtIP+":9001")
	if err != nil {
		t.Fatalf("pod-a to the outside before the flood: %v", err)
	}
	t.Cleanup(func() { pc.Close() })
	go io.Copy(pc, pc)
	extSide, err := acceptWithin(idleLn, labIOTimeout)
	if err != nil {
		t.Fatal(err)
	}
	idle := newPushConn(t, "the idle NATed connection", extSide)
	if err := idle.push("before the flood"); err != nil {
		t.Fatal(err)
	}
	before, err := cl.Counters(ctxIO(t))
	if err != nil {
		t.Fatal(err)
	}
	share, wantShare := int(before.FlowTable.PortShare), perPort
	if perPort == 0 {
		wantShare = floodMaxFlows / 4
	}
	if before.FlowTable.Capacity != floodMaxFlows || share != wantShare {
		t.Fatalf("flow table of %d flows, share %d; want %d and %d", before.FlowTable.Capacity, share, floodMaxFlows, wantShare)
	}

	// The floods.
	checksDone := make(chan struct{})
	extFlood := &synFlood{what: "outside to the mapped port", ns: o.ext, port: "uplink", count: floodExtSYNs, rate: floodExtRate,
		until: checksDone, seed: 1, next: spoofedToMapped, cl: cl}
	podFlood := &synFlood{what: "pod-f to random outside addresses", ns: nsF, port: f.name, count: floodPodSYNs, rate: floodPodRate,
		until: checksDone, seed: 2, next: podToRandom(f), cl: cl}
	for _, fl := range []*synFlood{extFlood, podFlood} {
		fl.open(t)
	}
	mon := &floodMonitor{cl: cl, ports: []string{"uplink", f.name, b.name}}
	monDone := make(chan struct{})
	stopMon := make(chan struct{})
	go func() {
		defer close(monDone)
		mon.run(stopMon)
	}()
	var floods sync.WaitGroup
	for _, fl := range []*synFlood{extFlood, podFlood} {
		floods.Add(1)
		go func() {
			defer floods.Done()
			fl.run()
		}()
	}

	// The checks, once both floods are at work: the uplink holds its
	// share (or the table is full), pod-f its share of ports.
	var checkErrs []error
	if err := mon.waitFor(func(s *inspect.Stats) bool {
		return (portFlows(s, "uplink") >= uint64(share)*9/10 || s.FlowTable.Flows >= floodMaxFlows*9/10) &&
			poolTCP(s).InUse >= floodNATShare
	}, 20*time.Second); err != nil {
		checkErrs = append(checkErrs, err)
	} else {
		checkErrs = append(checkErrs, floodChecks(nsA, nsB, o.ext, c)...)
	}
	close(checksDone)
	floods.Wait()
	close(stopMon)
	<-monDone
	for _, err := range checkErrs {
		t.Error(err)
	}
	for _, fl := range []*synFlood{extFlood, podFlood} {
		t.Logf("flood %s: %d SYNs sent in %v (%.0f/s; %d refused by the sender's kernel, about %d lost before ufpd)",
			fl.what, fl.sent.Load(), fl.took.Round(time.Millisecond), float64(fl.sent.Load())/fl.took.Seconds(), fl.failed.Load(), fl.lost)
		if fl.err != nil {
			t.Errorf("flood %s: %v", fl.what, fl.err)
		}
		if fl.checksOutlasted {
			t.Errorf("flood %s stopped at its bound before the checks were done: they did not all run during it", fl.what)
		}
	}

	if err := idle.push("after the flood"); err != nil {
		t.Errorf("%s after the flood: %v", idle.name, err)
	}
	after, err := cl.Counters(ctxIO(t))
	if err != nil {
		t.Fatal(err)
	}
	mon.report(t, share, share == floodMaxFlows)
	checkFloodCounters(t, before, after, f.name, b.name, share, share == floodMaxFlows)
	checkFloodMetrics(t, o.node, metricsAddr, after, f.name)
}

// floodChecks are the legitimate connections made during the floods: one
// from pod-a to pod-c, one from the outside host to the mapped port, one
// from pod-b (the flood's target) to the outside host, and ten from pod-a
// to the outside host one after another.
func floodChecks(nsA, nsB, ext string, c onePod) []error {
	var errs []error
	if _, err := tcpSend(nsA, hostPort(c.ip4(), 7000), 64<<10, nil); err != nil {
		errs = append(errs, fmt.Errorf("pod-a to pod-c during the floods: %w", err))
	}
	if err := echoOnce(ext, hostPort(oneNodeIP, 8100), "from outside during the flood"); err != nil {
		errs = append(errs, fmt.Errorf("the outside host to the mapped port during the floods: %w", err))
	}
	if rep, err := tcpSend(nsB, hostPort(oneExtIP, 7000), 64<<10, nil); err != nil {
		errs = append(errs, fmt.Errorf("pod-b, the flood's target, to the outside during the floods: %w", err))
	} else if rep.peer.Addr().String() != oneNodeIP {
		errs = append(errs, fmt.Errorf("pod-b to the outside: the outside saw %s, want the node's %s", rep.peer, oneNodeIP))
	}
	for i := range 10 {
		rep, err := tcpSend(nsA, hostPort(oneExtIP, 7000), 16<<10, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("pod-a to the outside during the floods, connection %d: %w", i+1, err))
			continue
		}
		if rep.peer.Addr().String() != oneNodeIP {
			errs = append(errs, fmt.Errorf("pod-a to the outside, connection %d: the outside saw %s, want the node's %s", i+1, rep.peer, oneNodeIP))
		}
	}
	return errs
}

// echoOnce connects from namespace ns to an echo server at addr, sends a
// line and reads it back.
func echoOnce(ns, addr, msg string) error {
	c, err := dialNoKeepAlive(ns, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(labIOTimeout))
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != msg+"\n" {
		return fmt.Errorf("sent %q, got %q back", msg, line)
	}
	return nil
}

// floodConfig is ufpd's configuration with the metrics endpoint.
type floodConfig struct {
	restartConfig
	Metrics floodMetrics `json:"metrics"`
}

type floodMetrics struct {
	Listen string `json:"listen"`
}

// A synFlood sends count TCP SYNs (more while until is open, at most
// floodMaxFactor times count) from a raw socket in namespace ns, each made by next, at
// rate per second at most and no faster than ufpd takes them in: at most
// floodWindow frames beyond what ufpd has counted as received on port
// (read through its API), so that the flood loads ufpd rather than
// overflows the kernel's queue in front of it, where legitimate packets
// would be lost with the flood's. It gives up at floodMaxTime.
type synFlood struct {
	what  string
	ns    string
	port  string // the port of ufpd the flood comes in by
	count int
	rate  int
	until <-chan struct{}
	seed  uint64
	next  func(r *mrand.Rand, buf []byte) (pkt []byte, dst [4]byte)
	cl    *api.Client

	fd              int
	sent, failed    atomic.Int64
	rx0, rx, lost   uint64 // ufpd's count of the port's frames: at the start, now; frames given up for lost
	took            time.Duration
	err             error
	checksOutlasted bool
	started         time.Time
}

// floodWindow is how many frames a flood may have sent beyond what ufpd
// has received.
const floodWindow = 1024

// open makes the flood's raw socket (IPPROTO_RAW: the packets carry
// their IPv4 header) in its namespace, closed when the test ends.
func (fl *synFlood) open(t *testing.T) {
	t.Helper()
	if err := device.InNetNS("/var/run/netns/"+fl.ns, func() (err error) {
		fl.fd, err = syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_RAW)
		return err
	}); err != nil {
		t.Fatalf("%s: raw socket: %v", fl.ns, err)
	}
	t.Cleanup(func() { syscall.Close(fl.fd) })
	n, err := fl.received()
	if err != nil {
		t.Fatal(err)
	}
	fl.rx0, fl.rx = n, n
}

// received is ufpd's count of frames received on fl.port.
func (fl *synFlood) received() (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), labIOTimeout)
	defer cancel()
	s, err := fl.cl.Counters(ctx)
	if err != nil {
		return 0, err
	}
	for _, p := range s.Ports {
		if p.Name == fl.port {
			return p.RxPackets, nil
		}
	}
	return 0, fmt.Errorf("ufpd has no port %s", fl.port)
}

func (fl *synFlood) done(i int) bool {
	if i >= floodMaxFactor*fl.count || time.Since(fl.started) > floodMaxTime {
		select {
		case <-fl.until:
		default:
			fl.checksOutlasted = true
		}
		return true
	}
	if i < fl.count {
		return false
	}
	select {
	case <-fl.until:
		return true
	default:
		return false
	}
}

func (fl *synFlood) run() {
	r := mrand.New(mrand.NewPCG(fl.seed, 0x5f10_0d))
	buf := make([]byte, 64)
	start := time.Now()
	fl.started = start
	defer func() { fl.took = time.Since(start) }()
	for i := 0; !fl.done(i); i++ {
		if ahead := time.Duration(i)*time.Second/time.Duration(fl.rate) - time.Since(start); ahead > time.Millisecond {
			time.Sleep(ahead)
		}
		if err := fl.wait(uint64(fl.sent.Load())); err != nil {
			fl.err = err
			return
		}
		pkt, dst := fl.next(r, buf)
		err := syscall.Sendto(fl.fd, pkt, 0, &syscall.SockaddrInet4{Addr: dst})
		switch {
		case err == nil:
			fl.sent.Add(1)
		case errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.EAGAIN):
			fl.failed.Add(1)
		default:
			fl.err = err
			return
		}
	}
}

// wait returns once fewer than floodWindow of the sent frames are not yet
// received by ufpd. Frames ufpd has not received after 500 ms without
// progress are given up for lost (dropped before ufpd, by the kernel).
func (fl *synFlood) wait(sent uint64) error {
	var stalled time.Time
	// ufpd's count holds the sender's other frames too (ARP): it may be
	// ahead.
	for int64(sent-fl.lost)-int64(fl.rx-fl.rx0) >= floodWindow {
		rx, err := fl.received()
		if err != nil {
			return err
		}
		switch {
		case rx != fl.rx:
			fl.rx, stalled = rx, time.Time{}
		case stalled.IsZero():
			stalled = time.Now()
		case time.Since(stalled) > 500*time.Millisecond:
			fl.lost = sent - (fl.rx - fl.rx0)
		default:
			time.Sleep(2 * time.Millisecond)
		}
	}
	return nil
}

// spoofedToMapped is a SYN from a random address of 198.18.0.0/15 (the
// benchmarking range, RFC 2544: no host of the test has one) and a random
// port to the node's mapped port 8100.
func spoofedToMapped(r *mrand.Rand, buf []byte) ([]byte, [4]byte) {
	src := [4]byte{198, 18 + byte(r.IntN(2)), byte(r.IntN(256)), byte(1 + r.IntN(254))}
	dst := [4]byte(net.ParseIP(oneNodeIP).To4())
	return tcpSYN(buf, src, dst, uint16(1024+r.IntN(64512)), 8100, r.Uint32()), dst
}

// podToRandom is a SYN from pod p's own address and a random port to a
// random address of 198.18.0.0/15 and a random port, which the node
// translates.
func podToRandom(p onePod) func(*mrand.Rand, []byte) ([]byte, [4]byte) {
	src := [4]byte(net.ParseIP(p.ip4()).To4())
	return func(r *mrand.Rand, buf []byte) ([]byte, [4]byte) {
		dst := [4]byte{198, 18 + byte(r.IntN(2)), byte(r.IntN(256)), byte(1 + r.IntN(254))}
		return tcpSYN(buf, src, dst, uint16(1024+r.IntN(64512)), uint16(1+r.IntN(65535)), r.Uint32()), dst
	}
}

// tcpSYN writes into buf (40 bytes at least) an IPv4 packet holding a TCP
// SYN, with both checksums, and returns it.
func tcpSYN(buf []byte, src, dst [4]byte, sport, dport uint16, seq uint32) []byte {
	p := buf[:40]
	clear(p)
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], 40)
	binary.BigEndian.PutUint16(p[4:], uint16(seq))
	p[8] = 64 // TTL
	p[9] = syscall.IPPROTO_TCP
	copy(p[12:16], src[:])
	copy(p[16:20], dst[:])
	binary.BigEndian.PutUint16(p[10:], ^foldSum(sum16(p[:20], 0)))
	tcp := p[20:]
	binary.BigEndian.PutUint16(tcp[0:], sport)
	binary.BigEndian.PutUint16(tcp[2:], dport)
	binary.BigEndian.PutUint32(tcp[4:], seq)
	tcp[12] = 5 << 4
	tcp[13] = 0x02 // SYN
	binary.BigEndian.PutUint16(tcp[14:], 64240)
	s := sum16(p[12:20], uint32(syscall.IPPROTO_TCP)+uint32(len(tcp)))
	binary.BigEndian.PutUint16(tcp[16:], ^foldSum(sum16(tcp, s)))
	return p
}

// sum16 adds b's 16-bit big-endian words (b has an even length) to s.
func sum16(b []byte, s uint32) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	return s
}

func foldSum(s uint32) uint16 {
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

// floodMonitor samples ufpd's counters during the floods and keeps the
// peaks.
type floodMonitor struct {
	cl    *api.Client
	ports []string // whose flows it keeps the peak of

	mu        sync.Mutex
	last      *inspect.Stats
	samples   int
	errs      int
	peakFlows uint64
	peakPort  map[string]uint64
	peakTCP   uint64 // TCP ports of the node's pool in use
}

// run samples every 100 ms until stop is closed.
func (m *floodMonitor) run(stop <-chan struct{}) {
	m.peakPort = map[string]uint64{}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), labIOTimeout)
		s, err := m.cl.Counters(ctx)
		cancel()
		m.mu.Lock()
		if err != nil {
			m.errs++
		} else {
			m.samples++
			m.last = s
			m.peakFlows = max(m.peakFlows, s.FlowTable.Flows)
			for _, p := range m.ports {
				m.peakPort[p] = max(m.peakPort[p], portFlows(s, p))
			}
			m.peakTCP = max(m.peakTCP, poolTCP(s).InUse)
		}
		m.mu.Unlock()
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitFor waits until a sample satisfies ok.
func (m *floodMonitor) waitFor(ok func(*inspect.Stats) bool, within time.Duration) error {
	end := time.Now().Add(within)
	for {
		m.mu.Lock()
		s := m.last
		m.mu.Unlock()
		if s != nil && ok(s) {
			return nil
		}
		if time.Now().After(end) {
			if s == nil {
				return fmt.Errorf("no counters from ufpd within %v of the floods' start", within)
			}
			return fmt.Errorf("the floods did not fill the uplink's share and pod-f's ports within %v: %d flows of the uplink, %d TCP ports of the pool in use",
				within, portFlows(s, "uplink"), poolTCP(s).InUse)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// report logs the peaks and checks them against the bounds: the table's
// size, a port's share of it (a port holds at most share+1 flows), and
// pod-f's share of the pool (plus pod-a's few connections); if wantFull,
// that the flood filled the table.
func (m *floodMonitor) report(t *testing.T, share int, wantFull bool) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	t.Logf("%d samples of the counters during the floods (%d failed): peak %d flows in the table, %v by port, %d TCP ports of the pool",
		m.samples, m.errs, m.peakFlows, m.peakPort, m.peakTCP)
	if m.peakFlows > floodMaxFlows {
		t.Errorf("the table held %d flows, over its %d", m.peakFlows, floodMaxFlows)
	}
	if wantFull && m.peakFlows < floodMaxFlows*9/10 {
		t.Errorf("the table held %d flows at most: the flood did not fill it", m.peakFlows)
	}
	for p, n := range m.peakPort {
		if n > uint64(share)+1 {
			t.Errorf("%s held %d flows, over its share of %d (+1)", p, n, share)
		}
	}
	if m.peakTCP > floodNATShare+16 {
		t.Errorf("%d TCP ports of the pool were in use at once: pod-f's share is %d and pod-a holds a few", m.peakTCP, floodNATShare)
	}
}

// checkFloodCounters checks the refusals: the flooder's over its NAT
// share are counted on it and on the pool; the flood from outside cycled
// through its own half-open flows by early drop; the target's SYN-ACKs
// to the flood's sources, after their connections left, were dropped as
// tcp-no-connection; no one but the flooder was refused (but for
// flow-table-full if tableFull: the table may fill); and every reason's
// per-port counts add up to the switch's.
func checkFloodCounters(t *testing.T, before, after *inspect.Stats, flooder, target string, share int, tableFull bool) {
	t.Helper()
	natShare := dataplane.DropNATShareExceeded.String()
	flowShare := dataplane.DropFlowShareExceeded.String()
	full := dataplane.DropFlowTableFull.String()
	noConn := dataplane.DropTCPNoConnection.String()
	ft := after.FlowTable
	pool := poolTCPStats(after)
	t.Logf("flow table: %d flows now, %d inserted, %d early-dropped, %d refused (%d over a port's share), %d evicted, %d expired",
		ft.Flows, ft.Inserted-before.FlowTable.Inserted, ft.EarlyDropped-before.FlowTable.EarlyDropped, ft.Refused-before.FlowTable.Refused,
		ft.ShareRefused-before.FlowTable.ShareRefused, ft.Evicted-before.FlowTable.Evicted, ft.Expired-before.FlowTable.Expired)
	if pool == nil {
		t.Fatalf("no NAT pool on %s", oneNodeIP)
	}
	t.Logf("NAT pool %s: %d over a share, %d exhausted, %d TCP ports in use (share %d)", oneNodeIP, pool.ShareExceeded, pool.Exhausted,
		pool.Protocols["tcp"].InUse, pool.Protocols["tcp"].Share)
	sums := map[string]uint64{}
	for _, p := range after.Ports {
		t.Logf("port %s: rx %d, tx %d, %d flows, drops %v", p.Name, p.RxPackets, p.TxPackets, p.Flows, p.Drops)
		for _, r := range []string{natShare, flowShare, full} {
			sums[r] += p.Drops[r]
		}
		switch p.Name {
		case flooder:
			if p.Drops[natShare] == 0 {
				t.Errorf("%s counted no %s drops: its flood was never held to its NAT share", p.Name, natShare)
			}
			if p.Drops[natShare] != pool.ShareExceeded {
				t.Errorf("%s counted %d %s drops, the pool %d refusals over a share: they are the same refusals", p.Name, p.Drops[natShare], natShare, pool.ShareExceeded)
			}
		case "uplink":
		case target:
			// Its answers to the flood from outside: a SYN-ACK retransmitted
			// after the flood's connection was early-dropped opens no
			// connection (see the test's comment).
			if p.Drops[noConn] == 0 {
				t.Errorf("%s, the flood's target, counted no %s drops: its retransmitted SYN-ACKs were taken up", p.Name, noConn)
			}
			for _, r := range []string{natShare, flowShare, full} {
				if p.Drops[r] != 0 && (r != full || !tableFull) {
					t.Errorf("%s, the flood's target, counted %d %s drops", p.Name, p.Drops[r], r)
				}
			}
		default:
			for _, r := range []string{natShare, flowShare, full} {
				if p.Drops[r] != 0 && (r != full || !tableFull) {
					t.Errorf("%s, which did not flood, counted %d %s drops", p.Name, p.Drops[r], r)
				}
			}
		}
	}
	// With shares the table never fills; full, a new flow may lose the
	// place early drop made to another insert (see the test's comment).
	if n := after.Drops[full]; n != 0 && !tableFull {
		t.Errorf("%d %s drops, though no port may fill more than a share of the table", n, full)
	}
	for _, r := range []string{natShare, flowShare, full} {
		if sums[r] != after.Drops[r] {
			t.Errorf("the ports counted %d %s drops, the switch %d", sums[r], r, after.Drops[r])
		}
	}
	if sums[flowShare] != ft.ShareRefused {
		t.Errorf("the ports counted %d %s drops, the flow table %d refusals over a share", sums[flowShare], flowShare, ft.ShareRefused)
	}
	if ft.EarlyDropped-before.FlowTable.EarlyDropped < uint64(share) {
		t.Errorf("%d flows early-dropped during the floods, want at least a share's %d: the flood from outside did not cycle through its own", ft.EarlyDropped-before.FlowTable.EarlyDropped, share)
	}
	if pool.Exhausted != 0 {
		t.Errorf("the pool was exhausted %d times: pod-f's share should have kept it from that", pool.Exhausted)
	}
}

// checkFloodMetrics scrapes the Prometheus endpoint in the node's
// namespace and checks that it shows the flooder's refusals as the API
// does (nothing sends from the flooder any more).
func checkFloodMetrics(t *testing.T, node, addr string, s *inspect.Stats, flooder string) {
	t.Helper()
	hc := &http.Client{Timeout: labIOTimeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) { return dialIn(node, network, a) },
	}}
	resp, err := hc.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scraping ufpd's metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var flooderDrops map[string]uint64
	for _, p := range s.Ports {
		if p.Name == flooder {
			flooderDrops = p.Drops
		}
	}
	for _, r := range []string{dataplane.DropNATShareExceeded.String(), dataplane.DropFlowShareExceeded.String()} {
		name := fmt.Sprintf(`ufp_port_drops_total{port=%q,reason=%q}`, flooder, r)
		got, ok := metricValue(string(body), name)
		if want := flooderDrops[r]; got != want || !ok && want != 0 {
			t.Errorf("metrics: %s %d (present: %v), the API says %d", name, got, ok, want)
		}
	}
	name := fmt.Sprintf(`ufp_nat_pool_share_exceeded_total{address=%q}`, oneNodeIP)
	if got, _ := metricValue(string(body), name); got != poolTCPStats(s).ShareExceeded {
		t.Errorf("metrics: %s %d, the API says %d", name, got, poolTCPStats(s).ShareExceeded)
	}
}

// metricValue finds the sample name (with its labels) in a Prometheus text
// exposition.
func metricValue(body, name string) (uint64, bool) {
	for line := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return uint64(f), err == nil
		}
	}
	return 0, false
}

// portFlows is the flows charged to port name.
func portFlows(s *inspect.Stats, name string) uint64 {
	for _, p := range s.Ports {
		if p.Name == name {
			return p.Flows
		}
	}
	return 0
}

// poolTCPStats is the node's NAT pool, or nil.
func poolTCPStats(s *inspect.Stats) *inspect.NATPoolStats {
	for i := range s.NATPools {
		if s.NATPools[i].Address.String() == oneNodeIP {
			return &s.NATPools[i]
		}
	}
	return nil
}

// poolTCP is the node's pool's TCP ports.
func poolTCP(s *inspect.Stats) inspect.NATPortUse {
	if p := poolTCPStats(s); p != nil {
		return p.Protocols["tcp"]
	}
	return inspect.NATPortUse{}
}
