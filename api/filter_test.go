package api

import (
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/inspect"
)

func TestFlowFilterRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   FlowFilter
		want inspect.FlowFilter
	}{
		{name: "empty"},
		{name: "everything",
			in: FlowFilter{Port: "pod-a", Proto: "tcp", Src: "10.244.1.10", Dst: "10.96.0.0/12", SrcPort: 40000, DstPort: 80, Limit: 5},
			want: inspect.FlowFilter{Port: "pod-a", Proto: 6, Src: netip.MustParsePrefix("10.244.1.10/32"),
				Dst: netip.MustParsePrefix("10.96.0.0/12"), SrcPort: 40000, DstPort: 80, Limit: 5}},
		{name: "ipv6 and a number",
			in:   FlowFilter{Proto: "58", Src: "fd00::1", Dst: "fd00::8/64"},
			want: inspect.FlowFilter{Proto: 58, Src: netip.MustParsePrefix("fd00::1/128"), Dst: netip.MustParsePrefix("fd00::/64")}},
		{name: "icmpv6 by name", in: FlowFilter{Proto: "icmp6"}, want: inspect.FlowFilter{Proto: 58}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := url.ParseQuery(strings.TrimPrefix(tc.in.query(), "?"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseFlowFilter(q)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestFlowFilterErrors(t *testing.T) {
	for _, tc := range []struct{ query, want string }{
		{"proto=sctpx", `proto: "sctpx" is not tcp, udp, icmp, icmpv6 or a protocol number`},
		{"proto=300", `proto: "300" is not`},
		{"src=10.0.0", `src: "10.0.0" is not an address or prefix`},
		{"dst=10.0.0.0/33", `dst: "10.0.0.0/33" is not an address or prefix`},
		{"sport=0", `sport: "0" is not a port (1-65535)`},
		{"dport=70000", `dport: "70000" is not a port`},
		{"limit=-1", `limit: "-1" is not a count`},
		{"prot=tcp", `prot: unknown flow filter`},
	} {
		q, _ := url.ParseQuery(tc.query)
		if _, err := ParseFlowFilter(q); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.query, err, tc.want)
		}
	}
}
