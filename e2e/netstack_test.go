package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vswitch"
)

// nsOverlayPolicy is a flannel-style Overlay network on one node, dual
// stack, with a ClusterIP Service per family over pod-b and pod-c (IPv4
// with DSR, IPv6 without) and OutBoundNAT on pod-a through the underlay's
// router.
const nsOverlayPolicy = `{
  "switch": {"name": "e2e-overlay"},
  "Uplink": {
    "Name": "uplink",
    "MacAddress": "02:00:00:00:00:fe",
    "IpAddresses": ["192.168.1.10"],
    "DefaultGateway": "192.168.1.1",
    "Neighbors": [{"IpAddress": "192.168.1.1", "MacAddress": "02:00:00:00:00:99"}]
  },
  "Networks": [{
    "Name": "flannel.4096",
    "Type": "Overlay",
    "Ipams": [{"Type": "Static", "Subnets": [
      {"IpAddressPrefix": "10.244.0.0/24",
       "Routes": [{"NextHop": "10.244.0.1", "DestinationPrefix": "0.0.0.0/0"}],
       "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]},
      {"IpAddressPrefix": "fd00:244::/64",
       "Routes": [{"NextHop": "fd00:244::1", "DestinationPrefix": "::/0"}],
       "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]}
    ]}],
    "Policies": [
      {"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.1.10"}},
      {"Type": "DrMacAddress", "Settings": {"Address": "02:00:00:00:00:01"}}
    ]
  }],
  "Endpoints": [
    {"Name": "pod-a", "HostComputeNetwork": "flannel.4096", "MacAddress": "02:00:00:00:00:0a",
     "IpConfigurations": [{"IpAddress": "10.244.0.10", "PrefixLength": 24}, {"IpAddress": "fd00:244::10", "PrefixLength": 64}],
     "Policies": [{"Type": "OutBoundNAT", "Settings": {"Exceptions": ["10.244.0.0/16", "10.96.0.0/12"]}}]},
    {"Name": "pod-b", "HostComputeNetwork": "flannel.4096", "MacAddress": "02:00:00:00:00:0b",
     "IpConfigurations": [{"IpAddress": "10.244.0.11", "PrefixLength": 24}, {"IpAddress": "fd00:244::11", "PrefixLength": 64}]},
    {"Name": "pod-c", "HostComputeNetwork": "flannel.4096", "MacAddress": "02:00:00:00:00:0c",
     "IpConfigurations": [{"IpAddress": "10.244.0.12", "PrefixLength": 24}, {"IpAddress": "fd00:244::12", "PrefixLength": 64}]}
  ],
  "LoadBalancers": [
    {"Name": "web", "HostComputeEndpoints": ["pod-b", "pod-c"], "SourceVIP": "10.244.0.250",
     "FrontendVIPs": ["10.96.0.10"], "Flags": 1,
     "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80},
                      {"Protocol": 17, "InternalPort": 5353, "ExternalPort": 53}]},
    {"Name": "web-v6", "HostComputeEndpoints": ["pod-b", "pod-c"],
     "FrontendVIPs": ["fd00:96::10"], "Flags": 2,
     "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80},
                      {"Protocol": 17, "InternalPort": 5353, "ExternalPort": 53}]}
  ]
}`

// nsL2BridgePolicy is a win-bridge-style L2Bridge network, dual stack,
// whose subnet gateways are the underlay's router; pod-a has OutBoundNAT
// with an exception list that leaves the node subnet untranslated.
const nsL2BridgePolicy = `{
  "switch": {"name": "e2e-l2bridge"},
  "Uplink": {
    "Name": "uplink",
    "MacAddress": "02:00:00:00:00:fe",
    "IpAddresses": ["192.168.1.10"],
    "Neighbors": [
      {"IpAddress": "10.244.0.1", "MacAddress": "02:00:00:00:00:99"},
      {"IpAddress": "fd00:244::1", "MacAddress": "02:00:00:00:00:99"}
    ]
  },
  "Networks": [{
    "Name": "cbr0",
    "Type": "L2Bridge",
    "Ipams": [{"Subnets": [
      {"IpAddressPrefix": "10.244.0.0/24", "Routes": [{"NextHop": "10.244.0.1", "DestinationPrefix": "0.0.0.0/0"}]},
      {"IpAddressPrefix": "fd00:244::/64", "Routes": [{"NextHop": "fd00:244::1", "DestinationPrefix": "::/0"}]}
    ]}],
    "Policies": [{"Type": "NetAdapterName", "Settings": {"NetworkAdapterName": "uplink"}}]
  }],
  "Endpoints": [
    {"Name": "pod-a", "HostComputeNetwork": "cbr0", "MacAddress": "02:00:00:00:00:0a",
     "IpConfigurations": [{"IpAddress": "10.244.0.10", "PrefixLength": 24}, {"IpAddress": "fd00:244::10", "PrefixLength": 64}],
     "Policies": [{"Type": "OutBoundNAT", "Settings": {
       "Exceptions": ["10.244.0.0/16", "10.96.0.0/12"], "ExceptionList": ["192.168.1.0/24"]}}]},
    {"Name": "pod-b", "HostComputeNetwork": "cbr0", "MacAddress": "02:00:00:00:00:0b",
     "IpConfigurations": [{"IpAddress": "10.244.0.11", "PrefixLength": 24}, {"IpAddress": "fd00:244::11", "PrefixLength": 64}]}
  ]
}`

