package rules

import (
	"math"
	"net/netip"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
)

// Builders for layers and views.

func allow() Action { return Action{Verb: Allow} }
func block() Action { return Action{Verb: Block} }

func rule(name string, prio uint32, m Condition, a Action) Rule {
	return Rule{Name: name, Priority: prio, Match: m, Action: a}
}

func terminating(r Rule) Rule { r.Terminating = true; return r }

func group(name string, m Condition, rs ...Rule) Group {
	return Group{Name: name, Match: m, Rules: rs}
}

func pfx(ss ...string) []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range ss {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}

func ports(lo, hi uint16) []PortRange { return []PortRange{{Lo: lo, Hi: hi}} }

var (
	macA = dataplane.MAC{2, 0, 0, 0, 0, 0x0a}
	macB = dataplane.MAC{2, 0, 0, 0, 0, 0x0b}
)

// view describes a packet from src:sport to dst:dport.
func view(proto uint8, src string, sport uint16, dst string, dport uint16) dataplane.View {
	return dataplane.View{
		SrcMAC: macA, DstMAC: macB,
		Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst),
		Proto: proto, SrcPort: sport, DstPort: dport,
	}
}

func tcp4(dport uint16) dataplane.View {
	return view(dataplane.ProtoTCP, "10.0.0.10", 40000, "10.0.0.11", dport)
}

func udp4(dport uint16) dataplane.View {
	return view(dataplane.ProtoUDP, "10.0.0.10", 40000, "10.0.0.11", dport)
}

func tcp6(dport uint16) dataplane.View {
	return view(dataplane.ProtoTCP, "fd00::10", 40000, "fd00::11", dport)
}

func laterFragment(v dataplane.View) dataplane.View { v.LaterFragment = true; return v }

func encap(vni uint32, v dataplane.View) dataplane.View {
	v.Encap, v.VNI = true, vni
	v.OuterSrc, v.OuterDst = netip.MustParseAddr("192.168.1.20"), netip.MustParseAddr("192.168.1.10")
	v.OuterDstPort = dataplane.VXLANPort
	return v
}

