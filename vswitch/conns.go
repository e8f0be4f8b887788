package vswitch

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/netip"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/lb"
	"github.com/ufp-dev/ufp/nat"
)

// The switch's connections written out and read back, so that a switch
// started after this one died (ufpd restarted) carries on its stateful
// connections: NAT mappings keep their ports, and replies are translated
// as before.
//
// The format is a header (connsMagic) and then one record per
// connection: its payload's length and CRC-32C (little-endian uint32s),
// then the payload (connRecord.marshal). A reader stops at a truncated
// record and skips a record whose checksum or contents are wrong: what
// it read before stays good.

const (
	connsMagic = "UFPCONN1"
	// maxConnRecord bounds a record's payload; a longer length is
	// corruption.
	maxConnRecord = 1024
	// Part kinds of a record's connection state.
	partSNAT = 1
	partLB   = 2
	// Flags of an lb part.
	lbRegistered = 1
	lbSourceVIP  = 2
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// connEntry is a connection as the file holds it: the flow table's record
// with the input port by name and its state's parts as values.
type connEntry struct {
	port string
	rec  dataplane.ConnRecord // State left empty
	nat  []nat.ConnMapping
	lb   []lb.ConnChoice
}

// ConnsStats is what SaveConns wrote or RestoreConns read back.
type ConnsStats struct {
	// Conns: written, or restored.
	Conns int
	// Unsupported: connections left out because part of their state is
	// of a kind not carried.
	Unsupported int
	// Gone: records read whole whose connection was not restored (its
	// port or pool is gone, the policy decides it otherwise now, its NAT
	// port is bound otherwise).
	Gone int
	// Corrupt: records skipped for a wrong checksum or contents;
	// Truncated: the file ended inside a record.
	Corrupt   int
	Truncated bool
}

// SaveConns writes the switch's stateful connections to w in the format
// above. It may run while the switch serves: a connection opened or
// closed meanwhile may be in or out.
func (s *Switch) SaveConns(w io.Writer) (ConnsStats, error) {
	var st ConnsStats
	bw := bufio.NewWriterSize(w, 64<<10)
	if _, err := bw.WriteString(connsMagic); err != nil {
		return st, err
	}
	pol := s.pol.Load()
	var e connEntry
	var buf []byte
	var err error
	s.pl.FlowTable().Conns(s.Now(), func(r *dataplane.ConnRecord) bool {
		p := pol.port(r.Key.InPort)
		if p == nil {
			return true // its port has left: its flows are being purged
		}
		e = connEntry{port: p.Name, rec: *r, nat: e.nat[:0], lb: e.lb[:0]}
		e.rec.State = nil
		for _, part := range r.State {
			if m, ok := nat.MappingOf(part); ok {
				e.nat = append(e.nat, m)
			} else if ch, ok := s.env.LB.ChoiceOf(part); ok {
				e.lb = append(e.lb, ch)
			} else {
				st.Unsupported++
				return true
			}
		}
		buf = e.marshal(buf[:0])
		var hdr [8]byte
		binary.LittleEndian.PutUint32(hdr[0:], uint32(len(buf)))
		binary.LittleEndian.PutUint32(hdr[4:], crc32.Checksum(buf, crcTable))
		if _, err = bw.Write(hdr[:]); err == nil {
			_, err = bw.Write(buf)
		}
		st.Conns++
		return err == nil
	})
	if err != nil {
		return st, err
	}
	return st, bw.Flush()
}

// RestoreConns reads connections SaveConns wrote from r and puts them
// back in the switch's flow table: each NAT mapping is bound again on its
// port, then the connection is re-decided from its origin under the
// running policy (dataplane.Restorer). Call it before
// serving. What cannot be read or restored is counted, never fatal; the
// error is that of reading r, or a header that is not this format's.
func (s *Switch) RestoreConns(r io.Reader) (ConnsStats, error) {
	var st ConnsStats
	br := bufio.NewReaderSize(r, 64<<10)
	var magic [len(connsMagic)]byte
	if _, err := io.ReadFull(br, magic[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return st, nil // empty: nothing written yet
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			st.Truncated = true
			return st, nil
		}
		return st, err
	}
	if string(magic[:]) != connsMagic {
		return st, fmt.Errorf("not a connections file (header %q)", magic[:])
	}
	now := s.Now()
	rs := s.pl.NewRestorer()
	defer rs.Close()
	buf := make([]byte, maxConnRecord)
	for {
		e, err := readConn(br, buf)
		switch {
		case errors.Is(err, io.EOF):
			return st, nil
		case errors.Is(err, io.ErrUnexpectedEOF):
			st.Truncated = true
			return st, nil
		case errors.Is(err, errCorrupt):
			st.Corrupt++
			if errors.Is(err, errLost) {
				return st, nil // the records that follow cannot be found
			}
			continue
		case err != nil:
			return st, err
		}
		if s.restoreConn(rs, e, now) == nil {
			st.Conns++
		} else {
			st.Gone++
		}
	}
}

// restoreConn puts one connection read back in the flow table.
func (s *Switch) restoreConn(rs *dataplane.Restorer, e *connEntry, now int64) error {
	p := s.Port(e.port)
	if p == nil {
		return fmt.Errorf("port %s is gone", e.port)
	}
	rec := e.rec
	rec.Key.InPort = p.ID
	fail := func(err error) error {
		for _, q := range rec.State {
			q.Release()
		}
		return err
	}
	for _, m := range e.nat {
		part, err := s.env.NAT.RestoreConnState(m, rec.Key.DstAddr())
		if err != nil {
			return fail(err)
		}
		rec.State = append(rec.State, part)
	}
	for _, ch := range e.lb {
		part, err := s.env.LB.RestoreConnState(ch, now)
		if err != nil {
			return fail(err)
		}
		rec.State = append(rec.State, part)
	}
	return rs.Restore(&rec, now)
}

var (
	errCorrupt = errors.New("corrupt connection record")
	// errLost: a record's length is wrong, so the next cannot be found.
	errLost = errors.New("record boundary lost")
)

// readConn reads one record from r, using buf (maxConnRecord bytes) for
// its payload. It returns io.EOF at the end of the file,
// io.ErrUnexpectedEOF inside a record, and an error wrapping errCorrupt
// for a record that is not right.
func readConn(r io.Reader, buf []byte) (*connEntry, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[0:])
	if n > maxConnRecord {
		return nil, fmt.Errorf("%w: %w: length %d", errCorrupt, errLost, n)
	}
	b := buf[:n]
	if _, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if crc32.Checksum(b, crcTable) != binary.LittleEndian.Uint32(hdr[4:]) {
		return nil, fmt.Errorf("%w: checksum", errCorrupt)
	}
	e := new(connEntry)
	if err := e.unmarshal(b); err != nil {
		return nil, fmt.Errorf("%w: %w", errCorrupt, err)
	}
	return e, nil
}

