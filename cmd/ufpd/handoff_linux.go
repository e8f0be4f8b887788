package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ufp-dev/ufp/api"
)

// A graceful restart (SIGUSR2, POST /v1/restart): ufpd starts its
// successor (its own executable again, or another for an upgrade) with
// one end of a SOCK_SEQPACKET pair as descriptor 3 (named by
// handoffEnv), and over it hands the successor every device's descriptor
// and its listeners (opHeld each, then opEnd). The successor adopts them
// and answers opReady; only then does the old ufpd stop reading, at a
// frame boundary on every device (the frames that arrive from then on
// wait in the kernel's queues), write its connections to a memory file
// and send it (opGo). The successor restores the connections, answers
// opServing and serves; the old one closes its descriptors, leaving the
// interfaces, and exits. Until opReady nothing of the old ufpd has
// changed: a successor that fails to start or to adopt is killed and the
// old ufpd serves on, reporting why.

// restartSignals ask for a graceful restart onto ufpd's own executable.
var restartSignals = []os.Signal{unix.SIGUSR2}

// handoffEnv names the successor's end of the hand-over connection.
const handoffEnv = "UFPD_HANDOFF_FD"

// Bounds of a graceful restart's steps.
const (
	handoffReadyWithin = 30 * time.Second // the successor starts and adopts
	handoffQuiesce     = 2 * time.Second  // each reader stops
	handoffServeWithin = 10 * time.Second // the successor restores and serves
)

// errNoRestart marks a graceful restart that did not happen: ufpd serves
// on.
var errNoRestart = errors.New("graceful restart failed; ufpd serves on")

// handItem is a device to hand over.
type handItem struct {
	port string
	m    fdMsg
	h    handable
}

// handItems lists d's devices for a successor (d.mu held); a device that
// cannot be handed over (a TUN, an AF_XDP uplink) is an error.
func (d *daemon) handItems() ([]handItem, error) {
	var items []handItem
	for _, port := range slices.Sorted(maps.Keys(d.devs)) {
		o := d.devs[port]
		h, typ := handOf(o.dev)
		if h == nil || typ != o.spec.Type {
			return nil, fmt.Errorf("port %s: a %s device cannot be handed over (restart ufpd instead)", port, o.spec.Type)
		}
		items = append(items, handItem{port: port, h: h,
			m: fdMsg{Op: opHeld, Port: port, Type: typ, Name: o.spec.Name, NetNS: o.spec.NetNS}})
	}
	return items, nil
}

// restart hands the switch over to a successor running binary ("": this
// executable) and, once it serves, ends this ufpd's serve. Changes wait
// meanwhile (d.mu is held).
func (d *daemon) restart(binary string) (*api.Restarted, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped || d.handedOver.Load() {
		return nil, fmt.Errorf("%w: ufpd is stopping", errNoRestart)
	}
	if binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errNoRestart, err)
		}
		binary = exe
	}
	items, err := d.handItems()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNoRestart, err)
	}
	s, err := startSuccessor(binary)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNoRestart, err)
	}
	d.log.Info("graceful restart: successor started", "binary", binary, "pid", s.cmd.Process.Pid)
	if err := d.handTo(s, items); err != nil {
		select {
		case <-s.exited:
			err = fmt.Errorf("the successor exited (%s): %w", s.cmd.ProcessState, err)
		case <-time.After(100 * time.Millisecond):
		}
		s.abort()
		d.log.Error("graceful restart failed; serving on", "binary", binary, "err", err)
		return nil, fmt.Errorf("%w: %w", errNoRestart, err)
	}
	paused, err := d.switchTo(s, items)
	if err != nil {
		// The devices are quiesced: nothing can serve them here any
		// more. The holder keeps their carrier for the next ufpd.
		d.log.Error("graceful restart: the successor failed after this ufpd stopped reading; exiting", "err", err)
	} else {
		d.log.Info("graceful restart: handed over; exiting", "pid", s.cmd.Process.Pid, "paused", paused)
		d.sd.mainPID(s.cmd.Process.Pid)
	}
	d.handedOver.Store(true)
	for _, it := range items {
		it.h.KeepOnClose()
	}
	for _, l := range d.listeners {
		if ul, ok := l.(*net.UnixListener); ok {
			ul.SetUnlinkOnClose(false)
		}
	}
	if d.stopServing != nil {
		d.stopServing()
	}
	if err != nil {
		return nil, fmt.Errorf("graceful restart: %w", err)
	}
	return &api.Restarted{Pid: s.cmd.Process.Pid, Binary: binary, PausedMicros: paused.Microseconds()}, nil
}

// successor is a started successor and the connection to it.
type successor struct {
	cmd    *exec.Cmd
	fc     *fdConn
	exited chan struct{}
}

