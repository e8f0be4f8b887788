package main

import (
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Under systemd (NOTIFY_SOCKET set), whose restart of a service kills its
// whole cgroup and a holder process with it, the devices' descriptors go
// to systemd's file descriptor store instead (sd_notify FDSTORE=1 with
// FDNAME; the unit needs FileDescriptorStoreMax= and NotifyAccess=all),
// and a start takes back what systemd passes (LISTEN_FDS,
// LISTEN_FDNAMES). A stored descriptor is named TYPE.HEXPORT: the
// device's type and its port's name in hexadecimal, within the
// characters systemd allows in a name.

// sdStore is ufpd's side of systemd's descriptor store. Its methods are
// safe for concurrent use and do nothing on a nil store.
type sdStore struct {
	log *slog.Logger
	mu  sync.Mutex
	c   *net.UnixConn
	// names are the names stored, by port.
	names map[string]string
}

// newSDStore returns the store of the notify socket at path (a leading
// '@' is Linux's abstract namespace).
func newSDStore(path string, log *slog.Logger) (*sdStore, error) {
	name := path
	if strings.HasPrefix(path, "@") {
		name = "\x00" + path[1:]
	}
	if !strings.HasPrefix(path, "/") && !strings.HasPrefix(path, "@") {
		return nil, fmt.Errorf("NOTIFY_SOCKET=%q: not a Unix socket", path)
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("notify socket: %w", err)
	}
	return &sdStore{log: log, c: c, names: map[string]string{}}, nil
}

// sdName is the store's name of port's descriptor of type typ.
func sdName(typ, port string) string { return typ + "." + hex.EncodeToString([]byte(port)) }

// parseSDName is the inverse of sdName.
func parseSDName(name string) (typ, port string, ok bool) {
	typ, h, ok := strings.Cut(name, ".")
	if !ok || (typ != fdTypeTAP && typ != fdTypeAFPacket) {
		return "", "", false
	}
	b, err := hex.DecodeString(h)
	if err != nil || len(b) == 0 {
		return "", "", false
	}
	return typ, string(b), true
}

// notify sends state to systemd, with fd (-1: none).
func (s *sdStore) notify(state string, fd int) error {
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	// WriteMsgUnix refuses a connected datagram socket.
	rc, err := s.c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), []byte(state), oob, nil, 0)
		return serr != unix.EAGAIN
	}); err != nil {
		return err
	}
	return serr
}

// put stores fd as m's port's descriptor (replacing an earlier one).
func (s *sdStore) put(m fdMsg, fd int) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	name := sdName(m.Type, m.Port)
	if old, ok := s.names[m.Port]; ok {
		s.notify("FDSTOREREMOVE=1\nFDNAME="+old, -1)
	}
	if err := s.notify("FDSTORE=1\nFDNAME="+name, fd); err != nil {
		s.log.Warn("systemd's descriptor store: store", "port", m.Port, "err", err)
		return
	}
	s.names[m.Port] = name
}

// drop removes port's descriptor from the store.
func (s *sdStore) drop(port string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if name, ok := s.names[port]; ok {
		s.notify("FDSTOREREMOVE=1\nFDNAME="+name, -1)
		delete(s.names, port)
	}
}

// mainPID tells systemd that pid is the service's main process now (a
// graceful restart's successor).
func (s *sdStore) mainPID(pid int) {
	if s != nil {
		s.notify("MAINPID="+strconv.Itoa(pid), -1)
	}
}

// close closes the notify connection.
func (s *sdStore) close() {
	if s != nil {
		s.c.Close()
	}
}

// listenFds returns the descriptors systemd passed this process
// (LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES: from descriptor 3 on), by
// port, as held descriptors: those of the store named as sdName names
// them. Others are closed and reported in skipped. The variables are
// cleared so that nothing this process starts takes them.
func listenFds(getenv func(string) string, pid int) (held map[string]heldFd, skipped []string, err error) {
	return listenFdsFrom(getenv, pid, sdListenFdsStart)
}

// sdListenFdsStart is the first descriptor systemd passes.
const sdListenFdsStart = 3

// listenFdsFrom is listenFds with the passed descriptors from first on.
func listenFdsFrom(getenv func(string) string, pid, first int) (held map[string]heldFd, skipped []string, err error) {
	defer func() {
		for _, v := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
			os.Unsetenv(v)
		}
	}()
	if getenv("LISTEN_PID") == "" {
		return nil, nil, nil
	}
	if p, err := strconv.Atoi(getenv("LISTEN_PID")); err != nil || p != pid {
		return nil, nil, nil // not for this process
	}
	n, err := strconv.Atoi(getenv("LISTEN_FDS"))
	if err != nil || n < 0 || n > 1<<16 {
		return nil, nil, fmt.Errorf("LISTEN_FDS=%q: not a count", getenv("LISTEN_FDS"))
	}
	names := strings.Split(getenv("LISTEN_FDNAMES"), ":")
	held = map[string]heldFd{}
	for i := range n {
		fd := first + i
		unix.CloseOnExec(fd)
		name := ""
		if i < len(names) {
			name = names[i]
		}
		typ, port, ok := parseSDName(name)
		if !ok {
			unix.Close(fd)
			skipped = append(skipped, name)
			continue
		}
		if old, dup := held[port]; dup {
			unix.Close(old.fd)
		}
		held[port] = heldFd{msg: fdMsg{Op: opHeld, Port: port, Type: typ}, fd: fd}
	}
	return held, skipped, nil
}
