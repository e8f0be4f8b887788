package vswitch

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/rules"
)

// The VFP-level fields the HNS lowering relies on: port mtu and underlay,
// switch gateways, match encapsulated and outerSrcIPs, action reason.

// vfBase is a valid VFP-level policy using every one of those fields; the
// tests change one thing at a time.
const vfBase = `{
  "switch": {
    "name": "sw-vfp",
    "gateway": {"mac": "02:00:00:00:00:01", "ips": ["10.0.0.1"]},
    "gateways": [
      {"mac": "02:00:00:00:00:02", "ips": ["10.1.0.1", "fd00:1::1"]},
      {"mac": "02:00:00:00:00:03", "ips": ["10.2.0.1"]}
    ]
  },
  "ports": [
    {"name": "pod-a", "mac": "02:00:00:00:00:0a", "ips": ["10.0.0.10"], "mtu": 1450, "underlay": "none"},
    {"name": "pod-b", "mac": "02:00:00:00:00:0b", "ips": ["10.1.0.10", "fd00:1::10"], "mtu": 1500, "underlay": "rewrite"},
    {"name": "pod-c", "mac": "02:00:00:00:00:0c", "ips": ["10.2.0.10"], "underlay": "bridged"},
    {
      "name": "uplink", "mac": "02:00:00:00:00:fe", "uplink": true, "mtu": 1500,
      "layers": [
        {
          "name": "VNET_PA_ROUTE_LAYER",
          "groups": [
            {
              "name": "vxlan", "match": {"direction": "out", "encapsulated": true},
              "rules": [
                {"name": "from-pa", "priority": 100, "terminating": true,
                 "match": {"vnis": [4096], "outerSrcIPs": ["192.168.1.20", "fd00:99::/64"], "srcIPs": ["10.244.1.0/24"]},
                 "action": {"type": "allow", "outer": "pop", "modify": {"dstMAC": "02:00:00:00:00:01"}}},
                {"name": "unknown-pa", "priority": 60001, "terminating": true,
                 "match": {"vnis": [4096]},
                 "action": {"type": "block", "reason": "unknown-provider-address"}},
                {"name": "unknown-vni", "priority": 60002, "terminating": true,
                 "action": {"type": "block", "reason": "unknown-vni"}}
              ]
            }
          ]
        }
      ]
    }
  ]
}`

func vfPort(d doc, i int) doc { return at(d, "ports", i) }
func vfRule(d doc, i int) doc {
	return at(d, "ports", 3, "layers", 0, "groups", 0, "rules", i)
}
func vfGroup(d doc) doc { return at(d, "ports", 3, "layers", 0, "groups", 0) }

func TestVFPFieldsBaseParses(t *testing.T) {
	c, err := ParseConfig([]byte(vfBase))
	if err != nil {
		t.Fatal(err)
	}
	sw, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name     string
		mtu      uint16
		underlay Underlay
	}{
		{"pod-a", 1450, Isolated}, {"pod-b", 1500, Rewritten}, {"pod-c", 0, Bridged}, {"uplink", 1500, Bridged},
	} {
		p := sw.Port(tt.name)
		if p == nil {
			t.Fatalf("no port %s", tt.name)
		}
		if p.MTU != tt.mtu || p.Underlay != tt.underlay {
			t.Errorf("port %s: mtu %d underlay %d, want %d and %d", tt.name, p.MTU, p.Underlay, tt.mtu, tt.underlay)
		}
	}
	l := sw.Port("uplink").Layers[0]
	g := l.Groups[0]
	if !g.Match.Encapsulated || g.Match.Direction != rules.Out {
		t.Errorf("group match %s, want dir=out encapsulated", &g.Match)
	}
	want := []netip.Prefix{netip.MustParsePrefix("192.168.1.20/32"), netip.MustParsePrefix("fd00:99::/64")}
	if got := g.Rules[0].Match.OuterSrcIPs; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("outerSrcIPs %v, want %v (a bare address is a host prefix)", got, want)
	}
	if r := g.Rules[1].Action; r.Verb != rules.Block || r.Reason != dataplane.DropUnknownProvider {
		t.Errorf("unknown-pa action %+v", r)
	}
	if r := g.Rules[2].Action; r.Verb != rules.Block || r.Reason != dataplane.DropUnknownVNI || r.String() != "block (unknown-vni)" {
		t.Errorf("unknown-vni action %+v (%s)", r, r)
	}
	if r := g.Rules[0].Action; r.Reason != dataplane.NotDropped {
		t.Errorf("allow rule has a reason: %+v", r)
	}
}

func TestVFPFieldsErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(d doc)
		want string
	}{
		// mtu
		{"mtu below 576", func(d doc) { vfPort(d, 0)["mtu"] = 575 },
			"ports[0].mtu: 575 is below 576, the smallest MTU IPv4 allows"},
		{"mtu 1", func(d doc) { vfPort(d, 2)["mtu"] = 1 }, "ports[2].mtu: 1 is below 576"},
		{"uplink mtu below 576", func(d doc) { vfPort(d, 3)["mtu"] = 100 }, "ports[3].mtu: 100 is below 576"},
		{"mtu above 16 bits", func(d doc) { vfPort(d, 0)["mtu"] = 65536 }, "ports[0].mtu: want an integer from 0 to 65535, got 65536"},
		{"mtu negative", func(d doc) { vfPort(d, 0)["mtu"] = -1 }, "ports[0].mtu: want an integer from 0 to 65535, got -1"},
		{"mtu a string", func(d doc) { vfPort(d, 0)["mtu"] = "1500" }, `ports[0].mtu: want a number, got "1500"`},

		// underlay
		{"underlay unknown", func(d doc) { vfPort(d, 0)["underlay"] = "isolated" },
			`ports[0].underlay: unknown mode "isolated" (want bridged, rewrite or none)`},
		{"underlay is case-sensitive", func(d doc) { vfPort(d, 1)["underlay"] = "Rewrite" },
			`ports[1].underlay: unknown mode "Rewrite"`},
		{"underlay a bool", func(d doc) { vfPort(d, 1)["underlay"] = true }, "ports[1].underlay: want a string, got true"},
		{"uplink rewrite", func(d doc) { vfPort(d, 3)["underlay"] = "rewrite" },
			"ports[3].underlay: the uplink is the underlay; underlay applies to vNICs"},
		{"uplink in a segment", func(d doc) { vfPort(d, 3)["segment"] = "net-a" },
			"ports[3].segment: the uplink reaches every segment"},
		{"uplink none", func(d doc) { vfPort(d, 3)["underlay"] = "none" },
			"ports[3].underlay: the uplink is the underlay"},
		{"uplink unknown mode", func(d doc) { vfPort(d, 3)["underlay"] = "bogus" },
			`ports[3].underlay: unknown mode "bogus"`},

		// gateways
		{"duplicate IP within a gateway", func(d doc) {
			at(d, "switch", "gateways", 1)["ips"] = []any{"10.2.0.1", "10.2.0.1"}
		}, "switch.gateways[1].ips[1]: 10.2.0.1 is already a gateway address"},
		{"gateways IP of the gateway", func(d doc) {
			at(d, "switch", "gateways", 0)["ips"] = []any{"10.1.0.1", "10.0.0.1"}
		}, "switch.gateways[0].ips[1]: 10.0.0.1 is already a gateway address"},
		{"IP of another of the gateways", func(d doc) {
			at(d, "switch", "gateways", 1)["ips"] = []any{"fd00:1::1"}
		}, "switch.gateways[1].ips[0]: fd00:1::1 is already a gateway address"},
		{"IP of the gateways, without a gateway", func(d doc) {
			delete(at(d, "switch"), "gateway")
			at(d, "switch", "gateways", 1)["ips"] = []any{"10.1.0.1"}
			vfPort(d, 0)["ips"] = []any{"10.0.0.10"}
		}, "switch.gateways[1].ips[0]: 10.1.0.1 is already a gateway address"},
		{"gateways bad MAC", func(d doc) { at(d, "switch", "gateways", 1)["mac"] = "nope" }, "switch.gateways[1].mac: "},
		{"gateways multicast MAC", func(d doc) { at(d, "switch", "gateways", 0)["mac"] = "01:00:5e:00:00:01" },
			"switch.gateways[0].mac: 01:00:5e:00:00:01 is not a unicast address"},
		{"gateways without MAC", func(d doc) { delete(at(d, "switch", "gateways", 0), "mac") }, "switch.gateways[0].mac: "},
		{"gateways bad IP", func(d doc) { at(d, "switch", "gateways", 1)["ips"] = []any{"10.2.0"} }, "switch.gateways[1].ips[0]: "},
		{"gateway bad IP keeps its name", func(d doc) { at(d, "switch", "gateway")["ips"] = []any{"x"} }, "switch.gateway.ips[0]: "},
		{"port IP is a gateways address", func(d doc) { vfPort(d, 2)["ips"] = []any{"10.2.0.1"} },
			"ports[2].ips[0]: 10.2.0.1 is the gateway's address"},
		{"port MAC is a gateways MAC", func(d doc) { vfPort(d, 2)["mac"] = "02:00:00:00:00:03" },
			"ports[2].mac: 02:00:00:00:00:03 is already used by the gateway"},
		{"gateways unknown field", func(d doc) { at(d, "switch", "gateways", 0)["ip"] = "10.1.0.1" },
			`switch.gateways[0].ip: unknown field "ip"`},

		// reason
		{"reason parse error", func(d doc) { at(vfRule(d, 2), "action")["reason"] = "truncated-ipv4" },
			`ports[3].layers[0].groups[0].rules[2].action.reason: "truncated-ipv4" is not a drop reason a policy can give`},
		{"reason bad-vxlan (a parse error)", func(d doc) { at(vfRule(d, 2), "action")["reason"] = "bad-vxlan" },
			`rules[2].action.reason: "bad-vxlan" is not a drop reason a policy can give`},
		{"reason frame-too-large (last parse error)", func(d doc) { at(vfRule(d, 2), "action")["reason"] = "frame-too-large" },
			`rules[2].action.reason: "frame-too-large" is not a drop reason`},
		{"reason unknown", func(d doc) { at(vfRule(d, 2), "action")["reason"] = "no-such-reason" },
			`rules[2].action.reason: "no-such-reason" is not a drop reason`},
		{"reason not-dropped", func(d doc) { at(vfRule(d, 2), "action")["reason"] = "not-dropped" },
			`rules[2].action.reason: "not-dropped" is not a drop reason`},
		{"reason unknown-drop-reason", func(d doc) { at(vfRule(d, 2), "action")["reason"] = "unknown-drop-reason" },
			`rules[2].action.reason: "unknown-drop-reason" is not a drop reason`},
		{"reason in another case", func(d doc) { at(vfRule(d, 2), "action")["reason"] = "Unknown-VNI" },
			`rules[2].action.reason: "Unknown-VNI" is not a drop reason`},
		{"reason on an allow", func(d doc) { at(vfRule(d, 0), "action")["reason"] = "unknown-vni" },
			"ports[3].layers[0].groups[0].rules[0].action.reason: only a block action has a drop reason"},
		{"parse-error reason on an allow", func(d doc) { at(vfRule(d, 0), "action")["reason"] = "bad-arp" },
			`rules[0].action.reason: "bad-arp" is not a drop reason a policy can give`},
		{"reason a number", func(d doc) { at(vfRule(d, 2), "action")["reason"] = 34 },
			"ports[3].layers[0].groups[0].rules[2].action.reason: want a string, got the number 34"},

		// encapsulated, outerSrcIPs
		{"encapsulated a string", func(d doc) { at(vfGroup(d), "match")["encapsulated"] = "yes" },
			`ports[3].layers[0].groups[0].match.encapsulated: want true or false, got "yes"`},
		{"outerSrcIPs a string", func(d doc) { at(vfRule(d, 0), "match")["outerSrcIPs"] = "192.168.1.20" },
			`ports[3].layers[0].groups[0].rules[0].match.outerSrcIPs: want a list, got "192.168.1.20"`},
		{"outerSrcIPs host bits", func(d doc) { at(vfRule(d, 0), "match")["outerSrcIPs"] = []any{"192.168.1.20/24"} },
			"ports[3].layers[0].groups[0].rules[0].match.outerSrcIPs[0]: 192.168.1.20/24 has host bits set (did you mean 192.168.1.0/24?)"},
		{"outerSrcIPs IPv6 host bits, second", func(d doc) {
			at(vfRule(d, 0), "match")["outerSrcIPs"] = []any{"192.168.1.20", "fd00:99::1/64"}
		}, "rules[0].match.outerSrcIPs[1]: fd00:99::1/64 has host bits set (did you mean fd00:99::/64?)"},
		{"outerSrcIPs garbage", func(d doc) { at(vfRule(d, 0), "match")["outerSrcIPs"] = []any{"pa-1"} },
			`rules[0].match.outerSrcIPs[0]: "pa-1" is not an IP prefix or address`},
		{"outerSrcIPs prefix with zone", func(d doc) { at(vfRule(d, 0), "match")["outerSrcIPs"] = []any{"fe80::1%eth0/128"} },
			`rules[0].match.outerSrcIPs[0]: "fe80::1%eth0/128" is not an IP prefix or address`},
		{"outerSrcIPs IPv4-mapped", func(d doc) { at(vfRule(d, 0), "match")["outerSrcIPs"] = []any{"::ffff:192.168.1.20"} },
			`rules[0].match.outerSrcIPs[0]: "::ffff:192.168.1.20": write IPv4 prefixes in IPv4 form`},
		{"outerSrcIPs bad length", func(d doc) { at(vfRule(d, 0), "match")["outerSrcIPs"] = []any{"192.168.1.20/33"} },
			`rules[0].match.outerSrcIPs[0]: "192.168.1.20/33" is not an IP prefix or address`},
		{"group outerSrcIPs host bits", func(d doc) { at(vfGroup(d), "match")["outerSrcIPs"] = []any{"192.168.1.1/16"} },
			"ports[3].layers[0].groups[0].match.outerSrcIPs[0]: 192.168.1.1/16 has host bits set"},
		{"outerSrcIP (singular) is unknown", func(d doc) { at(vfRule(d, 0), "match")["outerSrcIP"] = "192.168.1.20" },
			`ports[3].layers[0].groups[0].rules[0].match.outerSrcIP: unknown field "outerSrcIP"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig(editJSON(t, vfBase, tt.edit))
			if err == nil {
				t.Fatalf("accepted, want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

func TestVFPFieldsAccepted(t *testing.T) {
	for _, tt := range []struct {
		name  string
		edit  func(d doc)
		check func(t *testing.T, sw *Switch)
	}{
		{"mtu 576", func(d doc) { vfPort(d, 0)["mtu"] = 576 }, func(t *testing.T, sw *Switch) {
			if m := sw.Port("pod-a").MTU; m != 576 {
				t.Errorf("mtu %d", m)
			}
		}},
		{"mtu 0 is no limit", func(d doc) { vfPort(d, 0)["mtu"] = 0 }, func(t *testing.T, sw *Switch) {
			if m := sw.Port("pod-a").MTU; m != 0 {
				t.Errorf("mtu %d", m)
			}
		}},
		{"mtu 65535", func(d doc) { vfPort(d, 0)["mtu"] = 65535 }, nil},
		{"underlay empty is bridged", func(d doc) { vfPort(d, 1)["underlay"] = "" }, func(t *testing.T, sw *Switch) {
			if u := sw.Port("pod-b").Underlay; u != Bridged {
				t.Errorf("underlay %d", u)
			}
		}},
		{"uplink bridged", func(d doc) { vfPort(d, 3)["underlay"] = "bridged" }, nil},
		{"gateways without gateway", func(d doc) {
			delete(at(d, "switch"), "gateway")
			vfPort(d, 0)["ips"] = []any{"10.0.0.10", "10.0.0.1"}
		}, nil},
		{"gateway and no gateways", func(d doc) {
			delete(at(d, "switch"), "gateways")
			vfPort(d, 1)["ips"] = []any{"10.1.0.1"}
		}, nil},
		{"every policy reason", func(d doc) {
			var rs []any
			for i, r := range []string{"blocked-by-policy", "spoofed-source", "no-destination", "unknown-vni", "unknown-provider-address"} {
				rs = append(rs, jsonValue(t, `{"name": "r`+string(rune('a'+i))+`", "priority": `+string(rune('1'+i))+`, "action": {"type": "block", "reason": "`+r+`"}}`))
			}
			at(d, "ports", 3, "layers", 0, "groups", 0)["rules"] = rs
		}, func(t *testing.T, sw *Switch) {
			want := []dataplane.DropReason{dataplane.DropBlocked, dataplane.DropSpoofedSource, dataplane.DropNoDestination,
				dataplane.DropUnknownVNI, dataplane.DropUnknownProvider}
			rs := sw.Port("uplink").Layers[0].Groups[0].Rules
			for i, r := range rs {
				if r.Action.Reason != want[i] || r.Action.DropReason() != want[i] {
					t.Errorf("rule %s: reason %s, want %s", r.Name, r.Action.Reason, want[i])
				}
			}
		}},
		{"block without reason is blocked-by-policy", func(d doc) { delete(at(vfRule(d, 2), "action"), "reason") }, func(t *testing.T, sw *Switch) {
			a := sw.Port("uplink").Layers[0].Groups[0].Rules[2].Action
			if a.Reason != dataplane.NotDropped || a.DropReason() != dataplane.DropBlocked || a.String() != "block" {
				t.Errorf("action %+v (%s)", a, a)
			}
		}},
		{"encapsulated false", func(d doc) { at(vfGroup(d), "match")["encapsulated"] = false }, func(t *testing.T, sw *Switch) {
			if sw.Port("uplink").Layers[0].Groups[0].Match.Encapsulated {
				t.Error("encapsulated")
			}
		}},
		{"outerSrcIPs empty list", func(d doc) { at(vfRule(d, 0), "match")["outerSrcIPs"] = []any{} }, func(t *testing.T, sw *Switch) {
			if n := len(sw.Port("uplink").Layers[0].Groups[0].Rules[0].Match.OuterSrcIPs); n != 0 {
				t.Errorf("%d prefixes", n)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig(editJSON(t, vfBase, tt.edit))
			if err != nil {
				t.Fatal(err)
			}
			sw, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			if tt.check != nil {
				tt.check(t, sw)
			}
		})
	}
}

// TestVFPFieldsRoundTrip checks that the new fields survive a marshal and
// parse.
func TestVFPFieldsRoundTrip(t *testing.T) {
	c, err := ParseConfig([]byte(vfBase))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"mtu":1450`, `"underlay":"none"`, `"underlay":"rewrite"`, `"gateways":[`, `"encapsulated":true`,
		`"outerSrcIPs":["192.168.1.20","fd00:99::/64"]`, `"reason":"unknown-vni"`} {
		if !strings.Contains(string(b), s) {
			t.Errorf("marshalled policy lacks %s:\n%s", s, b)
		}
	}
	c2, err := ParseConfig(b)
	if err != nil {
		t.Fatalf("the marshalled policy does not parse: %v", err)
	}
	b2, _ := json.Marshal(c2)
	if string(b) != string(b2) {
		t.Errorf("round trip changed the policy:\n%s\n%s", b, b2)
	}
}