func TestEvaluate(t *testing.T) {
	anyTCP := Condition{Protocols: []uint8{dataplane.ProtoTCP}}
	tests := []struct {
		name  string
		layer Layer
		view  dataplane.View
		dir   Direction
		// want is the name of the rule that applies, "" for the default.
		want     string
		wantVerb Verb
	}{
		{
			name: "smallest priority wins whatever the slice order",
			layer: Layer{Groups: []Group{group("g", Condition{},
				rule("p30", 30, anyTCP, allow()),
				rule("p10", 10, anyTCP, block()),
				rule("p20", 20, anyTCP, allow()),
			)}},
			view: tcp4(80), dir: Out, want: "p10", wantVerb: Block,
		},
		{
			name: "smaller priority that does not match is passed over",
			layer: Layer{Groups: []Group{group("g", Condition{},
				rule("p30", 30, anyTCP, allow()),
				rule("p1-ssh", 1, Condition{DstPorts: ports(22, 22)}, block()),
				rule("p20", 20, anyTCP, block()),
			)}},
			view: tcp4(80), dir: Out, want: "p20", wantVerb: Block,
		},
		{
			name: "priorities across the whole uint32 range",
			layer: Layer{Groups: []Group{group("g", Condition{},
				rule("max", math.MaxUint32, anyTCP, allow()),
				rule("high", 1<<31, anyTCP, allow()),
				rule("zero", 0, anyTCP, block()),
				rule("mid", 1<<31-1, anyTCP, allow()),
			)}},
			view: tcp4(80), dir: Out, want: "zero", wantVerb: Block,
		},
		{
			name: "last match wins across groups",
			layer: Layer{Groups: []Group{
				group("first", Condition{}, rule("allow-all", 1, Condition{}, allow())),
				group("second", Condition{}, rule("block-tcp", 100, anyTCP, block())),
			}},
			view: tcp4(80), dir: Out, want: "block-tcp", wantVerb: Block,
		},
		{
			name: "a later group that does not match keeps the earlier match",
			layer: Layer{Groups: []Group{
				group("first", Condition{}, rule("block-all", 1, Condition{}, block())),
				group("second", Condition{}, rule("allow-udp", 1, Condition{Protocols: []uint8{dataplane.ProtoUDP}}, allow())),
			}},
			view: tcp4(80), dir: Out, want: "block-all", wantVerb: Block,
		},
		{
			name: "a terminating rule stops evaluation",
			layer: Layer{Groups: []Group{
				group("first", Condition{}, terminating(rule("allow-web", 5, Condition{DstPorts: ports(80, 80)}, allow()))),
				group("second", Condition{}, rule("block-all", 1, Condition{}, block())),
			}},
			view: tcp4(80), dir: Out, want: "allow-web", wantVerb: Allow,
		},
		{
			name: "a terminating rule that does not match stops nothing",
			layer: Layer{Groups: []Group{
				group("first", Condition{}, terminating(rule("allow-web", 5, Condition{DstPorts: ports(80, 80)}, allow()))),
				group("second", Condition{}, rule("block-all", 1, Condition{}, block())),
			}},
			view: tcp4(443), dir: Out, want: "block-all", wantVerb: Block,
		},
		{
			name: "a terminating rule in a later group overrides an earlier match",
			layer: Layer{Groups: []Group{
				group("first", Condition{}, rule("block-all", 1, Condition{}, block())),
				group("second", Condition{}, terminating(rule("allow-tcp", 9, anyTCP, allow()))),
				group("third", Condition{}, rule("block-again", 1, Condition{}, block())),
			}},
			view: tcp4(80), dir: Out, want: "allow-tcp", wantVerb: Allow,
		},
		{
			name: "terminating is the rule that wins its group, not any matching rule",
			layer: Layer{Groups: []Group{
				group("first", Condition{},
					rule("allow-tcp", 1, anyTCP, allow()),
					terminating(rule("allow-web-terminating", 2, anyTCP, allow())),
				),
				group("second", Condition{}, rule("block-all", 1, Condition{}, block())),
			}},
			view: tcp4(80), dir: Out, want: "block-all", wantVerb: Block,
		},
		{
			name: "a group whose conditions do not match is skipped",
			layer: Layer{Groups: []Group{
				group("first", Condition{}, rule("allow-all", 1, Condition{}, allow())),
				group("other-subnet", Condition{DstIPs: pfx("10.1.0.0/16")}, rule("block-all", 1, Condition{}, block())),
			}},
			view: tcp4(80), dir: Out, want: "allow-all", wantVerb: Allow,
		},
		{
			name: "a group whose conditions match is evaluated",
			layer: Layer{Groups: []Group{
				group("first", Condition{}, rule("allow-all", 1, Condition{}, allow())),
				group("this-subnet", Condition{DstIPs: pfx("10.0.0.0/24")}, rule("block-all", 1, Condition{}, block())),
			}},
			view: tcp4(80), dir: Out, want: "block-all", wantVerb: Block,
		},
		{
			name:  "group direction condition skips the group the other way",
			layer: Layer{Groups: []Group{group("in-only", Condition{Direction: In}, rule("block", 1, Condition{}, block()))}},
			view:  tcp4(80), dir: Out, want: "", wantVerb: Allow,
		},
		{
			name:  "default out",
			layer: Layer{DefaultOut: block(), DefaultIn: allow()},
			view:  tcp4(80), dir: Out, want: "", wantVerb: Block,
		},
		{
			name:  "default in",
			layer: Layer{DefaultOut: block(), DefaultIn: allow()},
			view:  tcp4(80), dir: In, want: "", wantVerb: Allow,
		},
		{
			name: "default when no rule of any group matches",
			layer: Layer{DefaultOut: allow(), DefaultIn: block(), Groups: []Group{
				group("g", Condition{}, rule("udp", 1, Condition{Protocols: []uint8{dataplane.ProtoUDP}}, allow())),
			}},
			view: tcp4(80), dir: In, want: "", wantVerb: Block,
		},
		{
			name:  "direction out matches out",
			layer: Layer{DefaultOut: block(), Groups: []Group{group("g", Condition{}, rule("out", 1, Condition{Direction: Out}, allow()))}},
			view:  tcp4(80), dir: Out, want: "out", wantVerb: Allow,
		},
		{
			name:  "direction out does not match in",
			layer: Layer{DefaultIn: block(), Groups: []Group{group("g", Condition{}, rule("out", 1, Condition{Direction: Out}, allow()))}},
			view:  tcp4(80), dir: In, want: "", wantVerb: Block,
		},
		{
			name:  "direction both matches in",
			layer: Layer{Groups: []Group{group("g", Condition{}, rule("both", 1, Condition{Direction: Both}, block()))}},
			view:  tcp4(80), dir: In, want: "both", wantVerb: Block,
		},
		{
			name:  "IPv4 prefix does not match an IPv6 packet",
			layer: Layer{Groups: []Group{group("g", Condition{}, rule("v4-any", 1, Condition{SrcIPs: pfx("0.0.0.0/0")}, block()))}},
			view:  tcp6(80), dir: Out, want: "", wantVerb: Allow,
		},
		{
			name:  "IPv6 prefix does not match an IPv4 packet",
			layer: Layer{Groups: []Group{group("g", Condition{}, rule("v6-any", 1, Condition{DstIPs: pfx("::/0")}, block()))}},
			view:  tcp4(80), dir: Out, want: "", wantVerb: Allow,
		},
		{
			name: "mixed prefix list matches by the packet's family",
			layer: Layer{Groups: []Group{group("g", Condition{},
				rule("mixed", 1, Condition{DstIPs: pfx("10.9.0.0/16", "fd00::/64")}, block()))}},
			view: tcp6(80), dir: Out, want: "mixed", wantVerb: Block,
		},
		{
			name:  "ipVersion 6 does not match IPv4",
			layer: Layer{Groups: []Group{group("g", Condition{}, rule("v6", 1, Condition{IPVersion: 6}, block()))}},
			view:  tcp4(80), dir: Out, want: "", wantVerb: Allow,
		},
		{
			name:  "ipVersion 6 matches IPv6",
			layer: Layer{Groups: []Group{group("g", Condition{}, rule("v6", 1, Condition{IPVersion: 6}, block()))}},
			view:  tcp6(80), dir: Out, want: "v6", wantVerb: Block,
		},
		{
			name:  "port range is inclusive at the low end",
			layer: Layer{Groups: []Group{group("g", Condition{}, rule("range", 1, Condition{DstPorts: ports(1000, 2000)}, block()))}},
			view:  udp4(1000), dir: Out, want: "range", wantVerb: Block,
		},
		{
			name:  "port range is inclusive at the high end",
			layer: Layer{Groups: []Group{group("g", Condition{}, rule("range", 1, Condition{DstPorts: ports(1000, 2000)}, block()))}},
			view:  udp4(2000), dir: Out, want: "range", wantVerb: Block,
		},
		{
			name:  "port outside the range",
			layer: Layer{Groups: []Group{group("g", Condition{}, rule("range", 1, Condition{DstPorts: ports(1000, 2000)}, block()))}},
			view:  udp4(2001), dir: Out, want: "", wantVerb: Allow,
		},
		{
			name:  "source port condition",
			layer: Layer{Groups: []Group{group("g", Condition{}, rule("sport", 1, Condition{SrcPorts: ports(40000, 40000)}, block()))}},
			view:  tcp4(80), dir: Out, want: "sport", wantVerb: Block,
		},
		{
			name: "port condition never matches ICMP even when the identifier is in range",
			layer: Layer{Groups: []Group{group("g", Condition{},
				rule("ports", 1, Condition{SrcPorts: ports(0, 65535), DstPorts: ports(0, 65535)}, block()))}},
			view: view(dataplane.ProtoICMPv4, "10.0.0.10", 7, "10.0.0.11", 7), dir: Out, want: "", wantVerb: Allow,
		},
		{
			name: "port condition never matches other protocols",
			layer: Layer{Groups: []Group{group("g", Condition{},
				rule("ports", 1, Condition{DstPorts: ports(0, 65535)}, block()))}},
			view: view(47, "10.0.0.10", 0, "10.0.0.11", 0), dir: Out, want: "", wantVerb: Allow,
		},
		{
			name: "port condition never matches a later fragment",
			layer: Layer{Groups: []Group{group("g", Condition{},
				rule("ports", 1, Condition{DstPorts: ports(0, 65535)}, block()))}},
			view: laterFragment(udp4(0)), dir: Out, want: "", wantVerb: Allow,
		},
		{
			name: "a rule without port conditions matches a later fragment",
			layer: Layer{Groups: []Group{group("g", Condition{},
				rule("udp", 1, Condition{Protocols: []uint8{dataplane.ProtoUDP}}, block()))}},
			view: laterFragment(udp4(0)), dir: Out, want: "udp", wantVerb: Block,
		},
		{
			name: "VNI condition does not match a plain packet",
			layer: Layer{Groups: []Group{group("g", Condition{},
				rule("vni0", 1, Condition{VNIs: []uint32{0}}, block()))}},
			view: tcp4(80), dir: Out, want: "", wantVerb: Allow,
		},
		{
			name: "VNI condition matches an encapsulated packet with that VNI",
			layer: Layer{Groups: []Group{group("g", Condition{},
				rule("vni", 1, Condition{VNIs: []uint32{4095, 4096}}, block()))}},
			view: encap(4096, tcp4(80)), dir: Out, want: "vni", wantVerb: Block,
		},
		{
			name: "VNI condition does not match another VNI",
			layer: Layer{Groups: []Group{group("g", Condition{},
				rule("vni", 1, Condition{VNIs: []uint32{4096}}, block()))}},
			view: encap(4097, tcp4(80)), dir: Out, want: "", wantVerb: Allow,
		},
		{
			name: "MAC conditions",
			layer: Layer{Groups: []Group{group("g", Condition{},
				rule("wrong-src", 1, Condition{SrcMACs: []dataplane.MAC{macB}}, block()),
				rule("right", 2, Condition{SrcMACs: []dataplane.MAC{macB, macA}, DstMACs: []dataplane.MAC{macB}}, block()),
			)}},
			view: tcp4(80), dir: Out, want: "right", wantVerb: Block,
		},
		{
			name: "every part of a condition must match",
			layer: Layer{Groups: []Group{group("g", Condition{},
				rule("tcp-to-other", 1, Condition{Protocols: []uint8{dataplane.ProtoTCP}, DstIPs: pfx("10.0.0.12/32")}, block()),
			)}},
			view: tcp4(80), dir: Out, want: "", wantVerb: Allow,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := tt.layer
			l.Name = "test"
			if err := l.Compile(); err != nil {
				t.Fatalf("Compile: %v", err)
			}
			v := tt.view
			got := l.Evaluate(&v, tt.dir)
			gotName := ""
			if got.Rule != nil {
				gotName = got.Rule.Name
				if got.Group == nil {
					t.Errorf("verdict has rule %q but no group", gotName)
				}
			}
			if gotName != tt.want || got.Action.Verb != tt.wantVerb {
				t.Errorf("Evaluate = rule %q %s, want rule %q %s (%s)", gotName, got.Action.Verb, tt.want, tt.wantVerb, got)
			}
			if got.Rule != nil && got.Action != got.Rule.Action {
				t.Errorf("verdict action %s is not its rule's %s", got.Action, got.Rule.Action)
			}
			if v != tt.view {
				t.Errorf("Evaluate modified the view")
			}
		})
	}
}

