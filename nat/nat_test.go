package nat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestBind(t *testing.T) {
	type step struct {
		proto    uint8
		internal string
		want     uint16 // the external port
		wantErr  error
	}
	tests := []struct {
		name  string
		cfg   PoolConfig // IP defaults to poolIP
		steps []step
	}{
		{
			name:  "preserve the internal port",
			steps: []step{{proto: tcp, internal: "10.0.0.1:40000", want: 40000}},
		},
		{
			name: "same internal port, distinct endpoints, distinct external ports",
			steps: []step{
				{proto: tcp, internal: "10.0.0.1:40000", want: 40000},
				{proto: tcp, internal: "10.0.0.2:40000", want: 1024},
				{proto: tcp, internal: "10.0.0.3:40000", want: 1026},
			},
		},
		{
			name: "same endpoint, same binding",
			steps: []step{
				{proto: udp, internal: "10.0.0.1:53", want: 1025},
				{proto: udp, internal: "10.0.0.1:53", want: 1025},
			},
		},
		{
			name: "below the range: parity kept, next-fit from the low end",
			steps: []step{
				{proto: tcp, internal: "10.0.0.1:80", want: 1024},
				{proto: tcp, internal: "10.0.0.1:53", want: 1025},
				{proto: tcp, internal: "10.0.0.2:53", want: 1027},
				{proto: tcp, internal: "10.0.0.2:80", want: 1028},
			},
		},
		{
			name: "preserved ports do not move the cursor",
			cfg:  PoolConfig{Ports: PortRange{2000, 2005}},
			steps: []step{
				{proto: tcp, internal: "10.0.0.1:2002", want: 2002},
				{proto: tcp, internal: "10.0.0.2:2002", want: 2000},
				{proto: tcp, internal: "10.0.0.3:2002", want: 2004},
			},
		},
		{
			name: "next-fit wraps, then parity gives way, then exhaustion",
			cfg:  PoolConfig{Ports: PortRange{2000, 2005}},
			steps: []step{
				{proto: udp, internal: "10.0.0.1:2003", want: 2003},
				{proto: udp, internal: "10.0.0.2:2003", want: 2001},
				{proto: udp, internal: "10.0.0.3:2003", want: 2005},
				{proto: udp, internal: "10.0.0.4:2003", want: 2000},
				{proto: udp, internal: "10.0.0.5:1", want: 2002},
				{proto: udp, internal: "10.0.0.6:2004", want: 2004},
				{proto: udp, internal: "10.0.0.7:2004", wantErr: ErrExhausted},
				{proto: tcp, internal: "10.0.0.7:2004", want: 2004},
			},
		},
		{
			name: "a reserved port is not preserved",
			cfg:  PoolConfig{Reserved: []Reservation{{Proto: tcp, Port: 40000}}},
			steps: []step{
				{proto: tcp, internal: "10.0.0.1:40000", want: 1024},
				{proto: udp, internal: "10.0.0.1:40000", want: 40000},
			},
		},
		{
			name: "reserved ports are skipped by the search",
			cfg: PoolConfig{
				Ports:    PortRange{3000, 3003},
				Reserved: []Reservation{{Proto: tcp, Port: 3000}, {Proto: tcp, Port: 3002}},
			},
			steps: []step{
				{proto: tcp, internal: "10.0.0.1:10", want: 3001},
				{proto: tcp, internal: "10.0.0.2:10", want: 3003},
				{proto: tcp, internal: "10.0.0.3:10", wantErr: ErrExhausted},
				{proto: udp, internal: "10.0.0.3:10", want: 3000},
			},
		},
		{
			name: "classes are separate port spaces",
			steps: []step{
				{proto: tcp, internal: "10.0.0.1:5000", want: 5000},
				{proto: udp, internal: "10.0.0.1:5000", want: 5000},
				{proto: icmp4, internal: "10.0.0.1:5000", want: 5000},
				{proto: tcp, internal: "10.0.0.2:5000", want: 1024},
			},
		},
		{
			name: "ICMP identifiers use 0-65535 whatever the range",
			cfg:  PoolConfig{Ports: PortRange{5000, 5001}},
			steps: []step{
				{proto: icmp4, internal: "10.0.0.1:0", want: 0},
				{proto: icmp4, internal: "10.0.0.1:65535", want: 65535},
				{proto: icmp4, internal: "10.0.0.2:65535", want: 1},
				{proto: icmp4, internal: "10.0.0.3:65535", want: 2},
				{proto: icmp4, internal: "10.0.0.4:5000", want: 5000},
				{proto: tcp, internal: "10.0.0.1:0", want: 5000},
			},
		},
		{
			name: "IPv6 pool",
			cfg:  PoolConfig{IP: addr("2001:db8::1")},
			steps: []step{
				{proto: tcp, internal: "[fd00::1]:40000", want: 40000},
				{proto: tcp, internal: "[fd00::2]:40000", want: 1024},
				{proto: icmp6, internal: "[fd00::1]:9", want: 9},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			if !cfg.IP.IsValid() {
				cfg.IP = addr(poolIP)
			}
			_, p := testPool(t, cfg)
			for i, s := range tt.steps {
				b, err := p.Bind(s.proto, addrPort(s.internal))
				if s.wantErr != nil {
					if !errors.Is(err, s.wantErr) {
						t.Fatalf("step %d: Bind(%d, %s) = %v, %v; want error %v", i, s.proto, s.internal, b, err, s.wantErr)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d: Bind(%d, %s): %v", i, s.proto, s.internal, err)
				}
				if got := b.External(); got != netip.AddrPortFrom(cfg.IP, s.want) {
					t.Errorf("step %d: Bind(%d, %s).External() = %s, want port %d", i, s.proto, s.internal, got, s.want)
				}
				if b.Internal() != addrPort(s.internal) || b.Proto() != s.proto || b.Pool() != p {
					t.Errorf("step %d: binding = %d %s on %s", i, b.Proto(), b.Internal(), b.Pool().IP())
				}
				if err := p.check(); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
			}
		})
	}
}

func TestRefcount(t *testing.T) {
	tbl, p := testPool(t, PoolConfig{IP: addr(poolIP), Ports: PortRange{4000, 4001}})
	a1 := mustBind(t, p, tcp, "10.0.0.1:4000")
	a2 := mustBind(t, p, tcp, "10.0.0.1:4000")
	if a1 != a2 || a1.Refs() != 2 {
		t.Fatalf("second Bind = %p (refs %d), want %p with 2 references", a2, a2.Refs(), a1)
	}
	a1.Release()
	// One reference left: port 4000 stays taken.
	if b := mustBind(t, p, tcp, "10.0.0.2:4000"); b.External().Port() != 4001 {
		t.Errorf("with 4000 still bound, got port %d, want 4001", b.External().Port())
	}
	if _, err := p.Bind(tcp, addrPort("10.0.0.3:4000")); !errors.Is(err, ErrExhausted) {
		t.Errorf("Bind on a full pool: %v, want ErrExhausted", err)
	}
	a2.Release()
	if got := a1.Refs(); got != 0 {
		t.Errorf("Refs after the last Release = %d", got)
	}
	if b := mustBind(t, p, tcp, "10.0.0.3:4000"); b.External().Port() != 4000 || b == a1 {
		t.Errorf("after the last Release, got port %d (same binding: %t), want 4000 in a new binding", b.External().Port(), b == a1)
	}
	a1.Release() // double: counted, ignored
	if s := p.Stats(); s.DoubleRelease != 1 || s.InUse[ClassTCP] != 2 || s.Allocated != 3 || s.Released != 1 {
		t.Errorf("stats = %+v", s)
	}
	if got := tbl.Bindings(); got != 2 {
		t.Errorf("Bindings() = %d, want 2", got)
	}
	if err := p.check(); err != nil {
		t.Error(err)
	}
}

func TestBoundsAndReservations(t *testing.T) {
	tests := []struct {
		name     string
		ports    PortRange
		reserved []Reservation
		proto    uint8
	}{
		{name: "tcp one word", ports: PortRange{3000, 3040}, reserved: []Reservation{{tcp, 3000}, {tcp, 3033}, {udp, 3001}}, proto: tcp},
		{name: "udp across words", ports: PortRange{1000, 1300}, reserved: []Reservation{{udp, 1023}, {udp, 1024}, {udp, 1300}, {tcp, 1001}}, proto: udp},
		{name: "top of the port space", ports: PortRange{65400, 65535}, reserved: []Reservation{{tcp, 65535}, {tcp, 65534}}, proto: tcp},
		{name: "single port", ports: PortRange{7, 7}, proto: udp},
		{name: "all reserved", ports: PortRange{10, 11}, reserved: []Reservation{{tcp, 10}, {tcp, 11}}, proto: tcp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, p := testPool(t, PoolConfig{IP: addr(poolIP), Ports: tt.ports, Reserved: tt.reserved})
			reserved := map[Reservation]bool{}
			for _, r := range tt.reserved {
				reserved[r] = true
			}
			capacity := p.Stats().Capacity[classFor(t, tt.proto)]
			got := map[uint16]bool{}
			for i := 0; ; i++ {
				// Internal ports inside and outside the range, both parities.
				internal := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), uint16(int(tt.ports.Lo)+i*7-50))
				b, err := p.Bind(tt.proto, internal)
				if errors.Is(err, ErrExhausted) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				port := b.External().Port()
				if !tt.ports.Contains(port) || reserved[Reservation{tt.proto, port}] || got[port] {
					t.Fatalf("got port %d: outside %s, reserved or repeated", port, tt.ports)
				}
				got[port] = true
			}
			if len(got) != capacity {
				t.Errorf("exhausted after %d ports, capacity %d", len(got), capacity)
			}
			if err := p.check(); err != nil {
				t.Error(err)
			}
		})
	}
}