// TestVFPGatewaysAnswerAndRoute checks that each gateway answers ARP and
// neighbour solicitations for its own addresses with its own MAC, and routes
// as itself.
func TestVFPGatewaysAnswerAndRoute(t *testing.T) {
	sw, err := New(mustParse(t, string(editJSON(t, vfBase, func(d doc) {
		for i := range 3 {
			delete(vfPort(d, i), "underlay")
		}
	}))))
	if err != nil {
		t.Fatal(err)
	}
	podC := dataplane.MAC{2, 0, 0, 0, 0, 0x0c}
	podB := dataplane.MAC{2, 0, 0, 0, 0, 0x0b}
	for _, tt := range []struct {
		gw  string
		mac dataplane.MAC
	}{
		{"10.0.0.1", dataplane.MAC{2, 0, 0, 0, 0, 1}},
		{"10.1.0.1", dataplane.MAC{2, 0, 0, 0, 0, 2}},
		{"10.2.0.1", dataplane.MAC{2, 0, 0, 0, 0, 3}},
	} {
		p, trace := process(t, sw, "pod-c", whoHas(t, podC, "10.2.0.10", tt.gw))
		want := arpFrame(t, tt.mac, podC, 2, tt.mac, tt.gw, podC, "10.2.0.10")
		if outName(sw, p) != "pod-c" || string(p.Bytes()) != string(want) {
			t.Errorf("who-has %s: %s\n% x\nwant\n% x\n%s", tt.gw, outName(sw, p), p.Bytes(), want, trace)
		}
	}
	p, trace := process(t, sw, "pod-b", solicit(t, podB, "fd00:1::10", "fd00:1::1", 255))
	if outName(sw, p) != "pod-b" {
		t.Fatalf("solicitation for fd00:1::1: %s\n%s", outName(sw, p), trace)
	}
	checkNA(t, p.Bytes(), dataplane.MAC{2, 0, 0, 0, 0, 2}, podB, "fd00:1::1", "fd00:1::10", "fd00:1::1", true, true)

	// Routed through the third gateway to pod-b: the source MAC becomes
	// that gateway's.
	p, trace = process(t, sw, "pod-c", udpFrame(podC, dataplane.MAC{2, 0, 0, 0, 0, 3}, addr("10.2.0.10"), 1000, addr("10.1.0.10"), 2000, "x"))
	if outName(sw, p) != "pod-b" {
		t.Fatalf("routed: %s\n%s", outName(sw, p), trace)
	}
	eth := dataplane.Ethernet(p.Bytes())
	if eth.Src() != (dataplane.MAC{2, 0, 0, 0, 0, 3}) || eth.Dst() != podB {
		t.Errorf("routed frame %s > %s, want 02:00:00:00:00:03 > %s", eth.Src(), eth.Dst(), podB)
	}
}

