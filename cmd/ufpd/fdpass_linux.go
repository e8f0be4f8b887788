package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// The transport of the descriptor messages (fdmsg.go): one message per
// datagram of a Unix SOCK_SEQPACKET socket, its descriptor beside it.

// fdConn is a SOCK_SEQPACKET connection that carries descriptor
// messages. Not safe for concurrent sends, nor for concurrent receives.
type fdConn struct {
	c   *net.UnixConn
	buf []byte
	oob []byte
}

func newFdConn(c *net.UnixConn) *fdConn {
	// Room for more descriptors than any message carries, so that one
	// with too many is seen (and its descriptors closed), not cut short.
	return &fdConn{c: c, buf: make([]byte, fdMsgMax+1), oob: make([]byte, unix.CmsgSpace(8*4))}
}

// send sends m with the descriptor fd (-1: none; m's op says whether it
// has one).
func (fc *fdConn) send(m fdMsg, fd int) error {
	if (fd >= 0) != (m.Op.fds() == 1) {
		return fmt.Errorf("%s: a descriptor is %v, want %d", m.Op, fd >= 0, m.Op.fds())
	}
	b, err := appendFdMsg(nil, m)
	if err != nil {
		return err
	}
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	_, _, err = fc.c.WriteMsgUnix(b, oob, nil)
	return err
}

// recv receives one message and its descriptor (-1 if it has none), which
// the caller then owns (close-on-exec). A message that does not decode,
// was cut short, or carries another number of descriptors than its op
// has is rejected: its descriptors are closed. The peer's close is io.EOF.
func (fc *fdConn) recv() (fdMsg, int, error) {
	rc, err := fc.c.SyscallConn()
	if err != nil {
		return fdMsg{}, -1, err
	}
	var n, oobn, flags int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), fc.buf, fc.oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return fdMsg{}, -1, err
	}
	fds, perr := parseRights(fc.oob[:oobn])
	reject := func(err error) (fdMsg, int, error) {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return fdMsg{}, -1, err
	}
	switch {
	case n == 0 && oobn == 0:
		return reject(io.EOF)
	case perr != nil:
		return reject(fmt.Errorf("%w: control message: %w", errFdMsg, perr))
	case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0:
		return reject(fmt.Errorf("%w: cut short (flags %#x)", errFdMsg, flags))
	}
	m, err := decodeFdMsg(fc.buf[:n])
	if err != nil {
		return reject(err)
	}
	if len(fds) != m.Op.fds() {
		return reject(fmt.Errorf("%w: %s with %d descriptors, want %d", errFdMsg, m.Op, len(fds), m.Op.fds()))
	}
	if len(fds) == 1 {
		return m, fds[0], nil
	}
	return m, -1, nil
}

// parseRights returns the descriptors of the SCM_RIGHTS messages in oob.
func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	var errs []error
	for i := range msgs {
		if msgs[i].Header.Level != unix.SOL_SOCKET || msgs[i].Header.Type != unix.SCM_RIGHTS {
			errs = append(errs, fmt.Errorf("control message %d/%d is not SCM_RIGHTS", msgs[i].Header.Level, msgs[i].Header.Type))
			continue
		}
		r, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		fds = append(fds, r...)
	}
	return fds, errors.Join(errs...)
}

// checkPeer checks that the process at the other end of c runs as this
// one's user (or as root).
func checkPeer(c *net.UnixConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("peer credentials: %w", cerr)
	}
	if cred.Uid != uint32(os.Geteuid()) && cred.Uid != 0 {
		return fmt.Errorf("peer pid %d runs as uid %d, not %d", cred.Pid, cred.Uid, os.Geteuid())
	}
	return nil
}

// seqpacketPair returns the two ends of a connected SOCK_SEQPACKET pair
// (close-on-exec), the second as a file to give a child process.
func seqpacketPair() (*net.UnixConn, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	f0 := os.NewFile(uintptr(fds[0]), "handoff")
	defer f0.Close()
	c, err := net.FileConn(f0)
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, err
	}
	return c.(*net.UnixConn), os.NewFile(uintptr(fds[1]), "handoff-child"), nil
}

// fileUnixConn makes the connection over an inherited descriptor.
func fileUnixConn(fd uintptr, name string) (*net.UnixConn, error) {
	f := os.NewFile(fd, name)
	if f == nil {
		return nil, fmt.Errorf("%s: no descriptor %d", name, fd)
	}
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("%s: descriptor %d is not a Unix socket", name, fd)
	}
	return uc, nil
}
