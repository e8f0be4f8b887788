package hns_test

import (
	"fmt"
	"testing"

	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/internal/scaledoc"
)

// BenchmarkLower lowers the documents of a node agent with many Services
// (scaledoc): lowering must grow linearly with them.
func BenchmarkLower(b *testing.B) {
	for _, c := range []struct {
		n    int
		host string
	}{{1000, ""}, {10000, ""}, {10000, "vEthernet"}} {
		n := c.n
		s := scaledoc.Shape{Services: n, Backends: 10, Locals: 50, HostPort: c.host}
		name := fmt.Sprintf("services=%d", n)
		if c.host != "" {
			name += "/host-port" // its load-balancers group and routes
		}
		b.Run(name, func(b *testing.B) {
			doc := s.Document()
			b.ReportAllocs()
			for b.Loop() {
				low, err := hns.Lower(doc)
				if err != nil {
					b.Fatal(err)
				}
				if len(low.Switch.LoadBalancers) != n {
					b.Fatalf("%d load balancers, want %d", len(low.Switch.LoadBalancers), n)
				}
			}
		})
	}
}