// marshal appends e's payload to b: the port's name (a length byte and
// the bytes), the origin flow's key (addresses, VNI, ports, protocol,
// flags; the input port is the name), its guard (MACs, outer addresses),
// the origin's outer header set, each direction's counters, TCP flags and
// idle time, then the state's parts (a count, and for each its kind and
// value). Integers are big-endian.
func (e *connEntry) marshal(b []byte) []byte {
	r := &e.rec
	k := &r.Key
	b = append(b, byte(len(e.port)))
	b = append(b, e.port...)
	b = append(b, k.Src[:]...)
	b = append(b, k.Dst[:]...)
	b = binary.BigEndian.AppendUint32(b, k.VNI)
	b = binary.BigEndian.AppendUint16(b, k.SrcPort)
	b = binary.BigEndian.AppendUint16(b, k.DstPort)
	b = append(b, k.Proto, byte(k.Flags))
	b = append(b, r.SrcMAC[:]...)
	b = append(b, r.DstMAC[:]...)
	b = append(b, r.OuterSrc[:]...)
	b = append(b, r.OuterDst[:]...)
	o := &r.Origin
	b = appendAddr(b, o.OuterSrc)
	b = appendAddr(b, o.OuterDst)
	b = append(b, o.OuterSrcMAC[:]...)
	b = append(b, o.OuterDstMAC[:]...)
	b = binary.BigEndian.AppendUint16(b, o.OuterDstPort)
	for _, d := range []*dataplane.DirRecord{&r.Fwd, &r.Rev} {
		b = binary.BigEndian.AppendUint64(b, d.Packets)
		b = binary.BigEndian.AppendUint64(b, d.Bytes)
		b = append(b, d.TCPFlags)
		b = binary.BigEndian.AppendUint64(b, uint64(d.Idle))
	}
	b = append(b, byte(len(e.nat)+len(e.lb)))
	for _, m := range e.nat {
		b = append(b, partSNAT)
		b = appendMapping(b, &m)
	}
	for i := range e.lb {
		b = append(b, partLB)
		b = appendChoice(b, &e.lb[i])
	}
	return b
}

func appendMapping(b []byte, m *nat.ConnMapping) []byte {
	b = appendAddr(b, m.Pool)
	b = append(b, m.Proto)
	b = appendAddrPort(b, m.Internal)
	return binary.BigEndian.AppendUint16(b, m.External)
}

// appendChoice appends an lb part's value: the load balancer's name, the
// backend, the moved source port, flags, then the registered tuple
// (protocol, client, backend, frontend) and the SourceVIP mapping, each
// if its flag is set.
func appendChoice(b []byte, ch *lb.ConnChoice) []byte {
	b = append(b, byte(len(ch.LB)))
	b = append(b, ch.LB...)
	b = appendAddr(b, ch.Backend)
	b = binary.BigEndian.AppendUint16(b, ch.SrcPort)
	var flags byte
	if ch.Registered {
		flags |= lbRegistered
	}
	if ch.HasSourceVIP {
		flags |= lbSourceVIP
	}
	b = append(b, flags)
	if ch.Registered {
		b = append(b, ch.Tuple.Proto)
		b = appendAddrPort(b, ch.Tuple.Client)
		b = appendAddrPort(b, ch.Tuple.Backend)
		b = appendAddrPort(b, ch.Front)
	}
	if ch.HasSourceVIP {
		b = appendMapping(b, &ch.SourceVIP)
	}
	return b
}

