package rules

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
)

// encapView is a UDP packet between two pods, arrived in VXLAN with vni
// from outer source osrc to outer destination odst; osrc "" is a packet
// that is not encapsulated.
func encapView(osrc, odst string, vni uint32) dataplane.View {
	v := udp4(53)
	if osrc != "" {
		v.Encap, v.VNI = true, vni
		v.OuterSrc, v.OuterDst = netip.MustParseAddr(osrc), netip.MustParseAddr(odst)
		v.OuterSrcMAC, v.OuterDstMAC = macB, macA
		v.OuterDstPort = dataplane.VXLANPort
	}
	return v
}

func TestConditionEncapsulatedMatch(t *testing.T) {
	plain := encapView("", "", 0)
	tunneled := encapView("192.168.1.20", "192.168.1.10", 4096)
	// Outer fields left over on a packet that is not (or no longer)
	// encapsulated must not count: Encap is what says there is an outer
	// header set.
	stale := tunneled
	stale.Encap = false
	for _, tt := range []struct {
		name string
		c    Condition
		v    dataplane.View
		want bool
	}{
		{"encapsulated matches a tunnelled packet", Condition{Encapsulated: true}, tunneled, true},
		{"encapsulated does not match a plain packet", Condition{Encapsulated: true}, plain, false},
		{"encapsulated does not match outer fields without Encap", Condition{Encapsulated: true}, stale, false},
		{"not encapsulated is no condition (tunnelled)", Condition{}, tunneled, true},
		{"not encapsulated is no condition (plain)", Condition{}, plain, true},
		{"encapsulated with the right VNI", Condition{Encapsulated: true, VNIs: []uint32{4096}}, tunneled, true},
		{"encapsulated with another VNI", Condition{Encapsulated: true, VNIs: []uint32{4097}}, tunneled, false},
		{"encapsulated and inner source", Condition{Encapsulated: true, SrcIPs: pfx("10.0.0.0/24")}, tunneled, true},
		{"encapsulated and other inner source", Condition{Encapsulated: true, SrcIPs: pfx("10.9.0.0/24")}, tunneled, false},
		{"encapsulated, direction in, packet out", Condition{Direction: In, Encapsulated: true}, tunneled, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.c.Match(&tt.v, Out); got != tt.want {
				t.Errorf("%s: Match = %v, want %v", tt.c.String(), got, tt.want)
			}
		})
	}
}

func TestConditionOuterSrcIPsMatch(t *testing.T) {
	v4 := encapView("192.168.1.20", "192.168.1.10", 4096)
	v6 := encapView("fd00:1::20", "fd00:1::10", 4096)
	plain := encapView("", "", 0)
	stale := v4
	stale.Encap = false
	noOuter := v4
	noOuter.OuterSrc = netip.Addr{}
	for _, tt := range []struct {
		name string
		c    Condition
		v    dataplane.View
		want bool
	}{
		{"host prefix, same address", Condition{OuterSrcIPs: pfx("192.168.1.20/32")}, v4, true},
		{"host prefix, other address", Condition{OuterSrcIPs: pfx("192.168.1.21/32")}, v4, false},
		{"subnet", Condition{OuterSrcIPs: pfx("192.168.0.0/16")}, v4, true},
		{"second prefix of several", Condition{OuterSrcIPs: pfx("10.0.0.0/8", "192.168.1.16/28")}, v4, true},
		{"none of several", Condition{OuterSrcIPs: pfx("10.0.0.0/8", "192.168.2.0/24")}, v4, false},
		{"IPv6 outer in an IPv6 prefix", Condition{OuterSrcIPs: pfx("fd00:1::/64")}, v6, true},
		{"IPv6 outer, IPv4 prefix only", Condition{OuterSrcIPs: pfx("0.0.0.0/0")}, v6, false},
		{"IPv4 outer, IPv6 prefix only", Condition{OuterSrcIPs: pfx("::/0")}, v4, false},
		{"IPv4 outer, both families", Condition{OuterSrcIPs: pfx("::/0", "0.0.0.0/0")}, v4, true},
		{"plain packet never matches", Condition{OuterSrcIPs: pfx("0.0.0.0/0", "::/0")}, plain, false},
		{"stale outer source without Encap", Condition{OuterSrcIPs: pfx("192.168.1.20/32")}, stale, false},
		{"encapsulated without an outer source", Condition{OuterSrcIPs: pfx("0.0.0.0/0", "::/0")}, noOuter, false},
		// The outer source, not the inner one, is what is compared.
		{"inner source is not the outer source", Condition{OuterSrcIPs: pfx("10.0.0.10/32")}, v4, false},
		{"outer destination is not the outer source", Condition{OuterSrcIPs: pfx("192.168.1.10/32")}, v4, false},
		{"with VNI and inner source (decap rule)", Condition{VNIs: []uint32{4096}, OuterSrcIPs: pfx("192.168.1.20/32"), SrcIPs: pfx("10.0.0.0/24")}, v4, true},
		{"with VNI, wrong inner source", Condition{VNIs: []uint32{4096}, OuterSrcIPs: pfx("192.168.1.20/32"), SrcIPs: pfx("10.1.0.0/24")}, v4, false},
		{"with VNI, wrong VNI", Condition{VNIs: []uint32{5000}, OuterSrcIPs: pfx("192.168.1.20/32")}, v4, false},
		// The IP version condition is about the tenant (inner) packet.
		{"IPv4 inner over IPv6 outer, ipVersion 4", Condition{IPVersion: 4, OuterSrcIPs: pfx("fd00:1::/64")}, v6, true},
		{"IPv4 inner over IPv6 outer, ipVersion 6", Condition{IPVersion: 6, OuterSrcIPs: pfx("fd00:1::/64")}, v6, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.c.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if got := tt.c.Match(&tt.v, Out); got != tt.want {
				t.Errorf("%s: Match = %v, want %v", tt.c.String(), got, tt.want)
			}
		})
	}
}

