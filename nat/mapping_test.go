package nat

import (
	"errors"
	"net/netip"
	"testing"
)

// TestReachFiltering: a new connection from the network reaches a mapping
// as its pool's filtering says, judged by the remote addresses of the
// mapping's connections; one from inside (a hairpin) reaches it whatever
// the filtering.
func TestReachFiltering(t *testing.T) {
	const (
		peer  = "203.0.113.5"  // the mapping's connection is with it
		other = "198.51.100.9" // no connection of the mapping is
	)
	tests := []struct {
		filtering Filtering
		// Whether a connection from peer's address (any port) and from
		// other reaches the mapping, from the network.
		peer, other bool
	}{
		{filtering: EndpointIndependent, peer: true, other: true},
		{filtering: AddressDependent, peer: true, other: false},
		{filtering: AddressAndPortDependent, peer: false, other: false},
		{filtering: FilterDefault, peer: true, other: false}, // address-dependent
	}
	for _, tt := range tests {
		t.Run(tt.filtering.String(), func(t *testing.T) {
			_, p := testPool(t, PoolConfig{IP: addr(poolIP), Filtering: tt.filtering})
			b := mustBind(t, p, udp, "10.0.0.1:40000")
			b.AddPeer(addr(peer))
			for _, c := range []struct {
				from     string
				filtered bool
				want     bool
			}{
				{peer, true, tt.peer},
				{other, true, tt.other},
				{"10.0.0.2", false, true}, // hairpinned: never filtered
			} {
				got, why := p.Reach(udp, 40000, addr(c.from), c.filtered)
				if (got != nil) != c.want || (got != nil) != (why == Reached) {
					t.Errorf("Reach from %s (filtered %t) = %v, %s; want reached %t", c.from, c.filtered, got, why, c.want)
				}
				if got == nil {
					if why != Filtered && c.filtered {
						t.Errorf("Reach from %s: %s, want filtered", c.from, why)
					}
					continue
				}
				if got != b {
					t.Fatalf("Reach from %s reached another binding", c.from)
				}
				if n := b.Peers(addr(c.from)); n < 1 {
					t.Errorf("the connection from %s is not counted as the mapping's peer", c.from)
				}
				got.ReleasePeer(addr(c.from))
			}
			if err := p.check(); err != nil {
				t.Fatal(err)
			}
			// Once its last connection with peer is gone, the mapping
			// no longer counts peer.
			b.ReleasePeer(addr(peer))
			if got, _ := p.PeekReach(udp, 40000, addr(peer), true); got != nil {
				t.Errorf("Reach after the mapping is gone = %v", got)
			}
			if s := p.Stats(); s.InUse != [3]int{} || s.DoubleRelease != 0 {
				t.Errorf("stats after every release: %+v", s)
			}
		})
	}
}

// TestReachPeersCount: address-dependent filtering admits an address while
// any connection of the mapping is with it, not after.
func TestReachPeersCount(t *testing.T) {
	_, p := testPool(t, PoolConfig{IP: addr(poolIP)})
	b := mustBind(t, p, tcp, "10.0.0.1:40000")
	b.AddPeer(addr("203.0.113.5"))
	b2 := mustBind(t, p, tcp, "10.0.0.1:40000") // a second connection, same peer
	b2.AddPeer(addr("203.0.113.5"))
	in, why := p.Reach(tcp, 40000, addr("203.0.113.5"), true) // a third, from it
	if in != b || why != Reached {
		t.Fatalf("Reach = %v, %s", in, why)
	}
	for i, rel := range []func(){
		func() { b.ReleasePeer(addr("203.0.113.5")) },
		func() { b2.ReleasePeer(addr("203.0.113.5")) },
	} {
		rel()
		if got, _ := p.PeekReach(tcp, 40000, addr("203.0.113.5"), true); got != b {
			t.Errorf("after %d releases of 3, the peer no longer reaches the mapping", i+1)
		}
	}
	in.ReleasePeer(addr("203.0.113.5"))
	if got, why := p.PeekReach(tcp, 40000, addr("203.0.113.5"), true); got != nil || why != NotMapped {
		t.Errorf("after every release: %v, %s; want not mapped", got, why)
	}
	if err := p.check(); err != nil {
		t.Error(err)
	}
}

