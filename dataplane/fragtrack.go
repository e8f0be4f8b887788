package dataplane

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"
)

// Fragment tracking: the later fragments of an IP datagram carry no L4
// header, so they cannot be looked up by their flow's 5-tuple. Each worker
// keeps a table of the datagrams it is seeing in pieces, keyed as RFC 791
// and RFC 8200 identify a datagram (source, destination, protocol,
// identification) and by where it came from (input port, VNI and outer
// addresses of a tunnel). The first fragment takes its flow's way (fast or
// slow path) and leaves its verdict in the table: the action applied to it
// (output port, transposition, the flow hash a pushed header's source port
// comes from) or the reason it was dropped. Later fragments get that verdict
// without crossing the layers: the same action, of which only what lies in
// the Ethernet and IP headers applies to them (a port rewrite is in the
// first fragment's L4 header, which also holds the checksum of the whole
// datagram), or the same drop, so no fragment passes an ACL that blocked
// its first fragment. This is virtual reassembly as VPP's shallow
// reassembly and Open vSwitch's conntrack do it for the same reason, less
// the copy of the whole datagram: nothing waits but the later fragments
// that come before their first.
//
// Those are held, as copies in per-worker storage bounded in count and
// bytes, for at most the datagram's timeout, and released through the
// first fragment's verdict when it arrives (Worker.Released), or dropped
// when time runs out (fragment-timeout) or there is no room
// (fragments-held-full). Each fragment's byte range is checked against its
// datagram's others: overlaps (RFC 5722 for IPv6; for IPv4, RFC 1858's
// attacks that rewrite the TCP header) and impossible ranges drop the
// fragment and every later one of the datagram.

// FragmentConfig bounds the fragment tracking of each worker. The zero
// value takes the defaults.
type FragmentConfig struct {
	// Timeout is how long a datagram is tracked from its first fragment
	// of any kind (not refreshed): later fragments held longer are
	// dropped, and later fragments arriving after it are held anew.
	// 0 means DefaultFragmentTimeout.
	Timeout time.Duration
	// MaxDatagrams bounds the datagrams tracked at once; 0 means
	// DefaultFragmentDatagrams.
	MaxDatagrams int
	// MaxHeld bounds the fragments held at once, MaxHeldBytes the bytes
	// they take (each fragment's frame and Headroom); 0 means
	// DefaultFragmentsHeld and DefaultFragmentHeldBytes.
	MaxHeld, MaxHeldBytes int
}

// Defaults of FragmentConfig, per worker.
//
// The timeout is a second. The fragments of one datagram leave their
// sender back to back (45 fragments for 64 KiB, 5 ms at 100 Mb/s) and a
// network reorders packets by less than a round trip, so a later fragment
// whose first has not come within a second belongs, in practice, to a
// datagram whose first fragment was lost: holding it longer only keeps
// storage from live datagrams. Linux's 30 s (ipfrag_time) is a receiver's
// time to wait for the missing pieces of a datagram it keeps whole, another
// job; VPP's shallow reassembly, this job, waits 100 ms.
const (
	DefaultFragmentTimeout   = time.Second
	DefaultFragmentDatagrams = 1024
	DefaultFragmentsHeld     = 64
	DefaultFragmentHeldBytes = 256 << 10
)

// maxFragmentTrack bounds MaxDatagrams and MaxHeld (indices are int32,
// tables are allocated whole).
const maxFragmentTrack = 1 << 16

// withDefaults returns c with its zero fields set to the defaults, or an
// error naming a field that is out of range.
func (c FragmentConfig) withDefaults() (FragmentConfig, error) {
	switch {
	case c.Timeout < 0:
		return c, fmt.Errorf("fragments: timeout %v is negative", c.Timeout)
	case c.MaxDatagrams < 0 || c.MaxDatagrams > maxFragmentTrack:
		return c, fmt.Errorf("fragments: maxDatagrams %d is outside 0-%d", c.MaxDatagrams, maxFragmentTrack)
	case c.MaxHeld < 0 || c.MaxHeld > maxFragmentTrack:
		return c, fmt.Errorf("fragments: maxHeld %d is outside 0-%d", c.MaxHeld, maxFragmentTrack)
	case c.MaxHeldBytes < 0 || c.MaxHeldBytes > 1<<30:
		return c, fmt.Errorf("fragments: maxHeldBytes %d is outside 0-%d", c.MaxHeldBytes, 1<<30)
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultFragmentTimeout
	}
	if c.MaxDatagrams == 0 {
		c.MaxDatagrams = DefaultFragmentDatagrams
	}
	if c.MaxHeld == 0 {
		c.MaxHeld = DefaultFragmentsHeld
	}
	if c.MaxHeldBytes == 0 {
		c.MaxHeldBytes = DefaultFragmentHeldBytes
	}
	return c, nil
}

