package lb

import (
	"net/netip"
	"slices"
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

// TestBackendSet checks a set of backends kept as one sorted array: each
// backend is found by its address with what it was given, an address not
// among them is not, the healthy ones (and only they) are listed sorted,
// and a lookup allocates nothing (the slow path's, for a revalidated
// connection or an affinity hit).
func TestBackendSet(t *testing.T) {
	a := netip.MustParseAddr
	bcs := []BackendConfig{
		{IP: a("10.0.0.9"), Remote: true},
		{IP: a("fd00::2")},
		{IP: a("10.0.0.1"), Unhealthy: true},
		{IP: a("10.0.0.5"), Remote: true, Unhealthy: true},
		{IP: a("10.0.0.3")},
	}
	s := newBackendSet(bcs)
	if !s.remote {
		t.Error("remote: false, but two backends are remote")
	}
	for _, bc := range bcs {
		be := s.backend(bc.IP)
		if be == nil {
			t.Fatalf("backend %s not found", bc.IP)
		}
		if be.ip != bc.IP || be.remote != bc.Remote || be.unhealthy != bc.Unhealthy {
			t.Errorf("backend %s: got %+v, want %+v", bc.IP, *be, bc)
		}
	}
	for _, ip := range []string{"10.0.0.0", "10.0.0.2", "10.0.0.10", "fd00::1", "::ffff:10.0.0.3"} {
		if be := s.backend(a(ip)); be != nil {
			t.Errorf("backend %s found (%s), but it is not one", ip, be.ip)
		}
	}
	want := []netip.Addr{a("10.0.0.3"), a("10.0.0.9"), a("fd00::2")}
	if !slices.Equal(s.healthyIPs, want) {
		t.Errorf("healthy: %v, want %v", s.healthyIPs, want)
	}
	b := (&Runtime{}).New(Config{Name: "lb", Backends: bcs})
	all := []netip.Addr{a("10.0.0.1"), a("10.0.0.3"), a("10.0.0.5"), a("10.0.0.9"), a("fd00::2")}
	if got := b.Backends(); !slices.Equal(got, all) {
		t.Errorf("Backends: %v, want %v", got, all)
	}
	ip := a("10.0.0.9")
	if n := testing.AllocsPerRun(100, func() { _ = s.backend(ip) }); n != 0 {
		t.Errorf("a lookup allocates %v times", n)
	}
}
