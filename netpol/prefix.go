package netpol

import (
	"net/netip"
	"slices"
)

// subtract returns the prefixes that cover exactly block minus every
// prefix of except, sorted. An except prefix outside block takes nothing
// away; one that covers block takes all of it. Each except splits at most
// one prefix, into at most (except bits - prefix bits) pieces: the
// siblings on the path from the prefix down to the except.
func subtract(block netip.Prefix, except []netip.Prefix) []netip.Prefix {
	out := []netip.Prefix{block}
	for _, e := range except {
		if e.Addr().BitLen() != block.Addr().BitLen() {
			continue
		}
		var next []netip.Prefix
		for _, r := range out {
			switch {
			case e.Bits() <= r.Bits() && e.Contains(r.Addr()):
				// e covers r: r goes.
			case r.Bits() < e.Bits() && r.Contains(e.Addr()):
				next = appendSplit(next, r, e)
			default:
				next = append(next, r)
			}
		}
		out = next
	}
	slices.SortFunc(out, comparePrefix)
	return out
}

// appendSplit appends the pieces of r (which strictly contains e) that
// do not overlap e: at each length from r's to e's, the half that does
// not hold e.
func appendSplit(to []netip.Prefix, r, e netip.Prefix) []netip.Prefix {
	for bits := r.Bits() + 1; bits <= e.Bits(); bits++ {
		on, _ := e.Addr().Prefix(bits)
		to = append(to, netip.PrefixFrom(flipBit(on.Addr(), bits-1), bits))
	}
	return to
}

// flipBit returns a with bit i (0 the most significant) inverted.
func flipBit(a netip.Addr, i int) netip.Addr {
	if a.Is4() {
		b := a.As4()
		b[i/8] ^= 0x80 >> (i % 8)
		return netip.AddrFrom4(b)
	}
	b := a.As16()
	b[i/8] ^= 0x80 >> (i % 8)
	return netip.AddrFrom16(b)
}

// comparePrefix orders prefixes by address (IPv4 first), then length.
func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// prefixesContain reports whether one of ps holds a.
func prefixesContain(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
