package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The descriptor holder keeps duplicates of the descriptors of ufpd's
// TAPs and AF_PACKET uplink, so that they outlive ufpd: while any process
// holds a TAP's descriptor the kernel keeps its carrier, and the pod its
// neighbour entries; an uplink socket keeps its binding and the frames
// that arrive meanwhile. It is `ufpd fdholder`, started by ufpd in a
// session of its own on the socket ufpd bound for it (descriptor 3), and
// it lives until ufpd stops (opQuit) or is killed. It never reads or
// writes a descriptor it holds.

// holderFd is the descriptor of the listening socket a holder is given.
const holderFd = 3

// holderMain is `ufpd fdholder`. It serves the connections of ufpd
// processes (one at a time in a crash and restart; the old and the new
// one in a graceful restart) until opQuit.
func holderMain(stderr io.Writer) int {
	f := os.NewFile(holderFd, "fdholder")
	l, err := net.FileListener(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(stderr, "ufpd fdholder: %v\n", err)
		return 2
	}
	ul, ok := l.(*net.UnixListener)
	if !ok {
		fmt.Fprintf(stderr, "ufpd fdholder: descriptor %d is not a Unix socket\n", holderFd)
		return 2
	}
	ul.SetUnlinkOnClose(false) // the path belongs to whichever holder listens on it
	h := &holder{fds: map[string]heldFd{}}
	for {
		c, err := ul.AcceptUnix()
		if err != nil {
			fmt.Fprintf(stderr, "ufpd fdholder: %v\n", err)
			return 1
		}
		if err := checkPeer(c); err != nil {
			c.Close()
			continue
		}
		go h.serve(newFdConn(c))
	}
}

// holder is what a holder holds: by port, the descriptor and its
// description.
type holder struct {
	mu  sync.Mutex
	fds map[string]heldFd
}

// serve answers one ufpd until it closes the connection or sends what the
// holder does not take (the connection is closed then).
func (h *holder) serve(fc *fdConn) {
	defer fc.c.Close()
	for {
		m, fd, err := fc.recv()
		if err != nil {
			return
		}
		switch m.Op {
		case opPut:
			h.mu.Lock()
			if old, ok := h.fds[m.Port]; ok {
				unix.Close(old.fd)
			}
			m.Op = opHeld
			h.fds[m.Port] = heldFd{msg: m, fd: fd}
			h.mu.Unlock()
		case opDrop:
			h.mu.Lock()
			if old, ok := h.fds[m.Port]; ok {
				unix.Close(old.fd)
				delete(h.fds, m.Port)
			}
			h.mu.Unlock()
		case opList:
			if h.list(fc) != nil {
				return
			}
		case opQuit:
			h.mu.Lock()
			for _, hf := range h.fds {
				unix.Close(hf.fd)
			}
			fc.send(fdMsg{Op: opEnd}, -1)
			os.Exit(0)
		default:
			if fd >= 0 {
				unix.Close(fd)
			}
			return
		}
	}
}

// list sends every descriptor held, then opEnd.
func (h *holder) list(fc *fdConn) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, port := range slices.Sorted(maps.Keys(h.fds)) {
		hf := h.fds[port]
		if err := fc.send(hf.msg, hf.fd); err != nil {
			return err
		}
	}
	return fc.send(fdMsg{Op: opEnd}, -1)
}

// holderClient is ufpd's connection to its holder. Its methods are safe
// for concurrent use; the daemon calls them under its lock.
type holderClient struct {
	path string
	log  *slog.Logger

	mu sync.Mutex
	fc *fdConn // nil once the holder is gone
	// lost is closed when the connection ends: the holder died, or quit
	// (then quitDone is closed too).
	lost     chan struct{}
	quitting bool
	quitDone chan struct{}
	// started: this ufpd started the holder (it held nothing before).
	started bool
}

// connectHolder connects to the holder listening at path, starting one
// if none does, and returns the descriptors it holds, by port.
func connectHolder(path string, log *slog.Logger) (*holderClient, map[string]heldFd, error) {
	c, err := dialHolder(path)
	started := 0
	if err != nil {
		if started, err = startHolder(path); err != nil {
			return nil, nil, err
		}
		if c, err = dialHolder(path); err != nil {
			return nil, nil, err
		}
	}
	hc := &holderClient{path: path, log: log, fc: newFdConn(c), started: started != 0}
	held, err := hc.list()
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("descriptor holder %s: list: %w", path, err)
	}
	hc.lost, hc.quitDone = make(chan struct{}), make(chan struct{})
	if started != 0 {
		log.Info("descriptor holder started", "socket", path, "pid", started)
	} else {
		log.Info("descriptor holder found", "socket", path, "held", len(held))
	}
	return hc, held, nil
}

// dialHolder connects to the holder at path and checks its user.
func dialHolder(path string) (*net.UnixConn, error) {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("descriptor holder: %w", err)
	}
	if err := checkPeer(c); err != nil {
		c.Close()
		return nil, fmt.Errorf("descriptor holder %s: %w", path, err)
	}
	return c, nil
}

