package rules

import (
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
