package nat

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
)

// TestConcurrent runs Binds and Releases from many goroutines, sharing
// endpoints so reference counts race, while the pool is reconfigured,
// retired and revived. Run it with -race.
func TestConcurrent(t *testing.T) {
	cfg := PoolConfig{IP: addr(poolIP), Ports: PortRange{1024, 1279}}
	narrow := PoolConfig{IP: addr(poolIP), Ports: PortRange{1100, 1150}, Reserved: []Reservation{{tcp, 1100}}}
	tbl, _, _ := testTable(t, cfg)
	const workers, ops = 8, 3000

	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		cfgs := [][]PoolConfig{{narrow}, nil, {cfg}}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := tbl.Configure(cfgs[i%len(cfgs)]); err != nil {
				t.Error(err)
				return
			}
			tbl.Stats()
			tbl.Bindings()
		}
	})
	var workersWG sync.WaitGroup
	for w := range workers {
		workersWG.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			protos := []uint8{tcp, udp, icmp4}
			var held []*Binding
			for range ops {
				if len(held) > 0 && rng.IntN(2) == 0 {
					i := rng.IntN(len(held))
					held[i].Release()
					held[i] = held[len(held)-1]
					held = held[:len(held)-1]
					continue
				}
				p := tbl.Pool(addr(poolIP))
				if p == nil {
					continue
				}
				internal := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(rng.IntN(4))}), uint16(1000+rng.IntN(300)))
				b, err := p.Bind(protos[rng.IntN(3)], internal)
				switch {
				case err == nil:
					held = append(held, b)
				case !errors.Is(err, ErrExhausted) && !errors.Is(err, ErrRetired):
					t.Error(err)
					return
				}
			}
			for _, b := range held {
				b.Release()
			}
		})
	}
	workersWG.Wait()
	close(stop)
	wg.Wait()

	if n := tbl.Bindings(); n != 0 {
		t.Errorf("Bindings() = %d after every goroutine released its bindings", n)
	}
	if err := tbl.Configure([]PoolConfig{cfg}); err != nil {
		t.Fatal(err)
	}
	p := tbl.Pool(addr(poolIP))
	if err := p.check(); err != nil {
		t.Error(err)
	}
	if s := p.Stats(); s.InUse != [numClasses]int{} || s.Allocated != s.Released || s.DoubleRelease != 0 {
		t.Errorf("stats = %+v", s)
	}
}