var (
	nsHostIP     = netip.MustParseAddr("192.168.1.10") // Uplink.IpAddresses
	nsInternetIP = netip.MustParseAddr("203.0.113.10") // beyond the router: translated
	nsNodeNetIP  = netip.MustParseAddr("192.168.1.50") // in the ExceptionList: not translated
)

// TestNetstackPodToPod: two pods of one node talk over TCP (1 MiB each way,
// verified), UDP and ICMP echo, over IPv4 and IPv6, on an Overlay and on
// an L2Bridge network.
func TestNetstackPodToPod(t *testing.T) {
	for _, nw := range []struct{ name, policy string }{
		{"overlay", nsOverlayPolicy},
		{"l2bridge", nsL2BridgePolicy},
	} {
		t.Run(nw.name, func(t *testing.T) {
			s := newNSSwitch(t, nw.policy)
			a, b := s.pod("pod-a"), s.pod("pod-b")
			s.serve()
			for _, v6 := range []bool{false, true} {
				fam := map[bool]string{false: "ipv4", true: "ipv6"}[v6]
				dst := b.addr(v6)
				accepted := nsTCPServer(t, b, netip.AddrPortFrom(dst, 8080), "hello from pod-b\n")
				udpSeen := nsUDPServer(t, b, netip.AddrPortFrom(dst, 5353), "pod-b:")
				t.Run(fam+"/tcp", func(t *testing.T) {
					data := nsRandom(1 << 20)
					greet, err := nsEchoTCP(t, a, netip.AddrPortFrom(dst, 8080), len("hello from pod-b\n"), data)
					if err != nil {
						t.Fatal(err)
					}
					if greet != "hello from pod-b\n" {
						t.Errorf("greeting %q", greet)
					}
					if from := nsRecv(t, accepted, "the server's accept"); from.Addr() != a.addr(v6) {
						t.Errorf("pod-b accepted a connection from %s, want pod-a's %s", from, a.addr(v6))
					}
				})
				t.Run(fam+"/udp", func(t *testing.T) {
					got, err := nsUDPExchange(t, a, netip.AddrPortFrom(dst, 5353), "question")
					if err != nil {
						t.Fatal(err)
					}
					if got != "pod-b:question" {
						t.Errorf("answer %q, want %q", got, "pod-b:question")
					}
					if from := nsRecv(t, udpSeen, "the server's datagram"); from.Addr() != a.addr(v6) {
						t.Errorf("pod-b got a datagram from %s, want pod-a's %s", from, a.addr(v6))
					}
				})
				t.Run(fam+"/ping", func(t *testing.T) {
					if err := nsPing(t, a, dst); err != nil {
						t.Fatal(err)
					}
					if err := nsPing(t, b, a.addr(v6)); err != nil {
						t.Fatal(err)
					}
				})
			}
		})
	}
}