// TestEvaluateTransposition checks that a verdict carries the rule's
// transposition and that Stateful reports the rule's flag.
func TestEvaluateTransposition(t *testing.T) {
	ht := dataplane.Transposition{Set: dataplane.FieldDstIP, DstIP: netip.MustParseAddr("10.0.0.99")}
	r := rule("dnat", 1, Condition{}, Action{Verb: Allow, HT: ht})
	r.Stateful = true
	l := Layer{Name: "nat", Groups: []Group{group("g", Condition{}, r)}}
	if err := l.Compile(); err != nil {
		t.Fatal(err)
	}
	v := tcp4(80)
	vd := l.Evaluate(&v, Out)
	if vd.Action.HT != ht || !vd.Stateful() {
		t.Errorf("verdict %s: HT %s stateful %v, want %s stateful", vd, vd.Action.HT, vd.Stateful(), ht)
	}
	if want := "group g rule dnat (priority 1, stateful) -> allow modify(dst-ip=10.0.0.99)"; vd.String() != want {
		t.Errorf("String = %q, want %q", vd.String(), want)
	}
	l = Layer{Name: "empty", DefaultIn: block()}
	if err := l.Compile(); err != nil {
		t.Fatal(err)
	}
	vd = l.Evaluate(&v, In)
	if vd.Stateful() || vd.String() != "no rule matched -> default block" {
		t.Errorf("default verdict %q stateful %v", vd, vd.Stateful())
	}
}