func classFor(t *testing.T, proto uint8) int {
	c, ok := classOf(proto)
	if !ok {
		t.Fatalf("proto %d has no class", proto)
	}
	return c
}

func TestCapacity(t *testing.T) {
	_, p := testPool(t, PoolConfig{
		IP:       addr(poolIP),
		Ports:    PortRange{100, 199},
		Reserved: []Reservation{{tcp, 100}, {tcp, 150}, {tcp, 200}, {udp, 99}},
	})
	s := p.Stats()
	if want := [numClasses]int{98, 100, 65536}; s.Capacity != want {
		t.Errorf("Capacity = %v, want %v", s.Capacity, want)
	}
}

func TestExhaustionLog(t *testing.T) {
	tbl, clk, buf := testTable(t, PoolConfig{IP: addr(poolIP), Ports: PortRange{2000, 2001}})
	p := tbl.Pool(addr(poolIP))
	mustBind(t, p, udp, "10.0.0.1:1")
	mustBind(t, p, udp, "10.0.0.2:1")
	const line = `level=WARN msg="NAT pool exhausted" ip=192.0.2.1 proto=udp range=2000-2001 suppressed=%d` + "\n"
	steps := []struct {
		advance time.Duration
		binds   int
		want    string // the whole log so far
	}{
		{binds: 1, want: fmt.Sprintf(line, 0)},
		{advance: 9 * time.Second, binds: 3, want: fmt.Sprintf(line, 0)},
		{advance: 999 * time.Millisecond, binds: 1, want: fmt.Sprintf(line, 0)},
		{advance: time.Millisecond, binds: 2, want: fmt.Sprintf(line, 0) + fmt.Sprintf(line, 4)},
		{advance: time.Hour, binds: 1, want: fmt.Sprintf(line, 0) + fmt.Sprintf(line, 4) + fmt.Sprintf(line, 1)},
	}
	exhausted := 0
	for i, s := range steps {
		clk.t = clk.t.Add(s.advance)
		for j := 0; j < s.binds; j++ {
			if _, err := p.Bind(udp, netip.AddrPortFrom(addr("10.0.1.1"), uint16(1000+exhausted))); err != ErrExhausted {
				t.Fatalf("step %d: Bind on a full pool: %v, want ErrExhausted itself", i, err)
			}
			exhausted++
		}
		if got := buf.String(); got != s.want {
			t.Errorf("step %d: log:\n%s\nwant:\n%s", i, got, s.want)
		}
	}
	if got := p.Stats().Exhausted; got != uint64(exhausted) {
		t.Errorf("Stats().Exhausted = %d, want %d", got, exhausted)
	}
}