func appendAddrPort(b []byte, a netip.AddrPort) []byte {
	b = appendAddr(b, a.Addr())
	return binary.BigEndian.AppendUint16(b, a.Port())
}

// appendAddr appends a as its length (0, 4 or 16) and bytes.
func appendAddr(b []byte, a netip.Addr) []byte {
	if !a.IsValid() {
		return append(b, 0)
	}
	a = a.WithZone("")
	s := a.AsSlice()
	b = append(b, byte(len(s)))
	return append(b, s...)
}

// reader takes a payload apart; the first short read sets bad.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) take(n int) []byte {
	if r.bad || n > len(r.b) {
		r.bad = true
		return make([]byte, n)
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

func (r *reader) u8() byte    { return r.take(1)[0] }
func (r *reader) u16() uint16 { return binary.BigEndian.Uint16(r.take(2)) }
func (r *reader) u32() uint32 { return binary.BigEndian.Uint32(r.take(4)) }
func (r *reader) u64() uint64 { return binary.BigEndian.Uint64(r.take(8)) }

func (r *reader) addrPort() netip.AddrPort {
	a := r.addr()
	return netip.AddrPortFrom(a, r.u16())
}

func (r *reader) mapping() (m nat.ConnMapping) {
	m.Pool, m.Proto = r.addr(), r.u8()
	m.Internal, m.External = r.addrPort(), r.u16()
	return m
}

func (r *reader) choice() (ch lb.ConnChoice, err error) {
	ch.LB = string(r.take(int(r.u8())))
	ch.Backend, ch.SrcPort = r.addr(), r.u16()
	flags := r.u8()
	if flags&^(lbRegistered|lbSourceVIP) != 0 {
		return ch, fmt.Errorf("lb part flags %#x", flags)
	}
	if flags&lbRegistered != 0 {
		ch.Registered = true
		ch.Tuple.Proto = r.u8()
		ch.Tuple.Client, ch.Tuple.Backend, ch.Front = r.addrPort(), r.addrPort(), r.addrPort()
	}
	if flags&lbSourceVIP != 0 {
		ch.HasSourceVIP, ch.SourceVIP = true, r.mapping()
	}
	return ch, nil
}

func (r *reader) addr() netip.Addr {
	switch n := r.u8(); n {
	case 0:
		return netip.Addr{}
	case 4, 16:
		a, _ := netip.AddrFromSlice(r.take(int(n)))
		return a
	}
	r.bad = true
	return netip.Addr{}
}

// unmarshal reads a payload marshal wrote into e, checking what it reads.
func (e *connEntry) unmarshal(b []byte) error {
	r := &reader{b: b}
	e.port = string(r.take(int(r.u8())))
	rec := &e.rec
	k := &rec.Key
	copy(k.Src[:], r.take(16))
	copy(k.Dst[:], r.take(16))
	k.VNI = r.u32()
	k.SrcPort, k.DstPort = r.u16(), r.u16()
	k.Proto, k.Flags = r.u8(), dataplane.KeyFlags(r.u8())
	copy(rec.SrcMAC[:], r.take(6))
	copy(rec.DstMAC[:], r.take(6))
	copy(rec.OuterSrc[:], r.take(16))
	copy(rec.OuterDst[:], r.take(16))
	o := &rec.Origin
	o.OuterSrc, o.OuterDst = r.addr(), r.addr()
	copy(o.OuterSrcMAC[:], r.take(6))
	copy(o.OuterDstMAC[:], r.take(6))
	o.OuterDstPort = r.u16()
	for _, d := range []*dataplane.DirRecord{&rec.Fwd, &rec.Rev} {
		d.Packets, d.Bytes = r.u64(), r.u64()
		d.TCPFlags = r.u8()
		d.Idle = int64(r.u64())
	}
	n := int(r.u8())
	for range n {
		if r.bad {
			break
		}
		switch kind := r.u8(); {
		case kind == partSNAT && len(e.lb) == 0:
			e.nat = append(e.nat, r.mapping())
		case kind == partLB:
			ch, err := r.choice()
			if err != nil {
				return err
			}
			e.lb = append(e.lb, ch)
		default:
			return fmt.Errorf("state part of kind %d", kind)
		}
	}
	switch {
	case r.bad:
		return errors.New("payload too short")
	case len(r.b) != 0:
		return fmt.Errorf("%d bytes after the payload", len(r.b))
	case e.port == "":
		return errors.New("no port name")
	case rec.Fwd.Idle < 0 || rec.Rev.Idle < 0:
		return errors.New("negative idle time")
	}
	return nil
}
