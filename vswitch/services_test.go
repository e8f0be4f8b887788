package vswitch

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/internal/scaledoc"
)

// svcEdits are random changes of a node's Services (scaledoc.Mixed): load
// balancers of every kind added, removed, changed, with backends and
// remote endpoints beside; fresh numbers new objects.
var svcEdits = []struct {
	name string
	edit func(rng *rand.Rand, c *Config, kinds []hns.LoadBalancerConfig, fresh *int)
}{
	{"add a load balancer of a kind", func(rng *rand.Rand, c *Config, kinds []hns.LoadBalancerConfig, _ *int) {
		c.LoadBalancers = append(c.LoadBalancers, kinds[rng.IntN(len(kinds))])
	}},
	{"remove a load balancer", func(rng *rand.Rand, c *Config, _ []hns.LoadBalancerConfig, _ *int) {
		if n := len(c.LoadBalancers); n > 0 {
			i := rng.IntN(n)
			c.LoadBalancers = slices.Delete(c.LoadBalancers, i, i+1)
		}
	}},
	{"change a load balancer's port", func(rng *rand.Rand, c *Config, _ []hns.LoadBalancerConfig, _ *int) {
		if n := len(c.LoadBalancers); n > 0 {
			lb := &c.LoadBalancers[rng.IntN(n)]
			lb.PortMappings[0].ExternalPort = uint16(80 + rng.IntN(3))
		}
	}},
	{"add a Service with a new remote endpoint and drop a backend", func(rng *rand.Rand, c *Config, _ []hns.LoadBalancerConfig, fresh *int) {
		n := *fresh
		*fresh++
		ip := fmt.Sprintf("10.244.2.%d", 20+n%200)
		c.Endpoints = append(c.Endpoints, hns.EndpointConfig{Name: "remote." + ip, HostComputeNetwork: "ovl", Flags: hns.EndpointFlagRemote,
			IpConfigurations: []hns.IpConfigConfig{{IpAddress: ip}}})
		if n := len(c.LoadBalancers); n > 0 {
			if lb := &c.LoadBalancers[rng.IntN(n)]; len(lb.HostComputeEndpoints) > 1 {
				lb.HostComputeEndpoints = lb.HostComputeEndpoints[1:]
			}
		}
		c.LoadBalancers = append(c.LoadBalancers, hns.LoadBalancerConfig{Name: fmt.Sprintf("svc-%d", n), SourceVIP: "10.244.1.250",
			HostComputeEndpoints: []string{"remote." + ip, "pod-b"}, FrontendVIPs: []string{fmt.Sprintf("10.96.1.%d", n%250)},
			PortMappings: []hns.LoadBalancerPortMappingConfig{{Protocol: 6, InternalPort: 8080, ExternalPort: 80}}})
	}},
	{"add a backend to a load balancer, or take one out", func(rng *rand.Rand, c *Config, _ []hns.LoadBalancerConfig, _ *int) {
		if n := len(c.LoadBalancers); n > 0 {
			lb := &c.LoadBalancers[rng.IntN(n)]
			for _, name := range []string{"pod-b", "remote.b", "pod-a", "remote.a"} {
				if !slices.Contains(lb.HostComputeEndpoints, name) {
					lb.HostComputeEndpoints = append(lb.HostComputeEndpoints, name)
					return
				}
			}
			lb.HostComputeEndpoints = lb.HostComputeEndpoints[1:]
		}
	}},
	{"remove a load balancer and the remote endpoints no other lists", func(rng *rand.Rand, c *Config, _ []hns.LoadBalancerConfig, _ *int) {
		if n := len(c.LoadBalancers); n > 0 {
			i := rng.IntN(n)
			c.LoadBalancers = slices.Delete(c.LoadBalancers, i, i+1)
		}
		c.Endpoints = slices.DeleteFunc(c.Endpoints, func(e hns.EndpointConfig) bool {
			return e.Flags == hns.EndpointFlagRemote && e.Name != "remote.a" && e.Name != "remote.b" && !incListed(c, e.Name)
		})
	}},
}

// svcConn is a connection a client keeps across changes: from pod-a or
// the host, to a frontend.
type svcConn struct {
	from  string // pod-a, host, or uplink (from src)
	src   string
	dst   netip.AddrPort
	proto string
	sport uint16
}

