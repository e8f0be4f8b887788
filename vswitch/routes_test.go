package vswitch

import (
	"bytes"
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
// provider address is refused.
func TestRoutesOverlayTraffic(t *testing.T) {
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

	if err := r.sw.Apply(ulRoutes(t, routes...)); err != nil {
		t.Fatal(err)
	}
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
	if err := r.sw.Apply(ulRoutes(t)); err != nil {
		t.Fatal(err)
	}
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
// packet goes to the gateway again.
func TestRoutesL2BridgeTraffic(t *testing.T) {
	route := hns.RemoteRouteConfig{Name: "node/n9/10.244.9.0_24", HostComputeNetwork: "cbr0", DestinationPrefix: "10.244.9.0/24",
		NextHop: "192.168.1.20", Owner: "ufp-agent/node-1"}
	frame := ulUDPSized(t, ulL2A, ulRouter, "192.168.1.100", "10.244.9.5", 1000, 2000, 100)
	r := ulNewRig(t, ulRoutes(t))
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
	if err := r.sw.Apply(ulRoutes(t, route)); err != nil {
		t.Fatal(err)
	}
	step("with the route", ulPAMAC)
	if err := r.sw.Apply(ulRoutes(t)); err != nil {
		t.Fatal(err)
	}
	step("the route deleted", ulRouter)
}
