package vswitch

import (
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/vfp"
)

// ptPolicy is a policy with every kind of rule the slow path knows: an ACL
// with block, terminating and stateful allow rules, a stateful DNAT, VXLAN
// pushes (stateful and not, IPv4 and IPv6 underlay), pops on the uplink,
// SNAT with an exception group, a "not-present" requirement, and a rewrite
// of encapsulated packets. Its placeholders make the two variants ptA and
// ptB (see ptConfig), which a policy change alternates between.
const ptPolicy = `{
  "switch": {
    "name": "sw-pipeline",
    "gateway": {"mac": "02:00:00:00:00:01", "ips": ["10.244.0.1", "fd00::1"]},
    "flowTable": {"maxFlows": 3, "shards": 1, "onFull": "evict-oldest"}
  },
  "ports": [
    {
      "name": "pod-a", "mac": "02:00:00:00:00:0a", "ips": ["10.244.0.10", "fd00::10"],
      "layers": [
        {
          "name": "acl",
          "groups": [
            {
              "name": "base",
              "rules": [
                {"name": "block-telnet", "priority": 10, "match": {"direction": "out", "protocols": ["tcp"], "dstPorts": ["23"]}, "action": {"type": "block"}},
                {"name": "allow-web", "priority": 20, "match": {"direction": "out", "protocols": ["tcp"], "dstPorts": ["80", "443"]}, "action": {"type": "allow"}, "terminating": true, "stateful": true}
              ]
            },
            {
              "name": "quarantine",
              "rules": [
                {"name": "block-quarantine", "priority": 10, "match": {"dstIPs": ["10.244.9.0/24", "fd00:9::/64"]}, "action": {"type": "block"}}
              ]
            }
          ]
        },
        {
          "name": "lb",
          "groups": [
            {
              "name": "svc-dns",
              "rules": [
                {"name": "dnat-v4", "priority": 10, "match": {"direction": "out", "dstIPs": ["10.96.0.10"], "protocols": ["udp", "tcp"], "dstPorts": ["53"]},
                 "action": {"type": "allow", "modify": {"dstIP": "DNAT_IP", "dstMAC": "DNAT_MAC", "dstPort": 5353}}, "stateful": true},
                {"name": "dnat-v6", "priority": 20, "match": {"direction": "out", "dstIPs": ["fd00:96::10"]},
                 "action": {"type": "allow", "modify": {"dstIP": "fd00::11", "dstMAC": "02:00:00:00:00:0b"}}, "stateful": true}
              ]
            }
          ]
        },
        {
          "name": "vnet",
          "groups": [
            {
              "name": "remote-v4",
              "match": {"direction": "out", "dstIPs": ["10.244.1.0/24"]},
              "rules": [
                {"name": "encap-stateful", "priority": 10, "match": {"protocols": ["tcp", "icmp"]},
                 "action": {"type": "allow", "modify": {"dstMAC": "02:00:00:00:01:0a"},
                   "push": {"vni": 4096, "srcMAC": "02:00:00:00:00:fe", "dstMAC": "02:00:00:00:01:fe", "srcIP": "192.168.1.10", "dstIP": "192.168.1.20"}},
                 "stateful": true},
                {"name": "encap-stateless", "priority": 20,
                 "action": {"type": "allow",
                   "push": {"vni": 4096, "srcMAC": "02:00:00:00:00:fe", "dstMAC": "02:00:00:00:01:fe", "srcIP": "192.168.1.10", "dstIP": "192.168.1.20", "dontFragment": true}}}
              ]
            },
            {
              "name": "remote-v6",
              "match": {"direction": "out", "dstIPs": ["fd00:1::/64"]},
              "rules": [
                {"name": "encap6", "priority": 10,
                 "action": {"type": "allow",
                   "push": {"vni": 4097, "srcMAC": "02:00:00:00:00:fe", "dstMAC": "02:00:00:00:01:fe", "srcIP": "2001:db8::10", "dstIP": "2001:db8::20"}},
                 "stateful": true}
              ]
            }
          ]
        }
      ]
    },
    {
      "name": "pod-b", "mac": "02:00:00:00:00:0b", "ips": ["10.244.0.11", "fd00::11"],
      "layers": [
        {
          "name": "acl",
          "default": {"in": "block"},
          "groups": [
            {
              "name": "ingress",
              "rules": [
                {"name": "allow-web", "priority": 100, "match": {"direction": "in", "protocols": ["tcp"], "dstPorts": ["80"]}, "action": {"type": "allow"}, "stateful": true},
                {"name": "allow-dns", "priority": 110, "match": {"direction": "in", "protocols": ["udp", "tcp"], "dstPorts": ["5353"]}, "action": {"type": "allow"}},
                {"name": "allow-icmp", "priority": 120, "match": {"direction": "in", "protocols": ["icmp", "icmpv6"]}, "action": {"type": "allow"}, "stateful": true},
                {"name": "allow-v6", "priority": 130, "match": {"direction": "in", "ipVersion": 6}, "action": {"type": "allow"}}POD_B_EXTRA
              ]
            }
          ]
        }
      ]
    },
    {
      "name": "pod-c", "mac": "02:00:00:00:00:0c", "ips": ["10.244.0.12"],
      "layers": [
        {
          "name": "overlay-in",
          "groups": [
            {
              "name": "vni-999",
              "rules": [
                {"name": "rewrite-inner", "priority": 10, "match": {"direction": "in", "vnis": [999]}, "action": {"type": "allow", "modify": {"dstIP": "10.244.0.12", "srcPort": 4000}}}
              ]
            }
          ]
        }
      ]
    },
    {
      "name": "uplink", "mac": "02:00:00:00:00:fe", "uplink": true,
      "layers": [
        {
          "name": "vnet",
          "groups": [
            {
              "name": "overlay",
              "rules": [
                {"name": "decap-4096", "priority": 10, "match": {"direction": "out", "vnis": [4096]}, "action": {"type": "allow", "outer": "pop", "modify": {"srcMAC": "02:00:00:00:00:01"}}},
                {"name": "decap-4097", "priority": 20, "match": {"direction": "out", "vnis": [4097]}, "action": {"type": "allow", "outer": "pop"}},
                {"name": "internet-plain", "priority": 30, "match": {"direction": "in", "dstIPs": ["8.8.0.0/16"]}, "action": {"type": "allow", "outer": "not-present"}}
              ]
            }
          ]
        },
        {
          "name": "snat",
          "groups": [
            {
              "name": "snat",
              "rules": [
                {"name": "snat-v4", "priority": 10, "match": {"direction": "in", "ipVersion": 4, "srcIPs": ["10.244.0.0/24"]}, "action": {"type": "allow", "modify": {"srcIP": "192.168.1.10"}}, "stateful": true}
              ]
            },
            {
              "name": "snat-exceptions",
              "rules": [
                {"name": "cluster", "priority": 10, "match": {"direction": "in", "dstIPs": ["10.0.0.0/8", "192.168.0.0/16"]}, "action": {"type": "allow"}}
              ]
            }
          ]
        }
      ]
    }POD_D
  ]
}`