func TestConditionOuterSrcIPsValidate(t *testing.T) {
	mapped := netip.PrefixFrom(netip.MustParseAddr("::ffff:192.168.1.20"), 128)
	for _, tt := range []struct {
		name string
		c    Condition
		want string // "" for valid
	}{
		{"host prefix", Condition{OuterSrcIPs: pfx("192.168.1.20/32")}, ""},
		{"masked subnet", Condition{OuterSrcIPs: pfx("192.168.0.0/16", "fd00::/8")}, ""},
		{"host bits (IPv4)", Condition{OuterSrcIPs: pfx("192.168.1.20/24")},
			"outerSrcIPs[0]: 192.168.1.20/24 has host bits set (did you mean 192.168.1.0/24?)"},
		{"host bits (IPv6), second prefix", Condition{OuterSrcIPs: pfx("10.0.0.0/8", "fd00::1/64")},
			"outerSrcIPs[1]: fd00::1/64 has host bits set (did you mean fd00::/64?)"},
		{"zero prefix", Condition{OuterSrcIPs: []netip.Prefix{{}}}, "outerSrcIPs[0]: invalid prefix"},
		{"IPv4-mapped IPv6", Condition{OuterSrcIPs: []netip.Prefix{mapped}}, "outerSrcIPs[0]: invalid prefix"},
		// Prefixes are checked in a fixed order: the tenant ones first.
		{"srcIPs reported before outerSrcIPs", Condition{SrcIPs: pfx("10.0.0.1/8"), OuterSrcIPs: pfx("192.168.1.20/24")},
			"srcIPs[0]: 10.0.0.1/8 has host bits set"},
		{"dstIPs reported before outerSrcIPs", Condition{DstIPs: pfx("10.0.0.1/8"), OuterSrcIPs: pfx("192.168.1.20/24")},
			"dstIPs[0]: 10.0.0.1/8 has host bits set"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate: %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.want)):
				t.Errorf("Validate: %v, want %q", err, tt.want)
			}
		})
	}
}

func TestLayerCompileRejectsBadOuterSrcIPs(t *testing.T) {
	l := Layer{Name: "pa", Groups: []Group{
		group("g", Condition{Encapsulated: true, OuterSrcIPs: pfx("192.168.1.0/24")},
			rule("r", 1, Condition{OuterSrcIPs: pfx("192.168.1.20/16")}, allow())),
	}}
	err := l.Compile()
	if want := "groups[0].rules[0].match.outerSrcIPs[0]: 192.168.1.20/16 has host bits set"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Compile: %v, want %q", err, want)
	}
	l.Groups[0].Match.OuterSrcIPs = pfx("192.168.1.1/24")
	err = l.Compile()
	if want := "groups[0].match.outerSrcIPs[0]: 192.168.1.1/24 has host bits set"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Compile: %v, want %q", err, want)
	}
}

