package main

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ufp-dev/ufp/device"
)

// fdPair returns the two ends of a SOCK_SEQPACKET pair as fdConns.
func fdPair(t *testing.T) (*fdConn, *fdConn) {
	t.Helper()
	c0, f1, err := seqpacketPair()
	if err != nil {
		t.Fatal(err)
	}
	c1, err := net.FileConn(f1)
	f1.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c0.Close(); c1.Close() })
	return newFdConn(c0), newFdConn(c1.(*net.UnixConn))
}

// testPipe returns a pipe; the test closes both ends.
func testPipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// isOpen reports whether fd is an open descriptor.
func isOpen(fd int) bool {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return err == nil
}

// samePipe checks that fd reads what is written to w.
func samePipe(t *testing.T, fd int, w *os.File, msg string) {
	t.Helper()
	if _, err := io.WriteString(w, msg); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(msg))
	if n, err := unix.Read(fd, buf); err != nil || string(buf[:n]) != msg {
		t.Fatalf("descriptor %d read %q, %v; want %q", fd, buf[:n], err, msg)
	}
}

func TestFdPassRoundTrip(t *testing.T) {
	a, b := fdPair(t)
	for i, m := range []fdMsg{
		{Op: opPut, Port: "pod-a", Type: fdTypeTAP, Name: "eth0", NetNS: "ns-a"},
		{Op: opHeld, Port: "api", Type: fdTypeListener},
		{Op: opGo, Type: fdTypeConns},
	} {
		r, w := testPipe(t)
		if err := a.send(m, int(r.Fd())); err != nil {
			t.Fatalf("send %+v: %v", m, err)
		}
		got, fd, err := b.recv()
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		if got != m || fd < 0 {
			t.Fatalf("message %d: got %+v with descriptor %d, want %+v with one", i, got, fd, m)
		}
		if flags, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); flags&unix.FD_CLOEXEC == 0 {
			t.Errorf("message %d: the descriptor received is not close-on-exec", i)
		}
		samePipe(t, fd, w, "hello")
		unix.Close(fd)
	}
	if err := a.send(fdMsg{Op: opEnd}, -1); err != nil {
		t.Fatal(err)
	}
	if got, fd, err := b.recv(); err != nil || got.Op != opEnd || fd != -1 {
		t.Fatalf("recv: %+v, %d, %v; want end without a descriptor", got, fd, err)
	}
	a.c.Close()
	if _, _, err := b.recv(); err != io.EOF {
		t.Fatalf("recv after the peer's close: %v, want io.EOF", err)
	}
}

// A message that is malformed, or carries descriptors its op has not, is
// rejected with every descriptor it carried closed; the connection goes
// on.
func TestFdPassRejects(t *testing.T) {
	a, b := fdPair(t)
	r, _ := testPipe(t)
	list, _ := appendFdMsg(nil, fdMsg{Op: opList})
	put, _ := appendFdMsg(nil, fdMsg{Op: opPut, Port: "p", Type: fdTypeTAP, Name: "eth0"})
	for _, tc := range []struct {
		name string
		b    []byte
		fds  int
	}{
		{"list with a descriptor", list, 1},
		{"put without one", put, 0},
		{"put with two", put, 2},
		{"garbage with a descriptor", []byte("UFPH garbage"), 1},
	} {
		fds := make([]int, tc.fds)
		for i := range fds {
			fds[i] = int(r.Fd())
		}
		var oob []byte
		if tc.fds > 0 {
			oob = unix.UnixRights(fds...)
		}
		before := openFds(t)
		if _, _, err := a.c.WriteMsgUnix(tc.b, oob, nil); err != nil {
			t.Fatal(err)
		}
		if _, fd, err := b.recv(); !errors.Is(err, errFdMsg) || fd != -1 {
			t.Errorf("%s: recv: descriptor %d, err %v; want errFdMsg", tc.name, fd, err)
		}
		if after := openFds(t); after != before {
			t.Errorf("%s: %d descriptors open before, %d after: the rejected ones were not closed", tc.name, before, after)
		}
	}
	if err := a.send(fdMsg{Op: opEnd}, -1); err != nil {
		t.Fatal(err)
	}
	if m, _, err := b.recv(); err != nil || m.Op != opEnd {
		t.Fatalf("after the rejects: %+v, %v", m, err)
	}
}

func openFds(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// The holder's protocol: what is put is listed back, with its
// description, until it is dropped or replaced.
func TestHolderServe(t *testing.T) {
	ufpd, hs := fdPair(t)
	h := &holder{fds: map[string]heldFd{}}
	served := make(chan struct{})
	go func() { h.serve(hs); close(served) }()
	hc := &holderClient{fc: ufpd}

	ra, wa := testPipe(t)
	rb, wb := testPipe(t)
	rc, wc := testPipe(t)
	putA := fdMsg{Op: opPut, Port: "pod-a", Type: fdTypeTAP, Name: "eth0", NetNS: "ns-a"}
	putB := fdMsg{Op: opPut, Port: "uplink", Type: fdTypeAFPacket, Name: "eth0"}
	for _, p := range []struct {
		m  fdMsg
		fd int
	}{{putA, int(ra.Fd())}, {putB, int(rb.Fd())}, {putA, int(rc.Fd())}} {
		if err := ufpd.send(p.m, p.fd); err != nil {
			t.Fatal(err)
		}
	}
	held, err := hc.list()
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 2 {
		t.Fatalf("held %v, want pod-a and uplink", held)
	}
	wantA, wantB := putA, putB
	wantA.Op, wantB.Op = opHeld, opHeld
	if held["pod-a"].msg != wantA || held["uplink"].msg != wantB {
		t.Fatalf("held %+v", held)
	}
	samePipe(t, held["pod-a"].fd, wc, "the second put replaced the first")
	samePipe(t, held["uplink"].fd, wb, "uplink")
	_ = wa
	closeHeld(held)

	hc.drop("pod-a")
	held, err = hc.list()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := held["pod-a"]; ok || len(held) != 1 {
		t.Fatalf("after the drop: held %+v, want uplink alone", held)
	}
	closeHeld(held)

	// What the holder does not take ends the connection, not the holder.
	ufpd.send(fdMsg{Op: opServing}, -1)
	<-served
	if len(h.fds) != 1 {
		t.Fatalf("the holder holds %d descriptors after the connection ended, want 1", len(h.fds))
	}
}

// A held descriptor that does not fit the configuration is closed, not
// adopted.
func TestAdoptHeldChecks(t *testing.T) {
	spec := deviceConfig{Port: "pod-a", Type: "tap", Name: "eth0", NetNS: "ns-a"}
	for _, m := range []fdMsg{
		{Op: opHeld, Port: "pod-a", Type: fdTypeTAP, Name: "eth1", NetNS: "ns-a"},
		{Op: opHeld, Port: "pod-a", Type: fdTypeTAP, Name: "eth0", NetNS: "ns-b"},
		{Op: opHeld, Port: "pod-a", Type: fdTypeAFPacket, Name: "eth0", NetNS: "ns-a"},
	} {
		r, _, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Dup(int(r.Fd()))
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := adoptHeld(spec, device.Link{}, heldFd{msg: m, fd: fd}); err == nil {
			t.Errorf("%+v adopted for %+v", m, spec)
		}
		if isOpen(fd) {
			t.Errorf("%+v: the descriptor was left open", m)
			unix.Close(fd)
		}
	}
}