// TestServicesMatchWhole applies random sequences of changes that add
// and remove load balancers (scaledoc.Mixed: DSR, ILB, IPv6, SourceVIPs,
// affinity, a frontend on two ports, node ports and invalid ones) to a
// switch that compiles them incrementally where it can, and the same
// changes to a switch that compiles each whole. Each step must give the
// same error or the same lowered document and load balancers; every
// connection opened before (from a pod and from the host, to every
// frontend, those of Services removed too) and a new one to every
// frontend must go to the same place with the same bytes on both.
func TestServicesMatchWhole(t *testing.T) {
	services, whole, refused := 0, 0, 0
	for seq := range 8 {
		rng := rand.New(rand.NewPCG(uint64(seq), 23))
		d, kinds := scaledoc.Mixed()
		cfg := &Config{Switch: d.Switch, Uplink: d.Uplink, Networks: d.Networks, Endpoints: d.Endpoints, LoadBalancers: d.LoadBalancers}
		inc, ref := ulNewRig(t, cfg), ulNewRig(t, cfg)
		ref.sw.noIncremental = true
		var conns []svcConn
		sport, fresh := uint16(2000), 0
		for step := range 25 {
			ch := svcEdits[rng.IntN(len(svcEdits))]
			next, err := cfg.Clone()
			if err != nil {
				t.Fatal(err)
			}
			ch.edit(rng, next, kinds, &fresh)
			at := fmt.Sprintf("sequence %d step %d (%s)", seq, step, ch.name)
			gotErr, wantErr := inc.sw.Apply(next), ref.sw.Apply(next)
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Fatalf("%s: Apply: %v\nwhole: %v", at, gotErr, wantErr)
			}
			if gotErr != nil {
				refused++
				continue
			}
			cfg = next
			pol := inc.sw.pol.Load()
			if pol.services != nil {
				services++
			} else if !pol.incremental {
				whole++
			}
			incSame(t, at, pol, ref.sw.pol.Load())
			for _, c := range conns {
				svcSame(t, at+" established", inc, ref, c, "A")
			}
			for _, lb := range cfg.LoadBalancers {
				for _, f := range svcFrontends(cfg, &lb) {
					for _, pm := range lb.PortMappings {
						proto := map[uint32]string{6: "tcp", 17: "udp"}[pm.Protocol]
						// A pod, the host, and clients on the network
						// (enough that a change of backends moves some
						// where affinity does not hold them).
						for _, from := range []string{"pod-a", "host", "uplink:1", "uplink:2", "uplink:3", "uplink:4", "uplink:5", "uplink:6"} {
							sport++
							c := svcConn{from: from, dst: netip.AddrPortFrom(f, pm.ExternalPort), proto: proto, sport: sport}
							if n, ok := strings.CutPrefix(from, "uplink:"); ok {
								if !f.Is4() {
									continue
								}
								c.from, c.src = "uplink", "192.168.60."+n
							}
							if svcSame(t, at+" new", inc, ref, c, "S") {
								conns = append(conns, c)
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d changes of Services incremental, %d whole, %d refused", services, whole, refused)
	if services < 60 || whole < 10 || refused < 10 {
		t.Errorf("%d changes of Services incremental, %d whole, %d refused: the changes do not exercise every path", services, whole, refused)
	}
}

// svcFrontends are the addresses lb's connections go to: its frontends,
// or the host's address of its family (a node port).
func svcFrontends(c *Config, lb *hns.LoadBalancerConfig) []netip.Addr {
	var fs []netip.Addr
	for _, s := range lb.FrontendVIPs {
		fs = append(fs, netip.MustParseAddr(s))
	}
	if len(fs) == 0 {
		for _, s := range c.Uplink.IpAddresses {
			if a := netip.MustParsePrefix(s).Addr(); a.Is4() == (lb.Flags&hns.LBFlagIPv6 == 0) {
				fs = append(fs, a)
			}
		}
	}
	return fs
}

// svcSame sends a packet of connection c with TCP flags (UDP: a
// datagram) through both switches and checks that they do the same:
// the same port, the same bytes. It reports whether the packet left.
func svcSame(t *testing.T, at string, inc, ref *ulRig, c svcConn, flags string) bool {
	t.Helper()
	_, ok := svcSend(t, at, inc, ref, c, flags)
	return ok
}

// svcSend is svcSame, returning the packet that left too.
func svcSend(t *testing.T, at string, inc, ref *ulRig, c svcConn, flags string) ([]byte, bool) {
	t.Helper()
	k := natPkt{dst: c.dst.Addr().String(), dport: c.dst.Port(), sport: c.sport, proto: c.proto, flags: flags}
	v4 := c.dst.Addr().Is4()
	switch c.from {
	case "pod-a":
		k.smac, _ = dataplane.ParseMAC("02:00:00:00:01:0a")
		k.dmac, _ = dataplane.ParseMAC("02:00:00:00:01:01")
		k.src = map[bool]string{true: "10.244.1.10", false: "fd00:244:1::10"}[v4]
	case "uplink":
		k.smac, _ = dataplane.ParseMAC("02:00:00:00:00:99")
		k.dmac, _ = dataplane.ParseMAC("02:00:00:00:00:fe")
		k.src = c.src
	default:
		k.smac, _ = dataplane.ParseMAC("02:00:00:00:00:fe")
		k.dmac = hns.HostServicesMAC()
		k.src = map[bool]string{true: "192.168.50.1", false: "fd00:50::1"}[v4]
	}
	if c.proto == "udp" {
		k.flags = ""
	}
	frame := natFrame(t, k)
	gp, gtr := inc.run(c.from, frame, dataplane.Offload{})
	got, gb := outName(inc.sw, gp), slices.Clone(gp.Bytes())
	wp, wtr := ref.run(c.from, frame, dataplane.Offload{})
	want, wb := outName(ref.sw, wp), slices.Clone(wp.Bytes())
	if got != want || gp.Drop == dataplane.NotDropped && !bytes.Equal(gb, wb) {
		t.Fatalf("%s: %s %s:%d -> %s: %s\n%s\nwhole: %s\n%s", at, c.from, c.proto, c.sport, c.dst, got, gtr, want, wtr)
	}
	return gb, gp.Drop == dataplane.NotDropped
}

// TestServicesAffinityAdded: a Service with affinity added incrementally
// remembers its clients as one compiled whole does: after a backend is
// added, every client's new connection goes to the backend its first
// went to, on both switches.
func TestServicesAffinityAdded(t *testing.T) {
	d, kinds := scaledoc.Mixed()
	cfg := &Config{Switch: d.Switch, Uplink: d.Uplink, Networks: d.Networks, Endpoints: d.Endpoints, LoadBalancers: d.LoadBalancers}
	inc, ref := ulNewRig(t, cfg), ulNewRig(t, cfg)
	ref.sw.noIncremental = true
	k := slices.IndexFunc(kinds, func(lb hns.LoadBalancerConfig) bool { return lb.Name == "affinity" })
	apply := func(edit func(c *Config)) {
		t.Helper()
		next, err := cfg.Clone()
		if err != nil {
			t.Fatal(err)
		}
		edit(next)
		if err := inc.sw.Apply(next); err != nil {
			t.Fatal(err)
		}
		if err := ref.sw.Apply(next); err != nil {
			t.Fatal(err)
		}
		if !inc.sw.pol.Load().incremental {
			t.Fatal("the change was compiled whole")
		}
		cfg = next
	}
	apply(func(c *Config) { c.LoadBalancers = append(c.LoadBalancers, kinds[k]) })
	if inc.sw.pol.Load().services == nil {
		t.Fatal("the Service was not added incrementally")
	}
	dst := netip.AddrPortFrom(netip.MustParseAddr(kinds[k].FrontendVIPs[0]), 80)
	first := map[int]netip.Addr{}
	for client := 1; client <= 32; client++ {
		first[client] = svcBackend(t, inc, ref, client, dst, uint16(3000+client))
	}
	apply(func(c *Config) {
		lb := &c.LoadBalancers[len(c.LoadBalancers)-1]
		lb.HostComputeEndpoints = append(lb.HostComputeEndpoints, "remote.b")
	})
	for client := 1; client <= 32; client++ {
		if got := svcBackend(t, inc, ref, client, dst, uint16(4000+client)); got != first[client] {
			t.Errorf("client %d: %s, first %s: affinity did not hold", client, got, first[client])
		}
	}
}

// svcBackend opens a connection from network client 192.168.60.client to
// dst on both switches (svcSame) and returns its backend.
func svcBackend(t *testing.T, inc, ref *ulRig, client int, dst netip.AddrPort, sport uint16) netip.Addr {
	t.Helper()
	c := svcConn{from: "uplink", src: fmt.Sprintf("192.168.60.%d", client), dst: dst, proto: "tcp", sport: sport}
	b, ok := svcSend(t, "affinity", inc, ref, c, "S")
	if !ok {
		t.Fatalf("client %d: dropped", client)
	}
	return incBackend(b)
}

// TestPrepareEditsServices: a change of Services described by edits that
// cover only backends (what a batch records; hns.Lowered.UpdateEdits
// refuses it) is still prepared as a change of Services (Update), not
// compiled whole: for each load balancer deleted in turn, PrepareEdits
// takes the path Prepare takes.
func TestPrepareEditsServices(t *testing.T) {
	d, _ := scaledoc.Mixed()
	cfg := &Config{Switch: d.Switch, Uplink: d.Uplink, Networks: d.Networks, Endpoints: d.Endpoints, LoadBalancers: d.LoadBalancers}
	for n := range 3 { // plain Services, so that a deletion leaves one of their kind
		cfg.LoadBalancers = append(cfg.LoadBalancers, hns.LoadBalancerConfig{Name: fmt.Sprintf("svc-%d", n), SourceVIP: "10.244.1.250",
			HostComputeEndpoints: []string{"pod-b"}, FrontendVIPs: []string{fmt.Sprintf("10.96.1.%d", n)},
			PortMappings: []hns.LoadBalancerPortMappingConfig{{Protocol: 6, InternalPort: 8080, ExternalPort: 80}}})
	}
	sw, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	services := 0
	for k := range cfg.LoadBalancers {
		next := *cfg
		next.LoadBalancers = slices.Delete(slices.Clone(cfg.LoadBalancers), k, k+1)
		want, err := sw.Prepare(&next)
		if err != nil {
			t.Fatal(err)
		}
		got, err := sw.PrepareEdits(&next, cfg, &hns.Edits{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Incremental() != want.Incremental() || (got.pol.services != nil) != (want.pol.services != nil) {
			t.Errorf("%s deleted: PrepareEdits incremental %v, Services %v; Prepare %v, %v", cfg.LoadBalancers[k].Name,
				got.Incremental(), got.pol.services != nil, want.Incremental(), want.pol.services != nil)
		}
		if want.pol.services != nil {
			services++
		}
	}
	if services == 0 {
		t.Error("no deletion was a change of Services: the test checks nothing")
	}
}
