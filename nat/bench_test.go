package nat

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// BenchmarkBind binds a new endpoint and releases it in a 1024-65535 pool
// already filled to a given use. Prefilled endpoints have random internal
// ports, as hosts' ephemeral ports are, so the pool fills like a real one.
func BenchmarkBind(b *testing.B) {
	for _, use := range []int{0, 50, 90, 99} {
		b.Run(fmt.Sprintf("use=%d%%", use), func(b *testing.B) {
			_, p := testPool(b, PoolConfig{IP: addr(poolIP)})
			rng := rand.New(rand.NewPCG(1, 2))
			capacity := p.Stats().Capacity[ClassTCP]
			for i := range capacity * use / 100 {
				internal := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), uint16(1024+rng.IntN(64512)))
				if _, err := p.Bind(tcp, internal); err != nil {
					b.Fatal(err)
				}
			}
			ports := make([]uint16, 4096)
			for i := range ports {
				ports[i] = uint16(1024 + rng.IntN(64512))
			}
			client := addr("10.2.0.1")
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				bd, err := p.Bind(tcp, netip.AddrPortFrom(client, ports[i%len(ports)]))
				if err != nil {
					b.Fatal(err)
				}
				bd.Release()
				i++
			}
		})
	}
}

// BenchmarkBindExisting is the common case of a second flow from a bound
// endpoint: a map lookup and a reference count.
func BenchmarkBindExisting(b *testing.B) {
	_, p := testPool(b, PoolConfig{IP: addr(poolIP)})
	internal := addrPort("10.0.0.1:40000")
	if _, err := p.Bind(tcp, internal); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		bd, err := p.Bind(tcp, internal)
		if err != nil {
			b.Fatal(err)
		}
		bd.Release()
	}
}
