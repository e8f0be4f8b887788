package hns

import (
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/encap"
	"github.com/ufp-dev/ufp/vfp"
)

// l2RouteDoc is an L2Bridge node: two pods (pod-b with an SDNRoute of its
// own), node 2 at 192.168.50.2 and the underlay router at .254, the
// default gateway.
const l2RouteDoc = `{
  "Uplink": {"MacAddress": "02:00:00:00:00:fe", "IpAddresses": ["192.168.50.1/24"], "DefaultGateway": "192.168.50.254",
    "Neighbors": [{"IpAddress": "192.168.50.2", "MacAddress": "02:00:00:00:00:02"},
      {"IpAddress": "192.168.50.254", "MacAddress": "02:00:00:00:00:fd"}]},
  "Networks": [{"Name": "l2b", "Type": "L2Bridge",
    "Ipams": [{"Subnets": [{"IpAddressPrefix": "10.244.1.0/24",
      "Routes": [{"NextHop": "10.244.1.1", "DestinationPrefix": "0.0.0.0/0"}]}]}]}],
  "Endpoints": [
    {"Name": "pod-a", "HostComputeNetwork": "l2b", "MacAddress": "02:00:00:00:01:0a", "IpConfigurations": [{"IpAddress": "10.244.1.10"}]},
    {"Name": "pod-b", "HostComputeNetwork": "l2b", "MacAddress": "02:00:00:00:01:0b", "IpConfigurations": [{"IpAddress": "10.244.1.11"}],
     "Policies": [{"Type": "SDNRoute", "Settings": {"DestinationPrefix": "10.244.3.0/25", "NextHop": "192.168.50.254"}}]}]
}`

func l2RouteDocument(t *testing.T, edit func(d *Document)) *Document {
	t.Helper()
	var d Document
	if err := json.Unmarshal([]byte(l2RouteDoc), &d); err != nil {
		t.Fatal(err)
	}
	edit(&d)
	return &d
}

// ovlRoute is a route of objectDoc's overlay network to node 3.
func ovlRoute(name, prefix, pa string) RemoteRouteConfig {
	return RemoteRouteConfig{Name: name, HostComputeNetwork: "ovl", DestinationPrefix: prefix, ProviderAddress: pa,
		DistributedRouterMacAddress: "02:00:00:00:03:01", Owner: "ufp-agent/node-1"}
}

// l2Route is a host-gateway route of l2RouteDoc's network.
func l2Route(name, prefix, nextHop string) RemoteRouteConfig {
	return RemoteRouteConfig{Name: name, HostComputeNetwork: "l2b", DestinationPrefix: prefix, NextHop: nextHop, Owner: "ufp-agent/node-1"}
}

// portLayer returns the layer named name of port in d, or nil.
func portLayer(d *vfp.Document, port, name string) *vfp.LayerConfig {
	for i := range d.Ports {
		if d.Ports[i].Name != port {
			continue
		}
		for j := range d.Ports[i].Layers {
			if d.Ports[i].Layers[j].Name == name {
				return &d.Ports[i].Layers[j]
			}
		}
	}
	return nil
}

// ruleTo returns the rule of layer ly that matches destination prefix p,
// or nil.
func ruleTo(ly *vfp.LayerConfig, p string) *vfp.RuleConfig {
	if ly == nil {
		return nil
	}
	want := vfp.Prefix(netip.MustParsePrefix(p))
	for i := range ly.Groups {
		for j := range ly.Groups[i].Rules {
			r := &ly.Groups[i].Rules[j]
			if r.Match != nil && len(r.Match.DstIPs) == 1 && r.Match.DstIPs[0] == want {
				return r
			}
		}
	}
	return nil
}

