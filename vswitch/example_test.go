package vswitch_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/netip"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/ufp-dev/ufp/inspect"
	"github.com/ufp-dev/ufp/vswitch"
)

// examplePolicy is an HNS-level policy: one overlay network (flannel's VNI
// 4096) with two pods, pod-b refusing SSH with an ACL.
const examplePolicy = `{
  "Uplink": {"Name": "uplink", "MacAddress": "02:00:00:00:00:fe", "IpAddresses": ["192.168.50.1"]},
  "Networks": [{
    "Name": "flannel.4096", "Type": "Overlay",
    "Ipams": [{"Subnets": [{"IpAddressPrefix": "10.244.1.0/24",
      "Routes": [{"NextHop": "10.244.1.1", "DestinationPrefix": "0.0.0.0/0"}],
      "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]}]}],
    "Policies": [{"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.50.1"}},
                 {"Type": "DrMacAddress", "Settings": {"Address": "02:00:00:00:01:01"}}]
  }],
  "Endpoints": [
    {"Name": "pod-a", "HostComputeNetwork": "flannel.4096", "MacAddress": "02:00:00:00:01:0a",
     "IpConfigurations": [{"IpAddress": "10.244.1.10"}]},
    {"Name": "pod-b", "HostComputeNetwork": "flannel.4096", "MacAddress": "02:00:00:00:01:0b",
     "IpConfigurations": [{"IpAddress": "10.244.1.11"}],
     "Policies": [{"Type": "ACL", "Settings": {"Id": "deny-ssh", "Action": "Block", "Direction": "In",
                   "Protocols": "6", "LocalPorts": "22", "Priority": 100}}]}
  ]
}`

// A program embeds a switch: it compiles a policy, gives ports devices
// (here in memory; a real program opens TAPs with device) and
// serves them. A frame pod-a sends to pod-b comes out of pod-b's device.
func ExampleSwitch_Serve() {
	cfg, err := vswitch.ParseConfig([]byte(examplePolicy))
	if err != nil {
		log.Fatal(err)
	}
	sw, err := vswitch.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	podA, podB := vswitch.NewMemDevice("pod-a", 16), vswitch.NewMemDevice("pod-b", 16)
	if err := sw.Attach("pod-a", podA); err != nil {
		log.Fatal(err)
	}
	if err := sw.Attach("pod-b", podB); err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- sw.Serve(ctx) }()

	podA.Inject(udpFrame("02:00:00:00:01:0a", "02:00:00:00:01:0b", "10.244.1.10", "10.244.1.11", 40000, 53))
	frame, ok := podB.Receive(5 * time.Second)
	if !ok {
		log.Fatal("nothing reached pod-b")
	}
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	ip := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	udp := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
	fmt.Printf("pod-b received %s:%d > %s:%d\n", ip.SrcIP, udp.SrcPort, ip.DstIP, udp.DstPort)

	stop()
	if err := <-served; err != nil && err != context.Canceled {
		log.Fatal(err)
	}
	// Output:
	// pod-b received 10.244.1.10:40000 > 10.244.1.11:53
}

// A trace tells what the switch would do with a packet, layer by layer,
// without sending anything or changing any state: here, which rule drops
// pod-a's SSH connection to pod-b.
func ExampleSwitch_Trace() {
	cfg, err := vswitch.ParseConfig([]byte(examplePolicy))
	if err != nil {
		log.Fatal(err)
	}
	sw, err := vswitch.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	res, err := sw.Trace(inspect.TraceRequest{
		Port: "pod-a", Proto: "tcp",
		Src: netip.MustParseAddr("10.244.1.10"), SrcPort: 40000,
		Dst: netip.MustParseAddr("10.244.1.11"), DstPort: 22,
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, st := range res.Steps {
		fmt.Printf("port %s %s: layer %s: rule %q -> %s\n", st.Port, st.Direction, st.Layer, st.Rule, st.Action)
	}
	fmt.Println(res.Verdict, res.Drop)
	// Output:
	// port pod-b in: layer ACL_LAYER: rule "deny-ssh" -> block
	// drop blocked-by-policy
}

// A policy change is compiled and swapped in atomically: a policy that
// does not compile is refused and the running one stays.
func ExampleSwitch_Apply() {
	cfg, err := vswitch.ParseConfig([]byte(examplePolicy))
	if err != nil {
		log.Fatal(err)
	}
	sw, err := vswitch.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	bad, _ := vswitch.ParseConfig([]byte(examplePolicy))
	bad.Endpoints[1].IpConfigurations[0].IpAddress = "10.9.9.9"
	fmt.Println("refused:", sw.Apply(bad) != nil, "generation", sw.Generation())

	next, _ := vswitch.ParseConfig([]byte(examplePolicy))
	next.Endpoints = next.Endpoints[:1] // pod-b leaves
	if err := sw.Apply(next); err != nil {
		log.Fatal(err)
	}
	for _, p := range sw.PortInfos() {
		fmt.Println(p.Name)
	}
	fmt.Println("generation", sw.Generation())
	// Output:
	// refused: true generation 1
	// pod-a
	// uplink
	// generation 2
}

// udpFrame builds an Ethernet/IPv4/UDP frame with valid checksums.
func udpFrame(srcMAC, dstMAC, src, dst string, sport, dport uint16) []byte {
	mac := func(s string) net.HardwareAddr { m, _ := net.ParseMAC(s); return m }
	eth := &layers.Ethernet{SrcMAC: mac(srcMAC), DstMAC: mac(dstMAC), EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.ParseIP(src), DstIP: net.ParseIP(dst)}
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	udp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, eth, ip, udp, gopacket.Payload("hello")); err != nil {
		log.Fatal(err)
	}
	return buf.Bytes()
}