// IPv6Fragment is a view of the IPv6 Fragment extension header (RFC 8200
// section 4.5):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  Next Header  |   Reserved    |      Fragment Offset    |Res|M|
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                         Identification                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type IPv6Fragment []byte

// IPv6FragmentLen is the length of the IPv6 Fragment header.
const IPv6FragmentLen = 8

const (
	ipv6FragNext   = 0
	ipv6FragOffM   = 2
	ipv6FragID     = 4
	ipv6FragOffset = 0xfff8 // in bytes: the offset in 8-byte units, shifted
	ipv6FragMore   = 0x0001
)

func (h IPv6Fragment) NextHeader() uint8 { return h[ipv6FragNext] }
func (h IPv6Fragment) Offset() int       { return int(h.offsetM() & ipv6FragOffset) }
func (h IPv6Fragment) More() bool        { return h.offsetM()&ipv6FragMore != 0 }
func (h IPv6Fragment) ID() uint32        { return binary.BigEndian.Uint32(h[ipv6FragID:]) }
func (h IPv6Fragment) offsetM() uint16   { return binary.BigEndian.Uint16(h[ipv6FragOffM:]) }

// fragFields is what the tracking reads of a fragment: its datagram's
// identification and protocol (the protocol field of IPv4, the Next Header
// of the IPv6 Fragment header), where its data lies in the datagram's
// fragmentable part, and whether more follows. unfrag is the length of
// what precedes the fragmentable part in the reassembled payload (the
// IPv4 header, IPv6's extension headers before the Fragment header): the
// reassembled datagram may not exceed 65535 bytes with it.
type fragFields struct {
	id     uint32
	proto  uint8
	more   bool
	off, n int
	unfrag int
}

// atomic reports whether f is an IPv6 atomic fragment (offset 0, no more):
// a whole datagram, processed on its own (RFC 6946).
func (f *fragFields) atomic() bool { return f.off == 0 && !f.more }

// fragFieldsOf reads the fragment fields of the packet h describes in b
// (h.Flags has FlagFragment). It reports false if they cannot be found,
// which Decode makes impossible.
func fragFieldsOf(b []byte, h *Headers) (fragFields, bool) {
	var f fragFields
	l3, end := int(h.L3), int(h.End)
	if l3 <= 0 || end > len(b) || end < l3 {
		return f, false
	}
	if h.IPVersion == 4 {
		if end-l3 < IPv4MinLen {
			return f, false
		}
		ip := IPv4(b[l3:end])
		hl := ip.HeaderLen()
		if hl < IPv4MinLen || hl > len(ip) {
			return f, false
		}
		frag := ip.FragField()
		f.id, f.proto = uint32(ip.ID()), ip.Protocol()
		f.more, f.off = frag&ipv4FlagMF != 0, int(frag&ipv4OffsetMask)*8
		f.n, f.unfrag = len(ip)-hl, hl
		return f, true
	}
	if h.IPVersion != 6 || end-l3 < IPv6Len {
		return f, false
	}
	next := IPv6(b[l3:]).NextHeader()
	off := l3 + IPv6Len
	for range maxExtHeaders {
		if end-off < 8 {
			return f, false
		}
		switch next {
		case ProtoFragment:
			fh := IPv6Fragment(b[off : off+IPv6FragmentLen])
			f.id, f.proto, f.more, f.off = fh.ID(), fh.NextHeader(), fh.More(), fh.Offset()
			f.n, f.unfrag = end-off-IPv6FragmentLen, off-l3-IPv6Len
			return f, true
		case ProtoAH:
			next, off = b[off], off+(int(b[off+1])+2)*4
		case ProtoHopByHop, ProtoRouting, ProtoDstOpts:
			next, off = b[off], off+(int(b[off+1])+1)*8
		default:
			return f, false
		}
	}
	return f, false
}

