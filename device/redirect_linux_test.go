//go:build linux

package device

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/internal/testenv"
)

func TestRedirectTable(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"eth0", "ufp_eth0"},
		{"vEthernet", "ufp_vEthernet"},
		{"br-0.1", "ufp_br_0_1"},
	} {
		if got := RedirectTable(tc.name); got != tc.want {
			t.Errorf("RedirectTable(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestRedirectScript(t *testing.T) {
	a4, b4, a6, b6 := netip.MustParseAddr("192.168.70.1"), netip.MustParseAddr("169.254.0.1"),
		netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::ff:1")
	for _, tc := range []struct {
		name string
		rs   []Redirect
		want string
	}{
		{name: "none: the table goes", want: "table inet T {}\ndelete table inet T\n"},
		{
			name: "one address, ports sorted and deduplicated",
			rs:   []Redirect{{Proto: 17, Port: 30053, From: a4, To: b4}, {Proto: 6, Port: 30080, From: a4, To: b4}, {Proto: 6, Port: 30080, From: a4, To: b4}},
			want: "table inet T {}\ndelete table inet T\ntable inet T {\n" +
				"\tset ports0 {\n\t\ttype inet_proto . inet_service\n\t\telements = { 17 . 30053, 6 . 30080 }\n\t}\n" +
				"\tchain output {\n\t\ttype nat hook output priority -100; policy accept;\n" +
				"\t\tip daddr 192.168.70.1 meta l4proto . th dport @ports0 dnat ip to 169.254.0.1\n\t}\n}\n",
		},
		{
			name: "both families, in address order",
			rs:   []Redirect{{Proto: 6, Port: 30080, From: a6, To: b6}, {Proto: 6, Port: 30080, From: a4, To: b4}},
			want: "table inet T {}\ndelete table inet T\ntable inet T {\n" +
				"\tset ports0 {\n\t\ttype inet_proto . inet_service\n\t\telements = { 6 . 30080 }\n\t}\n" +
				"\tset ports1 {\n\t\ttype inet_proto . inet_service\n\t\telements = { 6 . 30080 }\n\t}\n" +
				"\tchain output {\n\t\ttype nat hook output priority -100; policy accept;\n" +
				"\t\tip daddr 192.168.70.1 meta l4proto . th dport @ports0 dnat ip to 169.254.0.1\n" +
				"\t\tip6 daddr fd00::1 meta l4proto . th dport @ports1 dnat ip6 to fd00::ff:1\n\t}\n}\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(redirectScript("T", tc.rs)); got != tc.want {
				t.Errorf("script:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func TestValidateRedirect(t *testing.T) {
	a4, b4, a6 := netip.MustParseAddr("192.168.70.1"), netip.MustParseAddr("169.254.0.1"), netip.MustParseAddr("fd00::1")
	for _, tc := range []struct {
		r    Redirect
		want string
	}{
		{Redirect{Proto: 1, Port: 1, From: a4, To: b4}, "protocol 1"},
		{Redirect{Proto: 6, From: a4, To: b4}, "port 0"},
		{Redirect{Proto: 6, Port: 1, From: a4}, "not IPv4 or IPv6"},
		{Redirect{Proto: 6, Port: 1, From: a4, To: a6}, "not of one family"},
	} {
		err := validateLink(Link{Name: "x", Redirects: []Redirect{tc.r}})
		if err == nil || !strings.HasPrefix(err.Error(), "Link.Redirects[0]: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.r, err, tc.want)
		}
	}
}

func TestRoutesChanged(t *testing.T) {
	r := func(i byte) Route {
		return Route{Dst: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 96, 0, i}), 32)}
	}
	rs := func(is ...byte) []Route {
		var out []Route
		for _, i := range is {
			out = append(out, r(i))
		}
		return out
	}
	for _, tc := range []struct {
		name              string
		old, now          []Route
		wantGone, wantAdd []Route
	}{
		{"same", rs(1, 2, 3), rs(1, 2, 3), nil, nil},
		{"added in the middle", rs(1, 2, 3), rs(1, 2, 9, 3), nil, rs(9)},
		{"removed at the end", rs(1, 2, 3), rs(1, 2), rs(3), nil},
		{"removed at the start", rs(1, 2, 3), rs(2, 3), rs(1), nil},
		{"replaced", rs(1, 2, 3), rs(1, 8, 3), rs(2), rs(8)},
		{"from none", nil, rs(1, 2), nil, rs(1, 2)},
		{"reordered", rs(1, 2, 3), rs(3, 2, 1), rs(1, 2, 3), rs(3, 2, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gone, added := routesChanged(tc.old, tc.now)
			if !slices.Equal(gone, tc.wantGone) || !slices.Equal(added, tc.wantAdd) {
				t.Errorf("routesChanged: gone %v added %v, want %v and %v", gone, added, tc.wantGone, tc.wantAdd)
			}
		})
	}
}

// nftTable is what the test reads of `nft -j list table`: the set
// elements (protocol and port) and whether a dnat rule is there.
func nftTable(t *testing.T, ns, table string) (elems []string, ok bool) {
	t.Helper()
	out, err := cmdOut("ip", "netns", "exec", ns, "nft", "-j", "list", "table", "inet", table)
	if err != nil {
		return nil, false
	}
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("nft -j: %v: %s", err, out)
	}
	for _, o := range doc.Nftables {
		if raw, isSet := o["set"]; isSet {
			var s struct {
				Elem []struct {
					Concat []any `json:"concat"`
				} `json:"elem"`
			}
			json.Unmarshal(raw, &s)
			for _, e := range s.Elem {
				b, _ := json.Marshal(e.Concat)
				elems = append(elems, string(b))
			}
		}
	}
	slices.Sort(elems)
	return elems, true
}

// TestTAPRedirects creates a TAP with a redirect of its namespace's
// connections to its own address and a port: such a connection leaves by
// the TAP toward the redirect's address (the kernel resolves it there),
// a connection to another port stays local; UpdateLink changes the
// routes and redirects in place (same interface), and Close removes the
// table with the interface.
func TestTAPRedirects(t *testing.T) {
	requireNetAdmin(t)
	testenv.NeedTool(t, "nft")
	ns := newNetns(t)
	self, gw := netip.MustParseAddr("10.78.0.1"), netip.MustParseAddr("169.254.0.1")
	l := Link{
		Name: "vEthernet", NetNS: nsPath(ns), MAC: dataplane.MAC{0x02, 0, 0, 0, 0x78, 1},
		Addrs:     []netip.Prefix{netip.MustParsePrefix("10.78.0.1/24")},
		Routes:    []Route{{Dst: netip.PrefixFrom(gw, 32)}},
		Redirects: []Redirect{{Proto: 6, Port: 30080, From: self, To: gw}},
	}
	tap, err := CreateTAP(l)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			tap.Close()
		}
	})
	table := RedirectTable(l.Name)
	if elems, ok := nftTable(t, ns, table); !ok || !slices.Equal(elems, []string{`["tcp",30080]`}) {
		t.Fatalf("table %s: %v %v, want tcp 30080", table, ok, elems)
	}
	r := newReader(t, tap, 8)
	dial := func(port int) {
		go InNetNS(nsPath(ns), func() error {
			d := net.Dialer{Timeout: 200 * time.Millisecond}
			c, err := d.DialContext(context.Background(), "tcp", netip.AddrPortFrom(self, uint16(port)).String())
			if err == nil {
				c.Close()
			}
			return nil
		})
	}
	// Redirected: the kernel resolves the gateway on the TAP.
	dial(30080)
	r.until(t, 10*time.Second, 300*time.Millisecond, func() { dial(30080) }, func(f []byte, _ dataplane.Offload) bool {
		a, ok := parseARP(f)
		return ok && a.op == 1 && a.tpa == gw && a.spa == self
	})
	// Another port stays local: refused at once, nothing on the TAP.
	err = InNetNS(nsPath(ns), func() error {
		_, err := net.DialTimeout("tcp", netip.AddrPortFrom(self, 30081).String(), time.Second)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("connection to another port: %v, want refused locally", err)
	}

	before := nsLink(t, ns, l.Name)
	next := l
	next.Routes = append(slices.Clone(l.Routes), Route{Dst: netip.MustParsePrefix("10.96.0.10/32"), Via: gw, OnLink: true})
	next.Redirects = []Redirect{{Proto: 6, Port: 30080, From: self, To: gw}, {Proto: 17, Port: 30053, From: self, To: gw}}
	if err := tap.UpdateLink(l, next); err != nil {
		t.Fatal(err)
	}
	after := nsLink(t, ns, l.Name)
	if after == nil || after.Index != before.Index {
		t.Fatalf("UpdateLink replaced the interface: %+v, was %+v", after, before)
	}
	var routes []ipRoute
	ipJSON(t, ns, &routes, "route", "show", "10.96.0.10/32")
	if len(routes) != 1 || routes[0].Gateway != gw.String() || routes[0].Dev != l.Name {
		t.Errorf("route to 10.96.0.10 after UpdateLink: %+v", routes)
	}
	if elems, _ := nftTable(t, ns, table); !slices.Equal(elems, []string{`["tcp",30080]`, `["udp",30053]`}) {
		t.Errorf("table after UpdateLink: %v", elems)
	}
	// Back: the route goes, the table holds the one redirect.
	if err := tap.UpdateLink(next, l); err != nil {
		t.Fatal(err)
	}
	routes = nil
	ipJSON(t, ns, &routes, "route", "show", "10.96.0.10/32")
	if len(routes) != 0 {
		t.Errorf("route to 10.96.0.10 after it left: %+v", routes)
	}
	if elems, _ := nftTable(t, ns, table); !slices.Equal(elems, []string{`["tcp",30080]`}) {
		t.Errorf("table after the second UpdateLink: %v", elems)
	}
	bad := l
	bad.MTU = 1300
	if err := tap.UpdateLink(l, bad); err == nil {
		t.Errorf("UpdateLink changed the MTU in place")
	}
	if err := tap.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if _, ok := nftTable(t, ns, table); ok {
		t.Errorf("table %s left after Close", table)
	}
}

