package vswitch

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/nat"
)

// NAT behaviour as RFC 4787, 5382 and 5508 describe it, through HNS-level
// documents: the filtering of each OutBoundNAT Filtering value (which new
// connections from the network reach a mapping), hairpinning to dynamic
// mappings and port mappings (TCP, UDP, ICMP echo; within a network and
// across networks; with and without the host's vNIC), and the host's own
// connections sharing the pool of its address with the pods' mappings.

// rfcDoc is a node with two overlay networks: ovl (pods a and b) and ovl2
// (pod c); every pod has OutBoundNAT with filtering (omitted when empty),
// and a has a port mapping, TCP 8080 to its 80. With host, the host's own
// vNIC is on the switch (Uplink.HostPort).
func rfcDoc(t *testing.T, filtering string, host bool) *Config {
	t.Helper()
	return mustParse(t, rfcDocJSON(filtering, host))
}

func rfcDocJSON(filtering string, host bool) string {
	nat := `{"Type": "OutBoundNAT", "Settings": {"Exceptions": ["10.244.0.0/15"]}}`
	if filtering != "" {
		nat = fmt.Sprintf(`{"Type": "OutBoundNAT", "Settings": {"Exceptions": ["10.244.0.0/15"], "Filtering": %q}}`, filtering)
	}
	hostPort, hostIP := "", `"192.168.1.10"`
	if host {
		hostPort, hostIP = `"HostPort": "host",`, `"192.168.1.10/24"`
	}
	net := func(name, prefix, gw string, vsid int, dr string) string {
		return fmt.Sprintf(`{"Name": %q, "Type": "Overlay",
      "Ipams": [{"Subnets": [{"IpAddressPrefix": %q, "Routes": [{"NextHop": %q, "DestinationPrefix": "0.0.0.0/0"}],
        "Policies": [{"Type": "VSID", "Settings": {"IsolationId": %d}}]}]}],
      "Policies": [
        {"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.1.10"}},
        {"Type": "DrMacAddress", "Settings": {"Address": %q}}]}`, name, prefix, gw, vsid, dr)
	}
	doc := `{
  "switch": {"name": "rfc"},
  "Uplink": {
    "Name": "uplink", "MacAddress": "02:00:00:00:00:fe", ` + hostPort + `
    "IpAddresses": [` + hostIP + `], "DefaultGateway": "192.168.1.1",
    "Neighbors": [{"IpAddress": "192.168.1.1", "MacAddress": "02:00:00:00:00:99"}]
  },
  "Networks": [` + net("ovl", "10.244.0.0/24", "10.244.0.1", 4096, "02:00:00:00:00:01") + `,
    ` + net("ovl2", "10.245.0.0/24", "10.245.0.1", 4097, "02:00:00:00:00:02") + `],
  "Endpoints": [
    {"Name": "a", "HostComputeNetwork": "ovl", "MacAddress": "02:00:00:00:00:1a",
     "IpConfigurations": [{"IpAddress": "10.244.0.10"}],
     "Policies": [` + nat + `, {"Type": "PortMapping", "Settings": {"Protocol": 6, "InternalPort": 80, "ExternalPort": 8080}}]},
    {"Name": "b", "HostComputeNetwork": "ovl", "MacAddress": "02:00:00:00:00:1b",
     "IpConfigurations": [{"IpAddress": "10.244.0.11"}], "Policies": [` + nat + `]},
    {"Name": "c", "HostComputeNetwork": "ovl2", "MacAddress": "02:00:00:00:00:1c",
     "IpConfigurations": [{"IpAddress": "10.245.0.12"}], "Policies": [` + nat + `]}
  ]
}`
	return doc
}

const rfcHost = "192.168.1.10"

// rfcPod is a pod of rfcDoc: its port, MAC, address and router's MAC.
type rfcPod struct {
	port     string
	mac, dr  dataplane.MAC
	ip       string
	ovlIndex int
}

var (
	rfcA = rfcPod{"a", dataplane.MAC{2, 0, 0, 0, 0, 0x1a}, natDR, "10.244.0.10", 0}
	rfcB = rfcPod{"b", dataplane.MAC{2, 0, 0, 0, 0, 0x1b}, natDR, "10.244.0.11", 0}
	rfcC = rfcPod{"c", dataplane.MAC{2, 0, 0, 0, 0, 0x1c}, dataplane.MAC{2, 0, 0, 0, 0, 0x02}, "10.245.0.12", 1}
)

