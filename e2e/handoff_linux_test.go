package e2e

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/device"
	"github.com/ufp-dev/ufp/hns"
)

// Restarts that keep the pods' carrier (docs/UFPD.md, "Restarts"): the
// descriptor holder keeps the TAPs' and the uplink socket's descriptors
// through a crash of ufpd, and a graceful restart hands them to the
// successor. Measured with two sequence-numbered UDP streams of
// handoffRate packets/s, one pod to pod and one from the outside host to
// a pod through a port mapping on the uplink, while netlink watchers in
// the pods' namespaces record every carrier change of their eth0 and
// every neighbour entry that fails or goes.

const (
	handoffRate   = 20000 // packets per second per stream
	handoffStream = 3 * time.Second
)

// handoffNode is a single node (oneNode's topology) with pods a and b,
// a UDP PortMapping of the node's port 8200 to pod b's 7200, run from a
// configuration file with an API socket and a state file (so with a
// descriptor holder).
type handoffNode struct {
	*oneNode
	a, b    onePod
	cfgPath string
	sock    string
	state   string
	cfg     ufpdConfig
}

func (l *lab) newHandoffNode() *handoffNode {
	l.t.Helper()
	o := &oneNode{l: l, node: l.netns("node"), ext: l.netns("ext"), pods: map[string]string{}}
	l.veth(o.node, "eth0", "", o.ext, "eth0", oneExtMAC)
	l.ip("-n", o.ext, "addr", "add", oneExtIP+"/24", "dev", "eth0")
	h := &handoffNode{oneNode: o, a: onePod{"pod-a", 0x10}, b: onePod{"pod-b", 0x11}}
	h.cfg = o.config([]onePod{h.a, h.b}, nil)
	epB := &h.cfg.Policy.Endpoints[1]
	epB.Policies = append(epB.Policies, pol("PortMapping", hns.PortMappingSettings{Protocol: 17, InternalPort: 7200, ExternalPort: 8200}))
	dir := l.t.TempDir()
	h.sock, h.state = filepath.Join(dir, "ufpd.sock"), filepath.Join(dir, "state", "ufpd.state")
	rc := restartConfig{ufpdConfig: h.cfg, API: restartAPI{Socket: h.sock}, State: h.state}
	raw, err := json.MarshalIndent(rc, "", "  ")
	if err != nil {
		l.t.Fatal(err)
	}
	h.cfgPath = filepath.Join(dir, "ufpd.json")
	if err := os.WriteFile(h.cfgPath, raw, 0o644); err != nil {
		l.t.Fatal(err)
	}
	// Packets are counted at 20k/s: ufpd as it ships (ufpdPlainBinary).
	l.plainUfpd = true
	o.u = l.runUfpd(o.node, h.cfgPath, h.cfg)
	for _, to := range []string{h.b.ip4(), oneExtIP} {
		if err := l.waitPing(o.pods[h.a.name], to, 5*time.Second); err != nil {
			l.t.Fatal(err)
		}
	}
	if err := l.waitPing(o.pods[h.b.name], oneExtIP, 5*time.Second); err != nil {
		l.t.Fatal(err)
	}
	return h
}