// startSuccessor starts binary with this ufpd's arguments and the
// hand-over connection as descriptor 3.
func startSuccessor(binary string) (*successor, error) {
	c, child, err := seqpacketPair()
	if err != nil {
		return nil, err
	}
	defer child.Close()
	cmd := exec.Command(binary, os.Args[1:]...)
	cmd.Env = append(os.Environ(), handoffEnv+"=3")
	cmd.ExtraFiles = []*os.File{child}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		c.Close()
		return nil, fmt.Errorf("start %s: %w", binary, err)
	}
	s := &successor{cmd: cmd, fc: newFdConn(c), exited: make(chan struct{})}
	go func() { cmd.Wait(); close(s.exited) }()
	return s, nil
}

// abort kills the successor (by its pid) and waits for it.
func (s *successor) abort() {
	s.cmd.Process.Kill()
	<-s.exited
	s.fc.c.Close()
}

// expect waits (until within) for a message of op from the successor.
func (s *successor) expect(op fdOp, within time.Duration) error {
	s.fc.c.SetReadDeadline(time.Now().Add(within))
	m, fd, err := s.fc.recv()
	if fd >= 0 {
		unix.Close(fd)
	}
	switch {
	case errors.Is(err, io.EOF):
		return fmt.Errorf("the successor exited (%s)", s.state())
	case err != nil:
		return fmt.Errorf("waiting for the successor's %s: %w", op, err)
	case m.Op == opFailed:
		return fmt.Errorf("the successor failed: %s", m.Text)
	case m.Op != op:
		return fmt.Errorf("the successor sent %s, want %s", m.Op, op)
	}
	return nil
}

// state describes how the successor ended, once it has.
func (s *successor) state() string {
	select {
	case <-s.exited:
		return s.cmd.ProcessState.String()
	case <-time.After(time.Second):
		return "still running"
	}
}

// handTo sends the successor the devices and listeners, and waits until
// it has adopted them.
func (d *daemon) handTo(s *successor, items []handItem) error {
	for _, it := range items {
		var serr error
		if err := it.h.Control(func(fd uintptr) { serr = s.fc.send(it.m, int(fd)) }); err != nil || serr != nil {
			return fmt.Errorf("port %s: handing over: %w", it.port, errors.Join(err, serr))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(d.listeners)) {
		if err := sendListener(s.fc, name, d.listeners[name]); err != nil {
			return fmt.Errorf("%s listener: %w", name, err)
		}
	}
	if err := s.fc.send(fdMsg{Op: opEnd}, -1); err != nil {
		return err
	}
	return s.expect(opReady, handoffReadyWithin)
}

// sendListener sends l's descriptor, as listener name.
func sendListener(fc *fdConn, name string, l net.Listener) error {
	sc, ok := l.(interface {
		File() (*os.File, error)
	})
	if !ok {
		return fmt.Errorf("a %T cannot be handed over", l)
	}
	f, err := sc.File()
	if err != nil {
		return err
	}
	defer f.Close()
	rc, err := f.SyscallConn() // not Fd: that would make the socket blocking
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = fc.send(fdMsg{Op: opHeld, Port: name, Type: fdTypeListener}, int(fd))
	}); err != nil {
		return err
	}
	return serr
}

// switchTo stops this ufpd's reads at a frame boundary on every device,
// hands the successor the connections and waits until it serves. It
// returns how long no ufpd read.
func (d *daemon) switchTo(s *successor, items []handItem) (time.Duration, error) {
	start := time.Now()
	serving := map[string]bool{}
	for _, st := range d.sw.Devices() {
		serving[st.Port] = st.Serving
	}
	parked := make([]<-chan struct{}, len(items))
	for i, it := range items {
		parked[i] = it.h.Quiesce()
	}
	deadline := time.After(handoffQuiesce)
	for i, it := range items {
		if !serving[it.port] {
			continue // no reader (the device failed)
		}
		select {
		case <-parked[i]:
		case <-deadline:
			d.log.Warn("graceful restart: a port's reader did not stop in time", "port", it.port)
		}
	}
	fd, err := d.connsMemfd()
	if err != nil {
		d.log.Error("graceful restart: connections not handed over", "err", err)
		if fd, err = unix.MemfdCreate("ufpd-conns", unix.MFD_CLOEXEC); err != nil {
			return 0, err
		}
	}
	err = s.fc.send(fdMsg{Op: opGo, Type: fdTypeConns}, fd)
	unix.Close(fd)
	if err != nil {
		return 0, err
	}
	if err := s.expect(opServing, handoffServeWithin); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// connsMemfd writes the connections (vswitch.SaveConns) to a memory file
// and returns its descriptor, at offset 0.
func (d *daemon) connsMemfd() (int, error) {
	fd, err := unix.MemfdCreate("ufpd-conns", unix.MFD_CLOEXEC)
	if err != nil {
		return -1, err
	}
	f := os.NewFile(uintptr(fd), "ufpd-conns")
	defer f.Close()
	if _, err := d.sw.SaveConns(f); err != nil {
		return -1, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return -1, err
	}
	return unix.Dup(fd) // f's close leaves the dup
}

// predecessor is the hand-over connection this ufpd was started with (by
// a graceful restart), or nil. The variable is cleared so that nothing
// this ufpd starts inherits it.
func predecessor() (*fdConn, error) {
	v := os.Getenv(handoffEnv)
	if v == "" {
		return nil, nil
	}
	os.Unsetenv(handoffEnv)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q: not a descriptor", handoffEnv, v)
	}
	unix.CloseOnExec(fd)
	c, err := fileUnixConn(uintptr(fd), "handoff")
	if err != nil {
		return nil, err
	}
	return newFdConn(c), nil
}

