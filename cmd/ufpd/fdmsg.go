package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// The messages ufpd exchanges with its descriptor holder and with its
// successor in a graceful restart (docs/UFPD.md, "Restarts"), one per
// datagram of a Unix SOCK_SEQPACKET socket, with at most one file
// descriptor passed beside it (SCM_RIGHTS):
//
//	0      4       5    6     7     8
//	+------+-------+----+-----+-----+------------------------------------+
//	| UFPH | ver 1 | op | fds | 0   | port | type | name | netns | text |
//	+------+-------+----+-----+-----+------------------------------------+
//
// fds is the number of descriptors the message carries (0 or 1, fixed by
// op). port, type and name are a length byte and that many bytes; netns
// and text a big-endian 16-bit length and that many bytes. Strings are
// UTF-8 without control characters. A message is decoded whole or
// rejected.

// fdOp is a message's operation.
type fdOp uint8

const (
	// opPut (ufpd to the holder, with a descriptor) holds the descriptor
	// of port's device, replacing the one held for port.
	opPut fdOp = 1 + iota
	// opDrop (ufpd to the holder) closes the descriptor held for port.
	opDrop
	// opList (ufpd to the holder) asks for every descriptor held: the
	// answer is an opHeld message each, then opEnd.
	opList
	// opHeld (with a descriptor) is one descriptor held for port; in a
	// graceful restart, one the old ufpd hands its successor.
	opHeld
	// opEnd ends a list.
	opEnd
	// opQuit (ufpd to the holder) closes every descriptor; the holder
	// answers opEnd and exits.
	opQuit
	// opReady (successor to the old ufpd): the successor has adopted
	// the devices and waits for the old one to stop.
	opReady
	// opGo (old ufpd to the successor, with the connections as a memory
	// file): the old one has stopped reading; serve.
	opGo
	// opServing (successor to the old ufpd): serving; the old one exits.
	opServing
	// opFailed (either way) aborts a graceful restart; text says why.
	opFailed
	opLast = opFailed
)

var fdOpNames = [...]string{opPut: "put", opDrop: "drop", opList: "list", opHeld: "held", opEnd: "end",
	opQuit: "quit", opReady: "ready", opGo: "go", opServing: "serving", opFailed: "failed"}