// ptConfig returns variant A of ptPolicy (DNAT to pod-b, pod-d present) or
// B (DNAT to pod-c, pod-b also allows UDP 7000, pod-d removed).
func ptConfig(tb testing.TB, b bool) *Config {
	tb.Helper()
	r := strings.NewReplacer(
		"DNAT_IP", "10.244.0.11", "DNAT_MAC", "02:00:00:00:00:0b", "POD_B_EXTRA", "",
		"POD_D", `,
    {"name": "pod-d", "mac": "02:00:00:00:00:0d", "ips": ["10.244.0.13"]}`)
	if b {
		r = strings.NewReplacer(
			"DNAT_IP", "10.244.0.12", "DNAT_MAC", "02:00:00:00:00:0c", "POD_D", "",
			"POD_B_EXTRA", `,
                {"name": "allow-udp-7000", "priority": 140, "match": {"direction": "in", "protocols": ["udp"], "dstPorts": ["7000"]}, "action": {"type": "allow"}}`)
	}
	cfg, err := ParseConfig([]byte(r.Replace(ptPolicy)))
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// ptWithFlowTable returns a copy of cfg with another flow table.
func ptWithFlowTable(cfg *Config, ft vfp.FlowTableConfig) *Config {
	c := *cfg
	c.Switch.FlowTable = ft
	return &c
}

// Frame builders (gopacket, lengths and checksums fixed).

func ptMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

func ptIP(s string) net.IP {
	ip := net.ParseIP(s)
	if ip4 := ip.To4(); ip4 != nil {
		return ip4
	}
	return ip
}

func ptSerialize(tb testing.TB, ls ...gopacket.SerializableLayer) []byte {
	tb.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		tb.Fatal(err)
	}
	return slices.Clone(buf.Bytes())
}

// ptL3 returns Ethernet and IP layers from src to dst (IPv4 or IPv6).
func ptL3(srcMAC, dstMAC, src, dst string, proto layers.IPProtocol) (*layers.Ethernet, gopacket.NetworkLayer, gopacket.SerializableLayer) {
	eth := &layers.Ethernet{SrcMAC: ptMAC(srcMAC), DstMAC: ptMAC(dstMAC)}
	if s := ptIP(src); len(s) == 4 {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip := &layers.IPv4{Version: 4, TTL: 64, Id: 9, Protocol: proto, SrcIP: s, DstIP: ptIP(dst)}
		return eth, ip, ip
	}
	eth.EthernetType = layers.EthernetTypeIPv6
	ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: ptIP(src), DstIP: ptIP(dst)}
	return eth, ip, ip
}

func ptTCP(tb testing.TB, srcMAC, dstMAC, src, dst string, sp, dp uint16, syn, ack bool) []byte {
	eth, nl, l3 := ptL3(srcMAC, dstMAC, src, dst, layers.IPProtocolTCP)
	t := &layers.TCP{SrcPort: layers.TCPPort(sp), DstPort: layers.TCPPort(dp), Seq: 100, Window: 8192, SYN: syn, ACK: ack}
	if err := t.SetNetworkLayerForChecksum(nl); err != nil {
		tb.Fatal(err)
	}
	return ptSerialize(tb, eth, l3, t, gopacket.Payload("tcp payload"))
}

func ptUDP(tb testing.TB, srcMAC, dstMAC, src, dst string, sp, dp uint16) []byte {
	eth, nl, l3 := ptL3(srcMAC, dstMAC, src, dst, layers.IPProtocolUDP)
	u := &layers.UDP{SrcPort: layers.UDPPort(sp), DstPort: layers.UDPPort(dp)}
	if err := u.SetNetworkLayerForChecksum(nl); err != nil {
		tb.Fatal(err)
	}
	return ptSerialize(tb, eth, l3, u, gopacket.Payload("udp payload."))
}

func ptEcho(tb testing.TB, srcMAC, dstMAC, src, dst string, id uint16) []byte {
	if len(ptIP(src)) == 4 {
		eth, _, l3 := ptL3(srcMAC, dstMAC, src, dst, layers.IPProtocolICMPv4)
		ic := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0), Id: id, Seq: 1}
		return ptSerialize(tb, eth, l3, ic, gopacket.Payload("ping"))
	}
	eth, nl, l3 := ptL3(srcMAC, dstMAC, src, dst, layers.IPProtocolICMPv6)
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeEchoRequest, 0)}
	if err := ic.SetNetworkLayerForChecksum(nl); err != nil {
		tb.Fatal(err)
	}
	return ptSerialize(tb, eth, l3, ic, &layers.ICMPv6Echo{Identifier: id, SeqNumber: 1}, gopacket.Payload("ping"))
}

func ptARP(tb testing.TB, srcMAC, sender, target string) []byte {
	eth := &layers.Ethernet{SrcMAC: ptMAC(srcMAC), DstMAC: ptMAC("ff:ff:ff:ff:ff:ff"), EthernetType: layers.EthernetTypeARP}
	a := &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
		Operation: layers.ARPRequest, SourceHwAddress: ptMAC(srcMAC), SourceProtAddress: ptIP(sender),
		DstHwAddress: make([]byte, 6), DstProtAddress: ptIP(target)}
	return ptSerialize(tb, eth, a)
}

// ptNS is a neighbour solicitation for target from src.
func ptNS(tb testing.TB, srcMAC, src, target string) []byte {
	t := ptIP(target)
	group := net.IP{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, t[13], t[14], t[15]}
	eth := &layers.Ethernet{SrcMAC: ptMAC(srcMAC), DstMAC: net.HardwareAddr{0x33, 0x33, 0xff, t[13], t[14], t[15]}, EthernetType: layers.EthernetTypeIPv6}
	ip := &layers.IPv6{Version: 6, HopLimit: 255, NextHeader: layers.IPProtocolICMPv6, SrcIP: ptIP(src), DstIP: group}
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborSolicitation, 0)}
	if err := ic.SetNetworkLayerForChecksum(ip); err != nil {
		tb.Fatal(err)
	}
	ns := &layers.ICMPv6NeighborSolicitation{TargetAddress: t,
		Options: layers.ICMPv6Options{{Type: layers.ICMPv6OptSourceAddress, Data: ptMAC(srcMAC)}}}
	return ptSerialize(tb, eth, ip, ic, ns)
}