// streams starts the two streams (pod a to pod b's 7201; the outside
// host to the node's 8200, mapped to pod b's 7200) and returns their
// receivers and a channel closed when both senders are done.
func (h *handoffNode) streams() ([]*udpSink, <-chan struct{}) {
	l, t := h.l, h.l.t
	t.Helper()
	nsA, nsB := h.pods[h.a.name], h.pods[h.b.name]
	sinks := []*udpSink{
		l.udpSink(nsB, ":7201", "pod-a to pod-b"),
		l.udpSink(nsB, ":7200", "outside to node:8200 (mapped to pod-b)"),
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i, s := range []struct{ ns, dst string }{{nsA, h.b.ip4() + ":7201"}, {h.ext, oneNodeIP + ":8200"}} {
		wg.Go(func() {
			if err := udpStream(s.ns, s.dst, handoffRate, handoffStream); err != nil {
				t.Errorf("stream %d: %v", i, err)
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	return sinks, done
}

// TestUfpdCrashKeepsCarrier kills ufpd with SIGKILL in the middle of the
// two streams and starts it again: the holder keeps the TAPs' and the
// uplink socket's descriptors, so the pods never see their carrier go
// (their neighbour entries stay), the new ufpd adopts every device, and
// each stream loses at most what arrives while no ufpd runs beyond what
// the kernel queues (the TAP's queue, the socket's buffer): far less than
// the second of ARP retries a lost carrier costs.
func TestUfpdCrashKeepsCarrier(t *testing.T) {
	l := newLab(t, "ping")
	h := l.newHandoffNode()
	watch := l.watchCarrier(h.pods[h.a.name], h.pods[h.b.name])
	sinks, done := h.streams()

	time.Sleep(handoffStream / 3)
	u := h.u
	killed := time.Now()
	u.kill(t)
	h.u = l.runUfpd(h.node, h.cfgPath, h.cfg)
	serving := time.Since(killed)
	restart := window{killed, time.Now().Add(restartSettle)}
	line := h.u.waitLog(t, 0, time.Second, "configuration restored")
	<-done
	for _, port := range []string{h.a.name, h.b.name, "vEthernet", "uplink"} {
		h.u.waitLog(t, 0, time.Second, "port device up", "port="+port, "interface=adopted")
	}
	t.Logf("ufpd killed, the new one serving %v later: %s", serving.Round(time.Millisecond), line)

	for _, s := range sinks {
		r := s.result(t)
		in, out := s.lostIn([]window{restart})
		t.Logf("%s: %s; lost around the restart %d, elsewhere (the machine's load) %d", s.name, r, in, out)
		if r.dups != 0 || r.reordered != 0 {
			t.Errorf("%s: %d duplicated and %d reordered packets across a crash", s.name, r.dups, r.reordered)
		}
		// What is lost is what arrives while no ufpd reads, beyond the
		// queues: at most the restart's gap, far under the second that
		// a lost carrier costs.
		if lostFor := time.Duration(in) * time.Second / handoffRate; lostFor > 500*time.Millisecond {
			t.Errorf("%s: %d packets lost around the restart (%v of the stream)", s.name, in, lostFor)
		}
	}
	watch.check(t)
}

// restartSettle is how long after a restart's successor serves its
// window lasts: the frames queued meanwhile are through by then.
const restartSettle = 200 * time.Millisecond

// udpStream sends count-numbered UDP datagrams of 64 bytes from
// namespace ns to dst at rate per second for d: each carries its sequence
// number (from 1), then the count of the stream's last (0 before the
// last one).
func udpStream(ns, dst string, rate int, d time.Duration) error {
	c, err := dialIn(ns, "udp", dst)
	if err != nil {
		return err
	}
	defer c.Close()
	total := int(int64(rate) * int64(d) / int64(time.Second))
	buf := make([]byte, 64)
	start := time.Now()
	for seq := 1; seq <= total; {
		want := min(total, int(time.Since(start).Seconds()*float64(rate))+1)
		for ; seq <= want; seq++ {
			binary.BigEndian.PutUint64(buf, uint64(seq))
			if seq == total {
				binary.BigEndian.PutUint64(buf[8:], uint64(total))
			}
			// A full queue (no ufpd reading) drops the datagram: that
			// is what the receiver counts as lost.
			if _, err := c.Write(buf); err != nil && !errors.Is(err, syscall.ENOBUFS) && !errors.Is(err, syscall.ECONNREFUSED) {
				return fmt.Errorf("send %d: %w", seq, err)
			}
		}
		time.Sleep(200 * time.Microsecond)
	}
	// The last datagram once more, after the others had time to arrive:
	// the receiver learns the count even if the first was lost.
	time.Sleep(100 * time.Millisecond)
	_, err = c.Write(buf)
	return err
}

// udpSink receives a udpStream.
type udpSink struct {
	name string
	c    *net.UDPConn
	done chan struct{}

	mu  sync.Mutex
	res streamResult
	at  []time.Time // by sequence number: when it arrived (zero: not)
}

// streamResult is what a sink saw of a stream.
type streamResult struct {
	total, received, lost, dups, reordered int
	maxGap                                 time.Duration // the longest time between two datagrams
	maxGapAfter                            int           // the sequence number before it
}

func (r streamResult) String() string {
	return fmt.Sprintf("%d of %d received, %d lost, %d duplicated, %d reordered; longest gap %v (after #%d)",
		r.received, r.total, r.lost, r.dups, r.reordered, r.maxGap.Round(time.Microsecond), r.maxGapAfter)
}

// udpSink listens on addr in namespace ns, with a receive buffer large
// enough that the receiver itself loses nothing, and counts.
func (l *lab) udpSink(ns, addr, name string) *udpSink {
	l.t.Helper()
	var c net.PacketConn
	if err := device.InNetNS("/var/run/netns/"+ns, func() (err error) {
		c, err = net.ListenPacket("udp", addr)
		return err
	}); err != nil {
		l.t.Fatalf("%s: listen udp %s: %v", ns, addr, err)
	}
	s := &udpSink{name: name, c: c.(*net.UDPConn), done: make(chan struct{})}
	rc, _ := s.c.SyscallConn()
	rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20) })
	l.t.Cleanup(func() { s.c.Close(); <-s.done })
	go s.run()
	return s
}

func (s *udpSink) run() {
	defer close(s.done)
	buf := make([]byte, 2048)
	var last uint64
	var lastAt time.Time
	for {
		n, err := s.c.Read(buf)
		if err != nil {
			return
		}
		now := time.Now()
		if n < 16 {
			continue
		}
		seq, total := binary.BigEndian.Uint64(buf), binary.BigEndian.Uint64(buf[8:])
		s.mu.Lock()
		if seq >= uint64(len(s.at)) {
			s.at = append(s.at, make([]time.Time, int(seq)+1-len(s.at))...)
		}
		r := &s.res
		switch {
		case total != 0 && !s.at[seq].IsZero():
			// The count, sent again at the end.
		case !s.at[seq].IsZero():
			r.dups++
		default:
			s.at[seq] = now
			r.received++
			if seq < last {
				r.reordered++
			}
			if !lastAt.IsZero() && now.Sub(lastAt) > r.maxGap {
				r.maxGap, r.maxGapAfter = now.Sub(lastAt), int(last)
			}
			last, lastAt = seq, now
		}
		if total != 0 {
			r.total = int(total)
		}
		s.mu.Unlock()
	}
}

// result waits (boundedly) for the stream's count and returns what the
// sink saw.
func (s *udpSink) result(t *testing.T) streamResult {
	t.Helper()
	for end := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		s.mu.Lock()
		r := s.res
		s.mu.Unlock()
		if r.total != 0 {
			r.lost = r.total - r.received
			return r
		}
		if time.Now().After(end) {
			t.Fatalf("%s: the stream's end never arrived (%s)", s.name, r)
		}
	}
}

// window is a time span of a test: a restart, from its start to a
// little after its successor serves.
type window struct{ from, to time.Time }

// lostIn splits the stream's lost datagrams into those lost in one of
// windows and the others (lost to a loaded machine, not to a restart).
// A lost datagram is placed at the arrival of the next one received:
// one lost while no ufpd read is placed once one reads again.
func (s *udpSink) lostIn(windows []window) (in, out int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	total := s.res.total
	var next time.Time // the arrival of the next datagram received
	for seq := total; seq >= 1; seq-- {
		if seq < len(s.at) && !s.at[seq].IsZero() {
			next = s.at[seq]
			continue
		}
		if slices.ContainsFunc(windows, func(w window) bool { return next.IsZero() || !next.Before(w.from) && !next.After(w.to) }) {
			in++
		} else {
			out++
		}
	}
	return in, out
}

// carrierWatch records, from netlink notifications in pod namespaces,
// every carrier loss of eth0 and every neighbour entry that fails or is
// removed.
type carrierWatch struct {
	mu     sync.Mutex
	events []string
	stop   chan struct{}
}

// watchCarrier starts watching the namespaces nss until the test ends.
func (l *lab) watchCarrier(nss ...string) *carrierWatch {
	t := l.t
	t.Helper()
	w := &carrierWatch{stop: make(chan struct{})}
	t.Cleanup(func() { close(w.stop) })
	for _, ns := range nss {
		h, err := netns.GetFromName(ns)
		if err != nil {
			t.Fatalf("netns %s: %v", ns, err)
		}
		t.Cleanup(func() { h.Close() })
		nh, err := netlink.NewHandleAt(h)
		if err != nil {
			t.Fatalf("netns %s: netlink: %v", ns, err)
		}
		link, err := nh.LinkByName("eth0")
		nh.Close()
		if err != nil {
			t.Fatalf("%s: eth0: %v", ns, err)
		}
		if link.Attrs().RawFlags&unix.IFF_LOWER_UP == 0 {
			t.Fatalf("%s: eth0 has no carrier before the test", ns)
		}
		links := make(chan netlink.LinkUpdate, 64)
		neighs := make(chan netlink.NeighUpdate, 64)
		errf := func(err error) { w.add(fmt.Sprintf("%s: netlink: %v", ns, err)) }
		if err := netlink.LinkSubscribeWithOptions(links, w.stop, netlink.LinkSubscribeOptions{Namespace: &h, ErrorCallback: errf}); err != nil {
			t.Fatal(err)
		}
		if err := netlink.NeighSubscribeWithOptions(neighs, w.stop, netlink.NeighSubscribeOptions{Namespace: &h, ErrorCallback: errf}); err != nil {
			t.Fatal(err)
		}
		go func() {
			for u := range links {
				if u.Attrs().Name == "eth0" && u.IfInfomsg.Flags&unix.IFF_LOWER_UP == 0 {
					w.add(fmt.Sprintf("%s: eth0 lost its carrier (flags %#x)", ns, u.IfInfomsg.Flags))
				}
			}
		}()
		go func() {
			for u := range neighs {
				switch {
				case u.Type == unix.RTM_DELNEIGH:
					w.add(fmt.Sprintf("%s: neighbour %s removed", ns, u.IP))
				case u.State&(netlink.NUD_FAILED|netlink.NUD_INCOMPLETE) != 0:
					w.add(fmt.Sprintf("%s: neighbour %s %s", ns, u.IP, neighState(u.State)))
				}
			}
		}()
	}
	return w
}

func (w *carrierWatch) add(ev string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events = append(w.events, time.Now().Format("15:04:05.000000")+" "+ev)
}

// check fails t if the watch saw a carrier loss or a neighbour entry fail
// or go.
func (w *carrierWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.events) > 0 {
		t.Errorf("the pods saw:\n%s", strings.Join(w.events, "\n"))
	}
}