func (o fdOp) String() string {
	if o >= 1 && o <= opLast {
		return fdOpNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// fds is the number of descriptors a message of op carries.
func (o fdOp) fds() int {
	switch o {
	case opPut, opHeld, opGo:
		return 1
	}
	return 0
}

// Descriptor types: a port's device (the type of its deviceConfig), a
// listener handed to a successor, the connections' memory file.
const (
	fdTypeTAP      = "tap"
	fdTypeAFPacket = "afpacket"
	fdTypeListener = "listener"
	fdTypeConns    = "conns"
)

// fdMsg is one message.
type fdMsg struct {
	Op fdOp
	// Port names the port whose device the descriptor is (opPut,
	// opDrop, opHeld), or the listener ("api", "metrics").
	Port string
	// Type, Name and NetNS describe the descriptor (opPut, opHeld,
	// opGo): its type (fdType*), and for a device its interface and
	// namespace as the configuration says.
	Type, Name, NetNS string
	// Text is why a graceful restart failed (opFailed).
	Text string
}

const (
	fdMsgMagic   = "UFPH"
	fdMsgVersion = 1
	fdMsgHeader  = 8
	// fdMsgMax bounds a message: the header, three short strings and
	// two long ones of at most fdMsgLong bytes.
	fdMsgLong = 4096
	fdMsgMax  = fdMsgHeader + 3*(1+255) + 2*(2+fdMsgLong)
)

// heldFd is a descriptor held or received, with what it was put as.
type heldFd struct {
	msg fdMsg
	fd  int
}

var errFdMsg = errors.New("not a valid descriptor message")

// appendFdMsg appends m's encoding to b. It fails on a field too long or
// a message its op does not allow.
func appendFdMsg(b []byte, m fdMsg) ([]byte, error) {
	if err := m.check(); err != nil {
		return b, err
	}
	b = append(b, fdMsgMagic...)
	b = append(b, fdMsgVersion, byte(m.Op), byte(m.Op.fds()), 0)
	for _, s := range []string{m.Port, m.Type, m.Name} {
		b = append(b, byte(len(s)))
		b = append(b, s...)
	}
	for _, s := range []string{m.NetNS, m.Text} {
		b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
		b = append(b, s...)
	}
	return b, nil
}

// decodeFdMsg decodes one message, checking every field.
func decodeFdMsg(b []byte) (fdMsg, error) {
	var m fdMsg
	if len(b) < fdMsgHeader || string(b[:4]) != fdMsgMagic {
		return m, fmt.Errorf("%w: no header", errFdMsg)
	}
	if b[4] != fdMsgVersion {
		return m, fmt.Errorf("%w: version %d, want %d", errFdMsg, b[4], fdMsgVersion)
	}
	m.Op = fdOp(b[5])
	if m.Op < 1 || m.Op > opLast {
		return m, fmt.Errorf("%w: unknown op %d", errFdMsg, b[5])
	}
	if int(b[6]) != m.Op.fds() || b[7] != 0 {
		return m, fmt.Errorf("%w: %s with %d descriptors (flags %#x)", errFdMsg, m.Op, b[6], b[7])
	}
	rest := b[fdMsgHeader:]
	var ok bool
	for _, f := range []*string{&m.Port, &m.Type, &m.Name} {
		if *f, rest, ok = cutString(rest, 1); !ok {
			return m, fmt.Errorf("%w: %s: short", errFdMsg, m.Op)
		}
	}
	for _, f := range []*string{&m.NetNS, &m.Text} {
		if *f, rest, ok = cutString(rest, 2); !ok {
			return m, fmt.Errorf("%w: %s: short", errFdMsg, m.Op)
		}
	}
	if len(rest) != 0 {
		return m, fmt.Errorf("%w: %s: %d bytes after the message", errFdMsg, m.Op, len(rest))
	}
	if err := m.check(); err != nil {
		return m, err
	}
	return m, nil
}

// cutString cuts a string of a lenBytes-byte length from the front of b.
func cutString(b []byte, lenBytes int) (string, []byte, bool) {
	if len(b) < lenBytes {
		return "", nil, false
	}
	n := int(b[0])
	if lenBytes == 2 {
		n = int(binary.BigEndian.Uint16(b))
	}
	b = b[lenBytes:]
	if len(b) < n {
		return "", nil, false
	}
	return string(b[:n]), b[n:], true
}

// check checks m's fields against its op.
func (m fdMsg) check() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", errFdMsg, m.Op, fmt.Sprintf(format, a...))
	}
	if m.Op < 1 || m.Op > opLast {
		return fmt.Errorf("%w: unknown op %d", errFdMsg, uint8(m.Op))
	}
	for _, f := range []struct {
		what, s string
		max     int
	}{{"port", m.Port, 255}, {"type", m.Type, 255}, {"name", m.Name, 255}, {"netns", m.NetNS, fdMsgLong}, {"text", m.Text, fdMsgLong}} {
		if len(f.s) > f.max {
			return bad("%s longer than %d bytes", f.what, f.max)
		}
		if !printable(f.s) {
			return bad("%s %q is not printable UTF-8", f.what, f.s)
		}
	}
	described := m.Port != "" || m.Type != "" || m.Name != "" || m.NetNS != ""
	switch m.Op {
	case opPut, opHeld:
		if m.Port == "" {
			return bad("no port")
		}
		switch m.Type {
		case fdTypeTAP, fdTypeAFPacket:
			if m.Name == "" {
				return bad("no interface name")
			}
		case fdTypeListener:
			if m.Op != opHeld || m.Name != "" || m.NetNS != "" {
				return bad("a listener is handed to a successor only, without interface")
			}
		default:
			return bad("type %q is not %s, %s or %s", m.Type, fdTypeTAP, fdTypeAFPacket, fdTypeListener)
		}
	case opDrop:
		if m.Port == "" || m.Type != "" || m.Name != "" || m.NetNS != "" {
			return bad("a port and nothing else")
		}
	case opGo:
		if m.Type != fdTypeConns || m.Port != "" || m.Name != "" || m.NetNS != "" {
			return bad("the connections and nothing else")
		}
	default:
		if described {
			return bad("no descriptor to describe")
		}
	}
	if m.Text != "" && m.Op != opFailed {
		return bad("text on a message that has none")
	}
	return nil
}

// printable reports whether s is UTF-8 without control characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}