// TestNetstackOutboundNAT: connections from a pod to a host beyond the uplink are
// translated to the host's address, except to destinations in the
// exception list, which see the pod's own.
func TestNetstackOutboundNAT(t *testing.T) {
	t.Run("l2bridge", func(t *testing.T) {
		s := newNSSwitch(t, nsL2BridgePolicy)
		a := s.pod("pod-a")
		ext := s.external(nsInternetIP, nsNodeNetIP)
		s.serve()
		for _, tc := range []struct {
			name string
			dst  netip.Addr
			want netip.Addr // the source the external host sees
		}{
			{"translated", nsInternetIP, nsHostIP},
			{"exception", nsNodeNetIP, a.addr(false)},
		} {
			t.Run(tc.name, func(t *testing.T) {
				accepted := nsTCPServer(t, ext, netip.AddrPortFrom(tc.dst, 80), "ext\n")
				udpSeen := nsUDPServer(t, ext, netip.AddrPortFrom(tc.dst, 53), "ext:")
				if _, err := nsEchoTCP(t, a, netip.AddrPortFrom(tc.dst, 80), 4, nsRandom(256<<10)); err != nil {
					t.Fatal(err)
				}
				if from := nsRecv(t, accepted, "the external server's accept"); from.Addr() != tc.want {
					t.Errorf("the external host accepted a connection from %s, want %s", from, tc.want)
				}
				got, err := nsUDPExchange(t, a, netip.AddrPortFrom(tc.dst, 53), "q")
				if err != nil {
					t.Fatal(err)
				}
				if got != "ext:q" {
					t.Errorf("UDP answer %q", got)
				}
				if from := nsRecv(t, udpSeen, "the external datagram"); from.Addr() != tc.want {
					t.Errorf("the external host got a datagram from %s, want %s", from, tc.want)
				}
				if err := nsPing(t, a, tc.dst); err != nil {
					t.Error(err)
				}
			})
		}
	})
	t.Run("overlay", func(t *testing.T) {
		s := newNSSwitch(t, nsOverlayPolicy)
		a := s.pod("pod-a")
		ext := s.external(nsInternetIP)
		s.serve()
		accepted := nsTCPServer(t, ext, netip.AddrPortFrom(nsInternetIP, 80), "ext\n")
		if _, err := nsEchoTCP(t, a, netip.AddrPortFrom(nsInternetIP, 80), 4, nsRandom(256<<10)); err != nil {
			t.Fatal(err)
		}
		if from := nsRecv(t, accepted, "the external server's accept"); from.Addr() != nsHostIP {
			t.Errorf("the external host accepted a connection from %s, want the host's %s", from, nsHostIP)
		}
		udpSeen := nsUDPServer(t, ext, netip.AddrPortFrom(nsInternetIP, 53), "ext:")
		if got, err := nsUDPExchange(t, a, netip.AddrPortFrom(nsInternetIP, 53), "q"); err != nil || got != "ext:q" {
			t.Fatalf("UDP: %q, %v", got, err)
		}
		if from := nsRecv(t, udpSeen, "the external datagram"); from.Addr() != nsHostIP {
			t.Errorf("the external host got a datagram from %s, want %s", from, nsHostIP)
		}
		if err := nsPing(t, a, nsInternetIP); err != nil {
			t.Error(err)
		}
	})
}