// ptVXLAN wraps inner in VXLAN from the remote host to this one.
func ptVXLAN(tb testing.TB, dstMAC string, vni uint32, inner []byte) []byte {
	return ptVXLANFrom(tb, "02:00:00:00:01:fe", dstMAC, "192.168.1.20", "192.168.1.10", vni, inner)
}

func ptVXLANFrom(tb testing.TB, srcMAC, dstMAC, src, dst string, vni uint32, inner []byte) []byte {
	eth, nl, l3 := ptL3(srcMAC, dstMAC, src, dst, layers.IPProtocolUDP)
	u := &layers.UDP{SrcPort: 51000, DstPort: dataplane.VXLANPort}
	if err := u.SetNetworkLayerForChecksum(nl); err != nil {
		tb.Fatal(err)
	}
	return ptSerialize(tb, eth, l3, u, &layers.VXLAN{ValidIDFlag: true, VNI: vni}, gopacket.Payload(inner))
}

// ptVLAN inserts an 802.1Q tag with VLAN id vid into frame.
func ptVLAN(frame []byte, vid uint16) []byte {
	tag := []byte{0x81, 0x00, byte(vid >> 8), byte(vid)}
	return slices.Concat(frame[:12], tag, frame[12:])
}

const (
	ptMACA  = "02:00:00:00:00:0a"
	ptMACB  = "02:00:00:00:00:0b"
	ptMACC  = "02:00:00:00:00:0c"
	ptMACD  = "02:00:00:00:00:0d"
	ptMACGw = "02:00:00:00:00:01"
	ptMACUp = "02:00:00:00:00:fe"
)

// ptPortNames are the ports a fuzz selector byte picks from; one more
// value picks a port ID that is in no policy.
var ptPortNames = []string{"pod-a", "pod-b", "pod-c", "uplink", "pod-d"}

const ptUnknownPort dataplane.PortID = 200

type ptSeed struct {
	name  string
	frame []byte
	port  string
}

func ptSeeds(tb testing.TB) []ptSeed {
	remoteTCP := ptTCP(tb, "02:00:00:00:01:0a", ptMACA, "10.244.1.5", "10.244.0.10", 33000, 80, true, false)
	return []ptSeed{
		{"tcp-a-b-web", ptTCP(tb, ptMACA, ptMACB, "10.244.0.10", "10.244.0.11", 40000, 80, true, false), "pod-a"},
		{"tcp-a-gw-b", ptTCP(tb, ptMACA, ptMACGw, "10.244.0.10", "10.244.0.11", 40001, 80, true, false), "pod-a"},
		{"tcp-a-b-telnet", ptTCP(tb, ptMACA, ptMACB, "10.244.0.10", "10.244.0.11", 40002, 23, true, false), "pod-a"},
		{"tcp-a-internet", ptTCP(tb, ptMACA, ptMACGw, "10.244.0.10", "8.8.8.8", 40003, 443, true, false), "pod-a"},
		{"tcp-a-remote", ptTCP(tb, ptMACA, ptMACGw, "10.244.0.10", "10.244.1.5", 40004, 443, true, false), "pod-a"},
		{"udp-a-vip", ptUDP(tb, ptMACA, ptMACGw, "10.244.0.10", "10.96.0.10", 40005, 53), "pod-a"},
		{"udp-a-remote", ptUDP(tb, ptMACA, ptMACGw, "10.244.0.10", "10.244.1.6", 40006, 9000), "pod-a"},
		{"udp-a-quarantine", ptUDP(tb, ptMACA, ptMACGw, "10.244.0.10", "10.244.9.1", 40007, 9000), "pod-a"},
		{"udp-a-d", ptUDP(tb, ptMACA, ptMACD, "10.244.0.10", "10.244.0.13", 40008, 7000), "pod-a"},
		{"udp-a-b-7000", ptUDP(tb, ptMACA, ptMACB, "10.244.0.10", "10.244.0.11", 40009, 7000), "pod-a"},
		{"udp6-a-vip", ptUDP(tb, ptMACA, ptMACGw, "fd00::10", "fd00:96::10", 40010, 53), "pod-a"},
		{"udp6-a-remote", ptUDP(tb, ptMACA, ptMACGw, "fd00::10", "fd00:1::5", 40011, 9000), "pod-a"},
		{"udp6-b-a", ptUDP(tb, ptMACB, ptMACA, "fd00::11", "fd00::10", 40012, 9000), "pod-b"},
		{"udp-a-vxlan-port", ptUDP(tb, ptMACA, ptMACB, "10.244.0.10", "10.244.0.11", 40013, dataplane.VXLANPort), "pod-a"},
		{"udp-a-b-vlan", ptVLAN(ptUDP(tb, ptMACA, ptMACB, "10.244.0.10", "10.244.0.11", 40014, 5353), 10), "pod-a"},
		{"icmp-a-remote", ptEcho(tb, ptMACA, ptMACGw, "10.244.0.10", "10.244.1.5", 7), "pod-a"},
		{"icmp-a-b", ptEcho(tb, ptMACA, ptMACGw, "10.244.0.10", "10.244.0.11", 8), "pod-a"},
		{"icmp6-a-b", ptEcho(tb, ptMACA, ptMACB, "fd00::10", "fd00::11", 9), "pod-a"},
		{"icmp-spoofed", ptEcho(tb, ptMACA, ptMACB, "10.244.0.99", "10.244.0.11", 10), "pod-a"},
		{"arp-a-gw", ptARP(tb, ptMACA, "10.244.0.10", "10.244.0.1"), "pod-a"},
		{"arp-a-b", ptARP(tb, ptMACA, "10.244.0.10", "10.244.0.11"), "pod-a"},
		{"arp-a-unknown", ptARP(tb, ptMACA, "10.244.0.10", "10.244.0.200"), "pod-a"},
		{"ns-a-b", ptNS(tb, ptMACA, "fd00::10", "fd00::11"), "pod-a"},
		{"ns-a-gw", ptNS(tb, ptMACA, "fd00::10", "fd00::1"), "pod-a"},
		{"vxlan-4096", ptVXLAN(tb, ptMACUp, 4096, remoteTCP), "uplink"},
		{"vxlan-4097", ptVXLAN(tb, ptMACUp, 4097, ptUDP(tb, "02:00:00:00:01:0a", ptMACB, "fd00:1::5", "fd00::11", 33001, 9000)), "uplink"},
		{"vxlan-999-to-c", ptVXLAN(tb, ptMACC, 999, ptUDP(tb, "02:00:00:00:01:0a", ptMACC, "10.244.1.5", "10.244.0.77", 33002, 9000)), "uplink"},
		{"vxlan-on-vnic", ptVXLANFrom(tb, ptMACA, ptMACGw, "10.244.0.10", "10.244.1.6", 4096, remoteTCP), "pod-a"},
		{"tcp-uplink-a", ptTCP(tb, "02:00:00:00:99:99", ptMACA, "8.8.8.8", "10.244.0.10", 443, 40003, true, true), "uplink"},
		{"tcp-unknown-port", ptTCP(tb, ptMACA, ptMACB, "10.244.0.10", "10.244.0.11", 40015, 80, true, false), ""},
		{"truncated", ptTCP(tb, ptMACA, ptMACB, "10.244.0.10", "10.244.0.11", 40016, 80, true, false)[:40], "pod-a"},
	}
}