// TestReachRefusals: no mapping, the host's own binding, another class,
// a retired pool.
func TestReachRefusals(t *testing.T) {
	tbl, p := testPool(t, PoolConfig{IP: addr(poolIP), Filtering: EndpointIndependent, Host: true})
	mustBind(t, p, udp, "10.0.0.1:40000")
	mustBind(t, p, icmp4, "10.0.0.1:7")
	if _, err := p.BindHost(tcp, addrPort(poolIP+":41000")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		proto uint8
		port  uint16
		want  Reach
	}{
		{udp, 40000, Reached},
		{tcp, 40000, NotMapped}, // TCP is another port space
		{udp, 40001, NotMapped},
		{icmp4, 7, Reached},
		{tcp, 41000, HostsOwn},
		{47, 40000, NotMapped}, // GRE has no ports
	} {
		if _, why := p.PeekReach(c.proto, c.port, addr("203.0.113.5"), true); why != c.want {
			t.Errorf("proto %d port %d: %s, want %s", c.proto, c.port, why, c.want)
		}
	}
	if err := tbl.Configure(nil); err != nil {
		t.Fatal(err)
	}
	if b, why := p.Reach(udp, 40000, addr("203.0.113.5"), true); b != nil || why != Retired {
		t.Errorf("retired pool: %v, %s", b, why)
	}
}

// TestBindHost: the host's own endpoint keeps its port wherever it lies
// unless a binding holds it; then it is remapped as Bind would.
func TestBindHost(t *testing.T) {
	type step struct {
		proto    uint8
		internal string
		host     bool // BindHost, else Bind
		want     uint16
	}
	host := poolIP + ":"
	tests := []struct {
		name  string
		steps []step
	}{
		{"an ephemeral port", []step{{tcp, host + "40000", true, 40000}}},
		{"below the range", []step{{udp, host + "123", true, 123}}},
		{"a reserved port", []step{{tcp, host + "8080", true, 8080}}},
		{"taken by a mapping: remapped", []step{
			{tcp, "10.0.0.1:40000", false, 40000},
			{tcp, host + "40000", true, 1024},
		}},
		{"a mapping avoids the host's port", []step{
			{udp, host + "40000", true, 40000},
			{udp, "10.0.0.1:40000", false, 1024},
		}},
		{"ICMP identifier 0", []step{{icmp4, host + "0", true, 0}}},
		{"the same endpoint, the same binding", []step{
			{tcp, host + "3000", true, 3000},
			{tcp, host + "3000", true, 3000},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, p := testPool(t, PoolConfig{IP: addr(poolIP), Reserved: []Reservation{{tcp, 8080}}, Host: true})
			for i, s := range tt.steps {
				bind := p.Bind
				if s.host {
					bind = p.BindHost
				}
				if s.host {
					if ext, err := p.PeekHost(s.proto, addrPort(s.internal)); err != nil || ext.Port() != s.want {
						t.Errorf("step %d: PeekHost = %v, %v; want port %d", i, ext, err, s.want)
					}
				}
				b, err := bind(s.proto, addrPort(s.internal))
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got := b.External().Port(); got != s.want {
					t.Errorf("step %d: %s -> port %d, want %d", i, s.internal, got, s.want)
				}
			}
			if err := p.check(); err != nil {
				t.Error(err)
			}
		})
	}
	_, p := testPool(t, PoolConfig{IP: addr(poolIP), Host: true})
	if _, err := p.BindHost(tcp, addrPort("10.0.0.1:80")); !errors.Is(err, ErrInvalid) {
		t.Errorf("BindHost of another address: %v, want ErrInvalid", err)
	}
	if b, err := p.BindHost(tcp, addrPort(poolIP+":0")); err != nil || b.External().Port() == 0 {
		t.Errorf("BindHost of TCP port 0 = %v, %v; want a port of the range", b, err)
	}
}

