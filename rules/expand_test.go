package rules

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// A rule expands into at most maxEntries entries whatever the lengths of
// its lists: their product is not computed past the bound, so lists whose
// lengths multiply past 2^63 cannot wrap it around and expand the rule
// into every combination (256 protocols x 16384 sources x 16384
// destinations x 16384 source ports x 8192 destination ports here).
func TestExpandBoundedWhateverTheListLengths(t *testing.T) {
	var c Condition
	for p := range 256 {
		c.Protocols = append(c.Protocols, uint8(p))
	}
	for i := range 16384 {
		c.SrcIPs = append(c.SrcIPs, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 32))
		c.DstIPs = append(c.DstIPs, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), 32))
		c.SrcPorts = append(c.SrcPorts, PortRange{uint16(i), uint16(i)})
		if i < 8192 {
			c.DstPorts = append(c.DstPorts, PortRange{uint16(i), uint16(i)})
		}
	}
	r := &Rule{Name: "huge", Priority: 1, Match: c}
	type stop struct{}
	n := 0
	func() {
		defer func() {
			if e := recover(); e != nil {
				if _, ok := e.(stop); !ok {
					panic(e)
				}
			}
		}()
		var ex expander
		ex.expand(r, func(*entry) {
			n++
			if n > maxEntries {
				panic(stop{}) // the rest would never end
			}
		})
	}()
	if n > maxEntries {
		t.Fatalf("expand emitted more than %d entries for one rule", maxEntries)
	}
}

// TestTindex checks the tables' key index: every key built in finds its
// bucket, keys not built in find none, at sizes around the growth points
// and with keys that differ in one field only.
func TestTindex(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	key := func() tkey {
		k := tkey{src0: uint64(r.IntN(4)) << 60, dst1: uint64(r.IntN(4)), sport: uint16(r.IntN(3)), dport: uint16(r.IntN(70000)), proto: uint8(r.IntN(3))}
		if r.IntN(2) == 0 {
			k.src1, k.dst0 = r.Uint64(), r.Uint64()
		}
		return k
	}
	for _, n := range []int{0, 1, 2, 3, 4, 7, 8, 9, 100, 1000} {
		m := map[tkey]int32{}
		for len(m) < n {
			m[key()] = int32(len(m))
		}
		ix := newTindex(m)
		if uint64(len(ix.slots)) < 2*uint64(n) || len(ix.slots)&(len(ix.slots)-1) != 0 {
			t.Errorf("%d keys: %d slots, want a power of two of at least %d", n, len(ix.slots), 2*n)
		}
		for k, b := range m {
			if got := ix.find(&k); got != b {
				t.Fatalf("%d keys: find(%+v) = %d, want %d", n, k, got, b)
			}
		}
		for range 1000 {
			k := key()
			want := int32(-1)
			if b, ok := m[k]; ok {
				want = b
			}
			if got := ix.find(&k); got != want {
				t.Fatalf("%d keys: find(%+v) = %d, want %d", n, k, got, want)
			}
		}
	}
}