// ptSelector returns the fuzz selector byte for port name ("" for the
// unknown port).
func ptSelector(name string) byte {
	if i := slices.Index(ptPortNames, name); i >= 0 {
		return byte(i)
	}
	return byte(len(ptPortNames))
}

func ptPortFor(sw *Switch, sel byte) dataplane.PortID {
	i := int(sel) % (len(ptPortNames) + 1)
	if i == len(ptPortNames) {
		return ptUnknownPort
	}
	if p := sw.Port(ptPortNames[i]); p != nil {
		return p.ID
	}
	return ptUnknownPort
}

// ptSum is the folded ones' complement sum of b, computed naively.
func ptSum(b []byte, acc uint32) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		acc += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		acc += uint32(b[len(b)-1]) << 8
	}
	for acc>>16 != 0 {
		acc = acc&0xffff + acc>>16
	}
	return acc
}

// ptChecksumsOK reports whether every checksum of the frame b (which pr
// describes) that can be checked without reassembly is valid: IPv4 headers
// and TCP, UDP and ICMP checksums, outer and inner.
func ptChecksumsOK(b []byte, pr *dataplane.Parsed) bool {
	ok := ptHeadersOK(b, &pr.Outer)
	if pr.Encap {
		ok = ok && ptHeadersOK(b, &pr.Inner)
	}
	return ok
}

func ptHeadersOK(b []byte, h *dataplane.Headers) bool {
	if h.IPVersion == 0 {
		return true
	}
	var pseudo []byte
	if h.IPVersion == 4 {
		hl := int(b[h.L3]&0xf) * 4
		if ptSum(b[h.L3:int(h.L3)+hl], 0) != 0xffff {
			return false
		}
		pseudo = slices.Concat(h.Src[:4], h.Dst[:4])
	} else {
		pseudo = slices.Concat(h.Src[:], h.Dst[:])
	}
	if h.Flags&dataplane.FlagL4 == 0 || h.Flags&dataplane.FlagFragment != 0 {
		return true
	}
	seg := b[h.L4:h.End]
	switch h.Proto {
	case dataplane.ProtoUDP:
		seg = seg[:binary.BigEndian.Uint16(seg[4:])]
		if binary.BigEndian.Uint16(seg[6:]) == 0 {
			return h.IPVersion == 4
		}
	case dataplane.ProtoTCP, dataplane.ProtoICMPv6:
	case dataplane.ProtoICMPv4:
		return ptSum(seg, 0) == 0xffff
	default:
		return true
	}
	pseudo = append(pseudo, 0, h.Proto)
	pseudo = binary.BigEndian.AppendUint16(pseudo, uint16(len(seg)))
	return ptSum(seg, ptSum(pseudo, 0)) == 0xffff
}

// ptStep is one frame through a switch, with the invariants every verdict
// must meet.
type ptStep struct {
	sw *Switch
	w  *dataplane.Worker
	p  *dataplane.Packet
}

func newPTStep(sw *Switch) *ptStep {
	s := &ptStep{sw: sw, w: sw.Pipeline().NewWorker(), p: dataplane.NewPacket(dataplane.BufferSize)}
	s.w.Trace = &dataplane.Trace{}
	return s
}

// run processes frame arriving on in and checks the verdict. It returns the
// output frame (a copy) if the packet was forwarded.
func (s *ptStep) run(t *testing.T, what string, frame []byte, in dataplane.PortID, now int64) []byte {
	t.Helper()
	p := s.p
	if !p.SetFrame(frame) {
		return nil
	}
	p.InPort = in
	s.w.Trace.Reset()
	s.w.Process([]*dataplane.Packet{p}, now)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("%s: %s\nin  (port %d) %x\nout (port %d) %x\ntrace:\n  %s", what, fmt.Sprintf(format, args...),
			in, frame, p.OutPort, p.Bytes(), strings.Join(s.w.Trace.Lines(), "\n  "))
	}
	if p.Drop != dataplane.NotDropped {
		if p.OutPort != dataplane.NoPort {
			fail("dropped (%s) with OutPort %d", p.Drop, p.OutPort)
		}
		if int(p.Drop) >= dataplane.NumDropReasons || p.Drop.String() == "unknown-drop-reason" {
			fail("unknown drop reason %d", p.Drop)
		}
		return nil
	}
	if s.sw.PortByID(p.OutPort) == nil {
		fail("forwarded to port %d, which is not in the policy", p.OutPort)
		return nil
	}
	if p.Path == dataplane.PathNone {
		fail("forwarded on no path")
	}
	out := slices.Clone(p.Bytes())
	var in0, out0 dataplane.Parsed
	in0.VXLANPort, out0.VXLANPort = s.sw.Config().Switch.VXLANPort, s.sw.Config().Switch.VXLANPort
	if in0.Decode(frame) != dataplane.NotDropped {
		return out
	}
	r := out0.Decode(out)
	switch {
	case r == dataplane.DropNestedVXLAN && in0.Encap && !s.sw.Decapsulates(in):
		// A VXLAN packet from a vNIC is plain UDP to the switch, which
		// may encapsulate it again: the parser refuses nested VXLAN.
	case r != dataplane.NotDropped:
		fail("the input decodes, the output does not: %s", r)
	case ptChecksumsOK(frame, &in0) && !ptChecksumsOK(out, &out0):
		fail("the input's checksums are valid, the output's are not")
	}
	return out
}