// fragKey identifies a datagram being tracked: its IP identity (RFC 791,
// RFC 8200: source, destination, protocol, identification) and where it
// came from: the input port and, for a packet in a tunnel the switch
// terminates, the VNI and outer addresses, so that a fragment forged from
// another tunnel endpoint never follows a genuine first fragment. MACs are
// left out: routers balancing per packet may send a datagram's fragments
// from different MACs.
type fragKey struct {
	src, dst           [16]byte
	outerSrc, outerDst [16]byte
	id, vni            uint32
	in                 PortID
	proto              uint8
	flags              uint8 // fragKeyIPv6, fragKeyEncap
}

const (
	fragKeyIPv6 = 1 << iota
	fragKeyEncap
)

func (k *fragKey) hash() uint32 {
	le := binary.LittleEndian
	x := le.Uint64(k.src[0:]) ^ le.Uint64(k.src[8:])*0x9e3779b97f4a7c15
	x ^= (le.Uint64(k.dst[0:]) ^ le.Uint64(k.dst[8:])*0xbf58476d1ce4e5b9) + 0x94d049bb133111eb
	x ^= le.Uint64(k.outerSrc[0:]) ^ le.Uint64(k.outerSrc[8:])*0x9e3779b97f4a7c15
	x ^= uint64(k.id)<<32 | uint64(k.vni)
	x ^= uint64(k.in)<<48 | uint64(k.proto)<<40 | uint64(k.flags)<<32
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 31
	x *= 0x94d049bb133111eb
	x ^= x >> 29
	return uint32(x)
}

// String formats k for traces: "udp 10.0.0.10 > 10.0.0.11 id 7".
func (k *fragKey) String() string {
	addr := func(a *[16]byte) netip.Addr {
		if k.flags&fragKeyIPv6 != 0 {
			return netip.AddrFrom16(*a)
		}
		return netip.AddrFrom4([4]byte(a[:4]))
	}
	s := fmt.Sprintf("%s %s > %s id %d", ProtoName(k.proto), addr(&k.src), addr(&k.dst), k.id)
	if k.flags&fragKeyEncap != 0 {
		s += fmt.Sprintf(" vni %d", k.vni)
	}
	return s
}

// fragMaxRanges bounds the byte ranges a datagram's entry keeps: fragments
// that join are merged, so in-order and reverse-order streams of any
// length take one, and only a datagram arriving in pieces with more than
// fragMaxRanges gaps between them (tiny fragments in random order) is
// refused.
const fragMaxRanges = 16

// fragRange is a byte range [from, to) of a datagram's fragmentable part.
type fragRange struct{ from, to uint16 }

// fragEntry is a tracked datagram.
type fragEntry struct {
	key      fragKey
	deadline int64
	// The first fragment's verdict (decided): the action applied to it,
	// with its flow hash and flow (counted with the later fragments), or
	// why it (or the datagram: an overlap) was dropped.
	act     *Action
	flow    *Flow
	hash    uint32
	drop    DropReason
	decided bool
	// last: the last fragment came; total is then the datagram's length.
	last   bool
	total  uint16
	nr     uint8
	ranges [fragMaxRanges]fragRange
	// The held fragments, in arrival order (indices into held; -1 none).
	heldHead, heldTail int32
	bucket             uint32
	// hnext chains the entry in its bucket (or the free entries); prev
	// and next in age order.
	hnext, prev, next int32
}