// TestNetstackServiceClusterIP: connections from pod-a to a Service's ClusterIP
// reach both backends (pod-b and pod-c, which tell who they are), carry
// their data whole, and the backends see pod-a's own address (DSR for
// IPv4; the default mode for IPv6 keeps it too for local clients).
func TestNetstackServiceClusterIP(t *testing.T) {
	s := newNSSwitch(t, nsOverlayPolicy)
	a := s.pod("pod-a")
	backends := []*nsHost{s.pod("pod-b"), s.pod("pod-c")}
	s.serve()
	for _, tc := range []struct {
		name string
		vip  netip.Addr
		v6   bool
	}{
		{"ipv4-dsr", netip.MustParseAddr("10.96.0.10"), false},
		{"ipv6", netip.MustParseAddr("fd00:96::10"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			accepted := make(chan netip.AddrPort, 64)
			udpSeen := make(chan netip.AddrPort, 64)
			done := make(chan struct{})
			t.Cleanup(func() { close(done) })
			for _, b := range backends {
				acc := nsTCPServer(t, b, netip.AddrPortFrom(b.addr(tc.v6), 8080), b.name+"\n")
				us := nsUDPServer(t, b, netip.AddrPortFrom(b.addr(tc.v6), 5353), b.name+":")
				go func() {
					for {
						select {
						case ap := <-acc:
							accepted <- ap
						case ap := <-us:
							udpSeen <- ap
						case <-done:
							return
						}
					}
				}()
			}
			hits := map[string]int{}
			// 32 connections all on one of two backends: 1 in 2^31.
			const conns = 32
			for i := range conns {
				greet, err := nsEchoTCP(t, a, netip.AddrPortFrom(tc.vip, 80), len("pod-b\n"), nsRandom(64<<10))
				if err != nil {
					t.Fatalf("connection %d: %v", i, err)
				}
				hits[strings.TrimSpace(greet)]++
				if from := nsRecv(t, accepted, "a backend's accept"); from.Addr() != a.addr(tc.v6) {
					t.Errorf("connection %d: the backend saw %s, want the client pod's %s", i, from, a.addr(tc.v6))
				}
			}
			if hits["pod-b"] == 0 || hits["pod-c"] == 0 || hits["pod-b"]+hits["pod-c"] != conns {
				t.Errorf("backends reached: %v, want both of pod-b and pod-c", hits)
			}
			udpHits := map[string]int{}
			for i := range conns {
				got, err := nsUDPExchange(t, a, netip.AddrPortFrom(tc.vip, 53), fmt.Sprintf("q%d", i))
				if err != nil {
					t.Fatal(err)
				}
				name, rest, _ := strings.Cut(got, ":")
				if rest != fmt.Sprintf("q%d", i) {
					t.Errorf("UDP answer %q", got)
				}
				udpHits[name]++
				if from := nsRecv(t, udpSeen, "a backend's datagram"); from.Addr() != a.addr(tc.v6) {
					t.Errorf("a backend got a datagram from %s, want the client pod's %s", from, a.addr(tc.v6))
				}
			}
			if udpHits["pod-b"] == 0 || udpHits["pod-c"] == 0 {
				t.Errorf("UDP backends reached: %v, want both", udpHits)
			}
		})
	}
}

// TestNetstackPolicyChangeDuringTransfer: policies applied while TCP transfers run
// (pod to pod, pod to Service, pod to the outside through OutBoundNAT)
// break none of them: each moves all its data, verified.
func TestNetstackPolicyChangeDuringTransfer(t *testing.T) {
	s := newNSSwitch(t, nsOverlayPolicy)
	a, b, c := s.pod("pod-a"), s.pod("pod-b"), s.pod("pod-c")
	ext := s.external(nsInternetIP)
	s.serve()
	nsTCPServer(t, b, netip.AddrPortFrom(b.addr(false), 8080), "pod-b\n")
	nsTCPServer(t, c, netip.AddrPortFrom(c.addr(false), 8080), "pod-c\n")
	nsTCPServer(t, ext, netip.AddrPortFrom(nsInternetIP, 80), "extrn\n")

	const size = 8 << 20
	targets := []struct {
		name string
		to   netip.AddrPort
	}{
		{"pod-to-pod", netip.AddrPortFrom(b.addr(false), 8080)},
		{"service", netip.MustParseAddrPort("10.96.0.10:80")},
		{"outbound-nat", netip.AddrPortFrom(nsInternetIP, 80)},
	}
	// Each transfer stops sending at a quarter and at half of its data
	// until the test has applied a new policy: a new endpoint that also
	// joins the Service; then the endpoint leaves the Service and pod-a's
	// OutBoundNAT gets another exception.
	changes := []func(*vswitch.Config){
		func(c *vswitch.Config) {
			c.Endpoints = append(c.Endpoints, hns.EndpointConfig{
				Name: "pod-d", HostComputeNetwork: "flannel.4096", MacAddress: "02:00:00:00:00:0d",
				IpConfigurations: []hns.IpConfigConfig{{IpAddress: "10.244.0.13", PrefixLength: 24}},
			})
			c.LoadBalancers[0].HostComputeEndpoints = append(c.LoadBalancers[0].HostComputeEndpoints, "pod-d")
		},
		func(c *vswitch.Config) {
			c.LoadBalancers[0].HostComputeEndpoints = []string{"pod-b", "pod-c"}
			c.Endpoints[0].Policies[0].Settings = json.RawMessage(`{"Exceptions": ["10.244.0.0/16", "10.96.0.0/12", "10.100.0.0/16"]}`)
		},
	}
	type gate struct {
		at      int
		reached sync.WaitGroup
		release chan struct{}
	}
	gates := make([]*gate, len(changes))
	for k := range gates {
		gates[k] = &gate{at: size * (k + 1) / 4, release: make(chan struct{})}
		gates[k].reached.Add(len(targets))
	}
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, tg := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := 0
			_, errs[i] = nsEchoTCPPaused(t, a, tg.to, 6, nsRandom(size), func(sent int) {
				for next < len(gates) && sent >= gates[next].at {
					gates[next].reached.Done()
					<-gates[next].release
					next++
				}
			})
			for ; next < len(gates); next++ {
				gates[next].reached.Done() // failed early: do not hold the others
			}
		}()
	}
	gen := s.sw.Generation()
	for k, change := range changes {
		reached := make(chan struct{})
		go func() { gates[k].reached.Wait(); close(reached) }()
		select {
		case <-reached:
		case <-time.After(2 * nsTimeout):
			t.Fatalf("the transfers did not reach %d bytes", gates[k].at)
		}
		cfg := nsCloneConfig(t, s.sw.Config())
		change(cfg)
		if err := s.sw.Apply(cfg); err != nil {
			t.Fatalf("apply %d: %v", k, err)
		}
		close(gates[k].release)
	}
	wg.Wait()
	for i, tg := range targets {
		if errs[i] != nil {
			t.Errorf("%s: %v", tg.name, errs[i])
		}
	}
	if g := s.sw.Generation(); g < gen+2 {
		t.Errorf("generation %d after two changes from %d", g, gen)
	}
	// New connections go by the new policy.
	if _, err := nsEchoTCP(t, a, targets[1].to, 6, nsRandom(4096)); err != nil {
		t.Errorf("a new connection to the Service: %v", err)
	}
}

