//go:build linux

package device

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ufp-dev/ufp/dataplane"
)

// handDevice is a device that can be handed over.
type handDevice interface {
	testDevice
	Quiesce() <-chan struct{}
	KeepOnClose()
	Control(func(fd uintptr)) error
}

// udpSeqSender sends UDP datagrams to dst:9999 from namespace ns, each
// carrying a sequence number.
func udpSeqSender(t *testing.T, ns, dst string) func(seq int) {
	t.Helper()
	var c net.Conn
	if err := InNetNS(nsPath(ns), func() (err error) {
		c, err = net.Dial("udp4", net.JoinHostPort(dst, "9999"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return func(seq int) {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(seq))
		if _, err := c.Write(b[:]); err != nil {
			t.Errorf("send %d: %v", seq, err)
		}
	}
}

// udpSeq returns the sequence number of a udpSeqSender frame.
func udpSeq(f []byte) (int, bool) {
	if len(f) < 14+20+8+8 || binary.BigEndian.Uint16(f[12:]) != 0x0800 || f[14+9] != 17 {
		return 0, false
	}
	udp := f[14+int(f[14]&0xf)*4:]
	if len(udp) < 16 || binary.BigEndian.Uint16(udp[2:]) != 9999 {
		return 0, false
	}
	return int(binary.BigEndian.Uint64(udp[8:])), true
}

// seqReader reads d on a goroutine until it fails, keeping the sequence
// numbers of the udpSeqSender frames it reads.
type seqReader struct {
	mu   sync.Mutex
	seqs []int
	err  error
	done chan struct{}
}

func readSeqs(d testDevice) *seqReader {
	r := &seqReader{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		pkts := make([]*dataplane.Packet, 16)
		for i := range pkts {
			pkts[i] = dataplane.NewPacket(dataplane.BufferSize)
		}
		for {
			n, err := d.ReadPackets(pkts)
			r.mu.Lock()
			for _, p := range pkts[:n] {
				if seq, ok := udpSeq(p.Bytes()); ok {
					r.seqs = append(r.seqs, seq)
				}
			}
			r.err = err
			r.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return r
}

// waitSeqs waits (boundedly) until r has read want, and fails t if it
// read anything else.
func (r *seqReader) waitSeqs(t *testing.T, who string, want []int) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r.mu.Lock()
		got := slices.Clone(r.seqs)
		r.mu.Unlock()
		if len(got) >= len(want) || time.Now().After(end) {
			if !slices.Equal(got, want) {
				t.Fatalf("%s read datagrams %v, want %v", who, got, want)
			}
			return
		}
	}
}

// checkHandover hands d over: what d read before Quiesce is d's, and the
// datagrams sent after it are read by the device adopt makes of a
// duplicate of d's descriptor, in order, none lost or read twice.
func checkHandover(t *testing.T, d handDevice, send func(int), adopt func(fd int) (testDevice, error)) {
	t.Helper()
	r1 := readSeqs(d)
	for seq := 1; seq <= 3; seq++ {
		send(seq)
	}
	r1.waitSeqs(t, "the first device", []int{1, 2, 3})
	var dup int
	var derr error
	if err := d.Control(func(fd uintptr) { dup, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || derr != nil {
		t.Fatalf("dup: %v %v", err, derr)
	}
	select {
	case <-d.Quiesce():
	case <-time.After(5 * time.Second):
		t.Fatal("the reader did not stop within 5 s of Quiesce")
	}
	for seq := 4; seq <= 6; seq++ {
		send(seq)
	}
	d.KeepOnClose()
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	<-r1.done
	if !errors.Is(r1.err, ErrClosed) {
		t.Errorf("the quiesced reader returned %v, want ErrClosed", r1.err)
	}
	r1.waitSeqs(t, "the first device", []int{1, 2, 3})
	d2, err := adopt(dup)
	if err != nil {
		t.Fatalf("adopt: %v", err)
	}
	r2 := readSeqs(d2)
	r2.waitSeqs(t, "the adopting device", []int{4, 5, 6})
	if err := d2.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	<-r2.done
}

// TestTAPHandover: the frames a pod sends while the TAP changes hands
// wait in the TAP's queue for the adopting process; the interface keeps
// its carrier; AdoptTAP refuses a descriptor that is not the Link's TAP.
func TestTAPHandover(t *testing.T) {
	requireNetAdmin(t)
	ns := newNetns(t)
	tap, err := CreateTAP(podLink(ns))
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, "ip", "-n", ns, "neigh", "replace", "10.77.0.9", "lladdr", gwMAC.String(), "dev", "eth0", "nud", "permanent")
	send := udpSeqSender(t, ns, "10.77.0.9")
	checkHandover(t, tap, send, func(fd int) (testDevice, error) {
		if l := nsLink(t, ns, "eth0"); l == nil || !slices.Contains(l.Flags, "LOWER_UP") {
			t.Errorf("eth0 after the first process closed its descriptor: %+v, want it with carrier", l)
		} else if l.TxQLen != tapTxQueueLen {
			t.Errorf("eth0's txqueuelen is %d, want %d", l.TxQLen, tapTxQueueLen)
		}
		return AdoptTAP(fd, podLink(ns))
	})
	if nsLink(t, ns, "eth0") != nil {
		t.Error("eth0 is left after the adopting TAP's Close")
	}

	// Refusals: another interface name, another namespace, not a TAP.
	other := newNetns(t)
	tap2 := createPodTAP(t, ns)
	for _, tc := range []struct {
		name string
		l    Link
		fd   func() int
	}{
		{"other name", func() Link { l := podLink(ns); l.Name = "eth1"; return l }(), func() int { return dupOf(t, tap2) }},
		{"other namespace", podLink(other), func() int { return dupOf(t, tap2) }},
		{"a pipe", podLink(ns), func() int {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			w.Close()
			fd, _ := unix.Dup(int(r.Fd()))
			r.Close()
			return fd
		}},
	} {
		fd := tc.fd()
		if d, err := AdoptTAP(fd, tc.l); err == nil {
			d.Close()
			t.Errorf("%s: adopted", tc.name)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
			t.Errorf("%s: the refused descriptor was left open", tc.name)
		}
	}
}

func dupOf(t *testing.T, d handDevice) int {
	t.Helper()
	var dup int
	var derr error
	if err := d.Control(func(fd uintptr) { dup, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || derr != nil {
		t.Fatalf("dup: %v %v", err, derr)
	}
	return dup
}

// TestRawHandover: frames that arrive while the uplink's socket changes
// hands wait in the socket for the adopting process; AdoptRaw refuses a
// socket bound elsewhere.
func TestRawHandover(t *testing.T) {
	requireNetAdmin(t)
	e := newRawEnv(t)
	r, err := openRaw("up0", nsPath(e.up), rawOptions{})
	if err != nil {
		t.Fatal(err)
	}
	send := udpSeqSender(t, e.peer, hostIP.String())
	checkHandover(t, r, send, func(fd int) (testDevice, error) { return AdoptRaw(fd, "up0", nsPath(e.up)) })

	r2 := openUplink(t, e, rawOptions{})
	for _, tc := range []struct{ name, ifname, netns string }{
		{"other interface", "lo", nsPath(e.up)},
		{"other namespace", "up0", nsPath(e.peer)},
	} {
		fd := dupOf(t, r2)
		if d, err := AdoptRaw(fd, tc.ifname, tc.netns); err == nil {
			d.Close()
			t.Errorf("%s: adopted", tc.name)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}
}
