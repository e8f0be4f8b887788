package main

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// The /proc/net/route and /proc/net/ipv6_route of a pod's namespace, as
// Linux 6.18 on x86-64 shows them: eth0 has 10.244.1.10/24 and
// fd00:244:1::a/64 with default routes through .1 and ::1, a route to
// 10.96.0.0/12 through .254 (metric 100), a host route to 192.0.2.7, and
// unreachable routes; 203.0.113.0/24 through .1 (not listed: /proc/net/route
// has the main table only) and 2001:db8::/32 through fe80::1 (listed) are
// in table 100. The interface peer0 is the other end of eth0's veth.
const (
	sampleRoute = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT                                                       \n" +
		"eth0\t00000000\t0101F40A\t0003\t0\t0\t0\t00000000\t0\t0\t0                                                                               \n" +
		"eth0\t0000600A\tFE01F40A\t0003\t0\t0\t100\t0000F0FF\t0\t0\t0                                                                             \n" +
		"eth0\t0001F40A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0                                                                               \n" +
		"eth0\t070200C0\t00000000\t0005\t0\t0\t0\tFFFFFFFF\t0\t0\t0                                                                               \n" +
		"*\t006433C6\t00000000\t0201\t0\t0\t0\t00FFFFFF\t0\t0\t0                                                                                  \n"

	sampleIPv6Route = "20010db8000000000000000000000000 20 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000400 00000001 00000000 00000003     eth0\n" +
		"00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo\n" +
		"20010db8000100000000000000000000 30 00000000000000000000000000000000 00 00000000000000000000000000000000 00000400 00000001 00000000 00200200       lo\n" +
		"fd000244000100000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n" +
		"fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000002 00000000 00000001    peer0\n" +
		"fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n" +
		"00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000244000100000000000000000001 00000400 00000001 00000000 00000003     eth0\n" +
		"00000000000000000000000000000001 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000002 00000000 80200001       lo\n" +
		"fd00024400010000000000000000000a 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000002 00000000 80200001     eth0\n" +
		"fe800000000000000c2a0afffef4010a 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000002 00000000 80200001     eth0\n" +
		"ff000000000000000000000000000000 08 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000004 00000000 00000001    peer0\n" +
		"ff000000000000000000000000000000 08 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000002 00000000 00000001     eth0\n" +
		"00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo\n"
)

func littleEndian(t testing.TB) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the /proc/net/route samples are a little-endian machine's")
	}
}

func route(dev, dst, gw string) procRoute {
	r := procRoute{dev: dev, nsRoute: nsRoute{dst: netip.MustParsePrefix(dst)}}
	if gw != "" {
		r.gw = netip.MustParseAddr(gw)
	}
	return r
}