func TestCompileErrors(t *testing.T) {
	ok := func(name string, prio uint32) Rule { return rule(name, prio, Condition{}, allow()) }
	tests := []struct {
		name  string
		layer Layer
		want  []string // substrings of the error
	}{
		{
			name:  "layer without a name",
			layer: Layer{Name: "-"},
			want:  []string{"name: a layer needs a name"},
		},
		{
			name: "duplicate priority",
			layer: Layer{Groups: []Group{
				group("a", Condition{}, ok("r0", 1)),
				group("b", Condition{}, ok("r0", 1), ok("r1", 2), ok("r2", 1)),
			}},
			want: []string{"groups[1].rules[2].priority:", `rule "r0"`, "unique within a group"},
		},
		{
			name: "same priority in two groups is fine, duplicate rule name is not",
			layer: Layer{Groups: []Group{
				group("a", Condition{}, ok("r", 1)),
				group("b", Condition{}, ok("r", 1), ok("r", 2)),
			}},
			want: []string{`groups[1].rules[1].name: "r" is also the name of rules[0]`},
		},
		{
			name: "duplicate group name",
			layer: Layer{Groups: []Group{
				group("a", Condition{}), group("b", Condition{}), group("a", Condition{}),
			}},
			want: []string{`groups[2].name: "a" is also the name of groups[0]`},
		},
		{
			name:  "group without a name",
			layer: Layer{Groups: []Group{group("a", Condition{}), group("", Condition{})}},
			want:  []string{"groups[1].name: a group needs a name"},
		},
		{
			name:  "rule without a name",
			layer: Layer{Groups: []Group{group("a", Condition{}, ok("r", 1), ok("", 2))}},
			want:  []string{"groups[0].rules[1].name: a rule needs a name"},
		},
		{
			name: "block with a transposition",
			layer: Layer{Groups: []Group{group("a", Condition{}, ok("r0", 1),
				rule("r1", 2, Condition{}, Action{Verb: Block, HT: dataplane.Transposition{Set: dataplane.FieldDstMAC}}))}},
			want: []string{"groups[0].rules[1].action: a block action cannot transpose headers"},
		},
		{
			name: "block with a pop",
			layer: Layer{Groups: []Group{group("a", Condition{},
				rule("r0", 1, Condition{}, Action{Verb: Block, HT: dataplane.Transposition{Outer: dataplane.OuterPop}}))}},
			want: []string{"groups[0].rules[0].action:"},
		},
		{
			name:  "default block with a transposition",
			layer: Layer{DefaultIn: Action{Verb: Block, HT: dataplane.Transposition{Set: dataplane.FieldSrcIP}}},
			want:  []string{"default: a block action cannot transpose headers"},
		},
		{
			name: "host bits set in a rule prefix",
			layer: Layer{Groups: []Group{group("a", Condition{}, ok("r0", 1),
				rule("r1", 2, Condition{SrcIPs: pfx("10.0.0.0/8", "10.0.0.1/24")}, allow()))}},
			want: []string{"groups[0].rules[1].match.srcIPs[1]: 10.0.0.1/24 has host bits set (did you mean 10.0.0.0/24?)"},
		},
		{
			name: "host bits set in a group prefix",
			layer: Layer{Groups: []Group{group("a", Condition{}),
				group("b", Condition{DstIPs: pfx("fd00::1/64")})}},
			want: []string{"groups[1].match.dstIPs[0]: fd00::1/64 has host bits set (did you mean fd00::/64?)"},
		},
		{
			name: "IPv4-mapped prefix",
			layer: Layer{Groups: []Group{group("a", Condition{},
				rule("r", 1, Condition{DstIPs: pfx("::ffff:10.0.0.0/120")}, allow()))}},
			want: []string{"groups[0].rules[0].match.dstIPs[0]: invalid prefix"},
		},
		{
			name: "invalid prefix",
			layer: Layer{Groups: []Group{group("a", Condition{},
				rule("r", 1, Condition{SrcIPs: []netip.Prefix{{}}}, allow()))}},
			want: []string{"groups[0].rules[0].match.srcIPs[0]: invalid prefix"},
		},
		{
			name: "empty port range",
			layer: Layer{Groups: []Group{group("a", Condition{},
				rule("r", 1, Condition{DstPorts: []PortRange{{1, 2}, {80, 70}}}, allow()))}},
			want: []string{"groups[0].rules[0].match.dstPorts[1]: range 80-70 is empty"},
		},
		{
			name:  "empty source port range",
			layer: Layer{Groups: []Group{group("a", Condition{Protocols: []uint8{6}, SrcPorts: []PortRange{{2, 1}}})}},
			want:  []string{"groups[0].match.srcPorts[0]: range 2-1 is empty"},
		},
		{
			name: "VNI beyond 24 bits",
			layer: Layer{Groups: []Group{group("a", Condition{},
				rule("r", 1, Condition{VNIs: []uint32{1, 1 << 24}}, allow()))}},
			want: []string{"groups[0].rules[0].match.vnis[1]: 16777216 does not fit in 24 bits"},
		},
		{
			name: "bad ipVersion",
			layer: Layer{Groups: []Group{group("a", Condition{},
				rule("r", 1, Condition{IPVersion: 5}, allow()))}},
			want: []string{"groups[0].rules[0].match.ipVersion: 5 is not 4 or 6"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := tt.layer
			if l.Name == "" {
				l.Name = "test"
			} else if l.Name == "-" {
				l.Name = ""
			}
			err := l.Compile()
			if err == nil {
				t.Fatalf("Compile succeeded, want an error containing %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestValidateDeterministic checks that a condition with several faults
// always reports the same one first.
func TestValidateDeterministic(t *testing.T) {
	c := Condition{
		SrcIPs:   pfx("10.0.0.1/8"),
		DstIPs:   pfx("10.0.0.1/16"),
		SrcPorts: []PortRange{{2, 1}},
		DstPorts: []PortRange{{4, 3}},
	}
	for range 50 {
		if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), "srcIPs[0]:") {
			t.Fatalf("Validate = %v, want the srcIPs error first", err)
		}
	}
	c.SrcIPs, c.DstIPs = nil, nil
	for range 50 {
		if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), "srcPorts[0]:") {
			t.Fatalf("Validate = %v, want the srcPorts error first", err)
		}
	}
}

func TestParseDirection(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Direction
	}{{"", Both}, {"both", Both}, {"out", Out}, {"in", In}} {
		d, err := ParseDirection(tt.in)
		if err != nil || d != tt.want {
			t.Errorf("ParseDirection(%q) = %v, %v; want %v", tt.in, d, err, tt.want)
		}
		if tt.in != "" && d.String() != tt.in {
			t.Errorf("%v.String() = %q, want %q", d, d.String(), tt.in)
		}
	}
	if _, err := ParseDirection("egress"); err == nil || !strings.Contains(err.Error(), `"egress"`) {
		t.Errorf("ParseDirection(egress) error = %v", err)
	}
}

func TestConditionString(t *testing.T) {
	c := Condition{
		Direction: Out, IPVersion: 4, DstIPs: pfx("10.0.0.0/24"),
		Protocols: []uint8{dataplane.ProtoTCP, dataplane.ProtoUDP}, DstPorts: []PortRange{{80, 80}, {1000, 2000}}, VNIs: []uint32{7},
	}
	want := "dir=out ipv4 dst=10.0.0.0/24 proto=tcp,udp dport=80,1000-2000 vni=7"
	if got := c.String(); got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	if got := (&Condition{}).String(); got != "any" {
		t.Errorf("empty condition String = %q, want any", got)
	}
}

// benchLayer is a layer of several groups of port rules where the packet
// matches late: the classifier scans most rules.
func benchLayer(tb testing.TB) *Layer {
	l := &Layer{Name: "acl", DefaultOut: block(), DefaultIn: block()}
	for g := range 4 {
		gr := Group{Name: "g" + string(rune('a'+g)), Match: Condition{IPVersion: 4}}
		for i := range 16 {
			gr.Rules = append(gr.Rules, Rule{
				Name: "r" + string(rune('a'+i)), Priority: uint32(100 - i),
				Match: Condition{
					Direction: Out, Protocols: []uint8{dataplane.ProtoTCP},
					DstIPs:   pfx("10.0.0.0/24", "fd00::/64"),
					DstPorts: []PortRange{{uint16(1000 + 10*i), uint16(1005 + 10*i)}},
				},
				Action: allow(),
			})
		}
		l.Groups = append(l.Groups, gr)
	}
	l.Groups[3].Rules[0].Match.DstPorts = ports(80, 80)
	if err := l.Compile(); err != nil {
		tb.Fatal(err)
	}
	return l
}

func TestEvaluateNoAllocs(t *testing.T) {
	l := benchLayer(t)
	v := tcp4(80)
	n := testing.AllocsPerRun(100, func() {
		if vd := l.Evaluate(&v, Out); vd.Rule == nil {
			t.Fatal("no rule matched")
		}
	})
	if n != 0 {
		t.Errorf("Evaluate allocates %v times per packet, want 0", n)
	}
}

func BenchmarkEvaluate(b *testing.B) {
	l := benchLayer(b)
	for _, bc := range []struct {
		name    string
		view    dataplane.View
		dir     Direction
		matched bool
	}{
		{"match-last-group", tcp4(80), Out, true},
		{"default", tcp4(22), Out, false},
		{"wrong-direction", tcp4(80), In, false},
		{"ipv6-skips-groups", tcp6(80), Out, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			v := bc.view
			b.ReportAllocs()
			for b.Loop() {
				if vd := l.Evaluate(&v, bc.dir); (vd.Rule != nil) != bc.matched {
					b.Fatalf("verdict %s", vd)
				}
			}
		})
	}
}