// ptReply returns a reply to the frame b: MACs, addresses and TCP/UDP
// ports swapped (inner and outer, keeping the outer UDP ports), an echo
// request turned into a reply. It returns nil if b is not an IP frame.
func ptReply(b []byte) []byte {
	var pr dataplane.Parsed
	if pr.Decode(b) != dataplane.NotDropped || pr.Tenant().IPVersion == 0 {
		return nil
	}
	r := slices.Clone(b)
	ptSwap(r, &pr.Outer, !pr.Encap)
	if pr.Encap {
		ptSwap(r, &pr.Inner, true)
	}
	return r
}

func ptSwap(b []byte, h *dataplane.Headers, l4 bool) {
	swap := func(i, j, n int) {
		tmp := slices.Clone(b[i : i+n])
		copy(b[i:i+n], b[j:j+n])
		copy(b[j:j+n], tmp)
	}
	e := int(h.Eth)
	swap(e, e+6, 6)
	l3 := int(h.L3)
	switch h.IPVersion {
	case 4:
		swap(l3+12, l3+16, 4)
	case 6:
		swap(l3+8, l3+24, 16)
	default:
		return
	}
	if !l4 || h.Flags&dataplane.FlagL4 == 0 {
		return
	}
	l4off := int(h.L4)
	switch h.Proto {
	case dataplane.ProtoTCP, dataplane.ProtoUDP:
		swap(l4off, l4off+2, 2)
	case dataplane.ProtoICMPv4, dataplane.ProtoICMPv6:
		old := binary.BigEndian.Uint16(b[l4off:])
		switch {
		case h.Proto == dataplane.ProtoICMPv4 && b[l4off] == dataplane.ICMPv4EchoRequest:
			b[l4off] = dataplane.ICMPv4EchoReply
		case h.Proto == dataplane.ProtoICMPv6 && b[l4off] == dataplane.ICMPv6EchoRequest:
			b[l4off] = dataplane.ICMPv6EchoReply
		default:
			return
		}
		var d dataplane.CsumDelta
		d = d.Word(old, binary.BigEndian.Uint16(b[l4off:]))
		d.UpdateChecksumField(b[l4off+2:])
	}
}

// FuzzPipeline runs random frames, arriving on a port the selector byte
// picks, through a switch with ptPolicy; then the reply to what came out,
// a policy change, and both again (revalidation), then a flow table expiry
// and the frame once more. Every verdict must meet the invariants of
// ptStep.run.
func FuzzPipeline(f *testing.F) {
	cfgA, cfgB := ptConfig(f, false), ptConfig(f, true)
	for _, s := range ptSeeds(f) {
		f.Add(s.frame, ptSelector(s.port))
	}
	f.Fuzz(func(t *testing.T, frame []byte, sel byte) {
		sw, err := New(cfgA)
		if err != nil {
			t.Fatal(err)
		}
		st := newPTStep(sw)
		in := ptPortFor(sw, sel)
		now := int64(time.Second)
		out := st.run(t, "frame", frame, in, now)
		outPort := st.p.OutPort
		var reply []byte
		if out != nil {
			reply = ptReply(out)
		}
		if reply != nil {
			st.run(t, "reply", reply, outPort, now+1)
		}
		if err := sw.Apply(cfgB); err != nil {
			t.Fatal(err)
		}
		st.run(t, "frame after a policy change", frame, in, now+2)
		if reply != nil {
			st.run(t, "reply after a policy change", reply, outPort, now+3)
		}
		if err := sw.Apply(cfgA); err != nil {
			t.Fatal(err)
		}
		if reply != nil {
			st.run(t, "reply after a second policy change", reply, outPort, now+4)
		}
		st.run(t, "frame after a second policy change", frame, in, now+5)
		later := now + int64(3*time.Hour)
		sw.Pipeline().FlowTable().Expire(later)
		st.run(t, "frame after expiry", frame, in, later)
		ptCheckTable(t, sw)
	})
}

// ptCheckTable checks that the flow table's count is the number of flows
// it holds, and that connections link flows that are in it.
func ptCheckTable(t *testing.T, sw *Switch) {
	t.Helper()
	ft := sw.Pipeline().FlowTable()
	n := 0
	ft.Range(func(f *dataplane.Flow) bool {
		n++
		if f.Removed() {
			t.Errorf("flow %s is in the table but marked removed", f.Key())
		}
		if k := f.Key(); ft.Lookup(&k, k.Hash()) != f {
			t.Errorf("flow %s is not found by its key", f.Key())
		}
		return true
	})
	if n != ft.Len() {
		t.Errorf("flow table: Len() = %d, Range sees %d flows", ft.Len(), n)
	}
	if max := ft.Config().MaxFlows; n > max {
		t.Errorf("flow table holds %d flows, more than its bound %d", n, max)
	}
}

// TestPipelineSeeds runs the fuzz seeds with expected verdicts: the fuzz
// target's invariants say nothing about which port a frame goes to.
func TestPipelineSeeds(t *testing.T) {
	cfgA := ptConfig(t, false)
	want := map[string]string{ // seed -> out port or drop reason
		"tcp-a-b-web":      "pod-b",
		"tcp-a-gw-b":       "pod-b",
		"tcp-a-b-telnet":   "blocked-by-policy",
		"tcp-a-internet":   "uplink",
		"tcp-a-remote":     "uplink",
		"udp-a-vip":        "pod-b",
		"udp-a-remote":     "uplink",
		"udp-a-quarantine": "blocked-by-policy",
		"udp-a-d":          "pod-d",
		"udp-a-b-7000":     "blocked-by-policy",
		"udp6-a-vip":       "pod-b",
		"udp6-a-remote":    "uplink",
		"udp6-b-a":         "pod-a",
		"udp-a-vxlan-port": "blocked-by-policy",
		"udp-a-b-vlan":     "pod-b",
		"icmp-a-remote":    "uplink",
		"icmp-a-b":         "pod-b",
		"icmp6-a-b":        "pod-b",
		"icmp-spoofed":     "spoofed-source",
		"arp-a-gw":         "pod-a",
		"arp-a-b":          "pod-a",
		"arp-a-unknown":    "uplink",
		"ns-a-b":           "pod-a",
		"ns-a-gw":          "pod-a",
		"vxlan-4096":       "pod-a",
		"vxlan-4097":       "pod-b",
		"vxlan-999-to-c":   "pod-c",
		"vxlan-on-vnic":    "uplink",
		"tcp-uplink-a":     "pod-a",
		"tcp-unknown-port": "unknown-port",
		"truncated":        "truncated-ipv4",
	}
	for _, s := range ptSeeds(t) {
		t.Run(s.name, func(t *testing.T) {
			sw, err := New(cfgA)
			if err != nil {
				t.Fatal(err)
			}
			st := newPTStep(sw)
			in := ptPortFor(sw, ptSelector(s.port))
			st.run(t, s.name, s.frame, in, int64(time.Second))
			got := st.p.Drop.String()
			if st.p.Drop == dataplane.NotDropped {
				got = sw.PortByID(st.p.OutPort).Name
			}
			if got != want[s.name] {
				t.Errorf("verdict %s, want %s\ntrace:\n  %s", got, want[s.name], strings.Join(st.w.Trace.Lines(), "\n  "))
			}
		})
	}
}

