package rules

import (
	"cmp"
	"encoding/binary"
	"net/netip"
	"slices"

	"github.com/ufp-dev/ufp/dataplane"
)

// The classifier finds, within one group, the matching rule with the
// smallest priority number. A group of up to linearMax rules is scanned in
// priority order. A larger one is compiled into a tuple space (Srinivasan,
// Suri and Varghese, "Packet classification using tuple space search",
// SIGCOMM 1999), with tuples coarsened as TupleMerge does (Daly and Torng,
// ICCCN 2017) so that their number stays small whatever the prefix lengths:
//
//   - A rule is expanded into entries, one per combination of its source
//     and destination prefixes, protocols, and the prefixes that cover its
//     source and destination port ranges (a range splits into at most 30
//     prefixes of the 16-bit port space). A field the rule leaves open is a
//     wildcard. When a rule's combinations would exceed maxEntries, its
//     longest lists are left out of the key (wildcards) until they do not.
//   - Each entry's prefix lengths are rounded down to a level: IPv4 0, 8,
//     16, 24, 32; IPv6 every 16 bits; ports 0, 8, 16 (any, high byte,
//     exact); the protocol is exact or any. Entries with the same levels
//     and address family form a table, a hash map from the key (the fields
//     masked to those levels) to a bucket of rules in priority order.
//   - A lookup masks the packet's fields with each table's levels and
//     probes the table; the bucket's rules are checked in priority order
//     with the rule's full condition (which also decides the fields no key
//     holds: MACs, VNIs, outer addresses, the exact prefix lengths and port
//     ranges). Tables are kept in the order of the best priority they hold,
//     and the lookup stops at the first table that cannot beat the match it
//     has.
//
// So a lookup costs one probe per table (at most 450 IPv4 level
// combinations per direction: 5 x 5 address levels, 3 x 3 port levels,
// protocol keyed or not; a few dozen in practice) whatever the number of
// rules, and a bucket holds only rules whose keys agree on every level: a
// bucket grows only with rules that differ in no keyed field beyond the
// rounding. Directions are compiled apart (a rule for both directions is in
// both), so a lookup never probes the other direction's tables.
const (
	linearMax  = 16
	maxEntries = 256
)

// classifier is one group's compiled rules.
type classifier struct {
	sorted []*Rule // priority order
	tuples bool    // dir holds the rules: the group is larger than linearMax
	dir    [2]tupleSpace
}

func newClassifier(rs []Rule) classifier {
	sorted := make([]*Rule, len(rs))
	for i := range rs {
		sorted[i] = &rs[i]
	}
	slices.SortFunc(sorted, func(a, b *Rule) int { return cmp.Compare(a.Priority, b.Priority) })
	c := classifier{sorted: sorted, tuples: len(sorted) > linearMax}
	if !c.tuples {
		return c
	}
	var b [2]tupleBuilder
	var ex expander
	for _, r := range sorted {
		for d := range b {
			dir := Out + Direction(d)
			if r.Match.Direction != Both && r.Match.Direction != dir {
				continue
			}
			ex.expand(r, func(e *entry) { b[d].add(e, r) })
		}
	}
	for d := range b {
		c.dir[d] = b[d].build()
	}
	return c
}

func (c *classifier) find(v *dataplane.View, dir Direction) *Rule {
	if !c.tuples || dir != Out && dir != In {
		return c.scan(v, dir)
	}
	return c.dir[dir-Out].find(v, dir)
}

func (c *classifier) scan(v *dataplane.View, dir Direction) *Rule {
	for _, r := range c.sorted {
		if r.Match.Match(v, dir) {
			return r
		}
	}
	return nil
}

// tkey is a table's key: the packet's (or an entry's) fields masked to the
// table's levels. Addresses are in their 16-byte form (IPv4 mapped).
type tkey struct {
	src0, src1, dst0, dst1 uint64
	sport, dport           uint16
	proto                  uint8
}