// cover records that fragment f of e's datagram arrived, and reports why
// it must be dropped, if it must: an overlap with another fragment (a TCP
// fragment at offset 8 counts as one whatever came: it would rewrite the
// TCP flags, RFC 1858), or a range no datagram can have.
func (e *fragEntry) cover(f *fragFields) DropReason {
	from, to := f.off, f.off+f.n
	switch {
	case f.n == 0 || f.unfrag+to > 0xffff:
		return DropFragmentInvalid
	case f.more && f.n%8 != 0:
		return DropFragmentInvalid
	case e.last && (to > int(e.total) || !f.more && to != int(e.total) || f.more && to == int(e.total)):
		return DropFragmentInvalid
	case !f.more && e.nr > 0 && int(e.ranges[e.nr-1].to) > to:
		return DropFragmentInvalid
	case f.proto == ProtoTCP && f.off == 8:
		return DropFragmentOverlap // RFC 1858 section 3.2
	}
	// ranges is sorted and disjoint, never adjacent (joined ranges are
	// merged): find where [from, to) goes.
	i := 0
	for i < int(e.nr) && int(e.ranges[i].to) <= from {
		i++
	}
	if i < int(e.nr) && int(e.ranges[i].from) < to {
		return DropFragmentOverlap
	}
	joinPrev := i > 0 && int(e.ranges[i-1].to) == from
	joinNext := i < int(e.nr) && int(e.ranges[i].from) == to
	switch {
	case joinPrev && joinNext:
		e.ranges[i-1].to = e.ranges[i].to
		copy(e.ranges[i:e.nr], e.ranges[i+1:e.nr])
		e.nr--
	case joinPrev:
		e.ranges[i-1].to = uint16(to)
	case joinNext:
		e.ranges[i].from = uint16(from)
	default:
		if int(e.nr) == fragMaxRanges {
			return DropFragmentInvalid
		}
		copy(e.ranges[i+1:e.nr+1], e.ranges[i:e.nr])
		e.ranges[i] = fragRange{uint16(from), uint16(to)}
		e.nr++
	}
	if !f.more {
		e.last, e.total = true, uint16(to)
	}
	return NotDropped
}

// complete reports whether every byte of e's datagram has come.
func (e *fragEntry) complete() bool {
	return e.last && e.nr == 1 && e.ranges[0].from == 0 && e.ranges[0].to == e.total
}

// heldFrag is a held fragment: a packet whose buffer lies in the worker's
// fragment storage (Headroom, then the frame as it arrived).
type heldFrag struct {
	pkt        Packet
	start, end int32 // its region of the storage
	// next links the entry's held fragments, or the free slots.
	next int32
	// done: the slot's packet is gone (released and recycled, or
	// dropped); its region is given back once every region before it is.
	done bool
}

// fragTable is a worker's fragment tracking. Not safe for concurrent use.
type fragTable struct {
	timeout int64
	entries []fragEntry
	buckets []int32 // entry chains by hash; len a power of two
	// freeEntry heads the free entries (chained by hnext); oldest and
	// newest are the ends of the live entries in age order, which is
	// deadline order (every entry lives timeout).
	freeEntry, oldest, newest int32
	live                      int

	held     []heldFrag
	freeHeld int32
	waiting  int // held fragments not yet released or dropped
	// storage is a ring of the held fragments' regions, allocated in
	// arrival order (order, a ring of slots: head, length); regions are
	// given back from the oldest, so one fragment held long keeps the
	// space behind it until it goes. Allocated on first use.
	storage       []byte
	maxBytes      int
	order         []int32
	oHead, oLen   int
	sHead, sTail  int
	released      []*Packet
	releasedSlots []int32
	parsed        Parsed // a released fragment, decoded again
}

func newFragTable(c FragmentConfig) *fragTable {
	nb := 1
	for nb < c.MaxDatagrams {
		nb <<= 1
	}
	t := &fragTable{
		timeout:  int64(c.Timeout),
		entries:  make([]fragEntry, c.MaxDatagrams),
		buckets:  make([]int32, nb),
		held:     make([]heldFrag, c.MaxHeld),
		order:    make([]int32, c.MaxHeld),
		maxBytes: c.MaxHeldBytes,
		oldest:   -1, newest: -1,
	}
	for i := range t.buckets {
		t.buckets[i] = -1
	}
	for i := range t.entries {
		t.entries[i].hnext = int32(i + 1)
	}
	t.entries[len(t.entries)-1].hnext = -1
	for i := range t.held {
		t.held[i].next = int32(i + 1)
	}
	t.held[len(t.held)-1].next = -1
	t.released = make([]*Packet, 0, c.MaxHeld)
	t.releasedSlots = make([]int32, 0, c.MaxHeld)
	return t
}

