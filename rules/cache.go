package rules

import (
	"encoding/binary"
	"net/netip"
	"sync/atomic"

	"github.com/ufp-dev/ufp/dataplane"
)

// A layer with a large group (one the classifier compiles into a tuple
// space) remembers its verdicts: a packet that the layer's conditions
// cannot tell apart from an earlier packet gets the earlier packet's
// verdict without a lookup. New connections mostly differ from earlier
// ones by the client's source port alone, which NetworkPolicy-like rules
// seldom match on: their first packets, which take the slow path, then
// cost a probe of this cache instead of a probe of every table of the
// tuple space and the conditions of the rules found.
//
// The cache is keyed by every field a condition can look at
// (Condition.Match) but the source and destination ports, each left out
// when no condition of the layer matches on it (layerUses). Layers whose
// conditions match on MACs, VNIs or outer addresses (tunnel layers, small)
// have no cache, which keeps an entry to one cache line. A layer is
// immutable once compiled, so a verdict never goes stale; a policy change
// compiles new layers, with empty caches.
//
// The cache is direct-mapped, verdictSlots entries per direction: a packet
// whose slot holds another key's verdict is classified and replaces it.
// Workers share it without locks or allocations: each slot is a sequence
// lock over atomic words (a writer makes the sequence odd, writes, makes
// it even again; a reader that sees it odd or changed takes the slot as
// empty), and a slot being written by one worker is left alone by another.

// verdictSlots is the number of entries of a layer's verdict cache per
// direction, a power of two.
const verdictSlots = 512

// layerUses says which optional fields a layer's conditions match on.
type layerUses uint8

const (
	usesSrcPort layerUses = 1 << iota
	usesDstPort
	// usesOther: MACs, VNIs or outer addresses, which the cache's key
	// does not hold: the layer has no cache.
	usesOther
)

func (u *layerUses) add(c *Condition) {
	if len(c.SrcPorts) > 0 {
		*u |= usesSrcPort
	}
	if len(c.DstPorts) > 0 {
		*u |= usesDstPort
	}
	if len(c.SrcMACs) > 0 || len(c.DstMACs) > 0 || len(c.VNIs) > 0 || len(c.OuterSrcIPs) > 0 || len(c.OuterDstIPs) > 0 {
		*u |= usesOther
	}
}

// vkeyWords is the length of a key in words.
const vkeyWords = 6

// vkey is the key of a cached verdict: the fields of a packet the
// layer's conditions look at, in words: the source and destination
// addresses in their 16-byte form; the protocol and the ports used; the
// address families, later fragment and encapsulated flags.
type vkey [vkeyWords]uint64

// addrWords returns a in its 16-byte form, as two words, and its family
// (0 for the zero Addr, 1 for IPv4, 2 for IPv6): a 4-in-6 address and its
// IPv4 address are told apart, as prefixes tell them apart.
func addrWords(a netip.Addr) (hi, lo, fam uint64) {
	switch {
	case a.Is4():
		fam = 1
	case a.IsValid():
		fam = 2
	default:
		return 0, 0, 0
	}
	b := a.As16()
	return binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:]), fam
}

// keyOf returns the key of the packet v describes for a layer whose
// conditions use u.
func keyOf(v *dataplane.View, u layerUses) vkey {
	var k vkey
	var f1, f2 uint64
	k[0], k[1], f1 = addrWords(v.Src)
	k[2], k[3], f2 = addrWords(v.Dst)
	k[4] = uint64(v.Proto)
	if u&usesSrcPort != 0 {
		k[4] |= uint64(v.SrcPort) << 8
	}
	if u&usesDstPort != 0 {
		k[4] |= uint64(v.DstPort) << 24
	}
	k[5] = f1 | f2<<2
	if v.LaterFragment {
		k[5] |= 1 << 4
	}
	if v.Encap {
		k[5] |= 1 << 5
	}
	return k
}

// slot returns k's slot: a multiply-mix of its words.
func (k *vkey) slot() uint64 {
	x := k[0]*0xa0761d6478bd642f + k[1]*0xe7037ed1a0b428db + k[2]*0x8ebc6af09c88c6e3 + k[3]*0x589965cc75374cc3 +
		k[4]*0x1d8e4e27c47d124f + k[5]*0x9e3779b97f4a7c15
	x ^= x >> 32
	x *= 0xbf58476d1ce4e5b9
	return (x >> 40) & (verdictSlots - 1)
}

// verdictCache is one direction's cache of a layer's verdicts.
type verdictCache struct {
	slots [verdictSlots]vslot
}

// vslot is one entry: the sequence lock, the key and the verdict (the
// group's index plus one, 0 for the layer's default, in the high half;
// the rule's index in its group in the low half). 64 bytes.
type vslot struct {
	seq     atomic.Uint64
	key     [vkeyWords]atomic.Uint64
	verdict atomic.Uint64
}

// get returns the verdict cached for k, and whether there was one.
func (c *verdictCache) get(k *vkey) (verdict uint64, ok bool) {
	s := &c.slots[k.slot()]
	seq := s.seq.Load()
	if seq&1 != 0 {
		return 0, false
	}
	for i := range k {
		if s.key[i].Load() != k[i] {
			return 0, false
		}
	}
	verdict = s.verdict.Load()
	return verdict, s.seq.Load() == seq && seq != 0
}

// put caches verdict for k, unless another worker is writing the slot.
func (c *verdictCache) put(k *vkey, verdict uint64) {
	s := &c.slots[k.slot()]
	seq := s.seq.Load()
	if seq&1 != 0 || !s.seq.CompareAndSwap(seq, seq+1) {
		return
	}
	for i := range k {
		s.key[i].Store(k[i])
	}
	s.verdict.Store(verdict)
	s.seq.Store(seq + 2)
}
