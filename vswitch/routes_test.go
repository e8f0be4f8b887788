package vswitch

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/hns"
)

// Routes to other nodes' pod subnets (Config.Routes) through the whole
// pipeline: added to a running switch, a pod's packet to the new prefix
// leaves the uplink as the route says; deleted, it no longer does.

// ulRoutes returns ulDoc with the uplink's default gateway set (the
// router 192.168.1.1) and routes rs.
func ulRoutes(t *testing.T, rs ...hns.RemoteRouteConfig) *Config {
	t.Helper()
	c := mustParse(t, ulDoc)
	c.Uplink.DefaultGateway = "192.168.1.1"
	c.Routes = rs
	return c
}

// applyRoutes applies cfg to sw, compiled as a change of the running
// policy unless sw compiles every change whole (noIncremental): a change
// of routes alone is incremental.
func applyRoutes(t *testing.T, sw *Switch, cfg *Config) {
	t.Helper()
	p, err := sw.Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p.Incremental() == sw.noIncremental {
		t.Fatalf("Incremental() = %v, compiling whole: %v", p.Incremental(), sw.noIncremental)
	}
	if err := sw.Install(p); err != nil {
		t.Fatal(err)
	}
}

// vxlanOf decodes frame as VXLAN, failing the test if it is not.
func vxlanOf(t *testing.T, frame []byte) (*layers.Ethernet, gopacket.NetworkLayer, *layers.UDP, *layers.VXLAN) {
	t.Helper()
	pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	eth, _ := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
	vx, _ := pkt.Layer(layers.LayerTypeVXLAN).(*layers.VXLAN)
	if eth == nil || pkt.NetworkLayer() == nil || udp == nil || vx == nil {
		t.Fatalf("not VXLAN: %v", pkt)
	}
	return eth, pkt.NetworkLayer(), udp, vx
}

// TestRoutesOverlayTraffic adds routes to a running switch: an IPv4 and
// an IPv6 prefix to a provider address Neighbors does not list (sent to
// the default gateway's MAC), and one to a listed one. Each pod packet
// leaves in VXLAN to the route's provider address with the network's
// VNI, the inner destination MAC the route's router MAC; VXLAN from the
// new provider address is taken. With the routes deleted, the same
// packets (their flows cached) are dropped as before, and VXLAN from the
// provider address is refused. Both as a change of the running policy
// (incremental) and compiled whole.
func TestRoutesOverlayTraffic(t *testing.T) {
	for _, whole := range []bool{false, true} {
		t.Run(map[bool]string{false: "incremental", true: "whole"}[whole], func(t *testing.T) { testRoutesOverlayTraffic(t, whole) })
	}
}

func testRoutesOverlayTraffic(t *testing.T, whole bool) {
	n7DR, n8DR := dataplane.MAC{2, 0, 0, 0, 7, 1}, dataplane.MAC{2, 0, 0, 0, 8, 1}
	routes := []hns.RemoteRouteConfig{
		{Name: "node/n7/10.244.7.0_24", HostComputeNetwork: "ovl", DestinationPrefix: "10.244.7.0/24", ProviderAddress: "192.168.1.70",
			DistributedRouterMacAddress: n7DR.String(), Owner: "ufp-agent/node-1"},
		{Name: "node/n7/fd00:247::_64", HostComputeNetwork: "ovl", DestinationPrefix: "fd00:247::/64", ProviderAddress: "192.168.1.70",
			DistributedRouterMacAddress: n7DR.String(), Owner: "ufp-agent/node-1"},
		{Name: "node/n8/10.244.8.0_24", HostComputeNetwork: "ovl", DestinationPrefix: "10.244.8.0/24", ProviderAddress: "192.168.1.20",
			IsolationId: 4096, DistributedRouterMacAddress: n8DR.String()},
	}
	r := ulNewRig(t, ulRoutes(t))
	r.sw.noIncremental = whole
	cases := []struct {
		name      string
		frame     []byte
		pa, paMAC string
		innerDst  dataplane.MAC
	}{
		{"IPv4 to n7, via the router", ulUDPSized(t, ulOvA, ulDR, "10.244.0.10", "10.244.7.5", 1000, 2000, 100), "192.168.1.70", ulRouter.String(), n7DR},
		{"IPv6 to n7, via the router", ulUDPSized(t, ulOvA, ulDR, "fd00:244::10", "fd00:247::5", 1000, 2000, 100), "192.168.1.70", ulRouter.String(), n7DR},
		{"IPv4 to n8, a neighbour", ulUDPSized(t, ulOvA, ulDR, "10.244.0.10", "10.244.8.5", 1000, 2000, 100), "192.168.1.20", ulPAMAC.String(), n8DR},
	}
	fromN7 := ulVXLAN(t, "192.168.1.70", 4096, ptUDP(t, n7DR.String(), ulDR.String(), "10.244.7.5", "10.244.0.10", 2000, 1000))
	for _, tc := range cases {
		r.expect("ov-a", tc.frame, "drop no-destination")
	}
	r.expect("uplink", fromN7, "drop unknown-provider-address")

	applyRoutes(t, r.sw, ulRoutes(t, routes...))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for range 2 { // the second from the flow the first cached
				p := r.expect("ov-a", bytes.Clone(tc.frame), "uplink")
				if p.Drop != dataplane.NotDropped {
					return
				}
				eth, nl, udp, vx := vxlanOf(t, p.Bytes())
				if eth.SrcMAC.String() != ulHost.String() || eth.DstMAC.String() != tc.paMAC {
					t.Errorf("outer Ethernet %s > %s, want %s > %s", eth.SrcMAC, eth.DstMAC, ulHost, tc.paMAC)
				}
				if src, dst := nl.NetworkFlow().Endpoints(); src.String() != "192.168.1.10" || dst.String() != tc.pa {
					t.Errorf("outer IP %s > %s, want 192.168.1.10 > %s", src, dst, tc.pa)
				}
				if udp.DstPort != 4789 || vx.VNI != 4096 {
					t.Errorf("UDP port %d, VNI %d; want 4789, 4096", udp.DstPort, vx.VNI)
				}
				if in := vx.Payload; len(in) < 14 || !bytes.Equal(in[0:6], tc.innerDst[:]) || !bytes.Equal(in[6:12], ulOvA[:]) {
					t.Errorf("inner Ethernet % x, want %s > %s", in[:min(14, len(in))], ulOvA, tc.innerDst)
				}
			}
		})
	}
	r.expect("uplink", bytes.Clone(fromN7), "ov-a")

	// Deleted: dropped again, the flows the routes made gone with them.
	applyRoutes(t, r.sw, ulRoutes(t))
	for _, tc := range cases {
		for range 2 {
			r.expect("ov-a", bytes.Clone(tc.frame), "drop no-destination")
		}
	}
	r.expect("uplink", bytes.Clone(fromN7), "drop unknown-provider-address")
}