// table holds the entries of one tuple of levels.
type table struct {
	shape   shape
	masks   tkey      // the levels as masks
	best    uint32    // the smallest priority number in the table
	keys    tindex    // the keys' buckets
	buckets [][]*Rule // priority order
	// index collects the keys' buckets while the table is built;
	// build moves it into keys.
	index map[tkey]int32
}

// hash mixes k's words into 64 bits for tindex: multiplies by odd
// constants (those of dataplane's flow key hash), summed, and the high
// bits folded down.
func (k *tkey) hash() uint64 {
	x := k.src0*0xa0761d6478bd642f + k.src1*0xe7037ed1a0b428db + k.dst0*0x8ebc6af09c88c6e3 + k.dst1*0x589965cc75374cc3 +
		(uint64(k.sport)|uint64(k.dport)<<16|uint64(k.proto)<<32)*0x1d8e4e27c47d124f
	return x ^ x>>29
}

// tindex maps the keys of a table to their buckets: open addressing with
// linear probing over a power-of-two array at most half full. Beside each
// slot a tag byte holds 7 bits of its key's hash (0 for an empty slot), so
// that a probe for a key the table does not hold, as most probes are (a
// packet matches few tables), reads only tags, a cache line at most, and
// computes no Go map hash. Immutable once built.
type tindex struct {
	tags  []uint8
	slots []tslot
	mask  uint64
}

type tslot struct {
	key    tkey
	bucket int32
}

// tag returns the tag of a key with hash h: never 0.
func tag(h uint64) uint8 { return uint8(h>>57) | 0x80 }

func newTindex(m map[tkey]int32) tindex {
	n := uint64(4)
	for n < 2*uint64(len(m)) {
		n *= 2
	}
	ix := tindex{tags: make([]uint8, n), slots: make([]tslot, n), mask: n - 1}
	for k, b := range m {
		h := k.hash()
		i := h & ix.mask
		for ix.tags[i] != 0 {
			i = (i + 1) & ix.mask
		}
		ix.tags[i], ix.slots[i] = tag(h), tslot{key: k, bucket: b}
	}
	return ix
}

// find returns the bucket of key k, or -1.
func (ix *tindex) find(k *tkey) int32 {
	h := k.hash()
	t := tag(h)
	for i := h & ix.mask; ; i = (i + 1) & ix.mask {
		switch ix.tags[i] {
		case 0:
			return -1
		case t:
			if s := &ix.slots[i]; s.key == *k {
				return s.bucket
			}
		}
	}
}

// shape is a tuple: the address family (0 when neither address is keyed)
// and the number of key bits of each field.
type shape struct {
	fam                  uint8
	srcBits, dstBits     uint8 // of the 16-byte form
	sportBits, dportBits uint8
	proto                bool
}

// tupleSpace is one direction's tables, best priority first.
type tupleSpace struct {
	tables []*table
}

func (ts *tupleSpace) find(v *dataplane.View, dir Direction) *Rule {
	if len(ts.tables) == 0 {
		return nil
	}
	var fam uint8
	switch {
	case v.Src.Is4():
		fam = 4
	case v.Src.IsValid():
		fam = 6
	}
	s, d := v.Src.As16(), v.Dst.As16()
	pk := tkey{
		src0: binary.BigEndian.Uint64(s[:8]), src1: binary.BigEndian.Uint64(s[8:]),
		dst0: binary.BigEndian.Uint64(d[:8]), dst1: binary.BigEndian.Uint64(d[8:]),
		sport: v.SrcPort, dport: v.DstPort, proto: v.Proto,
	}
	var best *Rule
	for _, t := range ts.tables {
		if best != nil && t.best >= best.Priority {
			break
		}
		if t.shape.fam != 0 && t.shape.fam != fam {
			continue
		}
		m := &t.masks
		k := tkey{
			src0: pk.src0 & m.src0, src1: pk.src1 & m.src1, dst0: pk.dst0 & m.dst0, dst1: pk.dst1 & m.dst1,
			sport: pk.sport & m.sport, dport: pk.dport & m.dport, proto: pk.proto & m.proto,
		}
		i := t.keys.find(&k)
		if i < 0 {
			continue
		}
		for _, r := range t.buckets[i] {
			if best != nil && r.Priority >= best.Priority {
				break
			}
			if r.Match.Match(v, dir) {
				best = r
				break
			}
		}
	}
	return best
}