// BenchmarkUpdateLinkRoutes measures UpdateLink on a TAP with the routes
// of N Service frontends: all N added at once (a first sync), and one
// added and removed among N (a Service coming and going).
func BenchmarkUpdateLinkRoutes(b *testing.B) {
	requireNetAdmin(b)
	const n = 10000
	ns := newNetns(b)
	gw := netip.MustParseAddr("169.254.0.1")
	base := Link{Name: "vEthernet", NetNS: nsPath(ns), MAC: dataplane.MAC{0x02, 0, 0, 0, 0x78, 2},
		Addrs: []netip.Prefix{netip.MustParsePrefix("10.78.0.1/24")}, Routes: []Route{{Dst: netip.PrefixFrom(gw, 32)}}}
	tap, err := CreateTAP(base)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tap.Close() })
	vip := func(i int) Route {
		return Route{Dst: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}), 32), Via: gw, OnLink: true}
	}
	full := base
	for i := range n {
		full.Routes = append(full.Routes, vip(i))
	}
	b.Run("10000-at-once", func(b *testing.B) {
		for b.Loop() {
			if err := tap.UpdateLink(base, full); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := tap.UpdateLink(full, base); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	if err := tap.UpdateLink(base, full); err != nil {
		b.Fatal(err)
	}
	more := full
	more.Routes = append(slices.Clone(full.Routes), vip(n))
	b.Run("one-among-10000", func(b *testing.B) {
		for b.Loop() {
			if err := tap.UpdateLink(full, more); err != nil {
				b.Fatal(err)
			}
			if err := tap.UpdateLink(more, full); err != nil {
				b.Fatal(err)
			}
		}
	})
}
