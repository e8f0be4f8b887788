package lb

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"
)

func BenchmarkNewMaglev(b *testing.B) {
	for _, n := range []int{1, 1000, 10000} {
		b.Run(fmt.Sprintf("backends=%d", n), func(b *testing.B) {
			bs := randAddrs(rand.New(rand.NewPCG(1, 2)), n)
			b.ReportAllocs()
			for b.Loop() {
				m, err := NewMaglev(bs)
				if err != nil || m.Len() != n {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkLookup(b *testing.B) {
	for _, n := range []int{10, 10000} {
		b.Run(fmt.Sprintf("backends=%d", n), func(b *testing.B) {
			m := mustMaglev(b, randAddrs(rand.New(rand.NewPCG(1, 2)), n))
			b.ReportAllocs()
			h := uint64(0)
			for b.Loop() {
				h += 0x9e3779b97f4a7c15
				if i := m.Lookup(h); i < 0 || i >= n {
					b.Fatalf("Lookup = %d", i)
				}
			}
		})
	}
}

func BenchmarkFlowHash(b *testing.B) {
	for _, tt := range []struct {
		name     string
		src, dst netip.Addr
	}{
		{"ipv4", addr("192.0.2.1"), addr("10.96.0.10")},
		{"ipv6", addr("2001:db8::1"), addr("2001:db8::80")},
	} {
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			var sum uint64
			port := uint16(0)
			for b.Loop() {
				port++
				sum += FlowHash(PerConnection, 6, tt.src, port, tt.dst, 443)
			}
			if sum == 0 {
				b.Fatal("all hashes zero")
			}
		})
	}
}

// BenchmarkAffinityTouch touches clients of a table holding 64k live
// entries: "refresh" a known client, "new" a new client that replaces an
// expired one (the steady state of churn).
func BenchmarkAffinityTouch(b *testing.B) {
	const clients = 1 << 16
	client := func(i int) netip.Addr {
		return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	}
	backend := addr("10.0.0.1")
	b.Run("refresh", func(b *testing.B) {
		a := NewAffinity(time.Hour, 0)
		for i := range clients {
			a.Touch(client(i), backend, 0)
		}
		b.ReportAllocs()
		now := int64(0)
		for b.Loop() {
			now++
			if !a.Touch(client(int(now)%clients), backend, now) {
				b.Fatal("Touch refused")
			}
		}
	})
	b.Run("new", func(b *testing.B) {
		// One new client per nanosecond with a 64k ns timeout: each Touch
		// expires the oldest entry and adds one.
		a := NewAffinity(clients, 0)
		now := int64(0)
		for ; now < clients; now++ {
			a.Touch(client(int(now)), backend, now)
		}
		b.ReportAllocs()
		for b.Loop() {
			now++
			if !a.Touch(client(int(now)), backend, now) {
				b.Fatal("Touch refused")
			}
		}
		if a.Len() != clients {
			b.Fatalf("Len() = %d, want %d", a.Len(), clients)
		}
	})
}

func BenchmarkAffinityLookup(b *testing.B) {
	a := NewAffinity(time.Hour, 0)
	c := addr("2001:db8::1")
	a.Touch(c, addr("10.0.0.1"), 0)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := a.Lookup(c, 1); !ok {
			b.Fatal("Lookup missed")
		}
	}
}