// entry is one combination of a rule's values, rounded to levels.
type entry struct {
	fam  uint8
	key  tkey
	bits shape
}

// tupleBuilder collects one direction's entries. Rules are added in
// priority order, so buckets come out sorted.
type tupleBuilder struct {
	tables map[shape]*table
}

func (b *tupleBuilder) add(e *entry, r *Rule) {
	if b.tables == nil {
		b.tables = map[shape]*table{}
	}
	sh := e.bits
	sh.fam = e.fam
	t := b.tables[sh]
	if t == nil {
		t = &table{shape: sh, masks: masksOf(sh), best: r.Priority, index: map[tkey]int32{}}
		b.tables[sh] = t
	}
	i, ok := t.index[e.key]
	if !ok {
		i = int32(len(t.buckets))
		t.index[e.key] = i
		t.buckets = append(t.buckets, nil)
	}
	bk := t.buckets[i]
	if n := len(bk); n > 0 && bk[n-1] == r {
		return // another combination of the rule with the same key
	}
	t.buckets[i] = append(bk, r)
}

func (b *tupleBuilder) build() tupleSpace {
	var ts tupleSpace
	for _, t := range b.tables {
		t.keys, t.index = newTindex(t.index), nil
		ts.tables = append(ts.tables, t)
	}
	slices.SortFunc(ts.tables, func(x, y *table) int { return cmp.Compare(x.best, y.best) })
	return ts
}

func masksOf(sh shape) tkey {
	var m tkey
	m.src0, m.src1 = mask128(sh.srcBits)
	m.dst0, m.dst1 = mask128(sh.dstBits)
	m.sport, m.dport = mask16(sh.sportBits), mask16(sh.dportBits)
	if sh.proto {
		m.proto = 0xff
	}
	return m
}

func mask128(bits uint8) (hi, lo uint64) {
	switch {
	case bits == 0:
		return 0, 0
	case bits < 64:
		return ^uint64(0) << (64 - bits), 0
	case bits == 64:
		return ^uint64(0), 0
	case bits < 128:
		return ^uint64(0), ^uint64(0) << (128 - bits)
	}
	return ^uint64(0), ^uint64(0)
}

func mask16(bits uint8) uint16 {
	if bits == 0 {
		return 0
	}
	return ^uint16(0) << (16 - bits)
}

// value is one keyed value of a field: bits of its 16-byte (or 16-bit)
// form, and the family of an address (0 for a wildcard).
type value struct {
	fam  uint8
	hi   uint64
	lo   uint64
	bits uint8
}

// expander turns a rule into its entries, reusing its buffers.
type expander struct {
	src, dst, sport, dport []value
	proto                  []uint8
	e                      entry
}

func (x *expander) expand(r *Rule, emit func(*entry)) {
	c := &r.Match
	x.src = addrValues(x.src[:0], c.SrcIPs)
	x.dst = addrValues(x.dst[:0], c.DstIPs)
	x.sport = portValues(x.sport[:0], c.SrcPorts)
	x.dport = portValues(x.dport[:0], c.DstPorts)
	x.proto = x.proto[:0]
	if len(c.Protocols) == 0 {
		x.proto = append(x.proto, 0)
	}
	for _, p := range c.Protocols {
		if !slices.Contains(x.proto, p) {
			x.proto = append(x.proto, p)
		}
	}
	protoKeyed := len(c.Protocols) > 0
	// Leave the longest lists out of the key until the combinations fit
	// (the protocols, at most 256, always do).
	lists := []*[]value{&x.src, &x.dst, &x.sport, &x.dport}
	for tooMany(len(x.proto), lists) {
		longest := slices.MaxFunc(lists, func(a, b *[]value) int { return cmp.Compare(len(*a), len(*b)) })
		*longest = append((*longest)[:0], wildcardOf(*longest))
	}
	for _, s := range x.src {
		for _, d := range x.dst {
			fam := s.fam
			switch {
			case fam == 0:
				fam = d.fam
			case d.fam != 0 && d.fam != fam:
				continue // no packet has both
			}
			if c.IPVersion != 0 {
				if fam != 0 && fam != c.IPVersion {
					continue
				}
				fam = c.IPVersion
			}
			for _, p := range x.proto {
				for _, sp := range x.sport {
					for _, dp := range x.dport {
						e := &x.e
						*e = entry{fam: fam, bits: shape{
							srcBits: s.bits, dstBits: d.bits, sportBits: sp.bits, dportBits: dp.bits, proto: protoKeyed,
						}}
						e.key = tkey{src0: s.hi, src1: s.lo, dst0: d.hi, dst1: d.lo, sport: uint16(sp.lo), dport: uint16(dp.lo), proto: p}
						emit(e)
					}
				}
			}
		}
	}
}

