package netpol

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

func TestSubtract(t *testing.T) {
	p := netip.MustParsePrefix
	tests := []struct {
		block  string
		except []string
		want   []string
	}{
		{"10.0.0.0/8", nil, []string{"10.0.0.0/8"}},
		{"10.0.0.0/8", []string{"10.0.0.0/8"}, nil},
		{"10.0.0.0/8", []string{"0.0.0.0/0"}, nil},
		{"10.0.0.0/8", []string{"11.0.0.0/8", "fd00::/8"}, []string{"10.0.0.0/8"}},
		{"10.0.0.0/30", []string{"10.0.0.1/32"}, []string{"10.0.0.0/32", "10.0.0.2/31"}},
		{"10.0.0.0/30", []string{"10.0.0.1/32", "10.0.0.0/31"}, []string{"10.0.0.2/31"}},
		{"0.0.0.0/0", []string{"128.0.0.0/1"}, []string{"0.0.0.0/1"}},
		{"fd00::/126", []string{"fd00::3/128"}, []string{"fd00::/127", "fd00::2/128"}},
	}
	for _, tc := range tests {
		var ex []netip.Prefix
		for _, e := range tc.except {
			ex = append(ex, p(e))
		}
		var got []string
		for _, q := range subtract(p(tc.block), ex) {
			got = append(got, q.String())
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s except %v = %v, want %v", tc.block, tc.except, got, tc.want)
		}
	}
}

// TestSubtractProperty checks, over random blocks and excepts, that an
// address is in the result exactly when it is in the block and in no
// except, and that the result's prefixes do not overlap.
func TestSubtractProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	addr := func() netip.Addr {
		// Within 10.0.0.0/24, so that blocks, excepts and probes meet.
		return netip.AddrFrom4([4]byte{10, 0, 0, byte(rng.IntN(256))})
	}
	for range 2000 {
		block, _ := addr().Prefix(24 + rng.IntN(9))
		var ex []netip.Prefix
		for range rng.IntN(4) {
			e, _ := addr().Prefix(22 + rng.IntN(11))
			ex = append(ex, e)
		}
		got := subtract(block, ex)
		for i := range got {
			for j := i + 1; j < len(got); j++ {
				if got[i].Overlaps(got[j]) {
					t.Fatalf("%s except %v: %s and %s overlap", block, ex, got[i], got[j])
				}
			}
		}
		for a := range 256 {
			ip := netip.AddrFrom4([4]byte{10, 0, 0, byte(a)})
			want := block.Contains(ip) && !prefixesContain(ex, ip)
			if prefixesContain(got, ip) != want {
				t.Fatalf("%s except %v = %v: %s in it is %v, want %v", block, ex, got, ip, !want, want)
			}
		}
	}
}