// send is a packet the pod sends to dst (through its router).
func (p rfcPod) send(proto string, sport uint16, dst string, dport uint16, flags string) natPkt {
	return natPkt{smac: p.mac, dmac: p.dr, src: p.ip, sport: sport, dst: dst, dport: dport, proto: proto, flags: flags, payload: "x"}
}

// recv is k as the pod receives it: from its router, to its MAC, with the
// given source and destination.
func (p rfcPod) recv(k natPkt, src string, sport uint16, dst string, dport uint16) natPkt {
	k.smac, k.dmac, k.src, k.sport, k.dst, k.dport = p.dr, p.mac, src, sport, dst, dport
	return k
}

// wire is k as it leaves on the underlay from the host, translated to the
// host's address and sport.
func wire(k natPkt, sport uint16) natPkt {
	k.smac, k.dmac, k.src, k.sport = natHost, natRouter, rfcHost, sport
	return k
}

// fromNet is a packet a host of the network sends to the host's address.
func fromNet(proto, src string, sport, dport uint16, flags string) natPkt {
	return natPkt{smac: natRouter, dmac: natHost, src: src, sport: sport, dst: rfcHost, dport: dport, proto: proto, flags: flags, payload: "x"}
}

// echoes returns k (an echo request) with its identifier id and kind.
func echo(k natPkt, kind string, id uint16) natPkt {
	k.proto, k.sport, k.dport = kind, id, id
	return k
}