// handedIn is what a predecessor handed over: devices by port, listeners
// by name.
type handedIn struct {
	devs      map[string]heldFd
	listeners map[string]net.Listener
}

// receiveHandoff reads what the predecessor hands over, until opEnd.
func receiveHandoff(fc *fdConn) (*handedIn, error) {
	h := &handedIn{devs: map[string]heldFd{}, listeners: map[string]net.Listener{}}
	fail := func(err error) (*handedIn, error) {
		h.close()
		return nil, fmt.Errorf("hand-over: %w", err)
	}
	fc.c.SetReadDeadline(time.Now().Add(handoffReadyWithin))
	defer fc.c.SetReadDeadline(time.Time{})
	for {
		m, fd, err := fc.recv()
		if err != nil {
			return fail(err)
		}
		switch {
		case m.Op == opEnd:
			return h, nil
		case m.Op == opHeld && m.Type == fdTypeListener:
			f := os.NewFile(uintptr(fd), m.Port)
			l, err := net.FileListener(f)
			f.Close()
			if err != nil {
				return fail(fmt.Errorf("%s listener: %w", m.Port, err))
			}
			if old := h.listeners[m.Port]; old != nil {
				old.Close()
			}
			h.listeners[m.Port] = l
		case m.Op == opHeld:
			if old, dup := h.devs[m.Port]; dup {
				unix.Close(old.fd)
			}
			h.devs[m.Port] = heldFd{msg: m, fd: fd}
		default:
			if fd >= 0 {
				unix.Close(fd)
			}
			return fail(fmt.Errorf("%w: %s in a hand-over", errFdMsg, m.Op))
		}
	}
}

// close closes what h holds.
func (h *handedIn) close() {
	closeHeld(h.devs)
	for _, l := range h.listeners {
		l.Close()
	}
}

// fail tells the predecessor why this successor does not take over.
func failTo(fc *fdConn, err error) {
	text := err.Error()
	if len(text) > fdMsgLong {
		text = text[:fdMsgLong]
	}
	if !printable(text) {
		text = strconv.Quote(text)
		if len(text) > fdMsgLong {
			text = text[:fdMsgLong]
		}
	}
	fc.send(fdMsg{Op: opFailed, Text: text}, -1)
	fc.c.Close()
}

// takeOver is the successor's side once it has adopted the devices: it
// checks that every device was adopted, tells the predecessor it is
// ready, waits for the connections and restores them. A predecessor that
// goes away before handing the connections over leaves this ufpd to
// serve on its own, with the connections file, as after a crash.
func (d *daemon) takeOver(fc *fdConn) error {
	if len(d.devErr) > 0 {
		return fmt.Errorf("devices not adopted: %v", d.devErr)
	}
	if err := fc.send(fdMsg{Op: opReady}, -1); err != nil {
		return err
	}
	m, fd, err := fc.recv() // no deadline: the predecessor bounds its own steps
	switch {
	case err != nil && !errors.Is(err, errFdMsg):
		d.log.Warn("graceful restart: the predecessor went away before handing over; serving as after a crash", "err", err)
		if d.cfg.state != "" && d.restored != nil {
			d.restored.Connections = d.restoreConns(connsPath(d.cfg.state))
		}
	case err != nil:
		return err
	case m.Op != opGo:
		if fd >= 0 {
			unix.Close(fd)
		}
		return fmt.Errorf("the predecessor sent %s, want %s", m.Op, opGo)
	default:
		f := os.NewFile(uintptr(fd), "ufpd-conns")
		r := d.restoreConnsFrom(f, "handed over")
		f.Close()
		if d.restored != nil {
			d.restored.Connections = r
		}
	}
	d.handedOver.Store(false)
	return nil
}