// TestRoutesL2BridgeTraffic adds a host-gateway route to a running
// switch: an L2Bridge pod's packet to the prefix, sent to its gateway,
// leaves the uplink to the next hop's MAC from the host's; deleted, the
// packet goes to the gateway again. Both as a change of the running
// policy (incremental) and compiled whole.
func TestRoutesL2BridgeTraffic(t *testing.T) {
	for _, whole := range []bool{false, true} {
		t.Run(map[bool]string{false: "incremental", true: "whole"}[whole], func(t *testing.T) { testRoutesL2BridgeTraffic(t, whole) })
	}
}

func testRoutesL2BridgeTraffic(t *testing.T, whole bool) {
	route := hns.RemoteRouteConfig{Name: "node/n9/10.244.9.0_24", HostComputeNetwork: "cbr0", DestinationPrefix: "10.244.9.0/24",
		NextHop: "192.168.1.20", Owner: "ufp-agent/node-1"}
	frame := ulUDPSized(t, ulL2A, ulRouter, "192.168.1.100", "10.244.9.5", 1000, 2000, 100)
	r := ulNewRig(t, ulRoutes(t))
	r.sw.noIncremental = whole
	step := func(what string, dst dataplane.MAC) {
		t.Helper()
		for range 2 { // the second from the flow the first cached
			p := r.expect("l2-a", bytes.Clone(frame), "uplink")
			if p.Drop != dataplane.NotDropped {
				return
			}
			eth := dataplane.Ethernet(p.Bytes())
			if eth.Src() != ulHost || eth.Dst() != dst {
				t.Errorf("%s: %s > %s, want %s > %s", what, eth.Src(), eth.Dst(), ulHost, dst)
			}
		}
	}
	step("without the route", ulRouter)
	applyRoutes(t, r.sw, ulRoutes(t, route))
	step("with the route", ulPAMAC)
	applyRoutes(t, r.sw, ulRoutes(t))
	step("the route deleted", ulRouter)
}