func TestConditionEncapString(t *testing.T) {
	for _, tt := range []struct {
		c    Condition
		want string
	}{
		{Condition{Encapsulated: true}, "encapsulated"},
		{Condition{OuterSrcIPs: pfx("192.168.1.20/32", "fd00::/64")}, "outer-src=192.168.1.20/32,fd00::/64"},
		{Condition{Direction: Out, Encapsulated: true, VNIs: []uint32{4096}, OuterSrcIPs: pfx("192.168.1.20/32"), SrcIPs: pfx("10.244.1.0/24")},
			"dir=out src=10.244.1.0/24 vni=4096 encapsulated outer-src=192.168.1.20/32"},
		{Condition{}, "any"},
	} {
		if got := tt.c.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

func TestActionReason(t *testing.T) {
	for _, tt := range []struct {
		name   string
		a      Action
		str    string
		reason dataplane.DropReason
	}{
		{"block without a reason", Action{Verb: Block}, "block", dataplane.DropBlocked},
		{"block with unknown-vni", Action{Verb: Block, Reason: dataplane.DropUnknownVNI}, "block (unknown-vni)", dataplane.DropUnknownVNI},
		{"block with unknown-provider-address", Action{Verb: Block, Reason: dataplane.DropUnknownProvider},
			"block (unknown-provider-address)", dataplane.DropUnknownProvider},
		{"block with spoofed-source", Action{Verb: Block, Reason: dataplane.DropSpoofedSource}, "block (spoofed-source)", dataplane.DropSpoofedSource},
		{"block with blocked-by-policy spelled out", Action{Verb: Block, Reason: dataplane.DropBlocked}, "block (blocked-by-policy)", dataplane.DropBlocked},
		// A reason on an allow is meaningless; it must not show as a block.
		{"allow with a stray reason", Action{Verb: Allow, Reason: dataplane.DropUnknownVNI}, "allow", dataplane.DropUnknownVNI},
		{"allow with a pop", Action{Verb: Allow, HT: dataplane.Transposition{Outer: dataplane.OuterPop}}, "allow pop(vxlan)", dataplane.DropBlocked},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.a.String(); got != tt.str {
				t.Errorf("String() = %q, want %q", got, tt.str)
			}
			if got := tt.a.DropReason(); got != tt.reason {
				t.Errorf("DropReason() = %s, want %s", got, tt.reason)
			}
		})
	}
}

// TestLayerDecapVerdicts runs a VNET_PA_ROUTE_LAYER-shaped layer: a group
// for encapsulated packets that pops from a known provider address and
// blocks the rest with their own reasons.
func TestLayerDecapVerdicts(t *testing.T) {
	l := Layer{Name: "VNET_PA_ROUTE_LAYER", Groups: []Group{
		group("vxlan", Condition{Direction: Out, Encapsulated: true},
			terminating(rule("from-pa", 100, Condition{VNIs: []uint32{4096}, OuterSrcIPs: pfx("192.168.1.20/32"), SrcIPs: pfx("10.0.0.0/24")},
				Action{Verb: Allow, HT: dataplane.Transposition{Outer: dataplane.OuterPop}})),
			terminating(rule("spoofed", 60000, Condition{VNIs: []uint32{4096}, OuterSrcIPs: pfx("192.168.1.20/32")},
				Action{Verb: Block, Reason: dataplane.DropSpoofedSource})),
			terminating(rule("unknown-pa", 60001, Condition{VNIs: []uint32{4096}},
				Action{Verb: Block, Reason: dataplane.DropUnknownProvider})),
			terminating(rule("unknown-vni", 60002, Condition{}, Action{Verb: Block, Reason: dataplane.DropUnknownVNI})),
		),
	}}
	if err := l.Compile(); err != nil {
		t.Fatal(err)
	}
	spoofed := encapView("192.168.1.20", "192.168.1.10", 4096)
	spoofed.Src = netip.MustParseAddr("10.9.0.1")
	for _, tt := range []struct {
		name string
		v    dataplane.View
		rule string // "" for the layer default
		want dataplane.DropReason
		str  string
	}{
		{"known provider", encapView("192.168.1.20", "192.168.1.10", 4096), "from-pa", dataplane.NotDropped, "allow pop(vxlan)"},
		{"inner source not behind it", spoofed, "spoofed", dataplane.DropSpoofedSource, "block (spoofed-source)"},
		{"unknown provider", encapView("192.168.1.99", "192.168.1.10", 4096), "unknown-pa", dataplane.DropUnknownProvider, "block (unknown-provider-address)"},
		{"unknown VNI", encapView("192.168.1.20", "192.168.1.10", 4097), "unknown-vni", dataplane.DropUnknownVNI, "block (unknown-vni)"},
		{"plain packet passes the layer", encapView("", "", 0), "", dataplane.NotDropped, "allow"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vd := l.Evaluate(&tt.v, Out)
			name := ""
			if vd.Rule != nil {
				name = vd.Rule.Name
			}
			if name != tt.rule {
				t.Fatalf("rule %q, want %q (%s)", name, tt.rule, vd)
			}
			got := dataplane.NotDropped
			if vd.Action.Verb == Block {
				got = vd.Action.DropReason()
			}
			if got != tt.want || vd.Action.String() != tt.str {
				t.Errorf("%s: drop %s, want %s; action %q, want %q", vd, got, tt.want, vd.Action, tt.str)
			}
			if tt.rule != "" && !strings.HasSuffix(vd.String(), "-> "+tt.str) {
				t.Errorf("verdict %q does not end in the action %q", vd, tt.str)
			}
		})
	}
}