// A rule's hits count the evaluations whose verdict it was: not a
// non-terminating match a later group overrides, nor the default.
func TestRuleHits(t *testing.T) {
	l := &Layer{Name: "acl", Groups: []Group{
		{Name: "soft", Rules: []Rule{{Name: "pass-all", Priority: 1, Action: Action{Verb: Allow}}}},
		{Name: "hard", Rules: []Rule{
			{Name: "block-udp", Priority: 1, Match: Condition{Protocols: []uint8{dataplane.ProtoUDP}}, Action: Action{Verb: Block}, Terminating: true},
		}},
		{Name: "never", Rules: []Rule{{Name: "icmp", Priority: 1, Match: Condition{Protocols: []uint8{dataplane.ProtoICMPv4}}, Terminating: true}}},
	}}
	if err := l.Compile(); err != nil {
		t.Fatal(err)
	}
	udp := dataplane.View{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), Proto: dataplane.ProtoUDP}
	tcp := udp
	tcp.Proto = dataplane.ProtoTCP
	for range 3 {
		l.Evaluate(&udp, Out)
	}
	l.Evaluate(&tcp, In)
	want := map[string]uint64{"pass-all": 1, "block-udp": 3, "icmp": 0}
	for gi := range l.Groups {
		for ri := range l.Groups[gi].Rules {
			r := &l.Groups[gi].Rules[ri]
			if got := r.Counters().Hits.Load(); got != want[r.Name] {
				t.Errorf("rule %s: %d hits, want %d", r.Name, got, want[r.Name])
			}
		}
	}
}

// A layer's stateful default makes the connections it allows stateful; a
// block never is.
func TestDefaultStateful(t *testing.T) {
	v := dataplane.View{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), Proto: dataplane.ProtoUDP}
	for _, c := range []struct {
		stateful bool
		verb     Verb
		want     bool
	}{{false, Allow, false}, {true, Allow, true}, {true, Block, false}} {
		l := &Layer{Name: "acl", DefaultOut: Action{Verb: c.verb}, DefaultStateful: c.stateful}
		if err := l.Compile(); err != nil {
			t.Fatal(err)
		}
		if vd := l.Evaluate(&v, Out); vd.Stateful() != c.want || vd.Rule != nil {
			t.Errorf("default %s, DefaultStateful %v: verdict %s, stateful %v; want %v", c.verb, c.stateful, vd, vd.Stateful(), c.want)
		}
	}
}