// TestRoutesMatchWhole applies random sequences of routes added,
// deleted and altered (valid or not) to a switch that compiles them as
// changes of the running policy where it can, and the same changes to one
// that compiles each whole: each step gives the same error or the same
// lowered document; the ports a change of routes does not concern are
// the running policy's own values; and packets of pods to every prefix
// (their flows cached from earlier steps, so revalidated) leave the same
// way with the same bytes on both.
func TestRoutesMatchWhole(t *testing.T) {
	ovl := func(name, prefix, pa, dr string) hns.RemoteRouteConfig {
		return hns.RemoteRouteConfig{Name: name, HostComputeNetwork: "ovl", DestinationPrefix: prefix, ProviderAddress: pa,
			DistributedRouterMacAddress: dr, Owner: "ufp-agent/node-1"}
	}
	l2 := func(name, prefix, hop string) hns.RemoteRouteConfig {
		return hns.RemoteRouteConfig{Name: name, HostComputeNetwork: "cbr0", DestinationPrefix: prefix, NextHop: hop, Owner: "ufp-agent/node-1"}
	}
	pool := []hns.RemoteRouteConfig{
		ovl("o7", "10.244.7.0/24", "192.168.1.70", "02:00:00:00:07:01"),
		ovl("o7", "10.244.7.0/24", "192.168.1.20", "02:00:00:00:07:02"), // o7 altered
		ovl("o8", "10.244.8.0/24", "192.168.1.20", "02:00:00:00:08:01"),
		ovl("o9", "10.244.9.0/24", "192.168.1.71", "02:00:00:00:09:01"),
		ovl("o6", "fd00:247::/64", "192.168.1.70", "02:00:00:00:07:01"),
		ovl("ox", "10.244.8.0/25", "192.168.1.20", "02:00:00:00:08:01"), // overlaps o8
		l2("l20", "10.244.20.0/24", "192.168.1.20"),
		l2("l20", "10.244.20.0/24", "192.168.1.77"), // l20 altered: the router's MAC
		l2("l21", "10.244.21.0/24", "192.168.1.20"),
		l2("lx", "10.244.0.0/24", "192.168.1.20"), // the overlay's subnet
	}
	frames := []struct{ in string }{{"ov-a"}, {"ov-a"}, {"ov-a"}, {"ov-a"}, {"l2-a"}, {"l2-a"}}
	frame := func(i int, sport uint16) []byte {
		switch i {
		case 0, 1, 2:
			return ulUDPSized(t, ulOvA, ulDR, "10.244.0.10", fmt.Sprintf("10.244.%d.5", 7+i), sport, 2000, 100)
		case 3:
			return ulUDPSized(t, ulOvA, ulDR, "fd00:244::10", "fd00:247::5", sport, 2000, 100)
		default:
			return ulUDPSized(t, ulL2A, ulRouter, "192.168.1.100", fmt.Sprintf("10.244.%d.5", 20+i-4), sport, 2000, 100)
		}
	}
	rerouted, refused := 0, 0
	for seq := range 4 {
		rng := rand.New(rand.NewPCG(uint64(seq), 23))
		cur := ulRoutes(t)
		inc, ref := ulNewRig(t, cur), ulNewRig(t, cur)
		ref.sw.noIncremental = true
		for step := range 30 {
			next := ulRoutes(t, slices.Clone(cur.Routes)...)
			switch r := pool[rng.IntN(len(pool))]; {
			case rng.IntN(3) == 0 && len(next.Routes) > 0:
				k := rng.IntN(len(next.Routes))
				next.Routes = slices.Delete(next.Routes, k, k+1)
			default:
				if k := slices.IndexFunc(next.Routes, func(o hns.RemoteRouteConfig) bool { return o.Name == r.Name }); k >= 0 {
					next.Routes[k] = r
				} else {
					next.Routes = append(next.Routes, r)
				}
			}
			at := fmt.Sprintf("sequence %d step %d (routes %v)", seq, step, next.Routes)
			before := inc.sw.pol.Load()
			gotErr, wantErr := inc.sw.Apply(next), ref.sw.Apply(next)
			if (gotErr == nil) != (wantErr == nil) {
				t.Fatalf("%s: Apply: %v\nwhole: %v", at, gotErr, wantErr)
			}
			if gotErr != nil {
				refused++
				continue
			}
			cur = next
			pol := inc.sw.pol.Load()
			if pol.rerouted {
				rerouted++
				rc := pol.lowered.Routes()
				for i, p := range pol.ports {
					if kept := p == before.ports[i]; kept == slices.Contains(rc.Ports, i) {
						t.Fatalf("%s: port %s kept %v, listed in the change %v", at, p.Name, kept, rc.Ports)
					}
					if p.ID != before.ports[i].ID {
						t.Fatalf("%s: port %s has ID %d, was %d", at, p.Name, p.ID, before.ports[i].ID)
					}
				}
			}
			incSame(t, at, pol, ref.sw.pol.Load())
			for i, f := range frames {
				for _, sport := range []uint16{1000, uint16(3000 + step)} { // cached earlier, and new
					gp, gtr := inc.run(f.in, frame(i, sport), dataplane.Offload{})
					wp, _ := ref.run(f.in, frame(i, sport), dataplane.Offload{})
					if g, w := outName(inc.sw, gp), outName(ref.sw, wp); g != w || !bytes.Equal(gp.Bytes(), wp.Bytes()) {
						t.Fatalf("%s: frame %d from %d: %s, whole %s (bytes equal %v)\ntrace:\n%s", at, i, sport, g, w,
							bytes.Equal(gp.Bytes(), wp.Bytes()), gtr)
					}
				}
			}
		}
	}
	t.Logf("%d changes of routes compiled as changes, %d refused", rerouted, refused)
	if rerouted < 40 || refused == 0 {
		t.Errorf("%d changes of routes compiled as changes, %d refused: the sequences do not exercise both", rerouted, refused)
	}
}