// TestVFPReasonCounted checks that a block with a reason counts its drops
// under it, and that encapsulated and outerSrcIPs select the packets.
func TestVFPReasonCounted(t *testing.T) {
	sw, err := New(mustParse(t, vfBase))
	if err != nil {
		t.Fatal(err)
	}
	inner := udpFrame(dataplane.MAC{2, 0, 0, 0, 1, 1}, dataplane.MAC{2, 0, 0, 0, 0, 1}, addr("10.244.1.5"), 1000, addr("10.0.0.10"), 2000, "x")
	for _, tt := range []struct {
		name  string
		frame []byte
		want  string
	}{
		{"known provider address", ptVXLANFrom(t, "02:00:00:00:01:fe", ptMACUp, "192.168.1.20", "192.168.1.10", 4096, inner), "pod-a"},
		{"unknown provider address", ptVXLANFrom(t, "02:00:00:00:01:fe", ptMACUp, "192.168.1.21", "192.168.1.10", 4096, inner), "drop unknown-provider-address"},
		{"unknown VNI", ptVXLANFrom(t, "02:00:00:00:01:fe", ptMACUp, "192.168.1.20", "192.168.1.10", 4097, inner), "drop unknown-vni"},
		// Plain packets skip the encapsulated group.
		{"plain", udpFrame(dataplane.MAC{2, 0, 0, 0, 1, 1}, dataplane.MAC{2, 0, 0, 0, 0, 0x0c}, addr("10.9.0.5"), 1, addr("10.2.0.10"), 2, "x"), "pod-c"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := sw.Pipeline().Drops.Get(dataplane.DropUnknownVNI) + sw.Pipeline().Drops.Get(dataplane.DropUnknownProvider)
			p, trace := process(t, sw, "uplink", tt.frame)
			if got := outName(sw, p); got != tt.want {
				t.Fatalf("%s, want %s\n%s", got, tt.want, trace)
			}
			after := sw.Pipeline().Drops.Get(dataplane.DropUnknownVNI) + sw.Pipeline().Drops.Get(dataplane.DropUnknownProvider)
			if dropped := p.Drop != dataplane.NotDropped; dropped && after != before+1 || !dropped && after != before {
				t.Errorf("drop counters went from %d to %d", before, after)
			}
			if sw.Pipeline().Drops.Get(dataplane.DropBlocked) != 0 {
				t.Errorf("counted as blocked-by-policy: %s", sw.Pipeline().Drops.String())
			}
		})
	}
}

// TestVFPOuterSrcIPsZoneRejected: a zoned address written without a
// length must be rejected like a zoned prefix, not silently lose its zone.
func TestVFPOuterSrcIPsZoneRejected(t *testing.T) {
	_, err := ParseConfig(editJSON(t, vfBase, func(d doc) { at(vfRule(d, 0), "match")["outerSrcIPs"] = []any{"fe80::1%eth0"} }))
	ulRegression(t, err != nil, "parsePrefixes (config.go:858-862) accepts %q as fe80::1/128: netip.PrefixFrom drops the zone before the zone check", "fe80::1%eth0")
	if want := `rules[0].match.outerSrcIPs[0]: "fe80::1%eth0": zones are not allowed`; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q, want %q", err, want)
	}
}