// nsCloneConfig returns a deep copy of c.
func nsCloneConfig(t *testing.T, c *vswitch.Config) *vswitch.Config {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	out, err := vswitch.ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestNetstackDetachL3Port: detaching a port's L3 device while the switch serves
// ends its worker quietly, as a device that is closed should (not as a
// device failure), and the other ports go on.
func TestNetstackDetachL3Port(t *testing.T) {
	s := newNSSwitch(t, nsOverlayPolicy)
	a, b := s.pod("pod-a"), s.pod("pod-b")
	c := s.pod("pod-c")
	s.serve()
	nsTCPServer(t, b, netip.AddrPortFrom(b.addr(false), 8080), "pod-b\n")
	if _, err := nsEchoTCP(t, a, netip.AddrPortFrom(b.addr(false), 8080), 6, nsRandom(4096)); err != nil {
		t.Fatal(err)
	}
	if dev := s.sw.Detach("pod-c"); dev != c.port {
		t.Fatalf("Detach returned %v, want pod-c's port", dev)
	}
	if n := s.sw.DeviceFailures(); n != 0 {
		t.Errorf("DeviceFailures() = %d after a Detach, want 0", n)
	}
	for _, st := range s.sw.Devices() {
		if st.Err != nil {
			t.Errorf("device of %s: %v", st.Port, st.Err)
		}
	}
	if _, err := nsEchoTCP(t, a, netip.AddrPortFrom(b.addr(false), 8080), 6, nsRandom(4096)); err != nil {
		t.Errorf("after the Detach: %v", err)
	}
}

// TestNetstackUplinkMisaddressedReplies: frames that arrive on the uplink
// for another station's MAC are not the host's, whatever their IP
// addresses say: the answers of a host beyond the uplink that are sent to
// a MAC other than Uplink.MacAddress must not reach the pod through
// OutBoundNAT's reverse translation (the L2Bridge ingress group already
// demands the host's MAC; a real NIC filters them too).
func TestNetstackUplinkMisaddressedReplies(t *testing.T) {
	s := newNSSwitch(t, nsL2BridgePolicy)
	a := s.pod("pod-a")
	link := nsUplinkLink(t, s.cfg)
	link.GatewayMAC = dataplane.MAC{0x02, 0, 0, 0, 0, 0x77} // some other station on the wire
	ext := s.attach(s.cfg.Uplink.Name, link, []netip.Addr{nsInternetIP}, 1500)
	s.serve()
	nsTCPServer(t, ext, netip.AddrPortFrom(nsInternetIP, 80), "extrn\n")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := a.net.DialContextTCPAddrPort(ctx, netip.AddrPortFrom(nsInternetIP, 80))
	if err == nil {
		c.Close()
		t.Fatal("pod-a connected through OutBoundNAT although every answer went to another MAC than the host's")
	}
}