func TestParseRoute4(t *testing.T) {
	littleEndian(t)
	lines := strings.SplitAfter(sampleRoute, "\n")
	for _, tt := range []struct {
		name string
		line string
		want procRoute
		ok   bool
	}{
		{name: "header", line: lines[0]},
		{name: "default", line: lines[1], want: route("eth0", "0.0.0.0/0", "10.244.1.1"), ok: true},
		{name: "via gateway", line: lines[2], want: route("eth0", "10.96.0.0/12", "10.244.1.254"), ok: true},
		{name: "subnet", line: lines[3], want: route("eth0", "10.244.1.0/24", ""), ok: true},
		{name: "host", line: lines[4], want: route("eth0", "192.0.2.7/32", ""), ok: true},
		{name: "unreachable", line: lines[5], want: route("*", "198.51.100.0/24", ""), ok: true},
		{name: "no newline", line: "eth0\t00000000\t0101F40A\t0003\t0\t0\t0\t00000000\t0\t0\t0", want: route("eth0", "0.0.0.0/0", "10.244.1.1"), ok: true},
		{name: "lower case", line: "eth0\t0000600a\tfe01f40a\t0003\t0\t0\t100\t0000f0ff\t0\t0\t0\n", want: route("eth0", "10.96.0.0/12", "10.244.1.254"), ok: true},
		{name: "empty", line: ""},
		{name: "blank", line: "   \n"},
		{name: "no mask", line: "eth0\t00000000\t0101F40A\t0003\t0\t0\t0\n"},
		{name: "short destination", line: "eth0\t0000000\t0101F40A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"},
		{name: "long gateway", line: "eth0\t00000000\t0101F40A0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"},
		{name: "not hex", line: "eth0\t0000000G\t0101F40A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"},
		{name: "signed", line: "eth0\t+0000000\t0101F40A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"},
		{name: "mask with a hole", line: "eth0\t0000600A\tFE01F40A\t0003\t0\t0\t100\t0000F0F0\t0\t0\t0\n"},
		{name: "mask not from the top", line: "eth0\t0000600A\tFE01F40A\t0003\t0\t0\t100\t00FFFF00\t0\t0\t0\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseRoute4(tt.line)
			if ok != tt.ok || got != tt.want {
				t.Errorf("parseRoute4(%q) = %+v, %v; want %+v, %v", tt.line, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestParseRoute6(t *testing.T) {
	lines := strings.SplitAfter(sampleIPv6Route, "\n")
	for _, tt := range []struct {
		name string
		line string
		want procRoute
		ok   bool
	}{
		{name: "other table", line: lines[0], want: route("eth0", "2001:db8::/32", "fe80::1"), ok: true},
		{name: "unreachable", line: lines[2], want: route("lo", "2001:db8:1::/48", ""), ok: true},
		{name: "subnet", line: lines[3], want: route("eth0", "fd00:244:1::/64", ""), ok: true},
		{name: "link local", line: lines[4], want: route("peer0", "fe80::/64", ""), ok: true},
		{name: "default", line: lines[6], want: route("eth0", "::/0", "fd00:244:1::1"), ok: true},
		{name: "local", line: lines[8], want: route("eth0", "fd00:244:1::a/128", ""), ok: true},
		{name: "multicast", line: lines[11], want: route("eth0", "ff00::/8", ""), ok: true},
		{name: "no device", line: "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000244000100000000000000000001 00000400 00000001 00000000 00000003         \n",
			want: route("", "::/0", "fd00:244:1::1"), ok: true},
		{name: "no newline", line: strings.TrimSuffix(lines[6], "\n"), want: route("eth0", "::/0", "fd00:244:1::1"), ok: true},
		{name: "next hop without RTF_GATEWAY", line: "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000244000100000000000000000001 00000400 00000001 00000000 00000001     eth0\n",
			want: route("eth0", "::/0", ""), ok: true},
		// Older kernels list cached clones (RTF_CACHE), which are not
		// routes of a table.
		{name: "cached", line: "20010db8000000000000000000000001 80 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000000 00000001 00000000 01000003     eth0\n"},
		{name: "empty", line: ""},
		{name: "short", line: "00000000000000000000000000000000 00 00000000000000000000000000000000 00\n"},
		{name: "prefix too long", line: "00000000000000000000000000000000 81 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n"},
		{name: "short destination", line: "0000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n"},
		{name: "next hop not hex", line: "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd0002440001000000000000000000g1 00000400 00000001 00000000 00000003     eth0\n"},
		{name: "short flags", line: "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000244000100000000000000000001 00000400 00000001 00000000 0003     eth0\n"},
		{name: "extra field", line: "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000244000100000000000000000001 00000400 00000001 00000000 00000003 eth0 eth1\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseRoute6(tt.line)
			if ok != tt.ok || got != tt.want {
				t.Errorf("parseRoute6(%q) = %+v, %v; want %+v, %v", tt.line, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestAppendRoutes(t *testing.T) {
	littleEndian(t)
	nr := func(dst, gw string) nsRoute { return route("", dst, gw).nsRoute }
	got := appendRoutes(nil, sampleRoute, "eth0", parseRoute4)
	got = appendRoutes(got, sampleIPv6Route, "eth0", parseRoute6)
	want := []nsRoute{
		nr("0.0.0.0/0", "10.244.1.1"), nr("10.96.0.0/12", "10.244.1.254"), nr("10.244.1.0/24", ""), nr("192.0.2.7/32", ""),
		nr("2001:db8::/32", "fe80::1"), nr("fd00:244:1::/64", ""), nr("fe80::/64", ""), nr("::/0", "fd00:244:1::1"),
		nr("fd00:244:1::a/128", ""), nr("fe80::c2a:aff:fef4:10a/128", ""), nr("ff00::/8", ""),
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("routes via eth0:\n%v\nwant\n%v", got, want)
	}
	if got := appendRoutes(nil, sampleRoute, "eth1", parseRoute4); len(got) != 0 {
		t.Errorf("routes via eth1: %v, want none", got)
	}
}

func TestParseRouteNoAllocs(t *testing.T) {
	lines := strings.SplitAfter(sampleRoute+sampleIPv6Route, "\n")
	if n := testing.AllocsPerRun(100, func() {
		for _, l := range lines {
			parseRoute4(l)
			parseRoute6(l)
		}
	}); n != 0 {
		t.Errorf("parsing the samples allocates %v times, want 0", n)
	}
}

// formatRoute4 and formatRoute6 write r as the kernel writes it.
func formatRoute4(r procRoute) string {
	a := r.dst.Addr().As4()
	var g [4]byte
	if r.gw.Is4() {
		g = r.gw.As4()
	}
	m := binary.BigEndian.AppendUint32(nil, ^uint32(0)<<(32-r.dst.Bits()))
	return fmt.Sprintf("%s\t%08X\t%08X\t0003\t0\t0\t0\t%08X\t0\t0\t0\n", r.dev,
		binary.NativeEndian.Uint32(a[:]), binary.NativeEndian.Uint32(g[:]), binary.NativeEndian.Uint32(m))
}

func formatRoute6(r procRoute) string {
	a := r.dst.Addr().As16()
	var g [16]byte
	flags := 0x1
	if r.gw.IsValid() {
		g, flags = r.gw.As16(), flags|rtfGateway
	}
	return fmt.Sprintf("%x %02x %032x 00 %x %08x %08x %08x %08x %8s\n", a, r.dst.Bits(), 0, g, 1024, 1, 0, flags, r.dev)
}

// FuzzParseRoute feeds any line to both parsers: they do not panic, what
// they accept is a route of their family, and a route written back as
// the kernel writes it parses to the same route.
func FuzzParseRoute(f *testing.F) {
	for _, l := range strings.SplitAfter(sampleRoute+sampleIPv6Route, "\n") {
		f.Add(l)
	}
	f.Add("eth0\t0000600A\tFE01F40A\t0003\t0\t0\t100\t0000F0F0\t0\t0\t0\n")
	f.Add("20010db8000000000000000000000001 80 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000000 00000001 00000000 01000003     eth0\n")
	f.Fuzz(func(t *testing.T, line string) {
		if r, ok := parseRoute4(line); ok {
			if r.dev == "" || strings.ContainsAny(r.dev, " \t\n") || !r.dst.Addr().Is4() || r.gw.IsValid() && !r.gw.Is4() || r.gw.IsUnspecified() {
				t.Fatalf("parseRoute4(%q) = %+v", line, r)
			}
			if again, ok := parseRoute4(formatRoute4(r)); !ok || again != r {
				t.Fatalf("parseRoute4(%q) = %+v; written back as %q it parses to %+v, %v", line, r, formatRoute4(r), again, ok)
			}
		}
		if r, ok := parseRoute6(line); ok {
			if strings.ContainsAny(r.dev, " \t\n") || !r.dst.Addr().Is6() || r.gw.IsValid() && !r.gw.Is6() {
				t.Fatalf("parseRoute6(%q) = %+v", line, r)
			}
			if again, ok := parseRoute6(formatRoute6(r)); !ok || again != r {
				t.Fatalf("parseRoute6(%q) = %+v; written back as %q it parses to %+v, %v", line, r, formatRoute6(r), again, ok)
			}
		}
	})
}