func TestBindInvalid(t *testing.T) {
	tbl, _, _ := testTable(t, PoolConfig{IP: addr(poolIP)}, PoolConfig{IP: addr("2001:db8::1")})
	p4, p6 := tbl.Pool(addr(poolIP)), tbl.Pool(addr("2001:db8::1"))
	tests := []struct {
		name     string
		pool     *Pool
		proto    uint8
		internal netip.AddrPort
		want     string
	}{
		{name: "proto", pool: p4, proto: 50, internal: addrPort("10.0.0.1:1"), want: "proto 50"},
		{name: "missing address", pool: p4, proto: tcp, want: "missing"},
		{name: "IPv6 on IPv4", pool: p4, proto: tcp, internal: addrPort("[fd00::1]:1"), want: "family"},
		{name: "IPv4 on IPv6", pool: p6, proto: udp, internal: addrPort("10.0.0.1:1"), want: "family"},
		{name: "ICMPv6 on IPv4", pool: p4, proto: icmp6, internal: addrPort("10.0.0.1:1"), want: "icmpv6"},
		{name: "ICMPv4 on IPv6", pool: p6, proto: icmp4, internal: addrPort("[fd00::1]:1"), want: "icmp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.pool.Bind(tt.proto, tt.internal)
			if b != nil || !errors.Is(err, ErrInvalid) || errors.Is(err, ErrExhausted) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Bind = %v, %v; want an ErrInvalid mentioning %q", b, err, tt.want)
			}
		})
	}
	if n := tbl.Bindings(); n != 0 {
		t.Errorf("Bindings() = %d", n)
	}
}