// TestNATFilteringModes runs the STUN-style classification of RFC 4787
// section 5 against each OutBoundNAT Filtering: pod a sends from a port to
// a peer, then hosts of the network try to reach the mapping from the
// peer's port, another port of the peer's address, and another address.
// What the filtering refuses is not the pod's: with no host vNIC it has
// nowhere to go.
func TestNATFilteringModes(t *testing.T) {
	const (
		peer  = "203.0.113.5"
		other = "198.51.100.9"
	)
	tests := []struct {
		filtering string
		// whether a new connection reaches the mapping from another port
		// of the peer's address, and from another address
		otherPort, otherAddr bool
	}{
		{filtering: "EndpointIndependent", otherPort: true, otherAddr: true},
		{filtering: "AddressDependent", otherPort: true, otherAddr: false},
		{filtering: "AddressAndPortDependent", otherPort: false, otherAddr: false},
		{filtering: "", otherPort: true, otherAddr: false}, // the default: address-dependent
	}
	for _, tt := range tests {
		t.Run(cmpOr(tt.filtering, "default"), func(t *testing.T) {
			r := ulNewRig(t, rfcDoc(t, tt.filtering, false))
			// reach sends k from the network: it reaches pod a as to if
			// ok, else a mapping holds its port and it is dropped as
			// filtered (RFC 5382 REQ-4: silently).
			reach := func(k natPkt, ok bool, to natPkt) {
				t.Helper()
				if ok {
					r.out("uplink", natFrame(t, k), "a", natFrame(t, to))
				} else {
					r.expect("uplink", natFrame(t, k), "drop nat-filtered")
				}
			}
			// unmapped sends k, to a port no mapping holds: the host's,
			// which has no vNIC here.
			unmapped := func(k natPkt) {
				t.Helper()
				r.expect("uplink", natFrame(t, k), "drop no-destination")
			}
			for _, proto := range []string{"udp", "tcp"} {
				t.Run(proto, func(t *testing.T) {
					sport, syn, synAck := uint16(40000), "", ""
					if proto == "tcp" {
						sport, syn, synAck = 41000, "S", "SA"
					}
					out := rfcA.send(proto, sport, peer, 3478, syn)
					r.out("a", natFrame(t, out), "uplink", natFrame(t, wire(out, sport)))
					// The peer's answer: every filtering lets it in.
					ans := fromNet(proto, peer, 3478, sport, synAck)
					reach(ans, true, rfcA.recv(ans, peer, 3478, rfcA.ip, sport))
					// A new connection from another port of the peer.
					k := fromNet(proto, peer, 3479, sport, syn)
					reach(k, tt.otherPort, rfcA.recv(k, peer, 3479, rfcA.ip, sport))
					if tt.otherPort {
						// The pod answers it from its mapping.
						rep := rfcA.send(proto, sport, peer, 3479, synAck)
						r.out("a", natFrame(t, rep), "uplink", natFrame(t, wire(rep, sport)))
					}
					// From another address.
					k = fromNet(proto, other, 3478, sport, syn)
					reach(k, tt.otherAddr, rfcA.recv(k, other, 3478, rfcA.ip, sport))
					if proto == "tcp" {
						// A segment that opens nothing (no SYN) reaches no
						// mapping, whatever the filtering.
						reach(fromNet(proto, other, 3480, sport, "A"), false, natPkt{})
					}
				})
			}
			t.Run("echo", func(t *testing.T) {
				// RFC 5508: the identifier is the query's port.
				ping := echo(rfcA.send("", 0, peer, 0, ""), "echo", 0x77)
				r.out("a", natFrame(t, ping), "uplink", natFrame(t, wire(ping, 0x77)))
				k := echo(fromNet("", other, 0, 0, ""), "echo-reply", 0x77)
				reach(k, tt.otherAddr, rfcA.recv(k, other, 0x77, rfcA.ip, 0x77))
			})
			// A port no mapping holds reaches nothing; nor does any once
			// the mapping's connections are gone.
			unmapped(fromNet("udp", peer, 3478, 40001, ""))
			if got := r.sw.Pipeline().Drops.Get(dataplane.DropNATFiltered); got == 0 && tt.filtering != "EndpointIndependent" {
				t.Errorf("no nat-filtered drop counted")
			}
			r.sw.Pipeline().FlowTable().Expire(int64(3 * time.Hour))
			if n := r.sw.NAT().Bindings(); n != 0 {
				t.Fatalf("%d bindings left after every connection expired", n)
			}
			unmapped(fromNet("udp", peer, 3479, 40000, ""))
			unmapped(fromNet("udp", other, 3478, 40000, ""))
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestNATMappingRefresh checks REQ-6 of RFC 4787: the mapping lives while
// any connection on it does, whichever way that connection's packets go.
// The pod's only outbound connection idles out (30 s, unanswered); the
// connection a peer opened to the mapping, kept alive from the network,
// keeps the mapping and its filter (the peer's address) with it; once it
// too is gone, the mapping is.
func TestNATMappingRefresh(t *testing.T) {
	r := ulNewRig(t, rfcDoc(t, "AddressDependent", false))
	const peer = "203.0.113.5"
	out := rfcA.send("udp", 40000, peer, 3478, "")
	r.out("a", natFrame(t, out), "uplink", natFrame(t, wire(out, 40000)))
	// Within the 10 s an unanswered UDP flow lives (udpUnreplied), and
	// then every 8 s.
	r.now = 5 * sec
	in := fromNet("udp", peer, 3479, 40000, "")
	r.out("uplink", natFrame(t, in), "a", natFrame(t, rfcA.recv(in, peer, 3479, rfcA.ip, 40000)))
	for now := 13 * sec; now <= 61*sec; now += 8 * sec {
		r.now = now
		r.sw.Pipeline().FlowTable().Expire(now)
		r.out("uplink", natFrame(t, in), "a", nil)
	}
	if n := r.sw.NAT().Bindings(); n != 1 {
		t.Fatalf("bindings = %d, want the one mapping, held by the peer's connection", n)
	}
	// The pod's own connection is gone, the mapping is not: another port
	// of the peer reaches it.
	k := fromNet("udp", peer, 3480, 40000, "")
	r.out("uplink", natFrame(t, k), "a", natFrame(t, rfcA.recv(k, peer, 3480, rfcA.ip, 40000)))
	r.now = 10 * time.Minute.Nanoseconds()
	r.sw.Pipeline().FlowTable().Expire(r.now)
	if n := r.sw.NAT().Bindings(); n != 0 {
		t.Fatalf("bindings = %d after every connection expired", n)
	}
	r.expect("uplink", natFrame(t, fromNet("udp", peer, 3481, 40000, "")), "drop no-destination")
	// Refused packets are not cached: each is judged anew, and the one
	// after the pod talks to the sender's address gets in.
	out = rfcA.send("udp", 40002, peer, 3478, "")
	k = fromNet("udp", "198.51.100.9", 3478, 40002, "")
	r.out("a", natFrame(t, out), "uplink", natFrame(t, wire(out, 40002)))
	r.expect("uplink", natFrame(t, k), "drop nat-filtered")
	r.expect("uplink", natFrame(t, k), "drop nat-filtered")
	out = rfcA.send("udp", 40002, "198.51.100.9", 53, "")
	r.out("a", natFrame(t, out), "uplink", natFrame(t, wire(out, 40002)))
	r.out("uplink", natFrame(t, k), "a", natFrame(t, rfcA.recv(k, "198.51.100.9", 3478, rfcA.ip, 40002)))
}

// TestNATHairpinning: a pod sending to another pod's mapping (dynamic or a
// port mapping) at the host's address reaches it, from its own mapping
// (RFC 4787 REQ-9 and REQ-9a, RFC 5382 REQ-8), in either network, with
// or without the host's vNIC; the answer comes back from the mapping. A
// hairpin is never filtered: the sender is inside the NAT.
func TestNATHairpinning(t *testing.T) {
	for _, host := range []bool{false, true} {
		for _, from := range []rfcPod{rfcB, rfcC} {
			name := fmt.Sprintf("host-vnic=%t/from-%s", host, from.port)
			t.Run(name, func(t *testing.T) {
				r := ulNewRig(t, rfcDoc(t, "AddressAndPortDependent", host))
				for _, c := range []struct {
					proto          string
					aPort, ext     uint16 // a's port and its mapping's
					fromPort, want uint16 // the sender's port and its mapping's
					flags, answer  string
				}{
					{"udp", 40000, 40000, 50000, 50000, "", ""},
					{"tcp", 41000, 41000, 51000, 51000, "S", "SA"},
					// a's echo identifier 0x77 is its mapping's; the
					// sender's 0x77 is taken, so its mapping is 0.
					{"echo", 0x77, 0x77, 0x77, 0, "", ""},
				} {
					t.Run(c.proto, func(t *testing.T) {
						out := rfcA.send(c.proto, c.aPort, "203.0.113.5", 443, c.flags)
						if c.proto == "echo" {
							out = echo(out, "echo", c.aPort)
						}
						r.out("a", natFrame(t, out), "uplink", natFrame(t, wire(out, c.ext)))

						k := from.send(c.proto, c.fromPort, rfcHost, c.ext, c.flags)
						got := rfcA.recv(k, rfcHost, c.want, rfcA.ip, c.aPort)
						if c.proto == "echo" {
							k = echo(k, "echo", c.ext)
							got = rfcA.recv(k, rfcHost, c.want, rfcA.ip, c.want)
						}
						r.out(from.port, natFrame(t, k), "a", natFrame(t, got))
						ans := rfcA.send(c.proto, c.aPort, rfcHost, c.want, c.answer)
						back := from.recv(ans, rfcHost, c.ext, from.ip, c.fromPort)
						if c.proto == "echo" {
							ans = echo(ans, "echo-reply", c.want)
							back = from.recv(ans, rfcHost, c.ext, from.ip, c.fromPort)
						}
						r.out("a", natFrame(t, ans), from.port, natFrame(t, back))
					})
				}
				t.Run("port-mapping", func(t *testing.T) {
					k := from.send("tcp", 52000, rfcHost, 8080, "S")
					r.out(from.port, natFrame(t, k), "a", natFrame(t, rfcA.recv(k, rfcHost, 52000, rfcA.ip, 80)))
					ans := rfcA.send("tcp", 80, rfcHost, 52000, "SA")
					r.out("a", natFrame(t, ans), from.port, natFrame(t, from.recv(ans, rfcHost, 8080, from.ip, 52000)))
				})
				// A port no mapping holds is the host's: its vNIC gets the
				// packet untranslated; without one it has nowhere to go.
				k := from.send("udp", 53000, rfcHost, 40001, "")
				if host {
					to := k
					to.smac, to.dmac = from.dr, natHost
					r.out(from.port, natFrame(t, k), "host", natFrame(t, to))
				} else {
					r.expect(from.port, natFrame(t, k), "drop no-destination")
				}
				// The hairpins hold both mappings, each once per
				// connection; all of them are released with the
				// connections.
				r.sw.Pipeline().FlowTable().Expire(int64(3 * time.Hour))
				if n := r.sw.NAT().Bindings(); n != 0 {
					t.Errorf("%d bindings left after every connection expired", n)
				}
			})
		}
	}
}

// TestNATHostPorts: with the host's vNIC on the switch, the pool of the
// host's address spans the whole port range, and the host's own
// connections, seen through its vNIC, share it with the pods' mappings:
// a pod's mapping avoids a port the host uses, and the host's connection
// from a port a mapping holds is remapped (as Linux conntrack remaps a
// local connection whose tuple is taken), its answers translated back.
func TestNATHostPorts(t *testing.T) {
	r := ulNewRig(t, rfcDoc(t, "", true))
	if got := natPool(t, r.sw, rfcHost).Ports; got != nat.DefaultPortRange() {
		t.Fatalf("the host's pool spans %s, want %s", got, nat.DefaultPortRange())
	}
	hostSend := func(sport uint16, dst string, dport uint16) natPkt {
		return natPkt{smac: natHost, dmac: natRouter, src: rfcHost, sport: sport, dst: dst, dport: dport, proto: "udp", payload: "x"}
	}
	// The host's connection keeps its port; a pod's from the same port
	// is mapped to another.
	h := hostSend(40000, "192.0.2.7", 53)
	r.out("host", natFrame(t, h), "uplink", natFrame(t, h))
	p := rfcA.send("udp", 40000, "192.0.2.7", 53, "")
	r.out("a", natFrame(t, p), "uplink", natFrame(t, wire(p, 1024)))
	// Its answer goes to the host, the pod's to the pod.
	ans := fromNet("udp", "192.0.2.7", 53, 40000, "")
	toHost := ans
	toHost.dmac = natHost
	r.out("uplink", natFrame(t, ans), "host", natFrame(t, toHost))
	ans = fromNet("udp", "192.0.2.7", 53, 1024, "")
	r.out("uplink", natFrame(t, ans), "a", natFrame(t, rfcA.recv(ans, "192.0.2.7", 53, rfcA.ip, 40000)))

	// A pod's mapping holds 45000 (preserved: no split of the range);
	// the host's connection from 45000 is remapped, and its answer comes
	// back to its own port.
	p = rfcB.send("udp", 45000, "192.0.2.7", 53, "")
	r.out("b", natFrame(t, p), "uplink", natFrame(t, wire(p, 45000)))
	h = hostSend(45000, "192.0.2.8", 123)
	hw := h
	hw.sport = 1026
	r.out("host", natFrame(t, h), "uplink", natFrame(t, hw))
	ans = fromNet("udp", "192.0.2.8", 123, 1026, "")
	back := ans
	back.dport = 45000
	r.out("uplink", natFrame(t, ans), "host", natFrame(t, back))

	// A connection from the network to the host's own port (no mapping
	// holds it) reaches the host and keeps the port from new mappings
	// while it lives.
	ssh := natPkt{smac: natRouter, dmac: natHost, src: "198.51.100.9", sport: 50000, dst: rfcHost, dport: 10250, proto: "tcp", flags: "S"}
	r.out("uplink", natFrame(t, ssh), "host", natFrame(t, ssh))
	p = rfcC.send("tcp", 10250, "192.0.2.7", 443, "S")
	src := natOut(r, r.now, "c", p)
	if src.Port() == 10250 {
		t.Errorf("a pod's mapping took port 10250, which the host's connection uses")
	}
	// The host's answers to its connection from the network leave as
	// they are.
	synAck := natPkt{smac: natHost, dmac: natRouter, src: rfcHost, sport: 10250, dst: "198.51.100.9", dport: 50000, proto: "tcp", flags: "SA"}
	r.out("host", natFrame(t, synAck), "uplink", natFrame(t, synAck))

	for _, c := range []struct {
		proto string
		port  uint16
		who   string
	}{{"udp", 40000, rfcHost}, {"udp", 1024, rfcA.ip}, {"udp", 45000, rfcB.ip}, {"udp", 1026, rfcHost}, {"tcp", 10250, rfcHost}} {
		b := natMapping(t, r.sw, c.proto, c.port)
		if b == nil || b.Internal().Addr().String() != c.who {
			t.Errorf("%s port %d: bound to %v, want %s", c.proto, c.port, b, c.who)
		}
	}
	r.sw.Pipeline().FlowTable().Expire(int64(3 * time.Hour))
	if n := r.sw.NAT().Bindings(); n != 0 {
		t.Errorf("%d bindings left after every connection expired", n)
	}
}

// natMapping returns the live binding of the host's pool whose external
// port is port that a connection of the flow table holds, or nil.
func natMapping(t *testing.T, sw *Switch, proto string, port uint16) *nat.Binding {
	t.Helper()
	pr := map[string]uint8{"tcp": dataplane.ProtoTCP, "udp": dataplane.ProtoUDP}[proto]
	var found *nat.Binding
	sw.Pipeline().FlowTable().Range(func(f *dataplane.Flow) bool {
		if c := f.Conn(); c != nil {
			for _, b := range heldBindings(c.State) {
				if b.Proto() == pr && b.External() == netip.AddrPortFrom(netip.MustParseAddr(rfcHost), port) {
					found = b
				}
			}
		}
		return found == nil
	})
	return found
}

// TestHNSNATFilteringLower: OutBoundNAT's Filtering becomes its pool's;
// endpoints sharing a VirtualIP must agree, and an unknown value is an
// error naming the field.
func TestHNSNATFilteringLower(t *testing.T) {
	low, err := rfcDoc(t, "EndpointIndependent", false).Lower()
	if err != nil {
		t.Fatal(err)
	}
	if len(low.Switch.NATPools) != 1 || low.Switch.NATPools[0].Filtering != "endpoint-independent" {
		t.Errorf("pools %+v, want one, endpoint-independent", low.Switch.NATPools)
	}
	sw, err := New(rfcDoc(t, "EndpointIndependent", false))
	if err != nil {
		t.Fatal(err)
	}
	if f := sw.NAT().Pool(netip.MustParseAddr(rfcHost)).Filtering(); f != nat.EndpointIndependent {
		t.Errorf("pool filtering %s", f)
	}
	for _, tc := range []struct{ edit, want string }{
		{`"Filtering": "FullCone"`, `Endpoints[0] "a".Policies[0].Settings.Filtering: "FullCone" is not a filtering behaviour`},
		{`"Filtering": 3`, `Endpoints[0] "a".Policies[0].Settings.Filtering: want a filtering behaviour as a string`},
	} {
		doc := strings.Replace(rfcDocJSON("", false), `"Exceptions": ["10.244.0.0/15"]`, `"Exceptions": ["10.244.0.0/15"], `+tc.edit, 1)
		if _, err := ParseConfig([]byte(doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %s", tc.edit, err, tc.want)
		}
	}
	// Two endpoints of one VirtualIP with different filterings.
	doc := strings.Replace(rfcDocJSON("AddressAndPortDependent", false), `"Filtering": "AddressAndPortDependent"`, `"Filtering": "EndpointIndependent"`, 1)
	_, err = ParseConfig([]byte(doc))
	if want := `Endpoints[1] "b".Policies[0].Settings.Filtering: AddressAndPortDependent, but Endpoints[0] "a".Policies[0].Settings.Filtering gives 192.168.1.10 the filtering EndpointIndependent`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("disagreeing filterings: %v\nwant %s", err, want)
	}
	if hns.FilterAddressDependent != "AddressDependent" {
		t.Error("the default's HNS name changed")
	}
}

// TestNATMappedAllocs bounds what a connection from the network to a
// mapping costs: its flows and connection (one allocation) and its part
// of state (one), on the slow path; nothing on the fast path after.
func TestNATMappedAllocs(t *testing.T) {
	r := ulNewRig(t, rfcDoc(t, "EndpointIndependent", false))
	out := rfcA.send("udp", 40000, "203.0.113.5", 3478, "")
	r.out("a", natFrame(t, out), "uplink", natFrame(t, wire(out, 40000)))
	uplink, podA := r.sw.Port("uplink").ID, r.sw.Port("a").ID
	frame := natFrame(t, fromNet("udp", "198.51.100.9", 1024, 40000, ""))
	p := dataplane.NewPacket(dataplane.BufferSize)
	w := r.sw.Pipeline().NewWorker()
	sport := uint16(1024)
	send := func(path dataplane.Path) {
		p.SetFrame(frame)
		p.InPort = uplink
		binary.BigEndian.PutUint16(p.Bytes()[dataplane.EthernetLen+dataplane.IPv4MinLen:], sport)
		w.Process([]*dataplane.Packet{p}, 1)
		if p.OutPort != podA || p.Path != path {
			t.Fatalf("path=%s out=%d drop=%s", p.Path, p.OutPort, p.Drop)
		}
	}
	if allocs := testing.AllocsPerRun(500, func() { sport++; send(dataplane.PathSlow) }); allocs > 2 {
		t.Errorf("a new connection to a mapping costs %v allocations, want at most 2", allocs)
	}
	if allocs := testing.AllocsPerRun(1000, func() { send(dataplane.PathFast) }); allocs != 0 {
		t.Errorf("a packet of a connection to a mapping on the fast path costs %v allocations, want 0", allocs)
	}
}
