package lb

import (
	"net/netip"
	"sync"
	"testing"
)

// TestChoiceOfWhileReleased reads a registered connection's choice while
// another goroutine releases it, as ufpd's periodic save of the
// connections does beside the workers and API changes that remove flows:
// under -race, the registration must be read and cleared under the
// registry's lock. The choice seen is either the whole one or one
// without the registration, never another.
func TestChoiceOfWhileReleased(t *testing.T) {
	rt := NewRuntime(nil)
	tup := Tuple{Proto: 6, Client: netip.MustParseAddrPort("10.244.1.10:40000"), Backend: netip.MustParseAddrPort("10.244.2.11:8080")}
	front := netip.MustParseAddrPort("10.96.0.10:80")
	for range 100 {
		st, err := rt.RestoreConnState(ConnChoice{LB: "web", Backend: tup.Backend.Addr(), Tuple: tup, Registered: true, Front: front}, 0)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var ch ConnChoice
		wg.Go(func() { st.Release() })
		wg.Go(func() {
			var ok bool
			if ch, ok = rt.ChoiceOf(st); !ok {
				t.Error("ChoiceOf: not an lb state")
			}
		})
		wg.Wait()
		if ch.LB != "web" || ch.Backend != tup.Backend.Addr() || ch.Registered && (ch.Tuple != tup || ch.Front != front) {
			t.Fatalf("choice %+v while released", ch)
		}
		if n := len(rt.Registered()); n != 0 {
			t.Fatalf("%d tuples registered after the release", n)
		}
	}
}