func TestConfigureErrors(t *testing.T) {
	good := PoolConfig{IP: addr(poolIP), Ports: PortRange{2000, 2999}}
	tests := []struct {
		name string
		cfgs []PoolConfig
		want string
	}{
		{name: "missing ip", cfgs: []PoolConfig{good, {}}, want: "pools[1].ip: missing"},
		{name: "4in6", cfgs: []PoolConfig{{IP: addr("::ffff:192.0.2.9")}}, want: "pools[0].ip: ::ffff:192.0.2.9 is IPv4-mapped"},
		{name: "unspecified", cfgs: []PoolConfig{{IP: addr("::")}}, want: "pools[0].ip: :: is unspecified"},
		{name: "multicast", cfgs: []PoolConfig{{IP: addr("239.1.1.1")}}, want: "pools[0].ip: 239.1.1.1 is multicast"},
		{name: "broadcast", cfgs: []PoolConfig{{IP: addr("255.255.255.255")}}, want: "pools[0].ip: 255.255.255.255 is the limited broadcast"},
		{name: "zone", cfgs: []PoolConfig{{IP: addr("fe80::1%eth0")}}, want: "pools[0].ip: fe80::1%eth0 has a zone"},
		{name: "duplicate ip", cfgs: []PoolConfig{good, {IP: addr("192.0.2.2")}, {IP: addr(poolIP)}}, want: "pools[2].ip: 192.0.2.1 is listed twice (pools[0])"},
		{name: "empty range", cfgs: []PoolConfig{{IP: addr("192.0.2.2"), Ports: PortRange{10, 9}}}, want: "pools[0].ports: 10-9 is empty"},
		{name: "port 0", cfgs: []PoolConfig{{IP: addr("192.0.2.2"), Ports: PortRange{0, 9}}}, want: "pools[0].ports: 0-9 includes port 0"},
		{name: "reserved proto", cfgs: []PoolConfig{{IP: addr("192.0.2.2"), Reserved: []Reservation{{tcp, 80}, {icmp4, 1}}}}, want: "pools[0].reserved[1]: proto 1 is not TCP"},
		{name: "reserved port 0", cfgs: []PoolConfig{{IP: addr("192.0.2.2"), Reserved: []Reservation{{udp, 0}}}}, want: "pools[0].reserved[0]: port 0"},
		{name: "reserved twice", cfgs: []PoolConfig{{IP: addr("192.0.2.2"), Reserved: []Reservation{{udp, 53}, {tcp, 53}, {udp, 53}}}}, want: "pools[0].reserved[2]: udp/53 is listed twice (reserved[0])"},
		{name: "negative port share", cfgs: []PoolConfig{{IP: addr("192.0.2.2"), PortShare: -1}}, want: "pools[0].portShare: -1 is not 0 (the default) to 65536"},
		{name: "port share above a class", cfgs: []PoolConfig{{IP: addr("192.0.2.2"), PortShare: 65537}}, want: "pools[0].portShare: 65537 is not 0 (the default) to 65536"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tbl, p := testPool(t, good)
			b := mustBind(t, p, tcp, "10.0.0.1:2500")
			before := tbl.Stats()
			err := tbl.Configure(tt.cfgs)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("Configure: %v, want %q", err, tt.want)
			}
			if after := tbl.Stats(); !slices.Equal(after, before) {
				t.Errorf("a failed Configure changed the stats:\n%+v\nwant\n%+v", after, before)
			}
			if tbl.Pool(addr(poolIP)) != p || tbl.Pool(addr("192.0.2.2")) != nil {
				t.Errorf("a failed Configure changed the pools")
			}
			if b2 := mustBind(t, p, tcp, "10.0.0.2:3000"); b2.External().Port() != 2000 {
				t.Errorf("the old range no longer applies: got port %d", b2.External().Port())
			}
			b.Release()
		})
	}
}

func TestValidateDefaults(t *testing.T) {
	c := PoolConfig{IP: addr(poolIP)}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Ports != DefaultPortRange() || c.Ports.String() != "1024-65535" {
		t.Errorf("Ports = %s, want the default 1024-65535", c.Ports)
	}
	cfgs := []PoolConfig{{IP: addr(poolIP)}}
	if err := NewTable(nil).Configure(cfgs); err != nil || cfgs[0].Ports != (PortRange{}) {
		t.Errorf("Configure: %v, and it changed its argument's ports to %v", err, cfgs[0].Ports)
	}
}