// TestClaim: a connection to the host's own address that reaches no
// mapping keeps its port for the host while it lives.
func TestClaim(t *testing.T) {
	_, p := testPool(t, PoolConfig{IP: addr(poolIP), Host: true, Reserved: []Reservation{{tcp, 22}}})
	ssh := p.Claim(tcp, 22) // outside the range and reserved: still the host's
	if ssh == nil || ssh.External().Port() != 22 || ssh.Internal() != addrPort(poolIP+":22") {
		t.Fatalf("Claim(tcp, 22) = %v", ssh)
	}
	if again := p.Claim(tcp, 22); again != ssh || ssh.Refs() != 2 {
		t.Errorf("a second Claim = %v (refs %d), want the same binding with 2", again, ssh.Refs())
	}
	if !p.PeekClaim(tcp, 22) {
		t.Error("PeekClaim of the host's claimed port = false")
	}
	// The host's claim keeps mappings off its port.
	if b := mustBind(t, p, tcp, "10.0.0.1:22"); b.External().Port() == 22 {
		t.Error("a mapping got the host's claimed port")
	}
	pod := mustBind(t, p, udp, "10.0.0.1:40000")
	if p.Claim(udp, 40000) != nil || p.PeekClaim(udp, 40000) {
		t.Error("Claim of a port a mapping holds succeeded")
	}
	if p.Claim(tcp, 0) != nil || p.Claim(47, 1) != nil {
		t.Error("Claim of TCP port 0 or of a protocol without ports succeeded")
	}
	remapped, err := p.BindHost(udp, addrPort(poolIP+":40000")) // remapped away from pod's
	if err != nil || remapped.External().Port() == 40000 {
		t.Fatalf("BindHost = %v, %v", remapped, err)
	}
	if p.Claim(udp, 40000) != nil {
		t.Error("Claim of a port whose host endpoint is remapped elsewhere succeeded")
	}
	pod.Release()
	if err := p.check(); err != nil {
		t.Error(err)
	}
	_, notHost := testPool(t, PoolConfig{IP: addr(poolIP)})
	if notHost.Claim(tcp, 22) != nil || notHost.PeekClaim(tcp, 22) {
		t.Error("Claim on a pool that is not the host's succeeded")
	}
}

// TestReachAllocs: a connection reaching a mapping from a known peer, and
// its release, allocate nothing.
func TestReachAllocs(t *testing.T) {
	_, p := testPool(t, PoolConfig{IP: addr(poolIP), Filtering: AddressDependent})
	b := mustBind(t, p, udp, "10.0.0.1:40000")
	peer := addr("203.0.113.5")
	b.AddPeer(peer)
	if n := testing.AllocsPerRun(1000, func() {
		in, why := p.Reach(udp, 40000, peer, true)
		if why != Reached {
			t.Fatal(why)
		}
		in.ReleasePeer(peer)
	}); n != 0 {
		t.Errorf("Reach+ReleasePeer: %v allocations, want 0", n)
	}
}

func TestParseFiltering(t *testing.T) {
	for f := FilterDefault; f <= AddressAndPortDependent; f++ {
		s := f.String()
		if f == FilterDefault {
			s = ""
		}
		if got, err := ParseFiltering(s); err != nil || got != f {
			t.Errorf("ParseFiltering(%q) = %v, %v; want %v", s, got, err, f)
		}
	}
	if _, err := ParseFiltering("full-cone"); err == nil {
		t.Error("ParseFiltering(full-cone): no error")
	}
	c := PoolConfig{IP: addr(poolIP), Filtering: AddressAndPortDependent + 1}
	if err := c.Validate(); err == nil {
		t.Error("Validate of an unknown filtering: no error")
	}
}

// TestPeersInlineAndMap: the first peer is counted in the binding, others
// in its map; each address stays in one place as connections come and go.
func TestPeersInlineAndMap(t *testing.T) {
	_, p := testPool(t, PoolConfig{IP: addr(poolIP)})
	b := mustBind(t, p, udp, "10.0.0.1:40000")
	x, y, z := addr("203.0.113.1"), addr("203.0.113.2"), addr("203.0.113.3")
	b.AddPeer(x) // in the binding
	for _, a := range []netip.Addr{y, y, z} {
		mustBind(t, p, udp, "10.0.0.1:40000").AddPeer(a) // in the map
	}
	b.ReleasePeer(x) // the binding's slot is free; y and z stay in the map
	mustBind(t, p, udp, "10.0.0.1:40000").AddPeer(y)
	mustBind(t, p, udp, "10.0.0.1:40000").AddPeer(x) // back in the slot
	for a, want := range map[netip.Addr]int{x: 1, y: 3, z: 1, addr("198.51.100.1"): 0} {
		if got := b.Peers(a); got != want {
			t.Errorf("Peers(%s) = %d, want %d", a, got, want)
		}
		if got, _ := p.PeekReach(udp, 40000, a, true); (got != nil) != (want > 0) {
			t.Errorf("address-dependent filtering of %s: reached %t, %d connections with it", a, got != nil, want)
		}
	}
	if err := p.check(); err != nil {
		t.Fatal(err)
	}
	for _, a := range []netip.Addr{y, z, x, y, y} {
		b.ReleasePeer(a)
		if err := p.check(); err != nil {
			t.Fatal(err)
		}
	}
	if s := p.Stats(); s.InUse[ClassUDP] != 0 || s.DoubleRelease != 0 {
		t.Errorf("stats after every release: %+v", s)
	}
}
