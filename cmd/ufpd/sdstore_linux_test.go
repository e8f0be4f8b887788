package main

import (
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSDStore plays systemd's notify socket: what ufpd stores arrives as
// FDSTORE=1 with the descriptor and its name, a removal as FDSTOREREMOVE,
// a successor as MAINPID.
func TestSDStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sd, err := newSDStore(path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer sd.close()
	recv := func() (string, []int) {
		t.Helper()
		buf, oob := make([]byte, 4096), make([]byte, unix.CmsgSpace(4*4))
		ln.SetReadDeadline(time.Now().Add(5 * time.Second)) // a message that never comes fails, not hangs
		n, oobn, _, _, err := ln.ReadMsgUnix(buf, oob)
		if err != nil {
			t.Fatal(err)
		}
		fds, err := parseRights(oob[:oobn])
		if err != nil {
			t.Fatal(err)
		}
		return string(buf[:n]), fds
	}

	r, w := testPipe(t)
	sd.put(fdMsg{Op: opPut, Port: "pod-a", Type: fdTypeTAP, Name: "eth0"}, int(r.Fd()))
	msg, fds := recv()
	if want := "FDSTORE=1\nFDNAME=tap.706f642d61"; msg != want || len(fds) != 1 {
		t.Fatalf("store: %q with %d descriptors, want %q with one", msg, len(fds), want)
	}
	samePipe(t, fds[0], w, "stored")
	unix.Close(fds[0])

	sd.drop("pod-a")
	if msg, fds := recv(); msg != "FDSTOREREMOVE=1\nFDNAME=tap.706f642d61" || len(fds) != 0 {
		t.Fatalf("drop: %q with %d descriptors", msg, len(fds))
	}
	sd.drop("pod-a") // nothing stored: nothing sent
	sd.mainPID(4242)
	if msg, _ := recv(); msg != "MAINPID=4242" {
		t.Fatalf("main pid: %q", msg)
	}

	var nilStore *sdStore
	nilStore.put(fdMsg{Op: opPut, Port: "p", Type: fdTypeTAP, Name: "e"}, int(r.Fd()))
	nilStore.drop("p")
}

func TestSDName(t *testing.T) {
	for _, port := range []string{"pod-a", "uplink", "pod:with:colons", "pöd"} {
		name := sdName(fdTypeAFPacket, port)
		typ, got, ok := parseSDName(name)
		if !ok || typ != fdTypeAFPacket || got != port {
			t.Errorf("%q: name %q parses as %q %q %v", port, name, typ, got, ok)
		}
	}
	for _, name := range []string{"", "tap", "tap.", "tap.zz", "veth.706f64", "stored"} {
		if _, _, ok := parseSDName(name); ok {
			t.Errorf("%q parsed", name)
		}
	}
}

// listenFds takes the descriptors systemd passed this process, by port:
// ours by their names, others closed; descriptors for another process
// (LISTEN_PID) are left alone.
func TestListenFds(t *testing.T) {
	// Three descriptors at first, first+1 and first+2, as systemd
	// passes them from 3 on (high here, clear of the test process's own).
	const first = 900
	for fd := first; fd < first+3; fd++ {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		if err := unix.Dup3(p[0], fd, unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		unix.Close(p[0])
		t.Cleanup(func() { unix.Close(p[1]); unix.Close(fd) })
	}
	env := map[string]string{
		"LISTEN_PID":     strconv.Itoa(4242),
		"LISTEN_FDS":     "3",
		"LISTEN_FDNAMES": sdName(fdTypeTAP, "pod-a") + ":stored:" + sdName(fdTypeAFPacket, "uplink"),
	}
	getenv := func(k string) string { return env[k] }
	if held, _, err := listenFdsFrom(getenv, 1, first); err != nil || held != nil {
		t.Fatalf("another process's descriptors: %v, %v", held, err)
	}
	held, skipped, err := listenFdsFrom(getenv, 4242, first)
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 2 || held["pod-a"].fd != first || held["pod-a"].msg.Type != fdTypeTAP ||
		held["uplink"].fd != first+2 || held["uplink"].msg.Type != fdTypeAFPacket {
		t.Fatalf("held %+v", held)
	}
	if len(skipped) != 1 || skipped[0] != "stored" || isOpen(first+1) {
		t.Fatalf("skipped %v (descriptor %d open: %v), want \"stored\" closed", skipped, first+1, isOpen(first+1))
	}
	env["LISTEN_FDS"] = "many"
	if _, _, err := listenFdsFrom(getenv, 4242, first); err == nil {
		t.Error("LISTEN_FDS=many taken")
	}
}