// lookup returns the entry of k (hash k.hash()), -1 if none.
func (t *fragTable) lookup(k *fragKey, hash uint32) int32 {
	for i := t.buckets[hash&uint32(len(t.buckets)-1)]; i >= 0; i = t.entries[i].hnext {
		if t.entries[i].key == *k {
			return i
		}
	}
	return -1
}

// add starts tracking k (hash k.hash()) until now plus the timeout, and
// returns its entry; -1 if every entry is in use.
func (t *fragTable) add(k *fragKey, hash uint32, now int64) int32 {
	i := t.freeEntry
	if i < 0 {
		return -1
	}
	e := &t.entries[i]
	t.freeEntry = e.hnext
	b := hash & uint32(len(t.buckets)-1)
	*e = fragEntry{key: *k, deadline: now + t.timeout, heldHead: -1, heldTail: -1,
		bucket: b, hnext: t.buckets[b], prev: t.newest, next: -1}
	t.buckets[b] = i
	if t.newest >= 0 {
		t.entries[t.newest].next = i
	} else {
		t.oldest = i
	}
	t.newest = i
	t.live++
	return i
}

// remove stops tracking entry i, which holds no fragments.
func (t *fragTable) remove(i int32) {
	e := &t.entries[i]
	for p := &t.buckets[e.bucket]; *p >= 0; p = &t.entries[*p].hnext {
		if *p == i {
			*p = e.hnext
			break
		}
	}
	if e.prev >= 0 {
		t.entries[e.prev].next = e.next
	} else {
		t.oldest = e.next
	}
	if e.next >= 0 {
		t.entries[e.next].prev = e.prev
	} else {
		t.newest = e.prev
	}
	*e = fragEntry{hnext: t.freeEntry}
	t.freeEntry = i
	t.live--
}

// hold keeps a copy of p as a held fragment of entry i. It reports false
// if there is no room (a slot, or bytes of storage).
func (t *fragTable) hold(i int32, p *Packet) bool {
	s := t.freeHeld
	if s < 0 {
		return false
	}
	n := p.Len()
	start, ok := t.alloc(Headroom + n)
	if !ok {
		return false
	}
	h := &t.held[s]
	t.freeHeld = h.next
	end := start + Headroom + n
	copy(t.storage[start+Headroom:end], p.Bytes())
	h.pkt = Packet{buf: t.storage[start:end:end], off: Headroom, n: n, Offload: p.Offload,
		InPort: p.InPort, OutPort: NoPort}
	h.start, h.end, h.next, h.done = int32(start), int32(end), -1, false
	t.order[(t.oHead+t.oLen)%len(t.order)] = s
	t.oLen++
	e := &t.entries[i]
	if e.heldTail >= 0 {
		t.held[e.heldTail].next = s
	} else {
		e.heldHead = s
	}
	e.heldTail = s
	t.waiting++
	return true
}

// alloc returns the start of a region of n bytes of storage, or false if
// the ring has no n contiguous bytes free.
func (t *fragTable) alloc(n int) (int, bool) {
	if t.storage == nil {
		t.storage = make([]byte, t.maxBytes)
	}
	size := len(t.storage)
	if t.oLen == 0 {
		t.sHead, t.sTail = 0, 0
	}
	if t.oLen == 0 || t.sHead > t.sTail {
		// Free: [sHead, size) and [0, sTail).
		switch {
		case t.sHead+n <= size:
			s := t.sHead
			t.sHead += n
			return s, true
		case n <= t.sTail:
			t.sHead = n
			return 0, true
		}
		return 0, false
	}
	// Wrapped: free [sHead, sTail).
	if t.sHead+n <= t.sTail {
		s := t.sHead
		t.sHead += n
		return s, true
	}
	return 0, false
}