// startHolder binds path (replacing a socket nobody listens on) and
// starts `ufpd fdholder` on it, in a session of its own and with no
// output, so that it outlives ufpd and holds nothing of its caller's
// (a pipe of its output would keep a reader waiting). It returns the
// holder's pid.
func startHolder(path string) (int, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return 0, fmt.Errorf("descriptor holder: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return 0, fmt.Errorf("descriptor holder: %s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return 0, fmt.Errorf("descriptor holder: %w", err)
		}
	}
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return 0, fmt.Errorf("descriptor holder: %w", err)
	}
	l.SetUnlinkOnClose(false)
	defer l.Close()
	if err := os.Chmod(path, 0o600); err != nil {
		return 0, fmt.Errorf("descriptor holder: %w", err)
	}
	f, err := l.File()
	if err != nil {
		return 0, fmt.Errorf("descriptor holder: %w", err)
	}
	defer f.Close()
	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("descriptor holder: %w", err)
	}
	cmd := exec.Command(exe, "fdholder")
	cmd.ExtraFiles = []*os.File{f} // descriptor 3
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("descriptor holder: %w", err)
	}
	go cmd.Wait() // reaped if it ends while this ufpd runs
	return cmd.Process.Pid, nil
}

// startWatch watches the connection for the holder's end (lost).
func (hc *holderClient) startWatch() {
	if hc != nil {
		go hc.watch(hc.fc, hc.lost)
	}
}

// dropSync has the holder close what it holds for port and waits until
// it has (before startWatch).
func (hc *holderClient) dropSync(port string) {
	if hc == nil || hc.fc == nil {
		return
	}
	if hc.fc.send(fdMsg{Op: opDrop, Port: port}, -1) != nil {
		return
	}
	// The holder answers in order: once the list is in, the drop is done.
	if held, err := hc.list(); err == nil {
		closeHeld(held)
	}
}

// list asks for the descriptors held (before startWatch).
func (hc *holderClient) list() (map[string]heldFd, error) {
	if err := hc.fc.send(fdMsg{Op: opList}, -1); err != nil {
		return nil, err
	}
	held := map[string]heldFd{}
	for {
		m, fd, err := hc.fc.recv()
		if err != nil {
			closeHeld(held)
			return nil, err
		}
		switch m.Op {
		case opEnd:
			return held, nil
		case opHeld:
			if old, dup := held[m.Port]; dup {
				unix.Close(old.fd)
			}
			held[m.Port] = heldFd{msg: m, fd: fd}
		default:
			closeHeld(held)
			return nil, fmt.Errorf("%w: %s in a list", errFdMsg, m.Op)
		}
	}
}

// closeHeld closes the descriptors of held.
func closeHeld(held map[string]heldFd) {
	for _, h := range held {
		unix.Close(h.fd)
	}
}

// watch reads fc until it ends: the holder sends nothing but the answer
// to opQuit, and its end (EOF, once the process has exited and its
// descriptors are closed) is the holder's death or its quitting.
func (hc *holderClient) watch(fc *fdConn, lost chan struct{}) {
	for {
		_, fd, err := fc.recv()
		if fd >= 0 {
			unix.Close(fd)
		}
		if err != nil && !errors.Is(err, errFdMsg) {
			break
		}
	}
	hc.mu.Lock()
	if hc.fc == fc {
		hc.fc = nil
	}
	quitting := hc.quitting
	hc.mu.Unlock()
	close(lost)
	if quitting {
		close(hc.quitDone)
	}
}

// put has the holder hold fd for port, as m describes (opPut). It
// reports whether the holder is there.
func (hc *holderClient) put(m fdMsg, fd int) bool {
	if hc == nil {
		return false
	}
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if hc.fc == nil {
		return false
	}
	if err := hc.fc.send(m, fd); err != nil {
		hc.log.Warn("descriptor holder: put", "port", m.Port, "err", err)
		return false
	}
	return true
}

// drop has the holder close what it holds for port.
func (hc *holderClient) drop(port string) {
	if hc == nil {
		return
	}
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if hc.fc != nil {
		hc.fc.send(fdMsg{Op: opDrop, Port: port}, -1)
	}
}

// quit has the holder close everything and exit, and waits for it (so
// that the interfaces whose persist ufpd cleared are gone when ufpd
// exits).
func (hc *holderClient) quit() {
	if hc == nil {
		return
	}
	hc.mu.Lock()
	fc := hc.fc
	hc.quitting = true
	if fc != nil {
		if err := fc.send(fdMsg{Op: opQuit}, -1); err != nil {
			fc = nil
		}
	}
	hc.mu.Unlock()
	if fc == nil {
		return
	}
	select {
	case <-hc.quitDone:
	case <-time.After(2 * time.Second):
		hc.log.Warn("descriptor holder did not answer its quit", "socket", hc.path)
	}
	fc.c.Close()
}

// abandon is the end of a ufpd that failed to start: a holder it
// started itself holds nothing worth keeping and quits; one it found
// keeps what it holds for the next ufpd.
func (hc *holderClient) abandon() {
	if hc == nil {
		return
	}
	if hc.started {
		hc.startWatch()
		hc.quit()
		return
	}
	hc.detach()
}

// detach closes the connection and leaves the holder holding what it
// holds (for a successor).
func (hc *holderClient) detach() {
	if hc == nil {
		return
	}
	hc.mu.Lock()
	defer hc.mu.Unlock()
	hc.quitting = true
	if hc.fc != nil {
		hc.fc.c.Close()
	}
}
