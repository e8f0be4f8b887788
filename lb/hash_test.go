package lb

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

func TestParseDistribution(t *testing.T) {
	tests := []struct {
		in      string
		want    Distribution
		wantErr bool
	}{
		{in: "", want: PerConnection},
		{in: "connection", want: PerConnection},
		{in: "source-ip-protocol", want: SourceIPProtocol},
		{in: "source-ip", want: SourceIP},
		{in: "Connection", wantErr: true},
		{in: "none", wantErr: true},
		{in: "0", wantErr: true},
		{in: "source-ip ", wantErr: true},
		{in: "sourceip", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseDistribution(tt.in)
		if tt.wantErr {
			if err == nil {
				t.Errorf("ParseDistribution(%q) = %v, want an error", tt.in, got)
				continue
			}
			for _, name := range []string{"connection", "source-ip-protocol", "source-ip"} {
				if !strings.Contains(err.Error(), name) {
					t.Errorf("ParseDistribution(%q) error %q does not list %q", tt.in, err, name)
				}
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseDistribution(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestDistributionString(t *testing.T) {
	tests := []struct {
		d    Distribution
		want string
	}{
		{d: PerConnection, want: "connection"},
		{d: SourceIPProtocol, want: "source-ip-protocol"},
		{d: SourceIP, want: "source-ip"},
		{d: 3, want: "distribution-3"},
	}
	for _, tt := range tests {
		if got := tt.d.String(); got != tt.want {
			t.Errorf("Distribution(%d).String() = %q, want %q", uint8(tt.d), got, tt.want)
		}
		if tt.d > SourceIP {
			continue
		}
		if back, err := ParseDistribution(tt.want); err != nil || back != tt.d {
			t.Errorf("ParseDistribution(%q) = %v, %v; want %v", tt.want, back, err, tt.d)
		}
	}
	// HNS's LoadBalancerDistribution numbering.
	if PerConnection != 0 || SourceIPProtocol != 1 || SourceIP != 2 {
		t.Errorf("distributions numbered %d %d %d, want HNS's 0 1 2", PerConnection, SourceIPProtocol, SourceIP)
	}
}

// TestMix checks mix against splitmix64's published outputs for seed 0.
func TestMix(t *testing.T) {
	if got := mix(0); got != 0xe220a8397b1dcdaf {
		t.Errorf("mix(0) = %#x, want splitmix64's first output 0xe220a8397b1dcdaf", got)
	}
	if got := mix(0x9e3779b97f4a7c15); got != 0x6e789e6aa1b965f4 {
		t.Errorf("mix(gamma) = %#x, want splitmix64's second output 0x6e789e6aa1b965f4", got)
	}
}

// TestFlowHashPinned pins FlowHash's values: an accidental change to the
// function would move connections between nodes of different versions and
// break golden files.
func TestFlowHashPinned(t *testing.T) {
	tests := []struct {
		d          Distribution
		proto      uint8
		src, dst   string
		sport, dpt uint16
		want       uint64
	}{
		{PerConnection, 6, "192.0.2.1", "198.51.100.7", 40000, 443, 0xd99df7e5c5d694c8},
		{PerConnection, 17, "2001:db8::1", "2001:db8::80", 5353, 53, 0x4bcb3ac447d5c7d1},
		{SourceIPProtocol, 6, "192.0.2.1", "198.51.100.7", 40000, 443, 0x5ae4b2e5d8314737},
		{SourceIP, 6, "192.0.2.1", "198.51.100.7", 40000, 443, 0x0587c756a947b44a},
	}
	for _, tt := range tests {
		got := FlowHash(tt.d, tt.proto, addr(tt.src), tt.sport, addr(tt.dst), tt.dpt)
		if got != tt.want {
			t.Errorf("FlowHash(%v, %d, %s, %d, %s, %d) = %#x, want %#x", tt.d, tt.proto, tt.src, tt.sport, tt.dst, tt.dpt, got, tt.want)
		}
	}
}

// TestFlowHashFields checks, per distribution, that each field it ignores
// leaves the hash alone and each field it uses changes it, and the
// documented identities.
func TestFlowHashFields(t *testing.T) {
	type conn struct {
		proto        uint8
		src, dst     netip.Addr
		sport, dport uint16
	}
	base := conn{6, addr("192.0.2.1"), addr("198.51.100.7"), 40000, 443}
	fields := []struct {
		name   string
		change func(c *conn)
	}{
		{"proto", func(c *conn) { c.proto = 17 }},
		{"src", func(c *conn) { c.src = addr("192.0.2.2") }},
		{"src family", func(c *conn) { c.src = addr("2001:db8::c000:201") }},
		{"sport", func(c *conn) { c.sport = 40001 }},
		{"dst", func(c *conn) { c.dst = addr("198.51.100.8") }},
		{"dst missing", func(c *conn) { c.dst = netip.Addr{} }},
		{"dport", func(c *conn) { c.dport = 80 }},
	}
	uses := map[Distribution]map[string]bool{
		PerConnection:    {"proto": true, "src": true, "src family": true, "sport": true, "dst": true, "dst missing": true, "dport": true},
		SourceIPProtocol: {"proto": true, "src": true, "src family": true},
		SourceIP:         {"src": true, "src family": true},
		7:                {"proto": true, "src": true, "src family": true, "sport": true, "dst": true, "dst missing": true, "dport": true},
	}
	hash := func(d Distribution, c conn) uint64 { return FlowHash(d, c.proto, c.src, c.sport, c.dst, c.dport) }
	for d, used := range uses {
		h0 := hash(d, base)
		for _, f := range fields {
			c := base
			f.change(&c)
			if changed := hash(d, c) != h0; changed != used[f.name] {
				t.Errorf("%v: changing %s changes the hash: %t, want %t", d, f.name, changed, used[f.name])
			}
		}
	}

	// The documented identities.
	src, dst := base.src, base.dst
	if a, b := FlowHash(SourceIP, 6, src, 1, dst, 2), FlowHash(PerConnection, 0, src, 0, netip.Addr{}, 0); a != b {
		t.Errorf("SourceIP hash %#x != PerConnection with the other fields zero %#x", a, b)
	}
	if a, b := FlowHash(SourceIPProtocol, 6, src, 1, dst, 2), FlowHash(PerConnection, 6, src, 0, netip.Addr{}, 0); a != b {
		t.Errorf("SourceIPProtocol hash %#x != PerConnection with ports and dst zero %#x", a, b)
	}
	if a, b := FlowHash(7, 6, src, 1, dst, 2), FlowHash(PerConnection, 6, src, 1, dst, 2); a != b {
		t.Errorf("an unknown distribution hashes %#x, PerConnection %#x", a, b)
	}
	mapped := netip.AddrFrom16(src.As16())
	if a, b := FlowHash(PerConnection, 6, mapped, 1, dst, 2), FlowHash(PerConnection, 6, src, 1, dst, 2); a != b {
		t.Errorf("%s hashes %#x, %s %#x; want alike", mapped, a, src, b)
	}
	zoned := addr("fe80::1%eth0")
	if a, b := FlowHash(SourceIP, 0, zoned, 0, dst, 0), FlowHash(SourceIP, 0, zoned.WithZone(""), 0, dst, 0); a != b {
		t.Errorf("the zone changes the hash: %#x, %#x", a, b)
	}
	if a, b := FlowHash(SourceIP, 0, netip.Addr{}, 0, dst, 0), FlowHash(SourceIP, 0, netip.IPv6Unspecified(), 0, dst, 0); a != b {
		t.Errorf("the zero Addr hashes %#x, :: %#x; want alike", a, b)
	}
}

// TestFlowHashMixing checks the strict avalanche criterion: flipping any
// one input bit flips each output bit about half the time, which
// Lookup's use of the high bits relies on. It also checks that the top
// bits of hashes of one client's consecutive ports spread evenly.
func TestFlowHashMixing(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const trials = 400
	// Input bits: src 0-127, dst 128-255, sport 256-271, dport 272-287,
	// proto 288-295.
	var flips [296][64]int
	for range trials {
		src, dst := randAddr(rng).As16(), randAddr(rng).As16()
		proto, sport, dport := uint8(rng.Uint32()), uint16(rng.Uint32()), uint16(rng.Uint32())
		hash := func() uint64 {
			return FlowHash(PerConnection, proto, netip.AddrFrom16(src), sport, netip.AddrFrom16(dst), dport)
		}
		flip := func(in int) {
			switch {
			case in < 128:
				src[in/8] ^= 1 << (in % 8)
			case in < 256:
				dst[(in-128)/8] ^= 1 << (in % 8)
			case in < 272:
				sport ^= 1 << (in - 256)
			case in < 288:
				dport ^= 1 << (in - 272)
			default:
				proto ^= 1 << (in - 288)
			}
		}
		h := hash()
		for in := range flips {
			flip(in)
			d := h ^ hash()
			flip(in)
			for out := range 64 {
				flips[in][out] += int(d >> out & 1)
			}
		}
	}
	// 400 trials: a standard deviation of 0.025; 0.35-0.65 is 6 of them.
	for in := range flips {
		for out, n := range flips[in] {
			if p := float64(n) / trials; p < 0.35 || p > 0.65 {
				t.Errorf("input bit %d flips output bit %d with probability %.3f, want about 0.5", in, out, p)
			}
		}
	}

	// The top 4 bits of 64k hashes of one client's consecutive ports.
	var buckets [16]int
	src, dst := addr("10.0.0.1"), addr("10.96.0.10")
	for port := range 1 << 16 {
		buckets[FlowHash(PerConnection, 6, src, uint16(port), dst, 80)>>60]++
	}
	for i, n := range buckets {
		if n < 4096*9/10 || n > 4096*11/10 {
			t.Errorf("top-bits bucket %d has %d of 65536 hashes, want about 4096", i, n)
		}
	}
}

// TestFlowHashFormula computes FlowHash as its doc comment writes it, from
// As16, on random connections of both families.
func TestFlowHashFormula(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	ref := func(proto uint8, src netip.Addr, sport uint16, dst netip.Addr, dport uint16) uint64 {
		s, d := src.As16(), dst.As16()
		w := []uint64{
			binary.BigEndian.Uint64(s[:8]), binary.BigEndian.Uint64(s[8:]),
			binary.BigEndian.Uint64(d[:8]), binary.BigEndian.Uint64(d[8:]),
			uint64(proto)<<32 | uint64(sport)<<16 | uint64(dport),
		}
		k := []uint64{0x243f6a8885a308d3, 0x13198a2e03707344, 0xa4093822299f31d0, 0x082efa98ec4e6c89, 0x452821e638d01377}
		x := uint64(0)
		for i := range w {
			x ^= mix(w[i] ^ k[i])
		}
		return mix(x)
	}
	for range 1000 {
		src, dst := randAddr(rng), randAddr(rng)
		if rng.IntN(8) == 0 {
			src = netip.AddrFrom16(src.As16()) // IPv4-mapped, or IPv6 unchanged
		}
		if rng.IntN(8) == 0 {
			dst = netip.Addr{}
		}
		proto, sport, dport := uint8(rng.Uint32()), uint16(rng.Uint32()), uint16(rng.Uint32())
		if got, want := FlowHash(PerConnection, proto, src, sport, dst, dport), ref(proto, src, sport, dst, dport); got != want {
			t.Fatalf("FlowHash(%d, %s, %d, %s, %d) = %#x, the documented formula gives %#x", proto, src, sport, dst, dport, got, want)
		}
	}
}

func TestFlowHashNoAllocs(t *testing.T) {
	src, dst := addr("2001:db8::1"), addr("2001:db8::80")
	var sink uint64
	if n := testing.AllocsPerRun(1000, func() {
		sink += FlowHash(PerConnection, 6, src, 40000, dst, 443)
	}); n != 0 {
		t.Errorf("FlowHash allocates %v times per call", n)
	}
	_ = sink
}