// free gives slot s back: its packet is gone. Its region returns to the
// storage once the regions before it have.
func (t *fragTable) free(s int32) {
	t.held[s].done = true
	t.held[s].pkt = Packet{}
	for t.oLen > 0 {
		f := t.order[t.oHead]
		h := &t.held[f]
		if !h.done {
			t.sTail = int(h.start)
			return
		}
		h.done, h.next = false, t.freeHeld
		t.freeHeld = f
		t.oHead = (t.oHead + 1) % len(t.order)
		t.oLen--
	}
	t.sHead, t.sTail = 0, 0
}

// Released returns the held fragments that the last Process released: the
// later fragments of datagrams whose first fragment it processed, with the
// first's verdict applied (OutPort set, or Drop set and OutPort NoPort),
// in the order they arrived. Send the forwarded ones after the batch's own
// packets for their port: their first fragment is among those. The
// packets belong to the worker and are valid until its next Process or
// Release.
func (w *Worker) Released() []*Packet {
	if w.frags == nil {
		return nil
	}
	return w.frags.released
}

// HeldFragments returns how many later fragments the worker holds,
// waiting for their first fragment.
func (w *Worker) HeldFragments() int {
	if w.frags == nil {
		return 0
	}
	return w.frags.waiting
}

// fragBatch starts a batch at time now: the fragments the last batch
// released are given back, and held fragments whose time ran out are
// dropped (fragment-timeout).
func (w *Worker) fragBatch(now int64) {
	t := w.frags
	if len(t.releasedSlots) > 0 {
		for _, s := range t.releasedSlots {
			t.free(s)
		}
		t.releasedSlots = t.releasedSlots[:0]
		clear(t.released)
		t.released = t.released[:0]
	}
	for t.oldest >= 0 && t.entries[t.oldest].deadline <= now {
		i := t.oldest
		e := &t.entries[i]
		if e.heldHead >= 0 && w.Trace.On() {
			w.Trace.Addf("fragments of %s: the first fragment did not come in time: held fragments dropped", &e.key)
		}
		w.fragDropHeld(e, DropFragmentTimeout)
		t.remove(i)
	}
}

// fragDropAll drops every fragment the worker holds, as if its time had
// run out: the worker is released.
func (w *Worker) fragDropAll() {
	t := w.frags
	for t.oldest >= 0 {
		i := t.oldest
		w.fragDropHeld(&t.entries[i], DropFragmentTimeout)
		t.remove(i)
	}
}

// fragDropHeld drops the fragments entry e holds, for reason r.
func (w *Worker) fragDropHeld(e *fragEntry, r DropReason) {
	t := w.frags
	for s := e.heldHead; s >= 0; {
		h := &t.held[s]
		next := h.next
		w.countDrop(h.pkt.InPort, r)
		t.waiting--
		t.free(s)
		s = next
	}
	e.heldHead, e.heldTail = -1, -1
}

// fragRefuse refuses the datagram of entry e for reason r (an overlap, a
// range it cannot have, no room to hold one of its fragments): the
// fragments it holds are dropped, and so are those still to come until
// the entry times out.
func (w *Worker) fragRefuse(e *fragEntry, r DropReason) {
	if w.Trace.On() {
		w.Trace.Addf("fragments of %s refused (%s): held and later fragments dropped", &e.key, r)
	}
	w.fragDropHeld(e, r)
	e.decided, e.drop, e.act, e.flow = true, r, nil, nil
}

// fragment handles p, an IP fragment (h.Flags has FlagFragment), before
// its flow is looked up, and reports whether it is done with it. A later
// fragment is handled whole: it follows the verdict its first fragment
// left, or is held until the first comes, or is dropped. A first
// fragment is checked against the fragments of its datagram that came
// before it: an overlap drops it; otherwise fragment leaves its datagram's
// entry in w.fragFirst, for fragDecided to record the verdict the first
// fragment's flow gives it (an IPv6 atomic fragment is not tracked).
func (w *Worker) fragment(p *Packet, b []byte, pr *Parsed, now int64) (done bool) {
	entry, done := w.fragmentEntry(p, b, pr, now)
	if !done && entry >= 0 {
		w.fragFirst = entry + 1
	}
	return done
}