func neighState(s int) string {
	if s&netlink.NUD_FAILED != 0 {
		return "FAILED"
	}
	return "INCOMPLETE"
}

// TestUfpdGracefulRestart restarts ufpd gracefully twice in the middle of
// the two streams, once through the API (ufpctl restart) and once with
// SIGUSR2: not one packet is lost, duplicated or reordered, the pods see
// no carrier change, and the last successor stops cleanly (removing the
// TAPs). A successor that fails to start leaves the running ufpd serving.
func TestUfpdGracefulRestart(t *testing.T) {
	l := newLab(t, "ping")
	h := l.newHandoffNode()
	u := h.u
	cl := api.NewClient(h.sock)

	// A successor that fails: the running ufpd serves on.
	if _, err := cl.Restart(ctxIO(t), "/bin/false"); err == nil {
		t.Fatal("a restart onto /bin/false succeeded")
	} else {
		t.Logf("restart onto /bin/false: %v", err)
	}
	st, err := cl.Status(ctxIO(t))
	if err != nil || st.PID != u.cmd.Process.Pid {
		t.Fatalf("after the failed restart: status %+v, %v; want ufpd (pid %d) serving on", st, err, u.cmd.Process.Pid)
	}
	if err := l.waitPing(h.pods[h.a.name], h.b.ip4(), 5*time.Second); err != nil {
		t.Fatal(err)
	}

	watch := l.watchCarrier(h.pods[h.a.name], h.pods[h.b.name])
	sinks, done := h.streams()
	// The successors share ufpd's output; the last one's end closes it.
	u.stopped = true
	pid := u.cmd.Process.Pid
	t.Cleanup(func() { stopSuccessor(t, u, pid) })

	time.Sleep(handoffStream / 3)
	m := u.mark()
	began := time.Now()
	r, err := cl.Restart(ctxIO(t), "")
	if err != nil {
		t.Fatalf("graceful restart: %v", err)
	}
	pid = r.Pid
	u.waitLog(t, m, 5*time.Second, "ufpd serving", fmt.Sprintf("pid=%d", pid))
	restarts := []window{{began, time.Now().Add(restartSettle)}}
	t.Logf("restart through the API: pid %d, no ufpd read for %v", pid, time.Duration(r.PausedMicros)*time.Microsecond)

	time.Sleep(handoffStream / 3)
	m = u.mark()
	began = time.Now()
	if err := syscall.Kill(pid, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	line := u.waitLog(t, m, 5*time.Second, "graceful restart: handed over")
	next := u.waitLog(t, m, 5*time.Second, "ufpd serving")
	restarts = append(restarts, window{began, time.Now().Add(restartSettle)})
	_, after, _ := strings.Cut(next, " pid=")
	if pid, err = strconv.Atoi(strings.Fields(after)[0]); err != nil {
		t.Fatalf("no pid in %q", next)
	}
	t.Logf("restart on SIGUSR2: pid %d; %s", pid, line)
	<-done

	for _, s := range sinks {
		r := s.result(t)
		in, out := s.lostIn(restarts)
		t.Logf("%s: %s; lost around the restarts %d, elsewhere (the machine's load) %d", s.name, r, in, out)
		if in != 0 || r.dups != 0 || r.reordered != 0 {
			t.Errorf("%s: graceful restarts lost (%d), duplicated or reordered packets: %s", s.name, in, r)
		}
	}
	watch.check(t)
}

// stopSuccessor stops the ufpd running as pid (a successor of u's
// process, which shares its output) with SIGTERM and checks that it
// exits cleanly, leaving no TAP.
func stopSuccessor(t *testing.T, u *ufpd, pid int) {
	t.Helper()
	syscall.Kill(pid, syscall.SIGTERM)
	select {
	case <-u.exited:
	case <-time.After(10 * time.Second):
		t.Errorf("ufpd (pid %d) did not stop within 10 s of SIGTERM: killed", pid)
		syscall.Kill(pid, syscall.SIGKILL)
		select {
		case <-u.exited:
		case <-time.After(10 * time.Second):
			// A process it started (the descriptor holder outlives a
			// killed ufpd by design) still holds the output pipe: the
			// lab's cleanup reports and ends what is left in its
			// namespaces.
			t.Errorf("ufpd (pid %d) killed, but its output stays open 10 s on", pid)
			return
		}
	}
	if ps := u.cmd.ProcessState; !ps.Success() {
		t.Errorf("the first ufpd exited with %v after handing over", ps)
	}
	if strings.Contains(u.log.String(), "WARNING: DATA RACE") {
		t.Errorf("ufpd reported a data race")
	}
	for _, tap := range u.cfg.taps() {
		if nsExists(tap[0]) && u.l.linkExists(tap[0], tap[1]) {
			t.Errorf("ufpd (pid %d) left its TAP %s in namespace %s after SIGTERM", pid, tap[1], tap[0])
		}
	}
	if t.Failed() {
		t.Logf("ufpd's log:\n%s", u.log.String())
	}
}

// TestUfpdFailedStartQuitsHolder: a ufpd that starts a descriptor holder
// and then fails to start (a device that cannot be opened) has the
// holder quit, leaving no process behind (the lab's cleanup fails the
// test for a process left in a namespace it made).
func TestUfpdFailedStartQuitsHolder(t *testing.T) {
	l := newLab(t)
	node := l.netns("node")
	h := &handoffNode{a: onePod{"pod-a", 0x10}}
	o := &oneNode{l: l, node: node, pods: map[string]string{}}
	cfg := o.config([]onePod{h.a}, nil) // its uplink's eth0 does not exist in node
	dir := t.TempDir()
	raw, err := json.Marshal(restartConfig{ufpdConfig: cfg, State: filepath.Join(dir, "state", "ufpd.state")})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ufpd.json")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", node, ufpdBinary(t), "-config", path)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("ufpd started without its uplink's interface:\n%s", out)
	}
	t.Logf("ufpd:\n%s", out)
	if !strings.Contains(string(out), "descriptor holder started") {
		t.Fatalf("ufpd did not start a holder:\n%s", out)
	}
	if l.linkExists(o.pods[h.a.name], "eth0") {
		t.Errorf("the failed start left pod-a's TAP:\n%s", out)
	}
}