// ptFlow is one kind of traffic in TestPipelineSwitchConcurrent, with the
// verdicts it may get under either policy (and while they change).
type ptFlow struct {
	name  string
	frame []byte
	in    string
	out   []string               // acceptable output ports
	drops []dataplane.DropReason // acceptable drop reasons
}

// TestPipelineSwitchConcurrent runs four workers over one switch while
// another goroutine alternates the policy and expires flows. Run it with
// -race.
func TestPipelineSwitchConcurrent(t *testing.T) {
	ft := vfp.FlowTableConfig{MaxFlows: 1 << 16}
	cfgA := ptWithFlowTable(ptConfig(t, false), ft)
	cfgB := ptWithFlowTable(ptConfig(t, true), ft)
	sw, err := New(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	remoteTCP := ptTCP(t, "02:00:00:00:01:0a", ptMACA, "10.244.1.5", "10.244.0.10", 33000, 80, false, true)
	flows := func(wi int) []ptFlow {
		sp := uint16(20000 + wi*100)
		return []ptFlow{
			{"tcp-a-b", ptTCP(t, ptMACA, ptMACB, "10.244.0.10", "10.244.0.11", sp, 80, false, true), "pod-a", []string{"pod-b"}, nil},
			{"tcp-b-a-reply", ptTCP(t, ptMACB, ptMACA, "10.244.0.11", "10.244.0.10", 80, sp, false, true), "pod-b", []string{"pod-a"}, nil},
			{"udp-a-vip", ptUDP(t, ptMACA, ptMACGw, "10.244.0.10", "10.96.0.10", sp+1, 53), "pod-a", []string{"pod-b", "pod-c"}, nil},
			{"udp-b-a-dns-reply", ptUDP(t, ptMACB, ptMACA, "10.244.0.11", "10.244.0.10", 5353, sp+1), "pod-b", []string{"pod-a"}, nil},
			{"udp-a-b-7000", ptUDP(t, ptMACA, ptMACB, "10.244.0.10", "10.244.0.11", sp+2, 7000), "pod-a", []string{"pod-b"},
				[]dataplane.DropReason{dataplane.DropBlocked}},
			{"icmp-a-remote", ptEcho(t, ptMACA, ptMACGw, "10.244.0.10", "10.244.1.5", sp+3), "pod-a", []string{"uplink"}, nil},
			{"arp-a-gw", ptARP(t, ptMACA, "10.244.0.10", "10.244.0.1"), "pod-a", []string{"pod-a"}, nil},
			{"udp-a-d", ptUDP(t, ptMACA, ptMACD, "10.244.0.10", "10.244.0.13", sp+4, 7000), "pod-a", []string{"pod-d", "uplink"}, nil},
			{"vxlan-4096", ptVXLAN(t, ptMACUp, 4096, remoteTCP), "uplink", []string{"pod-a"}, nil},
			{"udp6-a-vip", ptUDP(t, ptMACA, ptMACGw, "fd00::10", "fd00:96::10", sp+5, 53), "pod-a", []string{"pod-b"}, nil},
			{"tcp-a-internet", ptTCP(t, ptMACA, ptMACGw, "10.244.0.10", "8.8.8.8", sp+6, 443, false, true), "pod-a", []string{"uplink"}, nil},
		}
	}
	// Port IDs are stable by name; pod-d's is kept while it is away.
	ids := map[string]dataplane.PortID{}
	for _, p := range sw.Ports() {
		ids[p.Name] = p.ID
	}

	// Each worker runs at least minRounds batches, and on until the policy
	// has changed minApplies times.
	const workers, minRounds, minApplies, maxRounds = 4, 300, 40, 1_000_000
	var clock atomic.Int64
	var applies atomic.Int64
	clock.Store(int64(time.Second))
	type tally struct {
		packets    uint64
		fast, slow uint64
		drops      [dataplane.NumDropReasons]uint64
	}
	tallies := make([]tally, workers)
	var wg, done sync.WaitGroup
	stop := make(chan struct{})
	for wi := range workers {
		done.Add(1)
		wg.Go(func() {
			defer done.Done()
			fl := flows(wi)
			w := sw.Pipeline().NewWorker()
			batch := make([]*dataplane.Packet, len(fl))
			for i := range batch {
				batch[i] = dataplane.NewPacket(dataplane.BufferSize)
			}
			tl := &tallies[wi]
			for r := 0; r < maxRounds && (r < minRounds || applies.Load() < minApplies); r++ {
				for i, p := range batch {
					p.SetFrame(fl[i].frame)
					p.InPort = ids[fl[i].in]
				}
				w.Process(batch, clock.Add(int64(time.Millisecond)))
				tl.packets += uint64(len(batch))
				for i, p := range batch {
					switch p.Path {
					case dataplane.PathFast:
						tl.fast++
					case dataplane.PathSlow:
						tl.slow++
					default:
						t.Errorf("%s: path %s", fl[i].name, p.Path)
					}
					if p.Rejected != dataplane.NotDropped {
						// Dropped, counted, and answered.
						tl.drops[p.Rejected]++
					}
					if p.Drop != dataplane.NotDropped {
						tl.drops[p.Drop]++
						if !slices.Contains(fl[i].drops, p.Drop) {
							t.Errorf("%s: dropped: %s", fl[i].name, p.Drop)
						}
						continue
					}
					ok := false
					for _, name := range fl[i].out {
						ok = ok || ids[name] == p.OutPort
					}
					if !ok {
						t.Errorf("%s: out port %d, want one of %v", fl[i].name, p.OutPort, fl[i].out)
					}
				}
			}
		})
	}
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			cfg := cfgA
			if i%2 == 0 {
				cfg = cfgB
			}
			if err := sw.Apply(cfg); err != nil {
				t.Error(err)
				return
			}
			applies.Add(1)
			switch i % 3 {
			case 1:
				sw.Pipeline().FlowTable().Expire(clock.Load() + int64(31*time.Second))
			case 2:
				sw.Pipeline().FlowTable().Expire(clock.Load() + int64(3*time.Hour))
			}
			time.Sleep(50 * time.Microsecond)
		}
	})
	done.Wait()
	close(stop)
	wg.Wait()
	if n := applies.Load(); n < minApplies {
		t.Errorf("only %d policy changes happened while the workers ran", n)
	}

	var sum tally
	for _, tl := range tallies {
		sum.packets += tl.packets
		sum.fast += tl.fast
		sum.slow += tl.slow
		for r, n := range tl.drops {
			sum.drops[r] += n
		}
	}
	pl := sw.Pipeline()
	if st := pl.Stats(); st.Fast != sum.fast || st.Slow != sum.slow {
		t.Errorf("inspect.Stats() = %+v, the workers saw fast=%d slow=%d", st, sum.fast, sum.slow)
	}
	if total := sum.fast + sum.slow; total != sum.packets {
		t.Errorf("%d packets on the two paths, want %d", total, sum.packets)
	}
	for r := range dataplane.NumDropReasons {
		if got := pl.Drops.Get(dataplane.DropReason(r)); got != sum.drops[r] {
			t.Errorf("Drops[%s] = %d, the workers saw %d", dataplane.DropReason(r), got, sum.drops[r])
		}
	}
	ptCheckTable(t, sw)
	t.Logf("%d policy changes; %d packets: fast=%d slow=%d drops: %s", applies.Load(), sum.packets, sum.fast, sum.slow, pl.Drops.String())
}