// fragmentEntry is fragment, returning the first fragment's entry.
func (w *Worker) fragmentEntry(p *Packet, b []byte, pr *Parsed, now int64) (entry int32, done bool) {
	h := pr.Tenant()
	f, ok := fragFieldsOf(b, h)
	if !ok {
		w.drop(p, DropFragmentInvalid)
		return -1, true
	}
	if f.atomic() {
		return -1, false
	}
	t := w.fragTable()
	var k fragKey
	fragKeyOf(&k, h, pr, p.InPort, &f)
	hash := k.hash()
	i := t.lookup(&k, hash)
	if i < 0 {
		if i = t.add(&k, hash, now); i < 0 {
			if w.Trace.On() {
				w.traceFragment(k, "the fragment table is full")
			}
			w.drop(p, DropFragmentTableFull)
			return -1, true
		}
	}
	e := &t.entries[i]
	if e.decided && e.drop != NotDropped {
		w.fragDropped(p, e, &f)
		return -1, true
	}
	if r := e.cover(&f); r != NotDropped {
		w.fragRefuse(e, r)
		w.drop(p, r)
		return -1, true
	}
	if h.Flags&FlagLaterFragment == 0 {
		return i, false
	}
	if e.decided {
		w.fragFollow(p, b, pr, e, now)
		if e.complete() {
			t.remove(i)
		}
		return -1, true
	}
	if !t.hold(i, p) {
		w.fragRefuse(e, DropFragmentsHeldFull)
		w.drop(p, DropFragmentsHeldFull)
		return -1, true
	}
	p.Path = PathHeld
	if w.Trace.On() {
		w.Trace.Addf("fragment of %s at offset %d: held until its first fragment comes (%d held)", &e.key, f.off, t.waiting)
	}
	return -1, true
}

// fragFast is the fast path of p, a fragment (pr describes its frame b)
// whose flow f (its key's hash hash) the table holds and may use: a first
// fragment is checked against its datagram's other fragments (fragment),
// takes its flow's action and leaves it for the later ones (fragDecided).
// Later fragments have no flow of their own, but should one be found,
// fragment handles it whole.
func (w *Worker) fragFast(p *Packet, b []byte, pr *Parsed, f *Flow, hash uint32, now int64) {
	if w.fragment(p, b, pr, now) {
		return
	}
	a := f.action.Load()
	w.applyTo(p, b, pr, a, hash)
	w.account(f, len(b), pr.Tenant().TCPFlags, now)
	p.Path = PathFast
	w.Flow = f
	w.fast++
	if w.fragFirst != 0 {
		w.fragDecided(p, a, hash, now)
	}
}

// traceFragment traces what became of a fragment of datagram k. (k is a
// copy, which escapes only when this runs.)
func (w *Worker) traceFragment(k fragKey, what string) {
	w.Trace.Addf("fragment of %s: %s", &k, what)
}

// fragTable returns the worker's fragment table, made on first use.
func (w *Worker) fragTable() *fragTable {
	if w.frags == nil {
		w.frags = newFragTable(w.pl.frag)
	}
	return w.frags
}

// fragKeyOf fills k with the key of the datagram of fragment f, which
// arrived on port in and which h (the tenant headers of pr) describes.
func fragKeyOf(k *fragKey, h *Headers, pr *Parsed, in PortID, f *fragFields) {
	*k = fragKey{src: h.Src, dst: h.Dst, id: f.id, in: in, proto: f.proto}
	if h.IPVersion == 6 {
		k.flags |= fragKeyIPv6
	}
	if pr.Encap {
		k.flags |= fragKeyEncap
		k.vni, k.outerSrc, k.outerDst = pr.VNI, pr.Outer.Src, pr.Outer.Dst
	}
}

// fragDropped drops p, a fragment of the datagram of entry e, which was
// dropped or refused.
func (w *Worker) fragDropped(p *Packet, e *fragEntry, f *fragFields) {
	if w.Trace.On() {
		w.Trace.Addf("fragment of %s at offset %d: its datagram was dropped (%s)", &e.key, f.off, e.drop)
	}
	w.drop(p, e.drop)
}

