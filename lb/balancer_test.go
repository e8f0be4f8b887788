package lb

import (
	"net/netip"
	"testing"
)

// TestLBKeyRoundTrip checks that the registry's pointer-free form of a
// balanced tuple gives the tuple back, for both families, and that
// tuples differing in any part, the family included, have distinct keys.
func TestLBKeyRoundTrip(t *testing.T) {
	ap := netip.MustParseAddrPort
	tuples := []Tuple{
		{Proto: 6, Client: ap("10.244.0.10:40000"), Backend: ap("10.244.1.5:8080")},
		{Proto: 17, Client: ap("10.244.0.10:40000"), Backend: ap("10.244.1.5:8080")},
		{Proto: 6, Client: ap("10.244.0.10:40001"), Backend: ap("10.244.1.5:8080")},
		{Proto: 6, Client: ap("10.244.0.10:40000"), Backend: ap("10.244.1.5:8081")},
		{Proto: 6, Client: ap("[fd00:244::10]:40000"), Backend: ap("[fd00:244::11]:8080")},
		{Proto: 6, Client: ap("[::ffff:10.244.0.10]:40000"), Backend: ap("[::ffff:10.244.1.5]:8080")},
	}
	seen := map[tupleKey]Tuple{}
	for _, tu := range tuples {
		k := tu.key()
		if got := k.tuple(); got != tu {
			t.Errorf("key(%v).tuple() = %v", tu, got)
		}
		if o, dup := seen[k]; dup {
			t.Errorf("%v and %v have the same key", o, tu)
		}
		seen[k] = tu
	}
	if frontOf(ap("10.96.0.10:80")) == frontOf(ap("[::ffff:10.96.0.10]:80")) {
		t.Error("an IPv4 frontend and its IPv4-mapped IPv6 form have the same key")
	}
}