// ptFiveLayers is a client port with five layers (ACL, NSG, load balancer,
// SNAT with exceptions, QoS classes), each with a few groups of rules, and a
// server port with an ACL of its own.
const ptFiveLayers = `{
  "switch": {
    "name": "sw-five-layers",
    "gateway": {"mac": "02:00:00:00:00:01", "ips": ["10.0.0.1"]},
    "flowTable": {"maxFlows": 1048576, "onFull": "evict-oldest"}
  },
  "ports": [
    {
      "name": "client", "mac": "02:00:00:00:00:0a", "ips": ["10.0.0.10"],
      "layers": [
        {
          "name": "acl", "default": {"out": "block", "in": "block"},
          "groups": [
            {"name": "deny", "rules": [
              {"name": "block-telnet", "priority": 10, "match": {"direction": "out", "protocols": ["tcp"], "dstPorts": ["23"]}, "action": {"type": "block"}},
              {"name": "block-smb", "priority": 20, "match": {"direction": "out", "protocols": ["tcp"], "dstPorts": ["137-139", "445"]}, "action": {"type": "block"}},
              {"name": "block-quarantine", "priority": 30, "match": {"dstIPs": ["10.96.9.0/24", "10.0.9.0/24"]}, "action": {"type": "block"}}
            ]},
            {"name": "allow", "rules": [
              {"name": "allow-services", "priority": 10, "match": {"direction": "out", "protocols": ["udp", "tcp"], "dstIPs": ["10.96.0.0/12"], "dstPorts": ["8000-8999"]}, "action": {"type": "allow"}, "stateful": true},
              {"name": "allow-dns", "priority": 20, "match": {"direction": "out", "protocols": ["udp"], "dstPorts": ["53"]}, "action": {"type": "allow"}, "stateful": true},
              {"name": "allow-in", "priority": 30, "match": {"direction": "in", "srcIPs": ["10.0.0.0/16"]}, "action": {"type": "allow"}}
            ]}
          ]
        },
        {
          "name": "nsg",
          "groups": [
            {"name": "egress-v4", "match": {"ipVersion": 4, "direction": "out"}, "rules": [
              {"name": "from-pod-subnet", "priority": 10, "match": {"srcIPs": ["10.0.0.0/24"]}, "action": {"type": "allow"}},
              {"name": "to-private", "priority": 20, "match": {"dstIPs": ["192.168.0.0/16", "172.16.0.0/12"]}, "action": {"type": "block"}}
            ]},
            {"name": "egress-v6", "match": {"ipVersion": 6}, "rules": [
              {"name": "ula", "priority": 10, "match": {"dstIPs": ["fd00::/8"]}, "action": {"type": "allow"}}
            ]}
          ]
        },
        {
          "name": "lb",
          "groups": [
            {"name": "svc-web", "match": {"direction": "out", "dstIPs": ["10.96.0.10"]}, "rules": [
              {"name": "dnat-tcp", "priority": 10, "match": {"protocols": ["tcp"], "dstPorts": ["8000-8999"]}, "action": {"type": "allow", "modify": {"dstIP": "10.0.0.11", "dstMAC": "02:00:00:00:00:0b"}}, "stateful": true},
              {"name": "dnat-udp", "priority": 20, "match": {"protocols": ["udp"], "dstPorts": ["8000-8999"]}, "action": {"type": "allow", "modify": {"dstIP": "10.0.0.11", "dstMAC": "02:00:00:00:00:0b"}}, "stateful": true}
            ]},
            {"name": "svc-dns", "match": {"direction": "out", "dstIPs": ["10.96.0.53"]}, "rules": [
              {"name": "dnat-dns", "priority": 10, "match": {"protocols": ["udp"], "dstPorts": ["53"]}, "action": {"type": "allow", "modify": {"dstIP": "10.0.0.53"}}, "stateful": true}
            ]}
          ]
        },
        {
          "name": "snat",
          "groups": [
            {"name": "snat", "rules": [
              {"name": "snat-all", "priority": 10, "match": {"direction": "out", "ipVersion": 4}, "action": {"type": "allow", "modify": {"srcIP": "192.168.1.10"}}, "stateful": true}
            ]},
            {"name": "exceptions", "rules": [
              {"name": "cluster", "priority": 10, "match": {"direction": "out", "dstIPs": ["10.0.0.0/8"]}, "action": {"type": "allow"}},
              {"name": "management", "priority": 20, "match": {"direction": "out", "dstIPs": ["172.31.0.0/16"]}, "action": {"type": "allow"}}
            ]}
          ]
        },
        {
          "name": "qos",
          "groups": [
            {"name": "classes", "rules": [
              {"name": "bulk", "priority": 10, "match": {"protocols": ["tcp"], "dstPorts": ["20-21", "873"]}, "action": {"type": "allow"}},
              {"name": "interactive", "priority": 20, "match": {"protocols": ["udp", "tcp"], "dstPorts": ["8000-8499"]}, "action": {"type": "allow"}},
              {"name": "default", "priority": 30, "match": {"protocols": ["udp", "tcp"], "srcPorts": ["1024-65535"]}, "action": {"type": "allow"}}
            ]}
          ]
        }
      ]
    },
    {
      "name": "server", "mac": "02:00:00:00:00:0b", "ips": ["10.0.0.11"],
      "layers": [
        {
          "name": "acl", "default": {"in": "block"},
          "groups": [
            {"name": "ingress", "rules": [
              {"name": "allow-services", "priority": 10, "match": {"direction": "in", "protocols": ["udp", "tcp"], "dstPorts": ["8000-8999"]}, "action": {"type": "allow"}}
            ]}
          ]
        }
      ]
    },
    {"name": "uplink", "mac": "02:00:00:00:00:fe", "uplink": true}
  ]
}`