func TestReconfigureKeepsBindings(t *testing.T) {
	tbl, p := testPool(t, PoolConfig{IP: addr(poolIP), Ports: PortRange{1024, 2000}})
	old := mustBind(t, p, tcp, "10.0.0.1:1500")
	oldUDP := mustBind(t, p, udp, "10.0.0.1:3000") // 1024, then reserved
	err := tbl.Configure([]PoolConfig{{
		IP:       addr(poolIP),
		Ports:    PortRange{1024, 1027},
		Reserved: []Reservation{{udp, 1024}, {tcp, 1025}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if tbl.Pool(addr(poolIP)) != p {
		t.Fatal("reconfiguring made a new pool")
	}
	if again := mustBind(t, p, tcp, "10.0.0.1:1500"); again != old || old.External().Port() != 1500 {
		t.Errorf("the binding outside the new range changed: %s", again.External())
	}
	again := mustBind(t, p, udp, "10.0.0.1:3000")
	if again != oldUDP || again.External().Port() != 1024 {
		t.Errorf("the binding on a now reserved port changed: %s", again.External())
	}
	// New bindings follow the new range and reservations: 1025 is reserved,
	// so its endpoint gets the other odd port.
	var got []uint16
	for i := range 4 {
		b, err := p.Bind(tcp, netip.AddrPortFrom(addr("10.0.0.2"), uint16(1024+i)))
		if err != nil {
			got = append(got, 0)
			continue
		}
		got = append(got, b.External().Port())
	}
	if want := []uint16{1024, 1027, 1026, 0}; !slices.Equal(got, want) {
		t.Errorf("new tcp ports %v, want %v", got, want)
	}
	if s := p.Stats(); s.InUse[ClassTCP] != 4 || s.Capacity[ClassTCP] != 3 || s.InUse[ClassUDP] != 1 || s.Capacity[ClassUDP] != 3 {
		t.Errorf("stats = %+v", s)
	}
	if err := p.check(); err != nil {
		t.Error(err)
	}
	// Releasing the out-of-range and reserved bindings frees nothing usable.
	old.Release()
	old.Release()
	oldUDP.Release()
	oldUDP.Release()
	if err := p.check(); err != nil {
		t.Error(err)
	}
	if _, err := p.Bind(tcp, addrPort("10.0.0.3:1500")); !errors.Is(err, ErrExhausted) {
		t.Errorf("Bind: %v, want ErrExhausted", err)
	}
}

func TestRetire(t *testing.T) {
	a, b := PoolConfig{IP: addr("192.0.2.1")}, PoolConfig{IP: addr("2001:db8::1")}
	tbl, _, _ := testTable(t, a, b)
	pb := tbl.Pool(b.IP)
	held := mustBind(t, pb, tcp, "[fd00::1]:5000")
	mustBind(t, pb, tcp, "[fd00::1]:5000")

	if err := tbl.Configure([]PoolConfig{a}); err != nil {
		t.Fatal(err)
	}
	if tbl.Pool(b.IP) != nil {
		t.Error("Pool returns a retired pool")
	}
	if _, err := pb.Bind(tcp, addrPort("[fd00::2]:1")); !errors.Is(err, ErrRetired) {
		t.Errorf("Bind on a retired pool: %v, want ErrRetired", err)
	}
	if _, err := pb.Bind(tcp, addrPort("[fd00::1]:5000")); !errors.Is(err, ErrRetired) {
		t.Errorf("Bind of a bound endpoint on a retired pool: %v, want ErrRetired", err)
	}
	if s := tbl.Stats(); len(s) != 2 || s[1].IP != b.IP || !s[1].Retired || s[1].InUse[ClassTCP] != 1 {
		t.Errorf("Stats while draining = %+v", s)
	}
	if n := tbl.Bindings(); n != 1 {
		t.Errorf("Bindings() = %d, want 1", n)
	}

	// Configuring the address again revives the pool with its binding.
	if err := tbl.Configure([]PoolConfig{a, b}); err != nil {
		t.Fatal(err)
	}
	if tbl.Pool(b.IP) != pb {
		t.Fatal("a draining pool was not revived")
	}
	if nb := mustBind(t, pb, tcp, "[fd00::2]:5000"); nb.External().Port() == 5000 {
		t.Error("the revived pool handed out a port still bound")
	} else {
		nb.Release()
	}

	if err := tbl.Configure([]PoolConfig{a}); err != nil {
		t.Fatal(err)
	}
	held.Release()
	held.Release()
	if s := tbl.Stats(); len(s) != 1 || s[0].IP != a.IP {
		t.Errorf("Stats after draining = %+v, want pool a only", s)
	}
	if n := tbl.Bindings(); n != 0 {
		t.Errorf("Bindings() = %d, want 0", n)
	}
	// A new pool on the address is a new pool.
	if err := tbl.Configure([]PoolConfig{b}); err != nil {
		t.Fatal(err)
	}
	if p := tbl.Pool(b.IP); p == pb || p == nil {
		t.Error("a forgotten pool came back")
	}
	if s := tbl.Stats(); len(s) != 1 || s[0].IP != b.IP {
		t.Errorf("Stats = %+v, want pool b only (a retired without bindings)", s)
	}
}

func TestAllocs(t *testing.T) {
	_, p := testPool(t, PoolConfig{IP: addr(poolIP)})
	held := mustBind(t, p, tcp, "10.0.0.1:1000")
	internal := addrPort("10.0.0.1:1000")
	if n := testing.AllocsPerRun(1000, func() {
		b, err := p.Bind(tcp, internal)
		if err != nil {
			t.Fatal(err)
		}
		b.Release()
	}); n != 0 {
		t.Errorf("Bind+Release of a bound endpoint: %v allocations, want 0", n)
	}
	held.Release()
	fresh := addrPort("10.0.0.2:1000")
	if n := testing.AllocsPerRun(1000, func() {
		b, err := p.Bind(tcp, fresh)
		if err != nil {
			t.Fatal(err)
		}
		b.Release()
	}); n > 1 {
		t.Errorf("Bind+Release of a new endpoint: %v allocations, want 1 (the Binding)", n)
	}
	if n := testing.AllocsPerRun(1000, held.Release); n != 0 {
		t.Errorf("double Release: %v allocations, want 0", n)
	}
	_, full := testPool(t, PoolConfig{IP: addr(poolIP), Ports: PortRange{5, 5}})
	mustBind(t, full, udp, "10.0.0.1:5")
	full.Bind(udp, fresh) // the one logged warning
	if n := testing.AllocsPerRun(1000, func() {
		if _, err := full.Bind(udp, fresh); err != ErrExhausted {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("exhausted Bind: %v allocations, want 0", n)
	}
}

func TestParsePortRange(t *testing.T) {
	tests := []struct {
		in      string
		want    PortRange
		wantErr string
	}{
		{in: "1024-65535", want: PortRange{1024, 65535}},
		{in: "8080", want: PortRange{8080, 8080}},
		{in: "1-1", want: PortRange{1, 1}},
		{in: "", wantErr: `port range "": "" is not a port number`},
		{in: "0", wantErr: "includes port 0"},
		{in: "0-10", wantErr: "includes port 0"},
		{in: "10-9", wantErr: "is empty"},
		{in: "65536", wantErr: "not a port number"},
		{in: "1024-", wantErr: `"" is not a port number`},
		{in: "-5", wantErr: "not a port number"},
		{in: "+5", wantErr: "not a port number"},
		{in: "1-2-3", wantErr: "not a port number"},
		{in: " 80", wantErr: "not a port number"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParsePortRange(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("ParsePortRange(%q) = %v, %v; want error %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("ParsePortRange(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
			if back, err := ParsePortRange(got.String()); err != nil || back != got {
				t.Errorf("round trip of %s: %v, %v", got, back, err)
			}
		})
	}
}

// TestPortRangeText checks a range's JSON text: "lo-hi" written, read as
// ParsePortRange reads it, the zero range (the default) empty both ways.
func TestPortRangeText(t *testing.T) {
	var rs []PortRange
	if err := json.Unmarshal([]byte(`["1024-65535", "8080", ""]`), &rs); err != nil {
		t.Fatal(err)
	}
	if want := []PortRange{{1024, 65535}, {8080, 8080}, {}}; !slices.Equal(rs, want) {
		t.Errorf("read %v, want %v", rs, want)
	}
	b, err := json.Marshal(rs)
	if want := `["1024-65535","8080-8080",""]`; err != nil || string(b) != want {
		t.Errorf("Marshal = %s, %v; want %s", b, err, want)
	}
	var r PortRange
	if err := r.UnmarshalText([]byte("9-1")); err == nil || err.Error() != `port range "9-1": 9-1 is empty: its low end is above its high end` {
		t.Errorf("9-1: %v", err)
	}
}

func TestReservationString(t *testing.T) {
	tests := []struct {
		r    Reservation
		want string
	}{
		{r: Reservation{tcp, 8080}, want: "tcp/8080"},
		{r: Reservation{udp, 53}, want: "udp/53"},
		{r: Reservation{132, 9}, want: "proto-132/9"},
	}
	for _, tt := range tests {
		if got := tt.r.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.r, got, tt.want)
		}
	}
}

// TestSetLogger checks that a table's pools log to the logger set last,
// pools made before it included, and that a table without one logs
// nothing anywhere (not to slog's default).
func TestSetLogger(t *testing.T) {
	tbl, clk, first := testTable(t, PoolConfig{IP: addr(poolIP), Ports: PortRange{2000, 2000}})
	p := tbl.Pool(addr(poolIP))
	mustBind(t, p, tcp, "10.0.0.1:1")
	var second bytes.Buffer
	tbl.SetLogger(slog.New(slog.NewJSONHandler(&second, nil)))
	if _, err := p.Bind(tcp, addrPort("10.0.0.2:1")); err != ErrExhausted {
		t.Fatalf("Bind: %v, want ErrExhausted", err)
	}
	if first.Len() != 0 {
		t.Errorf("the first logger got %q after SetLogger", first.String())
	}
	if !strings.Contains(second.String(), `"msg":"NAT pool exhausted"`) {
		t.Errorf("the logger set last got %q, want the exhaustion warning in JSON", second.String())
	}
	tbl.SetLogger(nil)
	clk.t = clk.t.Add(time.Hour)
	n := second.Len()
	if _, err := p.Bind(tcp, addrPort("10.0.0.2:1")); err != ErrExhausted {
		t.Fatalf("Bind: %v, want ErrExhausted", err)
	}
	if second.Len() != n {
		t.Errorf("after SetLogger(nil) the old logger got %q", second.String()[n:])
	}
}

func TestDefaultPortShare(t *testing.T) {
	for _, tt := range []struct{ capacity, want int }{
		{0, 0}, {1, 1}, {10, 10}, {64, 64}, {100, 64}, {512, 64}, {520, 65},
		{31742, 3967}, // 1024-32767 less two reservations
		{64512, 8064}, // the default range, 1024-65535
		{65536, 8192}, // ICMP echo identifiers
	} {
		if got := DefaultPortShare(tt.capacity); got != tt.want {
			t.Errorf("DefaultPortShare(%d) = %d, want %d", tt.capacity, got, tt.want)
		}
	}
}

// shareStep is a step of TestPortShare.
type shareStep struct {
	op       string // "bind", "peek", "release" (the i-th binding made), "share" (reconfigure with PortShare i)
	proto    uint8
	internal string
	i        int
	wantErr  error
}

func TestPortShare(t *testing.T) {
	type step = shareStep
	tests := []struct {
		name          string
		cfg           PoolConfig // IP defaults to poolIP
		steps         []step
		shareExceeded uint64
		endpoints     int // addresses holding bindings at the end
	}{
		{
			name: "an address is held to its share; others and other classes are not",
			cfg:  PoolConfig{Ports: PortRange{2000, 2099}, PortShare: 3},
			steps: []step{
				{op: "bind", proto: tcp, internal: "10.0.0.1:1"},
				{op: "bind", proto: tcp, internal: "10.0.0.1:2"},
				{op: "bind", proto: tcp, internal: "10.0.0.1:3"},
				{op: "peek", proto: tcp, internal: "10.0.0.1:4", wantErr: ErrShareExceeded},
				{op: "bind", proto: tcp, internal: "10.0.0.1:4", wantErr: ErrShareExceeded},
				{op: "bind", proto: tcp, internal: "10.0.0.1:3"}, // its own binding again: no new port
				{op: "bind", proto: udp, internal: "10.0.0.1:4"},
				{op: "bind", proto: icmp4, internal: "10.0.0.1:4"},
				{op: "bind", proto: tcp, internal: "10.0.0.2:4"},
				{op: "bind", proto: tcp, internal: "10.0.0.1:5", wantErr: ErrShareExceeded},
			},
			shareExceeded: 2,
			endpoints:     2,
		},
		{
			name: "a released binding returns to the share",
			cfg:  PoolConfig{Ports: PortRange{2000, 2099}, PortShare: 2},
			steps: []step{
				{op: "bind", proto: udp, internal: "10.0.0.1:1"},
				{op: "bind", proto: udp, internal: "10.0.0.1:2"},
				{op: "bind", proto: udp, internal: "10.0.0.1:3", wantErr: ErrShareExceeded},
				{op: "release", i: 0},
				{op: "bind", proto: udp, internal: "10.0.0.1:3"},
				{op: "bind", proto: udp, internal: "10.0.0.1:4", wantErr: ErrShareExceeded},
				{op: "release", i: 1},
				{op: "release", i: 2},
			},
			shareExceeded: 2,
			endpoints:     0,
		},
		{
			name: "the default share of a small pool is the whole pool; exhaustion is not a share exceeded",
			cfg:  PoolConfig{Ports: PortRange{2000, 2002}},
			steps: []step{
				{op: "bind", proto: tcp, internal: "10.0.0.1:1"},
				{op: "bind", proto: tcp, internal: "10.0.0.1:2"},
				{op: "bind", proto: tcp, internal: "10.0.0.1:3"},
				{op: "bind", proto: tcp, internal: "10.0.0.1:4", wantErr: ErrExhausted},
				{op: "bind", proto: tcp, internal: "10.0.0.2:4", wantErr: ErrExhausted},
			},
			endpoints: 1,
		},
		{
			name: "the default share: an eighth of a large pool",
			cfg:  PoolConfig{Ports: PortRange{10000, 10799}}, // 800 ports: 100 each
			steps: append(manyBinds(tcp, "10.0.0.1", 100),
				step{op: "bind", proto: tcp, internal: "10.0.0.1:60000", wantErr: ErrShareExceeded},
				step{op: "bind", proto: tcp, internal: "10.0.0.2:60000"}),
			shareExceeded: 1,
			endpoints:     2,
		},
		{
			name: "a lower share applies to new bindings; those held stay",
			cfg:  PoolConfig{Ports: PortRange{2000, 2099}, PortShare: 3},
			steps: []step{
				{op: "bind", proto: tcp, internal: "10.0.0.1:1"},
				{op: "bind", proto: tcp, internal: "10.0.0.1:2"},
				{op: "share", i: 1},
				{op: "bind", proto: tcp, internal: "10.0.0.1:3", wantErr: ErrShareExceeded},
				{op: "release", i: 0},
				{op: "bind", proto: tcp, internal: "10.0.0.1:3", wantErr: ErrShareExceeded},
				{op: "release", i: 1},
				{op: "bind", proto: tcp, internal: "10.0.0.1:3"},
			},
			shareExceeded: 2,
			endpoints:     1,
		},
		{
			name: "IPv6 addresses have their own shares",
			cfg:  PoolConfig{IP: addr("2001:db8::1"), PortShare: 1},
			steps: []step{
				{op: "bind", proto: udp, internal: "[fd00::1]:1"},
				{op: "bind", proto: udp, internal: "[fd00::1]:2", wantErr: ErrShareExceeded},
				{op: "bind", proto: udp, internal: "[fd00::2]:2"},
			},
			shareExceeded: 1,
			endpoints:     2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			if !cfg.IP.IsValid() {
				cfg.IP = addr(poolIP)
			}
			tbl, p := testPool(t, cfg)
			var made []*Binding
			for i, s := range tt.steps {
				var err error
				switch s.op {
				case "bind":
					var b *Binding
					if b, err = p.Bind(s.proto, addrPort(s.internal)); err == nil {
						made = append(made, b)
					}
				case "peek":
					_, err = p.Peek(s.proto, addrPort(s.internal))
				case "release":
					made[s.i].Release()
				case "share":
					c := cfg
					c.PortShare = s.i
					if err := tbl.Configure([]PoolConfig{c}); err != nil {
						t.Fatal(err)
					}
				}
				if err != s.wantErr {
					t.Fatalf("step %d (%s %s): %v, want %v", i, s.op, s.internal, err, s.wantErr)
				}
				if err := p.check(); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
			}
			st := p.Stats()
			if st.ShareExceeded != tt.shareExceeded || st.Endpoints != tt.endpoints {
				t.Errorf("ShareExceeded %d, Endpoints %d; want %d, %d", st.ShareExceeded, st.Endpoints, tt.shareExceeded, tt.endpoints)
			}
		})
	}
}

// manyBinds returns n bind steps of distinct ports of one address.
func manyBinds(proto uint8, ip string, n int) []shareStep {
	steps := make([]shareStep, n)
	for i := range steps {
		steps[i] = shareStep{op: "bind", proto: proto, internal: fmt.Sprintf("%s:%d", ip, 30000+i)}
	}
	return steps
}

func TestShareLog(t *testing.T) {
	tbl, clk, buf := testTable(t, PoolConfig{IP: addr(poolIP), PortShare: 1})
	p := tbl.Pool(addr(poolIP))
	mustBind(t, p, tcp, "10.0.0.1:1")
	const line = `level=WARN msg="NAT port share exceeded" ip=192.0.2.1 proto=tcp internal=10.0.0.1 share=1 suppressed=%d` + "\n"
	for i := range 5 {
		if _, err := p.Bind(tcp, netip.AddrPortFrom(addr("10.0.0.1"), uint16(100+i))); err != ErrShareExceeded {
			t.Fatalf("Bind over the share: %v", err)
		}
	}
	clk.t = clk.t.Add(logEvery)
	if _, err := p.Bind(tcp, addrPort("10.0.0.1:200")); err != ErrShareExceeded {
		t.Fatalf("Bind over the share: %v", err)
	}
	if got, want := buf.String(), fmt.Sprintf(line, 0)+fmt.Sprintf(line, 4); got != want {
		t.Errorf("log:\n%s\nwant:\n%s", got, want)
	}
}