// TestRoutesOverlay checks that an Overlay network's Routes lower as its
// RemoteSubnetRoute policies do: the VNI (0: the network's), the provider
// address and its MAC (the default gateway's when Neighbors has none),
// the inner router MAC, on every endpoint and in the uplink's decap layer.
func TestRoutesOverlay(t *testing.T) {
	router := "02:00:00:00:00:fd"
	for _, tc := range []struct {
		name   string
		route  RemoteRouteConfig
		gw     bool // the uplink has a default gateway (192.168.50.254)
		vni    uint32
		outMAC string
	}{
		{name: "listed neighbour, the network's VNI", route: ovlRoute("node/n2b/10.244.4.0_24", "10.244.4.0/24", "192.168.50.2"),
			vni: 4096, outMAC: "02:00:00:00:00:02"},
		{name: "VNI given", route: func() RemoteRouteConfig {
			r := ovlRoute("node/n2b/10.244.4.0_24", "10.244.4.0/24", "192.168.50.2")
			r.IsolationId = 4096
			return r
		}(), vni: 4096, outMAC: "02:00:00:00:00:02"},
		{name: "unlisted PA to the default gateway", route: ovlRoute("node/n3/10.244.3.0_24", "10.244.3.0/24", "192.168.60.3"),
			gw: true, vni: 4096, outMAC: router},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := objectDocument(t, func(d *Document) {
				if tc.gw {
					d.Uplink.DefaultGateway = "192.168.50.254"
					d.Uplink.Neighbors = append(d.Uplink.Neighbors, NeighborConfig{IpAddress: "192.168.50.254", MacAddress: router})
				}
				d.Routes = []RemoteRouteConfig{tc.route}
			})
			low, err := Lower(d)
			if err != nil {
				t.Fatal(err)
			}
			pa := netip.MustParseAddr(tc.route.ProviderAddress)
			for _, pod := range []string{"pod-a", "pod-b"} {
				r := ruleTo(portLayer(low, pod, encap.LayerEncap), tc.route.DestinationPrefix)
				if r == nil || r.Action.Push == nil {
					t.Fatalf("%s: no encapsulating rule to %s", pod, tc.route.DestinationPrefix)
				}
				p := r.Action.Push
				if p.VNI != tc.vni || p.DstIP != pa || p.DstMAC.String() != tc.outMAC || p.SrcIP != netip.MustParseAddr("192.168.50.1") {
					t.Errorf("%s: push %+v, want VNI %d to %s at %s", pod, p, tc.vni, pa, tc.outMAC)
				}
				if r.Action.Modify == nil || r.Action.Modify.DstMAC.String() != tc.route.DistributedRouterMacAddress {
					t.Errorf("%s: inner destination MAC %+v, want %s", pod, r.Action.Modify, tc.route.DistributedRouterMacAddress)
				}
			}
			// The policy's route is still there.
			if ruleTo(portLayer(low, "pod-a", encap.LayerEncap), "10.244.2.0/24") == nil {
				t.Error("the RemoteSubnetRoute policy's rule is gone")
			}
			decap := portLayer(low, "uplink", encap.LayerPARoute)
			if decap == nil || !strings.Contains(mustJSON(t, decap), tc.route.ProviderAddress) {
				t.Errorf("the uplink's %s does not take VXLAN from %s", encap.LayerPARoute, pa)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRoutesL2Bridge checks an L2Bridge network's Routes: a rule per
// route on every endpoint, to the next hop's MAC (the default gateway's
// when Neighbors has none), but on an endpoint whose own SDNRoute
// overlaps it (the endpoint's own wins).
func TestRoutesL2Bridge(t *testing.T) {
	d := l2RouteDocument(t, func(d *Document) {
		d.Routes = []RemoteRouteConfig{
			l2Route("node/n2/10.244.2.0_24", "10.244.2.0/24", "192.168.50.2"),
			l2Route("node/n3/10.244.3.0_24", "10.244.3.0/24", "192.168.60.3"), // off-link: the router
		}
	})
	low, err := Lower(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pod, prefix string
		mac         string // "": no rule
	}{
		{"pod-a", "10.244.2.0/24", "02:00:00:00:00:02"},
		{"pod-a", "10.244.3.0/24", "02:00:00:00:00:fd"},
		{"pod-b", "10.244.2.0/24", "02:00:00:00:00:02"},
		{"pod-b", "10.244.3.0/24", ""},                  // overlaps pod-b's own SDNRoute
		{"pod-b", "10.244.3.0/25", "02:00:00:00:00:fd"}, // that SDNRoute
	} {
		r := ruleTo(portLayer(low, tc.pod, encap.LayerRoute), tc.prefix)
		switch {
		case tc.mac == "" && r != nil:
			t.Errorf("%s: a rule to %s: %+v", tc.pod, tc.prefix, r)
		case tc.mac == "":
		case r == nil || r.Action.Modify == nil:
			t.Errorf("%s: no rule to %s", tc.pod, tc.prefix)
		case r.Action.Modify.DstMAC.String() != tc.mac:
			t.Errorf("%s: to %s via %s, want %s", tc.pod, tc.prefix, r.Action.Modify.DstMAC, tc.mac)
		}
	}
}

// TestRoutesFallbackPolicies checks that a RemoteSubnetRoute policy's
// provider address and an SDNRoute's next hop that Neighbors does not
// list go to the default gateway's MAC, and keep their errors without
// one.
func TestRoutesFallbackPolicies(t *testing.T) {
	remote := func(d *Document) {
		d.Networks[0].Policies[2].Settings = json.RawMessage(`{"DestinationPrefix": "10.244.2.0/24", "IsolationId": 4096,
			"ProviderAddress": "192.168.60.2", "DistributedRouterMacAddress": "02:00:00:00:02:01"}`)
	}
	_, err := Lower(objectDocument(t, remote))
	if err == nil || !strings.Contains(err.Error(), "no MAC is known for 192.168.60.2: list it (or the router toward it) in Uplink.Neighbors") {
		t.Errorf("RemoteSubnetRoute without a gateway: %v", err)
	}
	low, err := Lower(objectDocument(t, func(d *Document) {
		remote(d)
		d.Uplink.DefaultGateway = "192.168.50.254"
		d.Uplink.Neighbors = append(d.Uplink.Neighbors, NeighborConfig{IpAddress: "192.168.50.254", MacAddress: "02:00:00:00:00:fd"})
	}))
	if err != nil {
		t.Fatal(err)
	}
	if r := ruleTo(portLayer(low, "pod-a", encap.LayerEncap), "10.244.2.0/24"); r == nil || r.Action.Push.DstMAC.String() != "02:00:00:00:00:fd" {
		t.Errorf("RemoteSubnetRoute with a gateway: %+v", r)
	}
	sdn := func(d *Document) {
		d.Endpoints[0].Policies = []PolicyConfig{{Type: "SDNRoute", Settings: json.RawMessage(`{"DestinationPrefix": "10.50.0.0/16", "NextHop": "192.168.60.9"}`)}}
	}
	low, err = Lower(l2RouteDocument(t, sdn))
	if err != nil {
		t.Fatal(err)
	}
	if r := ruleTo(portLayer(low, "pod-a", encap.LayerRoute), "10.50.0.0/16"); r == nil || r.Action.Modify.DstMAC.String() != "02:00:00:00:00:fd" {
		t.Errorf("SDNRoute with a gateway: %+v", r)
	}
	_, err = Lower(l2RouteDocument(t, func(d *Document) { sdn(d); d.Uplink.DefaultGateway = "" }))
	if err == nil || !strings.Contains(err.Error(), "no MAC is known for 192.168.60.9: list it in Uplink.Neighbors") {
		t.Errorf("SDNRoute without a gateway: %v", err)
	}
}

// TestRoutesL2BridgeRemoteEndpoint checks that an L2Bridge remote
// endpoint without a MAC (a Service's backend on another node) is sent
// to the node a host-gateway route names.
func TestRoutesL2BridgeRemoteEndpoint(t *testing.T) {
	low, err := Lower(l2RouteDocument(t, func(d *Document) {
		d.Routes = []RemoteRouteConfig{l2Route("node/n2/10.244.2.0_24", "10.244.2.0/24", "192.168.50.2")}
		d.Endpoints = append(d.Endpoints, EndpointConfig{Name: "remote.10.244.2.5", HostComputeNetwork: "l2b", Flags: EndpointFlagRemote,
			IpConfigurations: []IpConfigConfig{{IpAddress: "10.244.2.5"}}})
		d.LoadBalancers = []LoadBalancerConfig{{Name: "web", HostComputeEndpoints: []string{"remote.10.244.2.5"}, SourceVIP: "10.244.1.250",
			FrontendVIPs: []string{"10.96.0.10"}, PortMappings: []LoadBalancerPortMappingConfig{{Protocol: 6, InternalPort: 80, ExternalPort: 80}}}}
	}))
	if err != nil {
		t.Fatal(err)
	}
	be := low.Switch.LoadBalancers[0].Backends[0]
	if want, _ := dataplane.ParseMAC("02:00:00:00:00:02"); be.Modify == nil || be.Modify.DstMAC != want {
		t.Errorf("backend %+v, want it sent to node 2's MAC", be)
	}
}

// TestRoutesInvalid checks that Lower refuses invalid routes naming the
// route (an ObjectError) and the field.
func TestRoutesInvalid(t *testing.T) {
	ovl := func(rs ...RemoteRouteConfig) func(d *Document) {
		return func(d *Document) { d.Routes = rs }
	}
	with := func(r RemoteRouteConfig, f func(r *RemoteRouteConfig)) RemoteRouteConfig { f(&r); return r }
	base := ovlRoute("r1", "10.244.4.0/24", "192.168.50.2")
	for _, tc := range []struct {
		name string
		l2   bool // on l2RouteDoc, else objectDoc
		edit func(d *Document)
		obj  string // the route blamed ("": none)
		msg  string
	}{
		{name: "no name", edit: ovl(with(base, func(r *RemoteRouteConfig) { r.Name = "" })), msg: "Routes[0].Name: a route needs a name"},
		{name: "duplicate name", edit: ovl(base, with(base, func(r *RemoteRouteConfig) { r.DestinationPrefix = "10.244.5.0/24" })),
			obj: "r1", msg: `Routes[1] "r1".Name: Routes[0] has this name`},
		{name: "bad owner", edit: ovl(with(base, func(r *RemoteRouteConfig) { r.Owner = "a\x01" })), obj: "r1", msg: `Routes[0] "r1".Owner:`},
		{name: "no network", edit: ovl(with(base, func(r *RemoteRouteConfig) { r.HostComputeNetwork = "nope" })),
			obj: "r1", msg: `Routes[0] "r1".HostComputeNetwork: no network is named "nope"`},
		{name: "next hop on overlay", edit: ovl(with(base, func(r *RemoteRouteConfig) { r.NextHop = "192.168.50.2" })),
			obj: "r1", msg: `Routes[0] "r1".NextHop: network "ovl" is Overlay`},
		{name: "bad prefix", edit: ovl(with(base, func(r *RemoteRouteConfig) { r.DestinationPrefix = "10.244.4.1/24" })),
			obj: "r1", msg: `Routes[0] "r1".DestinationPrefix: 10.244.4.1/24 has host bits set`},
		{name: "overlaps a policy's route", edit: ovl(with(base, func(r *RemoteRouteConfig) { r.DestinationPrefix = "10.244.2.0/25" })),
			obj: "r1", msg: `Routes[0] "r1".DestinationPrefix: 10.244.2.0/25 overlaps 10.244.2.0/24 of Networks[0] "ovl".Policies[2].Settings`},
		{name: "overlaps another route", edit: ovl(base, with(base, func(r *RemoteRouteConfig) { r.Name, r.DestinationPrefix = "r2", "10.244.4.0/23" })),
			obj: "r2", msg: `Routes[1] "r2".DestinationPrefix: 10.244.4.0/23 overlaps 10.244.4.0/24 of Routes[0] "r1"`},
		{name: "overlaps the local subnet", edit: ovl(with(base, func(r *RemoteRouteConfig) { r.DestinationPrefix = "10.244.1.128/25" })),
			obj: "r1", msg: `Routes[0] "r1".DestinationPrefix: 10.244.1.128/25 overlaps Networks[0] "ovl" subnet 10.244.1.0/24`},
		{name: "own provider address", edit: ovl(with(base, func(r *RemoteRouteConfig) { r.ProviderAddress = "192.168.50.1" })),
			obj: "r1", msg: "this host's own provider address"},
		{name: "PA of another family", edit: ovl(with(base, func(r *RemoteRouteConfig) { r.ProviderAddress = "fd00::2" })),
			obj: "r1", msg: "fd00::2 is IPv6, but the network has no IPv6 ProviderAddress"},
		{name: "PA without MAC or gateway", edit: ovl(with(base, func(r *RemoteRouteConfig) { r.ProviderAddress = "192.168.60.2" })),
			obj: "r1", msg: `Routes[0] "r1".ProviderAddress: no MAC is known for 192.168.60.2`},
		{name: "wrong VNI", edit: ovl(with(base, func(r *RemoteRouteConfig) { r.IsolationId = 7 })),
			obj: "r1", msg: `Routes[0] "r1".IsolationId: 7 is not the network's VNI`},
		{name: "bad DR MAC", edit: ovl(with(base, func(r *RemoteRouteConfig) { r.DistributedRouterMacAddress = "01:00:5e:00:00:01" })),
			obj: "r1", msg: `Routes[0] "r1".DistributedRouterMacAddress`},
		{name: "L2Bridge with a provider address", l2: true,
			edit: ovl(with(l2Route("h1", "10.244.2.0/24", "192.168.50.2"), func(r *RemoteRouteConfig) { r.ProviderAddress = "192.168.50.2" })),
			obj:  "h1", msg: `Routes[0] "h1".ProviderAddress: network "l2b" is L2Bridge`},
		{name: "L2Bridge with a VNI", l2: true,
			edit: ovl(with(l2Route("h1", "10.244.2.0/24", "192.168.50.2"), func(r *RemoteRouteConfig) { r.IsolationId = 1 })),
			obj:  "h1", msg: `Routes[0] "h1".IsolationId: network "l2b" is L2Bridge`},
		{name: "L2Bridge without next hop", l2: true, edit: ovl(l2Route("h1", "10.244.2.0/24", "")),
			obj: "h1", msg: `Routes[0] "h1".NextHop: a route of L2Bridge network "l2b" needs a next hop`},
		{name: "L2Bridge next hop of another family", l2: true, edit: ovl(l2Route("h1", "10.244.2.0/24", "fd00::2")),
			obj: "h1", msg: `Routes[0] "h1".NextHop: fd00::2 is IPv6, but the prefix 10.244.2.0/24 is IPv4`},
		{name: "L2Bridge next hop the host", l2: true, edit: ovl(l2Route("h1", "10.244.2.0/24", "192.168.50.1")),
			obj: "h1", msg: "this host's own address"},
		{name: "L2Bridge next hop without MAC or gateway", l2: true,
			edit: func(d *Document) {
				d.Uplink.DefaultGateway = ""
				d.Routes = []RemoteRouteConfig{l2Route("h1", "10.244.2.0/24", "192.168.60.2")}
			},
			obj: "h1", msg: `Routes[0] "h1".NextHop: no MAC is known for 192.168.60.2`},
		{name: "L2Bridge routes overlap", l2: true,
			edit: ovl(l2Route("h1", "10.244.2.0/24", "192.168.50.2"), l2Route("h2", "10.244.0.0/16", "192.168.50.2")),
			obj:  "h2", msg: `Routes[1] "h2".DestinationPrefix: 10.244.0.0/16 overlaps 10.244.2.0/24 of Routes[0] "h1"`},
		{name: "L2Bridge route over the local subnet", l2: true, edit: ovl(l2Route("h1", "10.244.1.0/25", "192.168.50.2")),
			obj: "h1", msg: `Routes[0] "h1".DestinationPrefix: 10.244.1.0/25 overlaps Networks[0] "l2b" subnet 10.244.1.0/24`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d *Document
			if tc.l2 {
				d = l2RouteDocument(t, tc.edit)
			} else {
				d = objectDocument(t, tc.edit)
			}
			_, err := Lower(d)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q, want it to say %q", err, tc.msg)
			}
			var oe *ObjectError
			switch {
			case tc.obj == "" && errors.As(err, &oe):
				t.Errorf("blames %s, want no object", oe.Object())
			case tc.obj != "" && !errors.As(err, &oe):
				t.Errorf("blames no object, want route %s", tc.obj)
			case tc.obj != "" && (oe.Kind != KindRoute || oe.Name != tc.obj):
				t.Errorf("blames %s, want route %s", oe.Object(), tc.obj)
			}
		})
	}
}