// fragFollow applies to p, a later fragment that pr describes (b its
// frame), the verdict its first fragment left in e: on the fast path,
// counted on the first fragment's flow.
func (w *Worker) fragFollow(p *Packet, b []byte, pr *Parsed, e *fragEntry, now int64) {
	if e.drop != NotDropped {
		w.drop(p, e.drop)
		return
	}
	p.Path = PathFast
	w.fast++
	w.Flow = e.flow
	n := len(b)
	w.applyTo(p, b, pr, e.act, e.hash)
	if e.flow != nil && p.Drop == NotDropped {
		w.account(e.flow, n, 0, now)
	}
}

// fragDecided leaves in the entry fragment found for first fragment p
// (w.fragFirst) the verdict p got: the action a applied to it with flow
// hash hash (nil if none was), or why it was dropped or rejected; and
// releases the fragments of its datagram that came before it, through
// that verdict.
func (w *Worker) fragDecided(p *Packet, a *Action, hash uint32, now int64) {
	t := w.frags
	i := w.fragFirst - 1
	w.fragFirst = 0
	e := &t.entries[i]
	e.decided = true
	switch {
	case p.Drop != NotDropped:
		e.drop = p.Drop
	case p.Rejected != NotDropped:
		e.drop = p.Rejected
	case a == nil || p.OutPort == NoPort:
		// Every path that forwards a packet applies an action to it;
		// should one not, its fragments are not followed blindly.
		e.drop = DropNoDestination
	default:
		e.act, e.hash, e.flow = a, hash, w.Flow
	}
	if w.Trace.On() {
		switch {
		case e.drop != NotDropped:
			w.Trace.Addf("first fragment of %s dropped (%s): so are its later fragments", &e.key, e.drop)
		default:
			w.Trace.Addf("first fragment of %s: its later fragments follow it (%s)", &e.key, a.HT)
		}
	}
	flow := w.Flow
	for s := e.heldHead; s >= 0; {
		h := &t.held[s]
		next := h.next
		w.fragRelease(&h.pkt, e, now)
		t.released = append(t.released, &h.pkt)
		t.releasedSlots = append(t.releasedSlots, s)
		t.waiting--
		s = next
	}
	e.heldHead, e.heldTail = -1, -1
	w.Flow = flow
	if e.complete() {
		t.remove(i)
	}
}

// fragRelease applies the verdict of entry e to hp, a fragment it held.
func (w *Worker) fragRelease(hp *Packet, e *fragEntry, now int64) {
	if e.drop != NotDropped {
		w.drop(hp, e.drop)
		return
	}
	t := w.frags
	pr := &t.parsed
	pr.VXLANPort, pr.NoVXLAN = w.parsed.VXLANPort, !w.pl.slow.Decapsulates(hp.InPort)
	b := hp.Bytes()
	if r := pr.Decode(b); r != NotDropped {
		w.drop(hp, r) // it decoded when it was held
		return
	}
	if w.Trace.On() {
		w.Trace.Addf("held fragment of %s released", &e.key)
	}
	w.fragFollow(hp, b, pr, e, now)
}

// fragRefused records that p, which arrived on port in and failed to
// decode for reason r, is the first fragment of a datagram (pr.Outer
// describes it as far as Decode got): its datagram's later fragments are
// dropped for the same reason, as RFC 1858 asks of a first fragment too
// short to hold the ports. It does nothing for other frames.
func (w *Worker) fragRefused(p *Packet, pr *Parsed, r DropReason, now int64) {
	h := &pr.Outer
	if h.Flags&(FlagFragment|FlagLaterFragment) != FlagFragment || h.IPVersion == 0 {
		return
	}
	f, ok := fragFieldsOf(p.Bytes(), h)
	if !ok || f.atomic() {
		return
	}
	t := w.fragTable()
	var k fragKey
	fragKeyOf(&k, h, pr, p.InPort, &f)
	hash := k.hash()
	i := t.lookup(&k, hash)
	if i < 0 {
		if i = t.add(&k, hash, now); i < 0 {
			return
		}
	}
	if e := &t.entries[i]; !e.decided || e.drop == NotDropped {
		w.fragRefuse(e, r)
	}
}
