package vfp

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"strconv"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/nat"
)

// decodeText decodes the JSON value js into a new value of type t as a
// policy is decoded: CheckFields at path "x", then encoding/json. It
// returns the value and how it marshals.
func decodeText(t reflect.Type, js string) (any, string, error) {
	var raw any
	if err := json.Unmarshal([]byte(js), &raw); err != nil {
		return nil, "", err
	}
	if n, ok := raw.(float64); ok {
		raw = json.Number(strconv.FormatFloat(n, 'f', -1, 64))
	}
	if err := CheckFields(raw, t, "x"); err != nil {
		return nil, "", err
	}
	v := reflect.New(t)
	if err := json.Unmarshal([]byte(js), v.Interface()); err != nil {
		return nil, "", err
	}
	b, err := json.Marshal(v.Interface())
	return v.Elem().Interface(), string(b), err
}

// TestTextValues decodes each kind of text value of a document as a
// policy file has it, and checks the value, how it is written back, and
// the error (with the field's path) for what it refuses.
func TestTextValues(t *testing.T) {
	addrT, prefixT := reflect.TypeFor[netip.Addr](), reflect.TypeFor[netip.Prefix]()
	for _, tt := range []struct {
		t       reflect.Type
		in      string // JSON
		want    any
		out     string // JSON written back (default: in)
		wantErr string
	}{
		{t: addrT, in: `"10.0.0.1"`, want: netip.MustParseAddr("10.0.0.1")},
		{t: addrT, in: `"fd00::1"`, want: netip.MustParseAddr("fd00::1")},
		{t: addrT, in: `""`, want: netip.Addr{}},
		{t: addrT, in: `"10.0.0"`, wantErr: `x: "10.0.0" is not an IP address`},
		{t: addrT, in: `"fe80::1%eth0"`, wantErr: `x: "fe80::1%eth0": zones are not allowed`},
		{t: addrT, in: `"::ffff:10.0.0.1"`, wantErr: `x: "::ffff:10.0.0.1": write IPv4 addresses in IPv4 form`},
		{t: addrT, in: `5`, wantErr: `x: want a string, got the number 5`},
		{t: prefixT, in: `"10.0.0.10/24"`, want: netip.MustParsePrefix("10.0.0.10/24")},
		{t: prefixT, in: `"10.0.0.10"`, wantErr: `x: "10.0.0.10" is not an address with a prefix length (10.0.0.10/24)`},
		{t: prefixT, in: `"::ffff:10.0.0.0/104"`, wantErr: `x: "::ffff:10.0.0.0/104": write IPv4 prefixes in IPv4 form`},
		{t: reflect.TypeFor[Prefix](), in: `"10.0.0.0/24"`, want: Prefix(netip.MustParsePrefix("10.0.0.0/24"))},
		{t: reflect.TypeFor[Prefix](), in: `"10.96.0.10"`, want: Host(netip.MustParseAddr("10.96.0.10"))},
		{t: reflect.TypeFor[Prefix](), in: `"10.96.0.10/32"`, want: Host(netip.MustParseAddr("10.96.0.10")), out: `"10.96.0.10"`},
		{t: reflect.TypeFor[Prefix](), in: `"fd00::1/128"`, want: Host(netip.MustParseAddr("fd00::1")), out: `"fd00::1"`},
		{t: reflect.TypeFor[Prefix](), in: `"10.0.0.1/8"`, want: Prefix(netip.MustParsePrefix("10.0.0.1/8"))},
		{t: reflect.TypeFor[Prefix](), in: `"0.0.0.0/0"`, want: Prefix(netip.MustParsePrefix("0.0.0.0/0"))},
		{t: reflect.TypeFor[Prefix](), in: `"10.0.0.0/33"`, wantErr: `x: "10.0.0.0/33" is not an IP prefix or address`},
		{t: reflect.TypeFor[Prefix](), in: `""`, wantErr: `x: "" is not an IP prefix or address`},
		{t: reflect.TypeFor[Prefix](), in: `"fe80::1%eth0"`, wantErr: `x: "fe80::1%eth0": zones are not allowed`},
		{t: reflect.TypeFor[Prefix](), in: `"::ffff:10.0.0.0/120"`, wantErr: `x: "::ffff:10.0.0.0/120": write IPv4 prefixes in IPv4 form`},
		{t: reflect.TypeFor[Proto](), in: `"tcp"`, want: TCP},
		{t: reflect.TypeFor[Proto](), in: `"ICMPv4"`, want: ICMP, out: `"icmp"`},
		{t: reflect.TypeFor[Proto](), in: `"IcmpV6"`, want: ICMPv6, out: `"icmpv6"`},
		{t: reflect.TypeFor[Proto](), in: `"17"`, want: UDP, out: `"udp"`},
		{t: reflect.TypeFor[Proto](), in: `"47"`, want: Proto(47)},
		{t: reflect.TypeFor[Proto](), in: `"256"`, wantErr: `x: "256" is not a protocol (tcp, udp, icmp, icmpv6 or a number 0-255)`},
		{t: reflect.TypeFor[Proto](), in: `6`, wantErr: `x: want a string, got the number 6`},
		{t: reflect.TypeFor[PortRange](), in: `"80"`, want: Port(80)},
		{t: reflect.TypeFor[PortRange](), in: `"1000-2000"`, want: PortRange{Lo: 1000, Hi: 2000}},
		{t: reflect.TypeFor[PortRange](), in: `" 1000 - 2000 "`, want: PortRange{Lo: 1000, Hi: 2000}, out: `"1000-2000"`},
		{t: reflect.TypeFor[PortRange](), in: `"80-80"`, want: Port(80), out: `"80"`},
		{t: reflect.TypeFor[PortRange](), in: `"80-70"`, wantErr: `x: range "80-70" is empty`},
		{t: reflect.TypeFor[PortRange](), in: `"65536"`, wantErr: `x: "65536" is not a port or port range (want 80 or 1000-2000)`},
		{t: reflect.TypeFor[PortRange](), in: `"1000-"`, wantErr: `x: "1000-" is not a port or port range (want 80 or 1000-2000)`},
		{t: reflect.TypeFor[Reservation](), in: `"tcp/8080"`, want: Reservation{Proto: TCP, Port: 8080}},
		{t: reflect.TypeFor[Reservation](), in: `"udp/53"`, want: Reservation{Proto: UDP, Port: 53}},
		{t: reflect.TypeFor[Reservation](), in: `"icmp/1"`, wantErr: `x: "icmp/1" is not tcp/PORT or udp/PORT`},
		{t: reflect.TypeFor[Reservation](), in: `"TCP/80"`, wantErr: `x: "TCP/80" is not tcp/PORT or udp/PORT`},
		{t: reflect.TypeFor[Reservation](), in: `"udp/65536"`, wantErr: `x: "udp/65536" is not tcp/PORT or udp/PORT`},
		{t: reflect.TypeFor[dataplane.MAC](), in: `"02:00:00:00:00:01"`, want: dataplane.MAC{2, 0, 0, 0, 0, 1}},
		{t: reflect.TypeFor[dataplane.MAC](), in: `""`, want: dataplane.MAC{}, out: `"00:00:00:00:00:00"`},
		{t: reflect.TypeFor[dataplane.MAC](), in: `"02:00:00:00:0b"`, wantErr: `x: "02:00:00:00:0b" is not a MAC address (want 02:00:00:00:00:01)`},
		{t: reflect.TypeFor[dataplane.MAC](), in: `[2, 0, 0, 0, 0, 1]`, wantErr: `x: want a string, got a list`},
		{t: reflect.TypeFor[dataplane.DropReason](), in: `"unknown-vni"`, want: dataplane.DropUnknownVNI},
		{t: reflect.TypeFor[dataplane.DropReason](), in: `"no-such-reason"`, wantErr: `x: "no-such-reason" is not a drop reason`},
		{t: reflect.TypeFor[nat.PortRange](), in: `"1024-32767"`, want: nat.PortRange{Lo: 1024, Hi: 32767}},
		{t: reflect.TypeFor[nat.PortRange](), in: `"3000-2000"`, wantErr: `x: port range "3000-2000": 3000-2000 is empty: its low end is above its high end`},
		{t: reflect.TypeFor[Verb](), in: `"block"`, want: Block},
		{t: reflect.TypeFor[Verb](), in: `""`, want: Verb("")},
		{t: reflect.TypeFor[Verb](), in: `"deny"`, wantErr: `x: unknown action "deny" (want allow or block)`},
		{t: reflect.TypeFor[Outer](), in: `"not-present"`, want: NotPresent},
		{t: reflect.TypeFor[Outer](), in: `"push"`, wantErr: `x: unknown operation "push" (want pop or not-present)`},
		{t: reflect.TypeFor[Direction](), in: `"in"`, want: In},
		{t: reflect.TypeFor[Direction](), in: `"up"`, wantErr: `x: unknown direction "up" (want out, in or both)`},
		{t: reflect.TypeFor[Underlay](), in: `"rewrite"`, want: UnderlayRewrite},
		{t: reflect.TypeFor[Underlay](), in: `"Rewrite"`, wantErr: `x: unknown mode "Rewrite" (want bridged, rewrite or none)`},
		{t: reflect.TypeFor[OnFull](), in: `"evict-oldest"`, want: EvictOldest},
		{t: reflect.TypeFor[OnFull](), in: `"drop-all"`, wantErr: `x: unknown policy "drop-all" (want refuse-new or evict-oldest)`},
		{t: reflect.TypeFor[Distribution](), in: `"source-ip"`, want: SourceIP},
		{t: reflect.TypeFor[Distribution](), in: `"sticky"`, wantErr: `x: distribution "sticky": not one of connection, source-ip-protocol, source-ip`},
		{t: reflect.TypeFor[Distribution](), in: `true`, wantErr: `x: want a string, got true`},
	} {
		t.Run(tt.t.Name()+" "+tt.in, func(t *testing.T) {
			got, out, err := decodeText(tt.t, tt.in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("got %v, %v; want the error %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
			want := tt.out
			if want == "" {
				want = tt.in
			}
			if out != want {
				t.Errorf("written back as %s, want %s", out, want)
			}
		})
	}
}

// TestZeroValuesOmitted checks that optional values left zero are not
// written, and that a zero Prefix writes nothing.
func TestZeroValuesOmitted(t *testing.T) {
	for _, v := range []any{&ModifyConfig{}, &ActionConfig{}, &BalancerConfig{}, &LinkConfig{}, &NATPoolConfig{}} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		json.Unmarshal(b, &m)
		for _, k := range []string{"srcMAC", "dstMAC", "srcIP", "dstIP", "snat", "reason", "sourceVIP", "gatewayMac", "ports"} {
			if _, ok := m[k]; ok {
				t.Errorf("%T writes %s when it is zero: %s", v, k, b)
			}
		}
	}
	if b, err := (Prefix{}).MarshalText(); err != nil || len(b) != 0 {
		t.Errorf("the zero Prefix writes %q, %v", b, err)
	}
}

// FuzzTextValues checks that each text value of a document reads what it
// writes: text a type accepts is written in canonical form, which reads
// the same value and is written the same again. CheckFields accepts only
// what encoding/json then decodes, to the value the type reads.
func FuzzTextValues(f *testing.F) {
	for _, s := range []string{"10.0.0.1", "10.0.0.0/24", "fd00::1/128", "::ffff:1.2.3.4", "fe80::1%eth0", "tcp", "ICMPv4", "47",
		"80", " 1000 - 2000 ", "70-60", "tcp/8080", "udp/65536", "02:00:00:00:00:01", "unknown-vni", "1024-65535", "allow", ""} {
		f.Add(s)
	}
	types := []reflect.Type{
		reflect.TypeFor[netip.Addr](), reflect.TypeFor[netip.Prefix](), reflect.TypeFor[Prefix](), reflect.TypeFor[Proto](),
		reflect.TypeFor[PortRange](), reflect.TypeFor[Reservation](), reflect.TypeFor[dataplane.MAC](),
		reflect.TypeFor[dataplane.DropReason](), reflect.TypeFor[nat.PortRange](), reflect.TypeFor[Verb](),
		reflect.TypeFor[Outer](), reflect.TypeFor[Direction](), reflect.TypeFor[Underlay](), reflect.TypeFor[OnFull](),
		reflect.TypeFor[Distribution](),
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, typ := range types {
			js, _ := json.Marshal(s)
			v, out, err := decodeText(typ, string(js))
			if err != nil {
				continue
			}
			again, out2, err := decodeText(typ, out)
			if err != nil || again != v || out2 != out {
				t.Fatalf("%v %q read %v, written %s, read back %v written %s, %v", typ, s, v, out, again, out2, err)
			}
		}
	})
}
