package encap

import (
	"net/netip"
	"slices"
	"strconv"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/rules"
	"github.com/ufp-dev/ufp/vfp"
)

func mac(s string) dataplane.MAC { m, _ := dataplane.ParseMAC(s); return m }

// ruleNames lists a layer's rules as "group/rule@priority".
func ruleNames(l *vfp.LayerConfig) []string {
	var out []string
	for _, g := range l.Groups {
		for _, r := range g.Rules {
			out = append(out, g.Name+"/"+r.Name+"@"+strconv.Itoa(int(*r.Priority)))
		}
	}
	return out
}

// compiles checks that a layer this package writes is valid VFP.
func compiles(t *testing.T, l *vfp.LayerConfig) *rules.Layer {
	t.Helper()
	st, _, err := vfp.NewEnv(nil).Stateful(&vfp.SwitchConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := l.Compile("layer", st, false)
	if err != nil {
		t.Fatalf("the layer does not compile: %v", err)
	}
	return cl
}

func TestEncapLayerLongestPrefixFirst(t *testing.T) {
	v := &VTEP{MAC: mac("02:00:00:00:00:01"), PA4: netip.MustParseAddr("192.168.1.10"), Port: 4789}
	tun := func(name, prefix, remote string) Tunnel {
		return Tunnel{Name: name, Prefix: netip.MustParsePrefix(prefix), VNI: 4096, Remote: netip.MustParseAddr(remote),
			RemoteMAC: mac("02:00:00:00:00:02"), RouterMAC: mac("02:00:00:00:00:03")}
	}
	l := v.EncapLayer([]Tunnel{tun("a", "10.244.0.0/16", "192.168.1.11"), tun("b", "10.244.2.0/24", "192.168.1.12"), tun("c", "10.244.0.0/16", "192.168.1.13")})
	if got, want := ruleNames(l), []string{"vxlan-to-remote-hosts/b@100", "vxlan-to-remote-hosts/a@101", "vxlan-to-remote-hosts/c@102"}; !slices.Equal(got, want) {
		t.Errorf("rules %v, want %v", got, want)
	}
	p := l.Groups[0].Rules[0].Action.Push
	if p.SrcIP != netip.MustParseAddr("192.168.1.10") || p.DstIP != netip.MustParseAddr("192.168.1.12") || p.VNI != 4096 || p.DstPort != 4789 || !p.DontFragment {
		t.Errorf("push %+v", *p)
	}
	compiles(t, l)
	if v.EncapLayer(nil) != nil {
		t.Error("a layer without tunnels")
	}
}

func TestDecapLayerValidatesWhatArrives(t *testing.T) {
	n := Network{VNIs: []uint32{4096, 4096}, Subnets: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")},
		RouterMAC: mac("02:00:00:00:00:fe"), Local: VTEP{PA4: netip.MustParseAddr("192.168.1.10")},
		Remotes: []Tunnel{{Prefix: netip.MustParsePrefix("10.244.2.0/24"), VNI: 4096, Remote: netip.MustParseAddr("192.168.1.11")}}}
	l := DecapLayer([]Network{n})
	want := []string{
		"vxlan-from-remote-hosts/own-router-mac-02:00:00:00:00:fe@10",
		"vxlan-from-remote-hosts/from-192.168.1.11-10.244.2.0/24@100",
		"vxlan-from-remote-hosts/inner-source-not-behind-provider@60000",
		"vxlan-from-remote-hosts/unknown-provider-address@60001",
		"vxlan-from-remote-hosts/unknown-vni@60002",
	}
	if got := ruleNames(l); !slices.Equal(got, want) {
		t.Errorf("rules %v, want %v", got, want)
	}
	if m := l.Groups[0].Rules[0].Match; !slices.Equal(m.VNIs, []uint32{4096}) || !slices.Equal(m.SrcMACs, []dataplane.MAC{{2, 0, 0, 0, 0, 0xfe}}) {
		t.Errorf("the loop rule matches %+v", *m)
	}
	m := l.Groups[0].Rules[1].Match
	if !slices.Equal(m.VNIs, []uint32{4096}) || !slices.Equal(m.OuterDstIPs, vfp.Hosts(netip.MustParseAddr("192.168.1.10"))) ||
		!slices.Equal(m.DstIPs, vfp.Prefixes(netip.MustParsePrefix("10.244.1.0/24"))) {
		t.Errorf("the decap rule matches %+v", *m)
	}
	compiles(t, l)
	if DecapLayer(nil) != nil || DecapLayer([]Network{{}}) != nil {
		t.Error("a decap layer with no VNI owned")
	}
}

func TestL2BridgeLayers(t *testing.T) {
	host := mac("02:00:00:00:00:01")
	rw := MACRewriteLayer(host, []Bridged{{Name: "pod-a", MAC: mac("02:00:00:00:00:0a"), IPs: []netip.Addr{netip.MustParseAddr("192.168.1.20")}}})
	if got, want := ruleNames(rw), []string{"l2bridge-egress/source-mac-to-host@100", "l2bridge-ingress/to-pod-a@100"}; !slices.Equal(got, want) {
		t.Errorf("rules %v, want %v", got, want)
	}
	compiles(t, rw)
	rl := RouteLayer([]NextHop{{Prefix: netip.MustParsePrefix("10.0.0.0/8"), MAC: host}, {Prefix: netip.MustParsePrefix("10.1.0.0/16"), MAC: host}})
	if got, want := ruleNames(rl), []string{"sdn-routes/sdn-route-10.1.0.0/16@100", "sdn-routes/sdn-route-10.0.0.0/8@101"}; !slices.Equal(got, want) {
		t.Errorf("rules %v, want %v", got, want)
	}
	compiles(t, rl)
	if MACRewriteLayer(host, nil) != nil || RouteLayer(nil) != nil {
		t.Error("a layer with nothing in it")
	}
	if Overhead(false) != 50 || Overhead(true) != 70 {
		t.Errorf("overheads %d and %d, want 50 and 70", Overhead(false), Overhead(true))
	}
}