// tooMany reports whether n times the lengths of lists exceeds maxEntries
// (without overflowing: it stops multiplying once past it).
func tooMany(n int, lists []*[]value) bool {
	for _, l := range lists {
		if n *= len(*l); n > maxEntries {
			return true
		}
	}
	return n > maxEntries
}

// wildcardOf is the value that stands for every value of list l: the
// family is kept if all of l has one.
func wildcardOf(l []value) value {
	w := value{fam: l[0].fam}
	for _, v := range l[1:] {
		if v.fam != w.fam {
			w.fam = 0
		}
	}
	return w
}

// appendNew appends v to dst unless it is there; seen, when not nil,
// holds dst's values (long lists: a scan would make expansion quadratic).
func appendNew(dst []value, v value, seen map[value]bool) []value {
	if seen != nil {
		if seen[v] {
			return dst
		}
		seen[v] = true
		return append(dst, v)
	}
	if slices.Contains(dst, v) {
		return dst
	}
	return append(dst, v)
}

// seenSet returns a set for deduplicating a list of n items, nil when a
// scan is cheaper.
func seenSet(n int) map[value]bool {
	if n <= 32 {
		return nil
	}
	return make(map[value]bool, n)
}

// addrValues appends the keyed values of prefixes ps (a wildcard if none),
// each rounded down to its family's level, without repeats.
func addrValues(dst []value, ps []netip.Prefix) []value {
	if len(ps) == 0 {
		return append(dst, value{})
	}
	seen := seenSet(len(ps))
	for _, p := range ps {
		a := p.Addr()
		v := value{fam: 6}
		l := p.Bits()
		if a.Is4() {
			v.fam = 4
			l = l / 8 * 8
			if l > 0 {
				l += 96
			}
		} else {
			l = l / 16 * 16
		}
		v.bits = uint8(l)
		b := a.As16()
		hi, lo := mask128(v.bits)
		v.hi, v.lo = binary.BigEndian.Uint64(b[:8])&hi, binary.BigEndian.Uint64(b[8:])&lo
		dst = appendNew(dst, v, seen)
	}
	return dst
}

// portValues appends the keyed values of port ranges rs (a wildcard if
// none): the prefixes that cover each range, rounded down to 0, 8 or 16
// bits, without repeats.
func portValues(dst []value, rs []PortRange) []value {
	if len(rs) == 0 {
		return append(dst, value{})
	}
	seen := seenSet(len(rs))
	for _, r := range rs {
		lo, hi := uint32(r.Lo), uint32(r.Hi)
		for lo <= hi {
			// The largest aligned block at lo that stays within hi.
			size := uint32(1)
			for lo%(size*2) == 0 && lo+size*2-1 <= hi && size < 1<<16 {
				size *= 2
			}
			bits := uint8(16)
			for s := size; s > 1; s >>= 1 {
				bits--
			}
			bits = bits / 8 * 8
			dst = appendNew(dst, value{bits: bits, lo: uint64(uint16(lo) & mask16(bits))}, seen)
			lo += size
		}
	}
	return dst
}