// BenchmarkSlowPathFiveLayers measures the first packet of a flow: every
// iteration sends a new UDP flow (another source and destination port), so
// that it misses the flow table, crosses the client's five layers, the
// switching decision and the server's ACL, and installs a stateful
// connection (two flows). The table holds 2^20 flows and evicts the oldest
// beyond, so it never refuses.
func BenchmarkSlowPathFiveLayers(b *testing.B) {
	cfg, err := ParseConfig([]byte(ptFiveLayers))
	if err != nil {
		b.Fatal(err)
	}
	sw, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	client, server := sw.Port("client").ID, sw.Port("server").ID
	w := sw.Pipeline().NewWorker()
	tmpl := ptUDP(b, ptMACA, ptMACGw, "10.0.0.10", "10.96.0.10", 1024, 8000)
	tmpl[dataplane.EthernetLen+dataplane.IPv4MinLen+6] = 0 // no UDP checksum: the ports change below
	tmpl[dataplane.EthernetLen+dataplane.IPv4MinLen+7] = 0
	l4 := dataplane.EthernetLen + dataplane.IPv4MinLen
	p := dataplane.NewPacket(dataplane.BufferSize)
	b.ReportAllocs()
	b.SetBytes(int64(len(tmpl)))
	i := 0
	for b.Loop() {
		p.SetFrame(tmpl)
		p.InPort = client
		fb := p.Bytes()
		binary.BigEndian.PutUint16(fb[l4:], uint16(1024+i%64000))
		binary.BigEndian.PutUint16(fb[l4+2:], uint16(8000+(i/64000)%1000))
		i++
		w.Process([]*dataplane.Packet{p}, int64(i))
		if p.OutPort != server || p.Path != dataplane.PathSlow {
			b.Fatalf("packet %d: path=%s out=%d drop=%s, want the slow path to the server", i, p.Path, p.OutPort, p.Drop)
		}
	}
	if st := sw.Pipeline().FlowTable().Stats(); st.Refused != 0 {
		b.Fatalf("flow table refused %d flows", st.Refused)
	}
}

// TestSlowPathFiveLayersVerdict checks what the benchmark's packets go
// through, so that the benchmark measures the intended work.
func TestSlowPathFiveLayersVerdict(t *testing.T) {
	cfg, err := ParseConfig([]byte(ptFiveLayers))
	if err != nil {
		t.Fatal(err)
	}
	sw, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := sw.Pipeline().NewWorker()
	w.Trace = &dataplane.Trace{}
	frame := ptUDP(t, ptMACA, ptMACGw, "10.0.0.10", "10.96.0.10", 1024, 8000)
	p := dataplane.NewPacket(dataplane.BufferSize)
	p.SetFrame(frame)
	p.InPort = sw.Port("client").ID
	w.Process([]*dataplane.Packet{p}, 1)
	trace := strings.Join(w.Trace.Lines(), "\n")
	if p.OutPort != sw.Port("server").ID || p.Path != dataplane.PathSlow {
		t.Fatalf("path=%s out=%d drop=%s\n%s", p.Path, p.OutPort, p.Drop, trace)
	}
	for _, l := range []string{"layer acl", "layer nsg", "layer lb", "layer snat", "layer qos", "port server in: layer acl", "stateful: reply flow"} {
		if !strings.Contains(trace, l) {
			t.Errorf("trace lacks %q:\n%s", l, trace)
		}
	}
	var pr dataplane.Parsed
	if r := pr.Decode(p.Bytes()); r != dataplane.NotDropped {
		t.Fatal(r)
	}
	if !ptChecksumsOK(p.Bytes(), &pr) {
		t.Error("bad checksums in the output")
	}
	if got := pr.Outer.DstAddr().String(); got != "10.0.0.11" {
		t.Errorf("dst %s, want 10.0.0.11", got)
	}
	if n := sw.Pipeline().FlowTable().Len(); n != 2 {
		t.Errorf("%d flows, want 2 (stateful)", n)
	}
}

// TestSlowPathAllocs bounds the allocations of a new stateful flow through
// five layers with tracing off: its two flows and their connection, made
// in one allocation (dataplane's connBlock). Trace
// arguments boxed for a nil trace, forwarding explanations formatted for
// nobody, and a Decision escaping through the SlowPath interface used to
// cost 27 more.
func TestSlowPathAllocs(t *testing.T) {
	cfg, err := ParseConfig([]byte(ptFiveLayers))
	if err != nil {
		t.Fatal(err)
	}
	sw, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	client, server := sw.Port("client").ID, sw.Port("server").ID
	w := sw.Pipeline().NewWorker()
	tmpl := ptUDP(t, ptMACA, ptMACGw, "10.0.0.10", "10.96.0.10", 1024, 8000)
	l4 := dataplane.EthernetLen + dataplane.IPv4MinLen
	p := dataplane.NewPacket(dataplane.BufferSize)
	port := uint16(1024)
	allocs := testing.AllocsPerRun(1000, func() {
		p.SetFrame(tmpl)
		p.InPort = client
		binary.BigEndian.PutUint16(p.Bytes()[l4:], port)
		port++
		w.Process([]*dataplane.Packet{p}, 1)
		if p.OutPort != server || p.Path != dataplane.PathSlow {
			t.Fatalf("path=%s out=%d drop=%s", p.Path, p.OutPort, p.Drop)
		}
	})
	if allocs > 1 {
		t.Errorf("a new stateful flow costs %v allocations, want at most 1", allocs)
	}
}
