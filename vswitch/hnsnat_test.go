package vswitch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/encap"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/nat"
	"github.com/ufp-dev/ufp/vfp"
)

// Outbound NAT and port mappings at the HNS level (validation and
// lowering), switch.natPools and action.snat at the VFP level, and NAT
// across policy changes, connection timeouts and pool exhaustion.

// natL2Doc is an L2Bridge counterpart of natDoc: the pods share the host's
// subnet and leave with the host's MAC. Its endpoint policies are, by
// index: pod-a 0 OutBoundNAT, 1 PortMapping (UDP), 2 SDNRoute; pod-b 0
// OutBoundNAT.
const natL2Doc = `{
  "switch": {"name": "node-2"},
  "Uplink": {
    "Name": "uplink", "MacAddress": "02:00:00:00:00:fe",
    "IpAddresses": ["192.168.1.10", "fd00:1::10"],
    "Neighbors": [
      {"IpAddress": "192.168.1.1", "MacAddress": "02:00:00:00:00:99"},
      {"IpAddress": "fd00:1::1", "MacAddress": "02:00:00:00:00:99"},
      {"IpAddress": "192.168.1.30", "MacAddress": "02:00:00:00:00:30"}
    ]
  },
  "Networks": [
    {"Name": "cbr0", "Type": "L2Bridge",
      "Ipams": [{"Subnets": [
        {"IpAddressPrefix": "192.168.1.0/24", "Routes": [{"NextHop": "192.168.1.1", "DestinationPrefix": "0.0.0.0/0"}]},
        {"IpAddressPrefix": "fd00:1::/64", "Routes": [{"NextHop": "fd00:1::1", "DestinationPrefix": "::/0"}]}]}]}
  ],
  "Endpoints": [
    {"Name": "pod-a", "HostComputeNetwork": "cbr0", "MacAddress": "02:00:00:00:00:2a",
     "IpConfigurations": [{"IpAddress": "192.168.1.100"}, {"IpAddress": "fd00:1::100"}],
     "Policies": [
       {"Type": "OutBoundNAT", "Settings": {"Exceptions": ["10.96.0.0/12"], "Nat66": true}},
       {"Type": "PortMapping", "Settings": {"Protocol": 17, "InternalPort": 53, "ExternalPort": 5353, "VIP": "192.168.1.10"}},
       {"Type": "SDNRoute", "Settings": {"DestinationPrefix": "172.16.0.0/16", "NextHop": "192.168.1.30"}}]},
    {"Name": "pod-b", "HostComputeNetwork": "cbr0", "MacAddress": "02:00:00:00:00:2b",
     "IpConfigurations": [{"IpAddress": "192.168.1.101"}],
     "Policies": [{"Type": "OutBoundNAT", "Settings": {}}]}
  ]
}`

var (
	natL2A = dataplane.MAC{2, 0, 0, 0, 0, 0x2a}
	natL2B = dataplane.MAC{2, 0, 0, 0, 0, 0x2b}
)

// natVFPDoc is a VFP-level document with one source NAT rule and its pool.
const natVFPDoc = `{
  "switch": {"name": "vfp",
    "natPools": [{"ip": "192.0.2.1", "ports": "1024-65535", "reserved": ["tcp/8080"]}]},
  "ports": [
    {"name": "pod-a", "mac": "02:00:00:00:00:0a", "ips": ["10.0.0.10"],
     "layers": [{"name": "NAT_LAYER", "groups": [{"name": "g", "rules": [
       {"name": "snat", "priority": 100, "match": {"direction": "out"},
        "action": {"type": "allow", "snat": "192.0.2.1"}, "terminating": true, "stateful": true}]}]}]},
    {"name": "uplink", "mac": "02:00:00:00:00:fe", "ips": ["192.0.2.1"], "uplink": true}
  ]
}`

// Shorthands into the NAT documents.
func natEPPolicy(d doc, ep, i int) doc { return at(d, "Endpoints", ep, "Policies", i, "Settings") }
func natUplink(d doc) doc              { return d["Uplink"].(doc) }
func natVFPRule(d doc) doc             { return at(d, "ports", 0, "layers", 0, "groups", 0, "rules", 0) }
func natVFPPool(d doc, i int) doc      { return at(d, "switch", "natPools", i) }

func TestHNSNATBaseDocumentsParse(t *testing.T) {
	for name, s := range map[string]string{"natDoc": natDoc, "natL2Doc": natL2Doc, "natVFPDoc": natVFPDoc} {
		if _, err := ParseConfig([]byte(s)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestHNSNATErrors(t *testing.T) {
	const (
		epA  = `Endpoints[0] "ov-a"`
		epB  = `Endpoints[1] "ov-b"`
		l2A  = `Endpoints[0] "pod-a"`
		l2B  = `Endpoints[1] "pod-b"`
		rule = "ports[0].layers[0].groups[0].rules[0]"
	)
	tests := []struct {
		name string
		// base is the valid document edited (natDoc when empty).
		base string
		edit func(t *testing.T, d doc)
		want string // a substring of the error: the object, the field, what is wrong
	}{
		// OutBoundNAT.
		{name: "IPv6 VirtualIP without Nat66", edit: func(t *testing.T, d doc) {
			natEPPolicy(d, 0, 0)["VirtualIP"] = "fd00:1::50"
			delete(natEPPolicy(d, 0, 0), "Nat66")
		}, want: epA + ".Policies[0].Settings.Nat66: VirtualIP fd00:1::50 is IPv6; set Nat66 to translate IPv6"},
		{name: "VirtualIP not an address", edit: func(t *testing.T, d doc) { natEPPolicy(d, 1, 0)["VirtualIP"] = "192.168.1" },
			want: epB + `.Policies[0].Settings.VirtualIP: "192.168.1" is not an IP address`},
		{name: "VirtualIP multicast", edit: func(t *testing.T, d doc) { natEPPolicy(d, 1, 0)["VirtualIP"] = "239.1.1.1" },
			want: epB + ".Policies[0].Settings.VirtualIP: 239.1.1.1 is not a unicast address"},
		{name: "VirtualIP unspecified", edit: func(t *testing.T, d doc) { natEPPolicy(d, 1, 0)["VirtualIP"] = "0.0.0.0" },
			want: epB + ".Policies[0].Settings.VirtualIP: 0.0.0.0 is not a unicast address"},
		{name: "IPv6 VirtualIP for an IPv4-only endpoint", edit: func(t *testing.T, d doc) {
			s := natEPPolicy(d, 1, 0)
			s["VirtualIP"], s["Nat66"] = "fd00:1::50", true
		}, want: epB + ".Policies[0]: the endpoint has no IPv6 address to translate"},
		{name: "IPv4 OutBoundNAT for an IPv6-only endpoint", base: natL2Doc, edit: func(t *testing.T, d doc) {
			e := at(d, "Endpoints", 1)
			e["IpConfigurations"] = jsonValue(t, `[{"IpAddress": "fd00:1::101"}]`)
		}, want: l2B + ".Policies[0]: the endpoint has no IPv4 address to translate"},
		{name: "no IPv6 host address to default to", edit: func(t *testing.T, d doc) {
			delete(natUplink(d), "IpAddresses")
		}, want: epA + ".Policies[0].Settings.VirtualIP: no IPv6 address to translate to: set VirtualIP or give the host one in Uplink.IpAddresses"},
		{name: "no host address at all on L2Bridge", base: natL2Doc, edit: func(t *testing.T, d doc) {
			delete(natUplink(d), "IpAddresses")
		}, want: l2A + ".Policies[0].Settings.VirtualIP: no IPv4 address to translate to"},
		{name: "Overlay endpoint without DefaultGateway", edit: func(t *testing.T, d doc) {
			delete(natUplink(d), "DefaultGateway")
		}, want: epA + ".Policies[0]: translated IPv4 traffic of an Overlay endpoint leaves through the underlay's router: set Uplink.DefaultGateway (with its MAC in Uplink.Neighbors)"},
		{name: "Overlay endpoint with Nat66 without DefaultGatewayV6", edit: func(t *testing.T, d doc) {
			delete(natUplink(d), "DefaultGatewayV6")
		}, want: epA + ".Policies[0]: translated IPv6 traffic of an Overlay endpoint leaves through the underlay's router: set Uplink.DefaultGatewayV6"},
		{name: "conflicting PortRange for one VirtualIP", edit: func(t *testing.T, d doc) {
			natEPPolicy(d, 0, 0)["PortRange"] = "10000-19999"
			natEPPolicy(d, 1, 0)["PortRange"] = "30000-39999"
		}, want: epB + ".Policies[0].Settings.PortRange: 30000-39999, but " + epA + ".Policies[0].Settings.PortRange gives 192.168.1.10 the range 10000-19999"},
		{name: "conflicting PortShare for one VirtualIP", edit: func(t *testing.T, d doc) {
			natEPPolicy(d, 0, 0)["PortShare"] = 100
			natEPPolicy(d, 1, 0)["PortShare"] = 200
		}, want: epB + ".Policies[0].Settings.PortShare: 200, but " + epA + ".Policies[0].Settings.PortShare gives 192.168.1.10 the share 100"},
		{name: "PortShare negative", edit: func(t *testing.T, d doc) { natEPPolicy(d, 0, 0)["PortShare"] = -1 },
			want: epA + ".Policies[0].Settings.PortShare: -1 is not 1 to 65536 (or 0, the default)"},
		{name: "PortShare above a protocol's ports", edit: func(t *testing.T, d doc) { natEPPolicy(d, 1, 0)["PortShare"] = 70000 },
			want: epB + ".Policies[0].Settings.PortShare: 70000 is not 1 to 65536 (or 0, the default)"},
		{name: "PortRange malformed", edit: func(t *testing.T, d doc) { natEPPolicy(d, 0, 0)["PortRange"] = "1024:65535" },
			want: epA + `.Policies[0].Settings.PortRange: port range "1024:65535"`},
		{name: "PortRange from port 0", edit: func(t *testing.T, d doc) { natEPPolicy(d, 1, 0)["PortRange"] = "0-1000" },
			want: epB + `.Policies[0].Settings.PortRange: port range "0-1000": 0-1000 includes port 0`},
		{name: "PortRange reversed", edit: func(t *testing.T, d doc) { natEPPolicy(d, 1, 0)["PortRange"] = "2000-1000" },
			want: epB + `.Policies[0].Settings.PortRange: port range "2000-1000": 2000-1000 is empty`},
		{name: "unknown OutBoundNAT field", edit: func(t *testing.T, d doc) { natEPPolicy(d, 1, 0)["ExceptionsList"] = []any{} },
			want: epB + `.Policies[0].Settings.ExceptionsList: unknown field "ExceptionsList"`},
		{name: "Nat66 not a bool", edit: func(t *testing.T, d doc) { natEPPolicy(d, 0, 0)["Nat66"] = "true" },
			want: epA + `.Policies[0].Settings.Nat66: want true or false, got "true"`},
		{name: "Exceptions with host bits", edit: func(t *testing.T, d doc) {
			natEPPolicy(d, 0, 0)["Exceptions"] = []any{"10.244.0.0/16", "10.96.0.1/12"}
		}, want: epA + ".Policies[0].Settings.Exceptions[1]: 10.96.0.1/12 has host bits set (did you mean 10.96.0.0/12?)"},
		{name: "ExceptionList with host bits", edit: func(t *testing.T, d doc) {
			natEPPolicy(d, 1, 0)["ExceptionList"] = []any{"10.244.1.0/16"}
		}, want: epB + ".Policies[0].Settings.ExceptionList[0]: 10.244.1.0/16 has host bits set (did you mean 10.244.0.0/16?)"},
		{name: "Exceptions not a prefix", edit: func(t *testing.T, d doc) { natEPPolicy(d, 0, 0)["Exceptions"] = []any{"10.96.0.0/33"} },
			want: epA + `.Policies[0].Settings.Exceptions[0]: "10.96.0.0/33" is not an IP prefix or address`},
		{name: "Destinations with host bits", edit: func(t *testing.T, d doc) {
			natEPPolicy(d, 0, 0)["Destinations"] = []any{"2001:db8::1/32"}
		}, want: epA + ".Policies[0].Settings.Destinations[0]: 2001:db8::1/32 has host bits set (did you mean 2001:db8::/32?)"},
		{name: "second OutBoundNAT for IPv4", edit: func(t *testing.T, d doc) {
			hnsAdd(t, at(d, "Endpoints", 1), "Policies", `{"Type": "OutBoundNAT", "Settings": {"VirtualIP": "192.168.1.50"}}`)
		}, want: epB + `.Policies[1]: IPv4 is translated by ` + epB + ".Policies[0] already"},
		{name: "IPv6-only OutBoundNAT after a dual-stack one", edit: func(t *testing.T, d doc) {
			hnsAdd(t, at(d, "Endpoints", 0), "Policies", `{"Type": "OutBoundNAT", "Settings": {"VirtualIP": "fd00:1::50", "Nat66": true}}`)
		}, want: epA + `.Policies[2]: IPv6 is translated by ` + epA + ".Policies[0] already"},

		// PortMapping.
		{name: "duplicate port mapping", edit: func(t *testing.T, d doc) {
			hnsAdd(t, at(d, "Endpoints", 1), "Policies", `{"Type": "PortMapping", "Settings": {"Protocol": 6, "InternalPort": 81, "ExternalPort": 8080}}`)
		}, want: epB + ".Policies[1].Settings.ExternalPort: tcp/8080 on 192.168.1.10 is mapped by " + epA + ".Policies[1].Settings already"},
		{name: "duplicate port mapping with an explicit VIP", base: natL2Doc, edit: func(t *testing.T, d doc) {
			hnsAdd(t, at(d, "Endpoints", 1), "Policies", `{"Type": "PortMapping", "Settings": {"Protocol": 17, "InternalPort": 53, "ExternalPort": 5353}}`)
		}, want: l2B + ".Policies[1].Settings.ExternalPort: udp/5353 on 192.168.1.10 is mapped by " + l2A + ".Policies[1].Settings already"},
		{name: "Protocol ICMP", edit: func(t *testing.T, d doc) { natEPPolicy(d, 0, 1)["Protocol"] = 1 },
			want: epA + ".Policies[1].Settings.Protocol: 1 is not 6 (TCP) or 17 (UDP)"},
		{name: "Protocol missing", edit: func(t *testing.T, d doc) { delete(natEPPolicy(d, 0, 1), "Protocol") },
			want: epA + ".Policies[1].Settings.Protocol: 0 is not 6 (TCP) or 17 (UDP)"},
		{name: "Protocol as a name", edit: func(t *testing.T, d doc) { natEPPolicy(d, 0, 1)["Protocol"] = "TCP" },
			want: epA + `.Policies[1].Settings.Protocol: want a number, got "TCP"`},
		{name: "InternalPort 0", edit: func(t *testing.T, d doc) { natEPPolicy(d, 0, 1)["InternalPort"] = 0 },
			want: epA + ".Policies[1].Settings.InternalPort: a port mapping needs the endpoint's port"},
		{name: "ExternalPort missing", edit: func(t *testing.T, d doc) { delete(natEPPolicy(d, 0, 1), "ExternalPort") },
			want: epA + ".Policies[1].Settings.ExternalPort: a port mapping needs the host's port"},
		{name: "ExternalPort out of range", edit: func(t *testing.T, d doc) { natEPPolicy(d, 0, 1)["ExternalPort"] = 65536 },
			want: epA + ".Policies[1].Settings.ExternalPort: want an integer from 0 to 65535, got 65536"},
		{name: "unknown PortMapping field", edit: func(t *testing.T, d doc) { natEPPolicy(d, 0, 1)["HostPort"] = 8080 },
			want: epA + `.Policies[1].Settings.HostPort: unknown field "HostPort"`},
		{name: "VIP not an address", edit: func(t *testing.T, d doc) { natEPPolicy(d, 0, 1)["VIP"] = "host" },
			want: epA + `.Policies[1].Settings.VIP: "host" is not an IP address`},
		{name: "VIP multicast", edit: func(t *testing.T, d doc) { natEPPolicy(d, 0, 1)["VIP"] = "ff02::1" },
			want: epA + ".Policies[1].Settings.VIP: ff02::1 is not a unicast address"},
		{name: "IPv6 VIP for an IPv4-only endpoint", edit: func(t *testing.T, d doc) {
			hnsAdd(t, at(d, "Endpoints", 1), "Policies", `{"Type": "PortMapping", "Settings": {"Protocol": 6, "InternalPort": 80, "ExternalPort": 8081, "VIP": "fd00:1::10"}}`)
		}, want: epB + ".Policies[1].Settings.VIP: fd00:1::10 is IPv6, and the endpoint has no IPv6 address"},
		{name: "PortMapping without a host address", base: natL2Doc, edit: func(t *testing.T, d doc) {
			delete(natUplink(d), "IpAddresses")
			s := natEPPolicy(d, 0, 0)
			s["VirtualIP"] = "192.168.1.50"
			delete(s, "Nat66")
			at(d, "Endpoints", 1)["Policies"] = jsonValue(t, `[{"Type": "PortMapping", "Settings": {"Protocol": 6, "InternalPort": 80, "ExternalPort": 8080}}]`)
		}, want: l2B + ".Policies[0].Settings.VIP: no host address of the endpoint's families to map: set VIP or Uplink.IpAddresses"},

		// Addresses the host or a pool uses.
		{name: "endpoint IP is the host's", base: natL2Doc, edit: func(t *testing.T, d doc) {
			natUplink(d)["IpAddresses"] = []any{"192.168.1.101", "fd00:1::10"}
		}, want: l2B + ".IpConfigurations[0].IpAddress: 192.168.1.101 is the host's (Uplink.IpAddresses)"},
		{name: "endpoint IP is a VirtualIP", edit: func(t *testing.T, d doc) { natEPPolicy(d, 1, 0)["VirtualIP"] = "10.244.0.10" },
			want: epA + ".IpConfigurations[0].IpAddress: 10.244.0.10 is a NAT address (VirtualIP, VIP or SourceVIP)"},
		{name: "VirtualIP is the underlay's router", edit: func(t *testing.T, d doc) { natEPPolicy(d, 1, 0)["VirtualIP"] = "192.168.1.1" },
			want: epB + ".Policies[0].Settings.VirtualIP: 192.168.1.1"},
		{name: "VirtualIP is a subnet gateway", edit: func(t *testing.T, d doc) { natEPPolicy(d, 1, 0)["VirtualIP"] = "10.244.0.1" },
			want: epB + ".Policies[0].Settings.VirtualIP: 10.244.0.1"},
		{name: "port mapping VIP is the underlay's router", edit: func(t *testing.T, d doc) { natEPPolicy(d, 0, 1)["VIP"] = "192.168.1.1" },
			want: epA + ".Policies[1].Settings.VIP: 192.168.1.1"},
		{name: "port mapping of the VXLAN port", edit: func(t *testing.T, d doc) {
			hnsAdd(t, at(d, "Endpoints", 1), "Policies", `{"Type": "PortMapping", "Settings": {"Protocol": 17, "InternalPort": 4789, "ExternalPort": 4789}}`)
		}, want: epB + ".Policies[1].Settings.ExternalPort: "},
		{name: "endpoint IP is a port mapping VIP", edit: func(t *testing.T, d doc) { natEPPolicy(d, 0, 1)["VIP"] = "10.244.0.11" },
			want: epB + ".IpConfigurations[0].IpAddress: 10.244.0.11 is a NAT address (VirtualIP, VIP or SourceVIP)"},

		// The uplink's addresses and gateways.
		{name: "IpAddresses not an address", edit: func(t *testing.T, d doc) { natUplink(d)["IpAddresses"] = []any{"192.168.1.10/24/8"} },
			want: `Uplink.IpAddresses[0]: "192.168.1.10/24/8" is not an IP address`},
		{name: "IpAddresses loopback", edit: func(t *testing.T, d doc) { natUplink(d)["IpAddresses"] = []any{"192.168.1.10", "::1"} },
			want: "Uplink.IpAddresses[1]: ::1 is not a unicast address"},
		{name: "IpAddresses two IPv4", edit: func(t *testing.T, d doc) {
			natUplink(d)["IpAddresses"] = []any{"192.168.1.10", "fd00:1::10", "192.168.1.11"}
		}, want: "Uplink.IpAddresses[2]: the host has 192.168.1.10 already; one address per family"},
		{name: "IpAddresses a neighbour", edit: func(t *testing.T, d doc) { natUplink(d)["IpAddresses"] = []any{"192.168.1.1"} },
			want: "Uplink.IpAddresses[0]: 192.168.1.1 is also listed in Uplink.Neighbors"},
		{name: "DefaultGateway IPv6", edit: func(t *testing.T, d doc) { natUplink(d)["DefaultGateway"] = "fd00:1::1" },
			want: "Uplink.DefaultGateway: fd00:1::1 is not an IPv4 address"},
		{name: "DefaultGatewayV6 IPv4", edit: func(t *testing.T, d doc) { natUplink(d)["DefaultGatewayV6"] = "192.168.1.1" },
			want: "Uplink.DefaultGatewayV6: 192.168.1.1 is not an IPv6 address"},
		{name: "DefaultGateway without a MAC", edit: func(t *testing.T, d doc) { natUplink(d)["DefaultGateway"] = "192.168.1.2" },
			want: "Uplink.DefaultGateway: no MAC is known for 192.168.1.2: list it in Uplink.Neighbors"},
		{name: "DefaultGateway not an address", edit: func(t *testing.T, d doc) { natUplink(d)["DefaultGateway"] = "router" },
			want: `Uplink.DefaultGateway: "router" is not an IP address`},
		{name: "unknown Uplink field", edit: func(t *testing.T, d doc) { natUplink(d)["Gateway"] = "192.168.1.1" },
			want: `Uplink.Gateway: unknown field "Gateway"`},
		{name: "switch.natPools at the HNS level", edit: func(t *testing.T, d doc) {
			at(d, "switch")["natPools"] = jsonValue(t, `[{"ip": "192.168.1.10"}]`)
		}, want: "switch.natPools: at the HNS level OutBoundNAT and PortMapping policies make them"},

		// switch.natPools at the VFP level.
		{name: "pool ip not an address", base: natVFPDoc, edit: func(t *testing.T, d doc) { natVFPPool(d, 0)["ip"] = "192.0.2" },
			want: `switch.natPools[0].ip: "192.0.2" is not an IP address`},
		{name: "pool ip missing", base: natVFPDoc, edit: func(t *testing.T, d doc) { delete(natVFPPool(d, 0), "ip") },
			want: "switch.natPools[0].ip: an IP address is required"},
		{name: "pool ip with a zone", base: natVFPDoc, edit: func(t *testing.T, d doc) { natVFPPool(d, 0)["ip"] = "fe80::1%eth0" },
			want: `switch.natPools[0].ip: "fe80::1%eth0": zones are not allowed`},
		{name: "pool ip unspecified", base: natVFPDoc, edit: func(t *testing.T, d doc) { natVFPPool(d, 0)["ip"] = "::" },
			want: "switch.natPools[0].ip: :: is unspecified"},
		{name: "pool ip multicast", base: natVFPDoc, edit: func(t *testing.T, d doc) { natVFPPool(d, 0)["ip"] = "224.0.0.1" },
			want: "switch.natPools[0].ip: 224.0.0.1 is multicast"},
		{name: "pool ip broadcast", base: natVFPDoc, edit: func(t *testing.T, d doc) { natVFPPool(d, 0)["ip"] = "255.255.255.255" },
			want: "switch.natPools[0].ip: 255.255.255.255 is the limited broadcast address"},
		{name: "duplicate pool", base: natVFPDoc, edit: func(t *testing.T, d doc) {
			hnsAdd(t, at(d, "switch"), "natPools", `{"ip": "192.0.2.2"}`)
			hnsAdd(t, at(d, "switch"), "natPools", `{"ip": "192.0.2.1", "ports": "2000-3000"}`)
		}, want: "switch.natPools[2].ip: 192.0.2.1 is also the address of natPools[0]"},
		{name: "pool ports from 0", base: natVFPDoc, edit: func(t *testing.T, d doc) { natVFPPool(d, 0)["ports"] = "0-100" },
			want: `switch.natPools[0].ports: port range "0-100": 0-100 includes port 0`},
		{name: "pool ports reversed", base: natVFPDoc, edit: func(t *testing.T, d doc) { natVFPPool(d, 0)["ports"] = "3000-2000" },
			want: `switch.natPools[0].ports: port range "3000-2000": 3000-2000 is empty`},
		{name: "pool ports beyond 65535", base: natVFPDoc, edit: func(t *testing.T, d doc) { natVFPPool(d, 0)["ports"] = "1024-70000" },
			want: `switch.natPools[0].ports: port range "1024-70000": "70000" is not a port number`},
		{name: "pool ports as a number", base: natVFPDoc, edit: func(t *testing.T, d doc) { natVFPPool(d, 0)["ports"] = 1024 },
			want: "switch.natPools[0].ports: want a string, got the number 1024"},
		{name: "reserved without a protocol", base: natVFPDoc, edit: func(t *testing.T, d doc) { natVFPPool(d, 0)["reserved"] = []any{"8080"} },
			want: `switch.natPools[0].reserved[0]: "8080" is not tcp/PORT or udp/PORT`},
		{name: "reserved ICMP", base: natVFPDoc, edit: func(t *testing.T, d doc) { natVFPPool(d, 0)["reserved"] = []any{"tcp/80", "icmp/1"} },
			want: `switch.natPools[0].reserved[1]: "icmp/1" is not tcp/PORT or udp/PORT`},
		{name: "reserved port beyond 65535", base: natVFPDoc, edit: func(t *testing.T, d doc) { natVFPPool(d, 0)["reserved"] = []any{"udp/65536"} },
			want: `switch.natPools[0].reserved[0]: "udp/65536" is not tcp/PORT or udp/PORT`},
		{name: "reserved port 0", base: natVFPDoc, edit: func(t *testing.T, d doc) { natVFPPool(d, 0)["reserved"] = []any{"udp/0"} },
			want: "switch.natPools[0].reserved[0]: port 0 is not a port"},
		{name: "reserved twice", base: natVFPDoc, edit: func(t *testing.T, d doc) {
			natVFPPool(d, 0)["reserved"] = []any{"tcp/8080", "udp/8080", "tcp/8080"}
		}, want: "switch.natPools[0].reserved[2]: tcp/8080 is listed twice (reserved[0])"},
		{name: "pool portShare negative", base: natVFPDoc, edit: func(t *testing.T, d doc) { natVFPPool(d, 0)["portShare"] = -5 },
			want: "switch.natPools[0].portShare: -5 is not 0 (the default) to 65536"},
		{name: "pool portShare as a string", base: natVFPDoc, edit: func(t *testing.T, d doc) { natVFPPool(d, 0)["portShare"] = "100" },
			want: "switch.natPools[0].portShare: want"},
		{name: "unknown pool field", base: natVFPDoc, edit: func(t *testing.T, d doc) { natVFPPool(d, 0)["range"] = "1-2" },
			want: `switch.natPools[0].range: unknown field "range"`},

		// action.snat at the VFP level.
		{name: "snat to an address without a pool", base: natVFPDoc, edit: func(t *testing.T, d doc) { at(natVFPRule(d), "action")["snat"] = "192.0.2.9" },
			want: rule + ".action.snat: 192.0.2.9 is not in switch.natPools"},
		{name: "snat without any pool", base: natVFPDoc, edit: func(t *testing.T, d doc) { delete(at(d, "switch"), "natPools") },
			want: rule + ".action.snat: 192.0.2.1 is not in switch.natPools"},
		{name: "snat not an address", base: natVFPDoc, edit: func(t *testing.T, d doc) { at(natVFPRule(d), "action")["snat"] = "pool-1" },
			want: rule + `.action.snat: "pool-1" is not an IP address`},
		{name: "snat on a block action", base: natVFPDoc, edit: func(t *testing.T, d doc) { at(natVFPRule(d), "action")["type"] = "block" },
			want: rule + ".action.snat: a block action does not translate"},
		{name: "snat on a non-stateful rule", base: natVFPDoc, edit: func(t *testing.T, d doc) { delete(natVFPRule(d), "stateful") },
			want: rule + ".stateful: a rule that translates the source (snat) must be stateful"},
		{name: "snat with modify.srcIP", base: natVFPDoc, edit: func(t *testing.T, d doc) {
			at(natVFPRule(d), "action")["modify"] = doc{"srcIP": "192.0.2.1"}
		}, want: rule + ".action.snat: the action also sets modify.srcIP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := editJSON(t, hnsOr(tt.base, natDoc), func(d doc) { tt.edit(t, d) })
			hnsWantRejected(t, b, tt.want)
		})
	}
}

// ruleLine summarises a lowered rule: priority, name, match, action (lb
// names the load balancer, route marks lbRoute) and flags (rules of
// NAT_LAYER are terminating, so only the exception says so).
func ruleLine(r vfp.RuleConfig) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", *r.Priority, r.Name)
	natMatchLine(&b, r.Match)
	b.WriteString(" " + string(r.Action.Type))
	if r.Action.LB != "" {
		b.WriteString(" lb=" + r.Action.LB)
	}
	if r.Action.LBRoute {
		b.WriteString(" route")
	}
	if r.Action.Mapped {
		b.WriteString(" mapped")
	}
	if r.Action.SNAT.IsValid() {
		b.WriteString(" snat=" + r.Action.SNAT.String())
	}
	if m := r.Action.Modify; m != nil {
		for _, f := range []struct {
			k   string
			v   fmt.Stringer
			set bool
		}{{"srcMAC", m.SrcMAC, !m.SrcMAC.IsZero()}, {"dstMAC", m.DstMAC, !m.DstMAC.IsZero()}, {"srcIP", m.SrcIP, m.SrcIP.IsValid()}, {"dstIP", m.DstIP, m.DstIP.IsValid()}} {
			if f.set {
				fmt.Fprintf(&b, " %s=%s", f.k, f.v)
			}
		}
		if m.SrcPort != nil {
			fmt.Fprintf(&b, " srcPort=%d", *m.SrcPort)
		}
		if m.DstPort != nil {
			fmt.Fprintf(&b, " dstPort=%d", *m.DstPort)
		}
	}
	if r.Action.Push != nil {
		b.WriteString(" push")
	}
	if r.Stateful {
		b.WriteString(" stateful")
	}
	if !r.Terminating {
		b.WriteString(" non-terminating")
	}
	return b.String()
}

func natMatchLine(b *strings.Builder, m *vfp.MatchConfig) {
	if m == nil {
		return
	}
	if m.Direction != "" {
		b.WriteString(" dir=" + string(m.Direction))
	}
	if m.IPVersion != 0 {
		fmt.Fprintf(b, " v%d", m.IPVersion)
	}
	for _, f := range []struct {
		k  string
		vs []string
	}{{"proto", texts(m.Protocols)}, {"src", texts(m.SrcIPs)}, {"dst", texts(m.DstIPs)}, {"sport", texts(m.SrcPorts)}, {"dport", texts(m.DstPorts)}} {
		if len(f.vs) > 0 {
			fmt.Fprintf(b, " %s=%s", f.k, strings.Join(f.vs, ","))
		}
	}
}

// natLayerDump summarises the lowered document's ports: their layers in
// order, each layer's groups ("port/layer": "group dir=..."), and each
// group's rules ("port/layer/group": ruleLine).
func natLayerDump(c *Config) (layers, groups, rules map[string][]string) {
	layers, groups, rules = map[string][]string{}, map[string][]string{}, map[string][]string{}
	for _, p := range c.Ports {
		layers[p.Name] = hnsLayerNames(&p)
		for _, l := range p.Layers {
			lk := p.Name + "/" + l.Name
			for _, g := range l.Groups {
				var b strings.Builder
				b.WriteString(g.Name)
				natMatchLine(&b, g.Match)
				groups[lk] = append(groups[lk], b.String())
				for _, r := range g.Rules {
					rules[lk+"/"+g.Name] = append(rules[lk+"/"+g.Name], ruleLine(r))
				}
			}
		}
	}
	return layers, groups, rules
}

func TestHNSNATLower(t *testing.T) {
	const (
		host = "02:00:00:00:00:fe" // the uplink
		gw   = "02:00:00:00:00:99" // the underlay router
		dr   = "02:00:00:00:00:01" // natDoc's distributed router
	)
	// natDoc's rules that most cases keep.
	var (
		ovAHairpin = []string{
			"100 port-mapping-192.168.1.10-tcp-8080 dir=out proto=tcp dst=192.168.1.10 dport=8080 allow snat=192.168.1.10 srcMAC=" + dr + " dstMAC=02:00:00:00:00:1a dstIP=10.244.0.10 dstPort=80 stateful",
			"101 port-mapping-fd00:1::10-tcp-8080 dir=out proto=tcp dst=fd00:1::10 dport=8080 allow snat=fd00:1::10 srcMAC=" + dr + " dstMAC=02:00:00:00:00:1a dstIP=fd00:244::10 dstPort=80 stateful",
		}
		// ov-b has IPv4 only: it reaches the IPv4 mapping, from its own
		// mapping (its OutBoundNAT's address).
		ovBHairpin = []string{
			"100 port-mapping-192.168.1.10-tcp-8080 dir=out proto=tcp dst=192.168.1.10 dport=8080 allow snat=192.168.1.10 srcMAC=" + dr + " dstMAC=02:00:00:00:00:1a dstIP=10.244.0.10 dstPort=80 stateful",
		}
		// Connections to a NAT address reach its dynamic mappings.
		ovAMapped = []string{
			"100 hairpin-from-192.168.1.10 proto=tcp,udp,icmp dst=192.168.1.10 allow mapped snat=192.168.1.10 stateful",
			"101 hairpin-from-fd00:1::10 proto=tcp,udp,icmpv6 dst=fd00:1::10 allow mapped snat=fd00:1::10 stateful",
		}
		upMapped = []string{
			"100 mapped-IPv4 proto=tcp,udp,icmp dst=192.168.1.10 allow mapped stateful",
			"101 mapped-IPv6 proto=tcp,udp,icmpv6 dst=fd00:1::10 allow mapped stateful",
		}
		upMappings = []string{
			"100 port-mapping-192.168.1.10-tcp-8080 proto=tcp dst=192.168.1.10 dport=8080 allow srcMAC=" + dr + " dstMAC=02:00:00:00:00:1a dstIP=10.244.0.10 dstPort=80 stateful",
			"101 port-mapping-fd00:1::10-tcp-8080 proto=tcp dst=fd00:1::10 dport=8080 allow srcMAC=" + dr + " dstMAC=02:00:00:00:00:1a dstIP=fd00:244::10 dstPort=80 stateful",
		}
		snat4 = "1100 snat-to-192.168.1.10 v4 allow snat=192.168.1.10 srcMAC=" + host + " dstMAC=" + gw + " stateful"
		snat6 = "1101 snat-to-fd00:1::10 v6 allow snat=fd00:1::10 srcMAC=" + host + " dstMAC=" + gw + " stateful"
		ovB   = []string{"1000 exceptions dst=10.244.0.0/16,10.244.0.0/24,fd00:244::/64 allow", snat4}
	)
	tests := []struct {
		name   string
		base   string // natDoc when empty
		edit   func(t *testing.T, d doc)
		layers map[string][]string // port: its layers in order
		groups map[string][]string // "port/layer": its groups in order
		rules  map[string][]string // "port/layer/group": its rules in order
		pools  []vfp.NATPoolConfig
		upIPs  []netip.Addr // the uplink's addresses
	}{
		{
			name:   "overlay, dual stack with a port mapping",
			layers: map[string][]string{"ov-a": {hns.LayerNAT}, "ov-b": {hns.LayerNAT}, "uplink": {encap.LayerPARoute, hns.LayerNAT}},
			groups: map[string][]string{
				"ov-a/" + hns.LayerNAT:   {"port-mapping-hairpin", "hairpin dir=out", "outbound-nat-dual-stack dir=out"},
				"ov-b/" + hns.LayerNAT:   {"port-mapping-hairpin", "hairpin dir=out", "outbound-nat-ipv4 dir=out v4"},
				"uplink/" + hns.LayerNAT: {"port-mappings dir=out", "mappings dir=out"},
			},
			rules: map[string][]string{
				"ov-a/NAT_LAYER/port-mapping-hairpin": ovAHairpin,
				"ov-a/NAT_LAYER/hairpin":              ovAMapped,
				"ov-b/NAT_LAYER/hairpin":              ovAMapped[:1],
				"uplink/NAT_LAYER/mappings":           upMapped,
				// Exceptions, then the network's own subnets.
				"ov-a/NAT_LAYER/outbound-nat-dual-stack": {"1000 exceptions dst=10.244.0.0/16,10.96.0.0/12,10.244.0.0/24,fd00:244::/64 allow", snat4, snat6},
				"ov-b/NAT_LAYER/port-mapping-hairpin":    ovBHairpin,
				"ov-b/NAT_LAYER/outbound-nat-ipv4":       ovB,
				"uplink/NAT_LAYER/port-mappings":         upMappings,
			},
			pools: []vfp.NATPoolConfig{{IP: addr("192.168.1.10"), Reserved: reserved("tcp/8080")}, {IP: addr("fd00:1::10"), Reserved: reserved("tcp/8080")}},
			upIPs: addrs("192.168.1.10", "fd00:1::10"),
		},
		{
			name: "Exceptions and ExceptionList merged, Destinations per family",
			edit: func(t *testing.T, d doc) {
				s := natEPPolicy(d, 0, 0)
				s["Exceptions"] = []any{"10.96.0.0/12"}
				s["ExceptionList"] = []any{"10.0.0.0/8", "fd00:96::/108"}
				s["Destinations"] = []any{"203.0.113.0/24", "2001:db8::/32", "198.51.100.7"}
			},
			rules: map[string][]string{
				"ov-a/NAT_LAYER/outbound-nat-dual-stack": {
					"1000 exceptions dst=10.96.0.0/12,10.0.0.0/8,fd00:96::/108,10.244.0.0/24,fd00:244::/64 allow",
					"1100 snat-to-192.168.1.10 v4 dst=203.0.113.0/24,198.51.100.7 allow snat=192.168.1.10 srcMAC=" + host + " dstMAC=" + gw + " stateful",
					"1101 snat-to-fd00:1::10 v6 dst=2001:db8::/32 allow snat=fd00:1::10 srcMAC=" + host + " dstMAC=" + gw + " stateful",
				},
				"ov-b/NAT_LAYER/outbound-nat-ipv4": ovB,
			},
		},
		{
			name: "Destinations of IPv4 only: IPv6 not translated",
			edit: func(t *testing.T, d doc) { natEPPolicy(d, 0, 0)["Destinations"] = []any{"203.0.113.0/24"} },
			rules: map[string][]string{
				"ov-a/NAT_LAYER/outbound-nat-dual-stack": {
					"1000 exceptions dst=10.244.0.0/16,10.96.0.0/12,10.244.0.0/24,fd00:244::/64 allow",
					"1100 snat-to-192.168.1.10 v4 dst=203.0.113.0/24 allow snat=192.168.1.10 srcMAC=" + host + " dstMAC=" + gw + " stateful",
				},
			},
		},
		{
			name: "without Nat66 and port mappings: IPv4 only, one pool",
			edit: func(t *testing.T, d doc) {
				e := at(d, "Endpoints", 0)
				e["Policies"] = e["Policies"].([]any)[:1]
				delete(natEPPolicy(d, 0, 0), "Nat66")
			},
			layers: map[string][]string{"ov-a": {hns.LayerNAT}, "ov-b": {hns.LayerNAT}, "uplink": {encap.LayerPARoute, hns.LayerNAT}},
			groups: map[string][]string{
				"ov-a/" + hns.LayerNAT:   {"hairpin dir=out", "outbound-nat-ipv4 dir=out v4"},
				"ov-b/" + hns.LayerNAT:   {"hairpin dir=out", "outbound-nat-ipv4 dir=out v4"},
				"uplink/" + hns.LayerNAT: {"mappings dir=out"},
			},
			rules: map[string][]string{
				"ov-a/NAT_LAYER/outbound-nat-ipv4": {"1000 exceptions dst=10.244.0.0/16,10.96.0.0/12,10.244.0.0/24,fd00:244::/64 allow", snat4},
			},
			pools: []vfp.NATPoolConfig{{IP: addr("192.168.1.10")}},
		},
		{
			name: "VirtualIP and PortRange: the range applies to the policy's pools",
			edit: func(t *testing.T, d doc) {
				s := natEPPolicy(d, 0, 0)
				s["VirtualIP"], s["PortRange"] = "192.168.1.50", "20000-29999"
			},
			rules: map[string][]string{
				"ov-a/NAT_LAYER/outbound-nat-dual-stack": {
					"1000 exceptions dst=10.244.0.0/16,10.96.0.0/12,10.244.0.0/24,fd00:244::/64 allow",
					"1100 snat-to-192.168.1.50 v4 allow snat=192.168.1.50 srcMAC=" + host + " dstMAC=" + gw + " stateful", snat6,
				},
				"ov-b/NAT_LAYER/outbound-nat-ipv4": ovB,
				// A hairpin comes from the endpoint's own mapping: one
				// rule per such address, reaching every pool.
				"ov-a/NAT_LAYER/hairpin": {
					"100 hairpin-from-192.168.1.50 proto=tcp,udp,icmp dst=192.168.1.50,192.168.1.10 allow mapped snat=192.168.1.50 stateful",
					"101 hairpin-from-fd00:1::10 proto=tcp,udp,icmpv6 dst=fd00:1::10 allow mapped snat=fd00:1::10 stateful",
				},
				"ov-b/NAT_LAYER/hairpin": {
					"100 hairpin-from-192.168.1.10 proto=tcp,udp,icmp dst=192.168.1.50,192.168.1.10 allow mapped snat=192.168.1.10 stateful",
				},
				"uplink/NAT_LAYER/mappings": {
					"100 mapped-IPv4 proto=tcp,udp,icmp dst=192.168.1.50,192.168.1.10 allow mapped stateful",
					"101 mapped-IPv6 proto=tcp,udp,icmpv6 dst=fd00:1::10 allow mapped stateful",
				},
			},
			// Pools in order of first use.
			pools: []vfp.NATPoolConfig{
				{IP: addr("192.168.1.50"), Ports: nat.PortRange{Lo: 20000, Hi: 29999}},
				{IP: addr("fd00:1::10"), Ports: nat.PortRange{Lo: 20000, Hi: 29999}, Reserved: reserved("tcp/8080")},
				{IP: addr("192.168.1.10"), Reserved: reserved("tcp/8080")},
			},
			// The uplink answers for every NAT address.
			upIPs: addrs("192.168.1.10", "fd00:1::10", "192.168.1.50"),
		},
		{
			name:   "IPv6 VirtualIP with Nat66: IPv6 only",
			edit:   func(t *testing.T, d doc) { natEPPolicy(d, 0, 0)["VirtualIP"] = "fd00:1::50" },
			groups: map[string][]string{"ov-a/" + hns.LayerNAT: {"port-mapping-hairpin", "hairpin dir=out", "outbound-nat-ipv6 dir=out v6"}},
			rules: map[string][]string{
				"ov-a/NAT_LAYER/outbound-nat-ipv6": {
					"1000 exceptions dst=10.244.0.0/16,10.96.0.0/12,10.244.0.0/24,fd00:244::/64 allow",
					"1101 snat-to-fd00:1::50 v6 allow snat=fd00:1::50 srcMAC=" + host + " dstMAC=" + gw + " stateful",
				},
			},
			pools: []vfp.NATPoolConfig{{IP: addr("fd00:1::50")}, {IP: addr("192.168.1.10"), Reserved: reserved("tcp/8080")}, {IP: addr("fd00:1::10"), Reserved: reserved("tcp/8080")}},
		},
		{
			name: "one OutBoundNAT per family: each group sees its family only",
			edit: func(t *testing.T, d doc) {
				delete(natEPPolicy(d, 0, 0), "Nat66")
				hnsAdd(t, at(d, "Endpoints", 0), "Policies", `{"Type": "OutBoundNAT", "Settings": {"VirtualIP": "fd00:1::50", "Nat66": true, "Exceptions": ["2001:db8:1::/48"]}}`)
			},
			groups: map[string][]string{"ov-a/" + hns.LayerNAT: {"port-mapping-hairpin", "hairpin dir=out", "outbound-nat-ipv4 dir=out v4", "outbound-nat-ipv6 dir=out v6"}},
			rules: map[string][]string{
				"ov-a/NAT_LAYER/outbound-nat-ipv4": {"1000 exceptions dst=10.244.0.0/16,10.96.0.0/12,10.244.0.0/24,fd00:244::/64 allow", snat4},
				"ov-a/NAT_LAYER/outbound-nat-ipv6": {
					"1000 exceptions dst=2001:db8:1::/48,10.244.0.0/24,fd00:244::/64 allow",
					"1101 snat-to-fd00:1::50 v6 allow snat=fd00:1::50 srcMAC=" + host + " dstMAC=" + gw + " stateful",
				},
			},
			pools: []vfp.NATPoolConfig{{IP: addr("192.168.1.10"), Reserved: reserved("tcp/8080")}, {IP: addr("fd00:1::10"), Reserved: reserved("tcp/8080")}, {IP: addr("fd00:1::50")}},
		},
		{
			name: "UDP port mapping with a VIP: reserved beside the TCP one",
			edit: func(t *testing.T, d doc) {
				hnsAdd(t, at(d, "Endpoints", 1), "Policies", `{"Type": "PortMapping", "Settings": {"Protocol": 17, "InternalPort": 53, "ExternalPort": 5353, "VIP": "192.168.1.10"}}`)
			},
			rules: map[string][]string{
				"ov-b/NAT_LAYER/port-mapping-hairpin": append(slices.Clone(ovBHairpin),
					"101 port-mapping-192.168.1.10-udp-5353 dir=out proto=udp dst=192.168.1.10 dport=5353 allow snat=192.168.1.10 srcMAC="+dr+" dstMAC=02:00:00:00:00:1b dstIP=10.244.0.11 dstPort=53 stateful"),
				"uplink/NAT_LAYER/port-mappings": append(slices.Clone(upMappings),
					"102 port-mapping-192.168.1.10-udp-5353 proto=udp dst=192.168.1.10 dport=5353 allow srcMAC="+dr+" dstMAC=02:00:00:00:00:1b dstIP=10.244.0.11 dstPort=53 stateful"),
			},
			pools: []vfp.NATPoolConfig{{IP: addr("192.168.1.10"), Reserved: reserved("tcp/8080", "udp/5353")}, {IP: addr("fd00:1::10"), Reserved: reserved("tcp/8080")}},
		},
		{
			name: "overlay with a remote subnet: NAT before encapsulation",
			edit: func(t *testing.T, d doc) {
				hnsAdd(t, natUplink(d), "Neighbors", `{"IpAddress": "192.168.1.20", "MacAddress": "02:00:00:00:01:fe"}`)
				hnsAdd(t, at(d, "Networks", 0), "Policies", `{"Type": "RemoteSubnetRoute", "Settings": {"DestinationPrefix": "10.244.1.0/24",
					"IsolationId": 4096, "ProviderAddress": "192.168.1.20", "DistributedRouterMacAddress": "02:00:00:00:01:01"}}`)
			},
			layers: map[string][]string{"ov-a": {hns.LayerNAT, encap.LayerEncap}, "ov-b": {hns.LayerNAT, encap.LayerEncap}, "uplink": {encap.LayerPARoute, hns.LayerNAT}},
		},
		{
			name:   "L2Bridge: no MAC rewrite in the snat rule",
			base:   natL2Doc,
			layers: map[string][]string{"pod-a": {hns.LayerNAT, encap.LayerRoute}, "pod-b": {hns.LayerNAT}, "uplink": {hns.LayerNAT, encap.LayerMACRewrite}},
			groups: map[string][]string{
				"pod-a/" + hns.LayerNAT: {"port-mapping-hairpin", "hairpin dir=out", "outbound-nat-dual-stack dir=out"},
				"pod-b/" + hns.LayerNAT: {"port-mapping-hairpin", "hairpin dir=out", "outbound-nat-ipv4 dir=out v4"},
			},
			rules: map[string][]string{
				// Forwarded from the subnet's gateway, whose MAC
				// Uplink.Neighbors gives.
				"pod-a/NAT_LAYER/port-mapping-hairpin": {
					"100 port-mapping-192.168.1.10-udp-5353 dir=out proto=udp dst=192.168.1.10 dport=5353 allow snat=192.168.1.10 srcMAC=" + gw + " dstMAC=02:00:00:00:00:2a dstIP=192.168.1.100 dstPort=53 stateful",
				},
				"pod-a/NAT_LAYER/outbound-nat-dual-stack": {
					"1000 exceptions dst=10.96.0.0/12,192.168.1.0/24,fd00:1::/64 allow",
					"1100 snat-to-192.168.1.10 v4 allow snat=192.168.1.10 stateful",
					"1101 snat-to-fd00:1::10 v6 allow snat=fd00:1::10 stateful",
				},
				"pod-b/NAT_LAYER/outbound-nat-ipv4": {
					"1000 exceptions dst=192.168.1.0/24,fd00:1::/64 allow",
					"1100 snat-to-192.168.1.10 v4 allow snat=192.168.1.10 stateful",
				},
				"uplink/NAT_LAYER/port-mappings": {
					"100 port-mapping-192.168.1.10-udp-5353 proto=udp dst=192.168.1.10 dport=5353 allow srcMAC=" + gw + " dstMAC=02:00:00:00:00:2a dstIP=192.168.1.100 dstPort=53 stateful",
				},
			},
			pools: []vfp.NATPoolConfig{{IP: addr("192.168.1.10"), Reserved: reserved("udp/5353")}, {IP: addr("fd00:1::10")}},
			upIPs: addrs("192.168.1.10", "fd00:1::10"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var edit func(d doc)
			if tt.edit != nil {
				edit = func(d doc) { tt.edit(t, d) }
			}
			b := editJSON(t, hnsOr(tt.base, natDoc), edit)
			low := hnsLower(t, b)
			layers, groups, rules := natLayerDump(low)
			for port, want := range tt.layers {
				if got := layers[port]; !slices.Equal(got, want) {
					t.Errorf("%s: layers %v, want %v", port, got, want)
				}
			}
			for k, want := range tt.groups {
				if got := groups[k]; !slices.Equal(got, want) {
					t.Errorf("%s: groups\n  %q\nwant\n  %q", k, got, want)
				}
			}
			for k, want := range tt.rules {
				got := rules[k]
				if !slices.Equal(got, want) {
					t.Errorf("%s: rules\n  %s\nwant\n  %s", k, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
				}
			}
			if tt.pools != nil {
				if got := low.Switch.NATPools; !slices.EqualFunc(got, tt.pools, func(a, b vfp.NATPoolConfig) bool {
					return a.IP == b.IP && a.Ports == b.Ports && slices.Equal(a.Reserved, b.Reserved)
				}) {
					t.Errorf("switch.natPools = %+v, want %+v", got, tt.pools)
				}
			}
			if tt.upIPs != nil {
				if got := hnsPort(t, low, "uplink").IPs; !slices.Equal(got, tt.upIPs) {
					t.Errorf("uplink ips %v, want %v", got, tt.upIPs)
				}
			}
			// Rule priorities within a group strictly increase.
			for k, lines := range rules {
				var prev int
				for i, l := range lines {
					var p int
					fmt.Sscanf(l, "%d", &p)
					if i > 0 && p <= prev {
						t.Errorf("%s: priority %d after %d", k, p, prev)
					}
					prev = p
				}
			}
			// The lowered document is a valid VFP-level document, and a
			// switch runs it.
			out, err := json.Marshal(low)
			if err != nil {
				t.Fatal(err)
			}
			again, err := ParseConfig(out)
			if err != nil {
				t.Fatalf("ParseConfig(lowered): %v", err)
			}
			if _, err := New(again); err != nil {
				t.Errorf("New(lowered): %v", err)
			}
		})
	}
}

// sec is one second on the flow table's clock (nanoseconds).
const sec = int64(time.Second)

// natAt processes frame k arriving on port in at time now (on the flow
// table's clock) and returns the packet and its trace.
func natAt(r *ulRig, now int64, in string, k natPkt) (*dataplane.Packet, string) {
	r.t.Helper()
	port := r.sw.Port(in)
	if port == nil {
		r.t.Fatalf("no port %s", in)
	}
	tr := &dataplane.Trace{}
	r.w.Trace = tr
	p := packet(r.t, port.ID, natFrame(r.t, k))
	r.w.Process([]*dataplane.Packet{p}, now)
	return p, strings.Join(tr.Lines(), "\n")
}

// natGo processes k at time now and checks where it goes: a port name or
// "drop <reason>".
func natGo(r *ulRig, now int64, in string, k natPkt, want string) *dataplane.Packet {
	r.t.Helper()
	p, trace := natAt(r, now, in, k)
	if got := outName(r.sw, p); got != want {
		r.t.Fatalf("%s %s:%d -> %s:%d from %s: %s, want %s\ntrace:\n%s", k.proto, k.src, k.sport, k.dst, k.dport, in, got, want, trace)
	}
	return p
}

// natEnds returns the source and destination of the frame b, with their
// ports (an ICMP echo's identifier for both).
func natEnds(t *testing.T, b []byte) (src, dst netip.AddrPort) {
	t.Helper()
	pk := gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.Default)
	var s, d netip.Addr
	switch ip := pk.NetworkLayer().(type) {
	case *layers.IPv4:
		s, _ = netip.AddrFromSlice(ip.SrcIP)
		d, _ = netip.AddrFromSlice(ip.DstIP)
	case *layers.IPv6:
		s, _ = netip.AddrFromSlice(ip.SrcIP)
		d, _ = netip.AddrFromSlice(ip.DstIP)
	default:
		t.Fatalf("no IP header in\n%s", pk.Dump())
	}
	var sp, dp uint16
	switch {
	case pk.Layer(layers.LayerTypeTCP) != nil:
		l := pk.Layer(layers.LayerTypeTCP).(*layers.TCP)
		sp, dp = uint16(l.SrcPort), uint16(l.DstPort)
	case pk.Layer(layers.LayerTypeUDP) != nil:
		l := pk.Layer(layers.LayerTypeUDP).(*layers.UDP)
		sp, dp = uint16(l.SrcPort), uint16(l.DstPort)
	case pk.Layer(layers.LayerTypeICMPv4) != nil:
		sp = pk.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4).Id
		dp = sp
	case pk.Layer(layers.LayerTypeICMPv6Echo) != nil:
		sp = pk.Layer(layers.LayerTypeICMPv6Echo).(*layers.ICMPv6Echo).Identifier
		dp = sp
	}
	return netip.AddrPortFrom(s, sp), netip.AddrPortFrom(d, dp)
}

// natOut sends k from pod port in to the uplink at time now and returns the
// address and port it left with.
func natOut(r *ulRig, now int64, in string, k natPkt) netip.AddrPort {
	r.t.Helper()
	p := natGo(r, now, in, k, "uplink")
	src, _ := natEnds(r.t, p.Bytes())
	return src
}

// natReply is the peer's answer to k, sent to ext (where k left from) on
// the wire, and whether it goes back to pod port in.
func natReply(r *ulRig, now int64, k natPkt, ext netip.AddrPort, flags, want string) *dataplane.Packet {
	r.t.Helper()
	rep := natPkt{smac: natRouter, dmac: natHost, src: k.dst, sport: k.dport, dst: ext.Addr().String(), dport: ext.Port(), proto: k.proto, flags: flags}
	switch k.proto {
	case "echo":
		rep.proto, rep.sport = "echo-reply", ext.Port()
	case "udp", "tcp":
	default:
		r.t.Fatalf("no reply for %s", k.proto)
	}
	return natGo(r, now, "uplink", rep, want)
}

// natPool returns the stats of the pool of ip.
func natPool(t *testing.T, sw *Switch, ip string) nat.PoolStats {
	t.Helper()
	p := sw.NAT().Pool(netip.MustParseAddr(ip))
	if p == nil {
		t.Fatalf("no NAT pool for %s", ip)
	}
	return p.Stats()
}

// natApply applies natL2Doc or natDoc (base) with edit, decoded without
// validation as a caller holding a Config would pass it.
func natApply(t *testing.T, sw *Switch, base string, edit func(d doc)) error {
	t.Helper()
	var c Config
	if err := json.Unmarshal(editJSON(t, base, edit), &c); err != nil {
		t.Fatal(err)
	}
	return sw.Apply(&c)
}

// A TCP connection from ov-a through NAT survives rejected policies: the
// running policy, its generation and the NAT pools stay, and the
// connection's packets keep their translation on the fast path.
func TestNATApplyKeepsPolicy(t *testing.T) {
	r := ulNewRig(t, mustParse(t, natDoc))
	sw := r.sw
	syn := natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: 5000, dst: "203.0.113.5", dport: 80, proto: "tcp", flags: "S"}
	ext := natOut(r, 1*sec, "ov-a", syn)
	if want := netip.MustParseAddrPort("192.168.1.10:5000"); ext != want {
		t.Fatalf("SYN left as %s, want %s", ext, want)
	}
	natReply(r, 1*sec, syn, ext, "SA", "ov-a")

	cfg, gen, pools := sw.Config(), sw.Generation(), sw.NAT().Stats()
	lowered := func(t *testing.T) doc {
		b, err := json.Marshal(hnsLower(t, []byte(natDoc)))
		if err != nil {
			t.Fatal(err)
		}
		return jsonValue(t, string(b)).(doc)
	}
	bad := []struct {
		name    string
		edit    func(t *testing.T, d doc)
		vfp     func(t *testing.T) doc // a VFP-level document instead of natDoc
		value   func(c *Config)        // edits vfp's document as a Go value, what JSON cannot carry
		want    string
		restart bool // the error wraps ErrRestartNeeded
	}{
		{name: "IPv6 VirtualIP without Nat66", edit: func(t *testing.T, d doc) { natEPPolicy(d, 1, 0)["VirtualIP"] = "fd00:1::50" },
			want: `Endpoints[1] "ov-b".Policies[0].Settings.Nat66: VirtualIP fd00:1::50 is IPv6`},
		{name: "duplicate port mapping", edit: func(t *testing.T, d doc) {
			hnsAdd(t, at(d, "Endpoints", 1), "Policies", `{"Type": "PortMapping", "Settings": {"Protocol": 6, "InternalPort": 80, "ExternalPort": 8080}}`)
		}, want: `Endpoints[1] "ov-b".Policies[1].Settings.ExternalPort: tcp/8080 on 192.168.1.10 is mapped by`},
		{name: "conflicting PortRange", edit: func(t *testing.T, d doc) {
			natEPPolicy(d, 0, 0)["PortRange"] = "10000-10009"
			natEPPolicy(d, 1, 0)["PortRange"] = "20000-20009"
		}, want: `Endpoints[1] "ov-b".Policies[0].Settings.PortRange: 20000-20009, but`},
		{name: "no DefaultGateway", edit: func(t *testing.T, d doc) { delete(natUplink(d), "DefaultGateway") },
			want: `Endpoints[0] "ov-a".Policies[0]: translated IPv4 traffic of an Overlay endpoint`},
		{name: "endpoint on the VirtualIP", edit: func(t *testing.T, d doc) { natEPPolicy(d, 1, 0)["VirtualIP"] = "10.244.0.10" },
			want: `Endpoints[0] "ov-a".IpConfigurations[0].IpAddress: 10.244.0.10 is a NAT address`},
		{name: "switch.natPools at the HNS level", edit: func(t *testing.T, d doc) {
			at(d, "switch")["natPools"] = jsonValue(t, `[{"ip": "192.168.1.10", "ports": "1-2"}]`)
		}, want: "switch.natPools: at the HNS level"},
		{name: "new PortRange with a flow table change", edit: func(t *testing.T, d doc) {
			natEPPolicy(d, 0, 0)["PortRange"] = "40000-40009"
			at(d, "switch")["flowTable"] = doc{"maxFlows": 1000}
		}, want: "switch.flowTable: the change needs a restart", restart: true},
		{name: "VFP level: bad pool range", vfp: lowered, value: func(c *Config) { c.Switch.NATPools[0].Ports = nat.PortRange{Lo: 9, Hi: 1} },
			want: `switch.natPools[0].ports: 9-1 is empty`},
		{name: "VFP level: snat without its pool", vfp: func(t *testing.T) doc {
			d := lowered(t)
			at(d, "switch")["natPools"] = []any{natVFPPool(d, 1)}
			return d
		}, want: ".action.snat: 192.168.1.10 is not in switch.natPools"},
	}
	for i, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.vfp != nil {
				var c Config
				b, _ := json.Marshal(tt.vfp(t))
				if err := json.Unmarshal(b, &c); err != nil {
					t.Fatal(err)
				}
				if tt.value != nil {
					tt.value(&c)
				}
				err = sw.Apply(&c)
			} else {
				err = natApply(t, sw, natDoc, func(d doc) { tt.edit(t, d) })
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Apply = %v, want an error containing %q", err, tt.want)
			}
			if tt.restart != errors.Is(err, ErrRestartNeeded) {
				t.Errorf("errors.Is(%v, ErrRestartNeeded) = %v, want %v", err, !tt.restart, tt.restart)
			}
			if sw.Config() != cfg || sw.Generation() != gen {
				t.Errorf("policy changed after a rejected Apply: generation %d -> %d", gen, sw.Generation())
			}
			if now := sw.NAT().Stats(); !slices.Equal(now, pools) {
				t.Errorf("NAT pools changed after a rejected Apply:\n  %+v\nwas\n  %+v", now, pools)
			}
			// The connection goes on, translated as before, on the fast
			// path.
			now := int64(2+i) * sec
			ack := syn
			ack.flags = "A"
			p := natGo(r, now, "ov-a", ack, "uplink")
			if src, _ := natEnds(t, p.Bytes()); src != ext || p.Path != dataplane.PathFast {
				t.Errorf("ACK left as %s on path %v, want %s on the fast path", src, p.Path, ext)
			}
			back := natReply(r, now, syn, ext, "A", "ov-a")
			if _, dst := natEnds(t, back.Bytes()); dst != netip.MustParseAddrPort("10.244.0.10:5000") {
				t.Errorf("reply delivered to %s, want 10.244.0.10:5000", dst)
			}
		})
	}
	if n := sw.NAT().Bindings(); n != 1 {
		t.Errorf("NAT bindings = %d, want 1 (the connection's)", n)
	}
	// New connections are translated by the running policy.
	k := natPkt{smac: natOvB, dmac: natDR, src: "10.244.0.11", sport: 5000, dst: "203.0.113.5", dport: 80, proto: "tcp", flags: "S"}
	if got := natOut(r, 20*sec, "ov-b", k); got.Addr() != ext.Addr() || got.Port() == ext.Port() || got.Port() < 1024 {
		t.Errorf("ov-b's SYN from port 5000 left as %s, want another port of 192.168.1.10 (5000 is ov-a's)", got)
	}
	// A valid document is still taken, and the connection keeps its
	// mapping through it.
	if err := natApply(t, sw, natDoc, nil); err != nil {
		t.Fatal(err)
	}
	if sw.Generation() != gen+1 {
		t.Errorf("generation %d after a good Apply, want %d", sw.Generation(), gen+1)
	}
	ack := syn
	ack.flags = "A"
	if got := natOut(r, 21*sec, "ov-a", ack); got != ext {
		t.Errorf("after a good Apply the connection left as %s, want %s", got, ext)
	}
}

// TestNATRevalidation changes the policy in the middle of connections: a
// connection keeps its mapping while its pool's address still applies to
// it, is left untranslated (its binding held until it ends) when its
// destination becomes an exception, and ends when its address changes:
// never moved to another address mid-connection.
func TestNATRevalidation(t *testing.T) {
	podA := func(sport uint16) natPkt {
		return natPkt{smac: natL2A, dmac: natRouter, src: "192.168.1.100", sport: sport, dst: "203.0.113.5", dport: 53, proto: "udp"}
	}
	podB := func(sport uint16) natPkt {
		return natPkt{smac: natL2B, dmac: natRouter, src: "192.168.1.101", sport: sport, dst: "203.0.113.5", dport: 53, proto: "udp"}
	}
	const hour = 3600 * sec
	apply := func(t *testing.T, sw *Switch, edit func(d doc)) {
		t.Helper()
		gen := sw.Generation()
		if err := natApply(t, sw, natL2Doc, edit); err != nil {
			t.Fatal(err)
		}
		if sw.Generation() != gen+1 {
			t.Fatalf("generation %d -> %d", gen, sw.Generation())
		}
	}
	// expireAll ends every connection and checks that no binding is left.
	expireAll := func(t *testing.T, sw *Switch) {
		t.Helper()
		sw.Pipeline().FlowTable().Expire(hour)
		if n := sw.NAT().Bindings(); n != 0 {
			t.Errorf("NAT bindings after every connection ended = %d, want 0", n)
		}
	}

	t.Run("unrelated change: the connection keeps its port", func(t *testing.T) {
		r := ulNewRig(t, mustParse(t, natL2Doc))
		// pod-b holds port 5000, so that pod-a's connection from 5000 gets
		// a port of the allocator's choosing: one a fresh binding after
		// the change would not get again.
		natOut(r, sec, "pod-b", podB(5000))
		k := podA(5000)
		ext := natOut(r, sec, "pod-a", k)
		if ext.Addr() != addr("192.168.1.10") || ext.Port() == 5000 {
			t.Fatalf("pod-a left as %s, want 192.168.1.10 and a port other than 5000", ext)
		}
		natReply(r, sec, k, ext, "", "pod-a")
		allocated := natPool(t, r.sw, "192.168.1.10").Allocated

		apply(t, r.sw, func(d doc) {
			natEPPolicy(d, 1, 0)["Exceptions"] = []any{"172.31.0.0/16"}
			natEPPolicy(d, 0, 2)["DestinationPrefix"] = "172.17.0.0/16"
		})
		if got := natOut(r, 2*sec, "pod-a", k); got != ext {
			t.Errorf("after the change pod-a left as %s, want %s", got, ext)
		}
		if _, dst := natEnds(t, natReply(r, 2*sec, k, ext, "", "pod-a").Bytes()); dst != netip.MustParseAddrPort("192.168.1.100:5000") {
			t.Errorf("reply delivered to %s, want 192.168.1.100:5000", dst)
		}
		if st := natPool(t, r.sw, "192.168.1.10"); st.Allocated != allocated || st.InUse[nat.ClassUDP] != 2 {
			t.Errorf("pool allocated %d bindings (was %d), %d in use; want no new binding and 2 in use", st.Allocated, allocated, st.InUse[nat.ClassUDP])
		}
		expireAll(t, r.sw)
	})

	t.Run("destination becomes an exception: untranslated, binding released at the end", func(t *testing.T) {
		// With address-and-port-dependent filtering; see the next case
		// for the default.
		apdf := func(d doc) { natEPPolicy(d, 0, 0)["Filtering"] = "AddressAndPortDependent" }
		r := ulNewRig(t, mustParse(t, string(editJSON(t, natL2Doc, apdf))))
		k := podA(6000)
		ext := natOut(r, sec, "pod-a", k)
		if want := netip.MustParseAddrPort("192.168.1.10:6000"); ext != want {
			t.Fatalf("pod-a left as %s, want %s", ext, want)
		}
		natReply(r, sec, k, ext, "", "pod-a")

		apply(t, r.sw, func(d doc) {
			apdf(d)
			natEPPolicy(d, 0, 0)["Exceptions"] = []any{"10.96.0.0/12", "203.0.113.0/24"}
		})
		if got := natOut(r, 2*sec, "pod-a", k); got != netip.MustParseAddrPort("192.168.1.100:6000") {
			t.Errorf("after the change pod-a left as %s, want untranslated 192.168.1.100:6000", got)
		}
		// The peer now answers the pod's own address; the old mapping,
		// which the connection still holds, takes nothing new.
		natReply(r, 2*sec, k, netip.MustParseAddrPort("192.168.1.100:6000"), "", "pod-a")
		natReply(r, 2*sec, k, ext, "", "drop "+dataplane.DropNATFiltered.String())
		// The connection still holds its binding, so that the port is not
		// handed to another while the peer may still use it.
		if n := r.sw.NAT().Bindings(); n != 1 {
			t.Errorf("NAT bindings while the connection lives = %d, want 1", n)
		}
		expireAll(t, r.sw)
	})

	t.Run("destination becomes an exception, address-dependent filtering: the peer still reaches the mapping", func(t *testing.T) {
		r := ulNewRig(t, mustParse(t, natL2Doc))
		k := podA(6000)
		ext := natOut(r, sec, "pod-a", k)
		natReply(r, sec, k, ext, "", "pod-a")
		apply(t, r.sw, func(d doc) { natEPPolicy(d, 0, 0)["Exceptions"] = []any{"10.96.0.0/12", "203.0.113.0/24"} })
		if got := natOut(r, 2*sec, "pod-a", k); got != netip.MustParseAddrPort("192.168.1.100:6000") {
			t.Errorf("after the change pod-a left as %s, want untranslated 192.168.1.100:6000", got)
		}
		// The mapping lives while the connection holds it, and the peer
		// is one of its connections': a new connection from it to the
		// mapping reaches the pod (and takes the place of the old one,
		// whose key its reply direction has).
		natReply(r, 2*sec, k, ext, "", "pod-a")
		if got := natOut(r, 3*sec, "pod-a", k); got != ext {
			t.Errorf("the pod's answer left as %s, want from the mapping %s", got, ext)
		}
		expireAll(t, r.sw)
	})

	t.Run("VirtualIP changes: the connection ends; UDP starts anew on the new address, TCP is reset", func(t *testing.T) {
		r := ulNewRig(t, mustParse(t, natL2Doc))
		k := podA(7000)
		ext := natOut(r, sec, "pod-a", k)
		natReply(r, sec, k, ext, "", "pod-a")
		syn := k
		syn.proto, syn.sport, syn.dport, syn.flags = "tcp", 7010, 80, "S"
		tcpExt := natOut(r, sec, "pod-a", syn)
		natReply(r, sec, syn, tcpExt, "SA", "pod-a")
		drops := r.sw.Pipeline().Drops.Get(dataplane.DropRevalidated)

		apply(t, r.sw, func(d doc) { natEPPolicy(d, 0, 0)["VirtualIP"] = "192.168.1.50" })
		// The datagram after the change is the first of a new
		// connection, on the new address; the old mapping is released.
		if got := natOut(r, 2*sec, "pod-a", k); got != netip.MustParseAddrPort("192.168.1.50:7000") {
			t.Errorf("after the change pod-a's datagram left as %s, want 192.168.1.50:7000", got)
		}
		natReply(r, 2*sec, k, netip.MustParseAddrPort("192.168.1.50:7000"), "", "pod-a")
		natReply(r, 2*sec, k, ext, "", "drop "+dataplane.DropNoDestination.String())
		// The TCP segment after it is answered with a reset from the
		// peer's address, so the pod's socket fails at once.
		ack := syn
		ack.flags = "A"
		p := natGo(r, 2*sec, "pod-a", ack, "pod-a")
		if src, dst := natEnds(t, p.Bytes()); src != netip.MustParseAddrPort("203.0.113.5:80") || dst != netip.MustParseAddrPort("192.168.1.100:7010") {
			t.Errorf("the reset went %s -> %s, want 203.0.113.5:80 -> 192.168.1.100:7010", src, dst)
		}
		if fl := p.Bytes()[14+20+13]; fl&dataplane.TCPRst == 0 {
			t.Errorf("the answer has TCP flags %#x, want a reset", fl)
		}
		if n := r.sw.Pipeline().Drops.Get(dataplane.DropRevalidated) - drops; n != 1 {
			t.Errorf("%d packets counted as %s, want 1 (the reset segment)", n, dataplane.DropRevalidated)
		}
		natReply(r, 2*sec, syn, tcpExt, "A", "drop "+dataplane.DropNoDestination.String())
		// pod-b's policy did not change: it still translates to the host.
		if got := natOut(r, 3*sec, "pod-b", podB(7002)); got != netip.MustParseAddrPort("192.168.1.10:7002") {
			t.Errorf("pod-b left as %s, want 192.168.1.10:7002", got)
		}
		if n := r.sw.NAT().Bindings(); n != 2 {
			t.Errorf("NAT bindings = %d, want 2 (pod-a's new connection, pod-b's; the ended ones released theirs)", n)
		}
		expireAll(t, r.sw)
	})

	t.Run("VirtualIP removed from every policy: its pool retires and drains", func(t *testing.T) {
		r := ulNewRig(t, mustParse(t, natL2Doc))
		apply(t, r.sw, func(d doc) { natEPPolicy(d, 0, 0)["VirtualIP"] = "192.168.1.50" })
		k := podA(7100)
		ext := natOut(r, sec, "pod-a", k)
		if ext != netip.MustParseAddrPort("192.168.1.50:7100") {
			t.Fatalf("pod-a left as %s, want 192.168.1.50:7100", ext)
		}
		apply(t, r.sw, nil)
		if r.sw.NAT().Pool(addr("192.168.1.50")) != nil {
			t.Errorf("the pool of 192.168.1.50 is still configured")
		}
		// The retired pool drains while its connection lives (reply
		// flows of it still cached elsewhere would otherwise lead to a
		// port handed to another), and retires with it.
		if n := r.sw.NAT().Bindings(); n != 1 {
			t.Errorf("NAT bindings = %d, want 1 (the retired pool drains)", n)
		}
		if got := natOut(r, 2*sec, "pod-a", k); got != netip.MustParseAddrPort("192.168.1.10:7100") {
			t.Errorf("after the change pod-a left as %s, want a new connection from 192.168.1.10:7100", got)
		}
		expireAll(t, r.sw)
		for _, st := range r.sw.NAT().Stats() {
			if st.IP == addr("192.168.1.50") {
				t.Errorf("the retired pool of 192.168.1.50 outlived its last binding: %+v", st)
			}
		}
	})

	t.Run("snat added to a stateful connection's rule: not moved onto an unheld port", func(t *testing.T) {
		// VFP level: pod-a and pod-b share a stateful allow rule, which the
		// change gives an snat.
		twoPods := func(snat bool) func(d doc) {
			return func(d doc) {
				b, _ := json.Marshal(at(d, "ports", 0))
				pb := jsonValue(t, string(b)).(doc)
				pb["name"], pb["mac"], pb["ips"] = "pod-b", "02:00:00:00:00:0b", []any{"10.0.0.11"}
				d["ports"] = slices.Insert(d["ports"].([]any), 1, any(pb))
				if !snat {
					delete(at(natVFPRule(d), "action"), "snat")
					delete(at(d, "ports", 1, "layers", 0, "groups", 0, "rules", 0, "action"), "snat")
				}
			}
		}
		r := ulNewRig(t, mustParse(t, string(editJSON(t, natVFPDoc, twoPods(false)))))
		k := natPkt{smac: macA, dmac: natRouter, src: "10.0.0.10", sport: 6000, dst: "203.0.113.5", dport: 53, proto: "udp"}
		if got := natOut(r, sec, "pod-a", k); got != netip.MustParseAddrPort("10.0.0.10:6000") {
			t.Fatalf("before the change pod-a left as %s, want untranslated", got)
		}
		apply := func(edit func(d doc)) {
			t.Helper()
			if err := natApply(t, r.sw, natVFPDoc, edit); err != nil {
				t.Fatal(err)
			}
		}
		apply(twoPods(true))
		p, trace := natAt(r, 2*sec, "pod-a", k)
		switch got := outName(r.sw, p); got {
		case "drop " + dataplane.DropRevalidated.String():
			// Dropped rather than moved, as a translated connection whose
			// address changes is.
		case "uplink":
			// Moved onto the pool: then the connection must hold the port
			// it now leaves from.
			ext, _ := natEnds(t, p.Bytes())
			if n := r.sw.NAT().Bindings(); n != 1 {
				t.Errorf("pod-a's connection now leaves as %s, but %d NAT bindings are held, want 1 (its own)\ntrace:\n%s", ext, n, trace)
			}
			kb := k
			kb.smac, kb.src = macB, "10.0.0.11"
			if got := natOut(r, 2*sec, "pod-b", kb); got == ext {
				t.Errorf("pod-b's new connection got %s, the external endpoint pod-a's connection uses (port overloaded)", got)
			}
		default:
			t.Errorf("pod-a's connection after the change: %s, want it dropped (%s) or translated\ntrace:\n%s", got, dataplane.DropRevalidated, trace)
		}
	})

	t.Run("PortRange change: existing bindings stay, new ones use the new range", func(t *testing.T) {
		r := ulNewRig(t, mustParse(t, natL2Doc))
		k := podA(8000)
		ext := natOut(r, sec, "pod-a", k)
		if want := netip.MustParseAddrPort("192.168.1.10:8000"); ext != want {
			t.Fatalf("pod-a left as %s, want %s", ext, want)
		}
		natReply(r, sec, k, ext, "", "pod-a")

		apply(t, r.sw, func(d doc) { natEPPolicy(d, 0, 0)["PortRange"] = "20000-20099" })
		if got := natOut(r, 2*sec, "pod-a", k); got != ext {
			t.Errorf("after the change pod-a left as %s, want %s (outside the new range, kept)", got, ext)
		}
		for i, sport := range []uint16{8001, 8002, 20050} {
			got := natOut(r, 2*sec, "pod-a", podA(sport))
			if got.Port() < 20000 || got.Port() > 20099 || got.Port()&1 != sport&1 {
				t.Errorf("new connection %d from port %d left from port %d, want one of 20000-20099 of the same parity", i, sport, got.Port())
			}
			if sport == 20050 && got.Port() != 20050 {
				t.Errorf("port 20050, in the new range, not preserved: got %d", got.Port())
			}
		}
		st := natPool(t, r.sw, "192.168.1.10")
		if st.Ports != (nat.PortRange{Lo: 20000, Hi: 20099}) || st.InUse[nat.ClassUDP] != 4 || st.Capacity[nat.ClassUDP] != 100 {
			t.Errorf("pool ports %s, %d UDP bindings, capacity %d; want 20000-20099, 4 and 100", st.Ports, st.InUse[nat.ClassUDP], st.Capacity[nat.ClassUDP])
		}
		// Releasing the binding outside the range does not add a port to it.
		expireAll(t, r.sw)
		st = natPool(t, r.sw, "192.168.1.10")
		if st.InUse[nat.ClassUDP] != 0 || st.Capacity[nat.ClassUDP] != 100 {
			t.Errorf("after expiry: %d UDP bindings, capacity %d; want 0 and 100", st.InUse[nat.ClassUDP], st.Capacity[nat.ClassUDP])
		}
	})
}

// natTimeoutsDoc is natL2Doc with idle timeouts distinct enough to tell
// which one applies.
func natTimeoutsDoc(t *testing.T) *Config {
	t.Helper()
	return mustParse(t, string(editJSON(t, natL2Doc, func(d doc) {
		at(d, "switch")["flowTable"] = jsonValue(t, `{"timeouts": {"tcpEstablished": "100s", "tcpHalfOpen": "30s", "tcpTransitory": "40s",
			"tcpTimeWait": "5s", "tcpClosed": "3s", "udp": "20s", "udpUnreplied": "10s", "icmp": "7s", "other": "50s"}}`)
	})))
}

// TestNATConntrackTimeouts checks that each protocol's idle timeout, by
// connection state, frees the connection's NAT port: not at the timeout,
// one nanosecond after it.
func TestNATConntrackTimeouts(t *testing.T) {
	type step struct {
		at    int64  // seconds
		reply bool   // from the peer, else from pod-a
		flags string // TCP
	}
	est := []step{{1, false, "S"}, {2, true, "SA"}, {3, false, "A"}}
	tests := []struct {
		name    string
		proto   string // udp, tcp or echo
		src     string // pod-a's address (default its IPv4 one)
		dst     string // the peer (default 203.0.113.5)
		steps   []step
		timeout time.Duration // the one that applies after the last step
	}{
		{name: "UDP unreplied", proto: "udp", steps: []step{{at: 1}}, timeout: 10 * time.Second},
		{name: "UDP replied", proto: "udp", steps: []step{{at: 1}, {at: 2, reply: true}}, timeout: 20 * time.Second},
		{name: "UDP replied, idle from the last packet", proto: "udp", steps: []step{{at: 1}, {at: 2, reply: true}, {at: 9}}, timeout: 20 * time.Second},
		{name: "UDP over IPv6 unreplied", proto: "udp", src: "fd00:1::100", dst: "2001:db8::5", steps: []step{{at: 1}}, timeout: 10 * time.Second},
		{name: "TCP SYN unanswered", proto: "tcp", steps: []step{{1, false, "S"}}, timeout: 30 * time.Second},
		{name: "TCP SYN answered, never acknowledged", proto: "tcp", steps: []step{{1, false, "S"}, {2, true, "SA"}}, timeout: 30 * time.Second},
		{name: "TCP established", proto: "tcp", steps: est, timeout: 100 * time.Second},
		{name: "TCP FIN from the pod", proto: "tcp", steps: append(slices.Clone(est), step{4, false, "FA"}), timeout: 40 * time.Second},
		{name: "TCP FIN both ways (time-wait)", proto: "tcp",
			steps: append(slices.Clone(est), step{4, false, "FA"}, step{5, true, "FA"}, step{6, false, "A"}), timeout: 5 * time.Second},
		{name: "TCP RST from the peer", proto: "tcp", steps: append(slices.Clone(est), step{4, true, "R"}), timeout: 3 * time.Second},
		{name: "TCP RST from the pod", proto: "tcp", steps: append(slices.Clone(est), step{4, false, "R"}), timeout: 3 * time.Second},
		{name: "ICMP echo answered", proto: "echo", steps: []step{{at: 1}, {at: 2, reply: true}}, timeout: 7 * time.Second},
		{name: "ICMP echo unanswered", proto: "echo", steps: []step{{at: 1}}, timeout: 7 * time.Second},
		{name: "ICMPv6 echo answered", proto: "echo", src: "fd00:1::100", dst: "2001:db8::5", steps: []step{{at: 1}, {at: 2, reply: true}}, timeout: 7 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ulNewRig(t, natTimeoutsDoc(t))
			k := natPkt{smac: natL2A, dmac: natRouter, src: hnsOr(tt.src, "192.168.1.100"), sport: 4000, dst: hnsOr(tt.dst, "203.0.113.5"), dport: 53, proto: tt.proto}
			var ext netip.AddrPort
			for _, s := range tt.steps {
				k.flags = s.flags
				if s.reply {
					natReply(r, s.at*sec, k, ext, s.flags, "pod-a")
					continue
				}
				got := natOut(r, s.at*sec, "pod-a", k)
				if ext.IsValid() && got != ext {
					t.Fatalf("at %ds the pod's packet left as %s, earlier as %s", s.at, got, ext)
				}
				ext = got
			}
			if ext.Port() != k.sport || ext.Addr().Is4() != addr(k.src).Is4() {
				t.Fatalf("left as %s, want the host's address and port %d (preserved)", ext, k.sport)
			}
			sw := r.sw
			ft := sw.Pipeline().FlowTable()
			last := tt.steps[len(tt.steps)-1].at * sec
			deadline := last + int64(tt.timeout)
			if n := ft.Expire(deadline); n != 0 || sw.NAT().Bindings() != 1 {
				t.Errorf("at the timeout (%s idle): %d flows expired, %d bindings; want 0 and 1", tt.timeout, n, sw.NAT().Bindings())
			}
			if n := ft.Expire(deadline + 1); n != 2 || sw.NAT().Bindings() != 0 {
				t.Errorf("just after the timeout: %d flows expired, %d bindings; want 2 (both directions) and 0", n, sw.NAT().Bindings())
			}
		})
	}

	// Endpoint-independent mapping: two connections from one pod port to
	// two peers share one binding, released when the second ends.
	shared := []struct {
		name    string
		proto   string
		class   int
		timeout time.Duration
	}{
		{name: "UDP", proto: "udp", class: nat.ClassUDP, timeout: 10 * time.Second},
		{name: "TCP", proto: "tcp", class: nat.ClassTCP, timeout: 30 * time.Second}, // half-open
		{name: "ICMP echo identifier", proto: "echo", class: nat.ClassICMP, timeout: 7 * time.Second},
	}
	for _, tt := range shared {
		t.Run("shared binding "+tt.name, func(t *testing.T) {
			r := ulNewRig(t, natTimeoutsDoc(t))
			sw := r.sw
			ft := sw.Pipeline().FlowTable()
			// pod-b takes port 4000 first, so that the shared port is one
			// the allocator chose.
			natOut(r, sec, "pod-b", natPkt{smac: natL2B, dmac: natRouter, src: "192.168.1.101", sport: 4000, dst: "203.0.113.5", dport: 53, proto: tt.proto, flags: "S"})
			k1 := natPkt{smac: natL2A, dmac: natRouter, src: "192.168.1.100", sport: 4000, dst: "203.0.113.5", dport: 53, proto: tt.proto, flags: "S"}
			k2 := k1
			k2.dst = "198.51.100.7"
			ext1 := natOut(r, sec, "pod-a", k1)
			ext2 := natOut(r, 4*sec, "pod-a", k2)
			if ext1 != ext2 || ext1.Port() == 4000 {
				t.Fatalf("pod-a's connections left as %s and %s, want one mapping, not port 4000 (pod-b's)", ext1, ext2)
			}
			st := natPool(t, sw, "192.168.1.10")
			if st.InUse[tt.class] != 2 || st.Allocated != 2 {
				t.Fatalf("pool: %d bindings in use, %d allocated; want 2 and 2 (pod-b's and pod-a's shared one)", st.InUse[tt.class], st.Allocated)
			}
			tmo := int64(tt.timeout)
			for _, c := range []struct {
				at       int64
				expired  int
				bindings int
			}{
				{at: sec + tmo, expired: 0, bindings: 2},
				{at: sec + tmo + 1, expired: 4, bindings: 1}, // pod-b's and pod-a's first
				{at: 4*sec + tmo, expired: 0, bindings: 1},
				{at: 4*sec + tmo + 1, expired: 2, bindings: 0}, // pod-a's second
			} {
				if n := ft.Expire(c.at); n != c.expired || sw.NAT().Bindings() != c.bindings {
					t.Errorf("Expire(%s): %d flows expired, %d bindings; want %d and %d",
						time.Duration(c.at), n, sw.NAT().Bindings(), c.expired, c.bindings)
				}
			}
			if st := natPool(t, sw, "192.168.1.10"); st.Released != 2 || st.DoubleRelease != 0 {
				t.Errorf("pool released %d bindings (%d twice), want 2 (0)", st.Released, st.DoubleRelease)
			}
		})
	}
}

// natExhausted is a switch running natL2Doc whose pool has two UDP
// ports, both bound at 1s by pod-b's connections from 5000 and 5001 (to
// 30000 and 30001); at 2s pod-b's connection from 5002 found it full.
// Pools log to logs.
func natExhausted(t *testing.T) (r *ulRig, logs *bytes.Buffer) {
	t.Helper()
	cfg := mustParse(t, string(editJSON(t, natL2Doc, func(d doc) {
		natEPPolicy(d, 1, 0)["PortRange"] = "30000-30001"
		at(d, "switch")["flowTable"] = jsonValue(t, `{"timeouts": {"udpUnreplied": "10s"}}`)
	})))
	r = ulNewRig(t, cfg)
	// Capture the pools' warnings: a table with a logger of our own,
	// configured before any binding.
	logs = &bytes.Buffer{}
	r.sw.env = vfp.NewEnv(slog.New(slog.NewTextHandler(logs, nil)))
	if err := r.sw.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	for i, sport := range []uint16{5000, 5001} {
		if got := natOut(r, sec, "pod-b", natUDP(natL2B, "192.168.1.101", sport)); got.Port() != 30000+uint16(i) {
			t.Fatalf("connection from %d left from port %d, want %d", sport, got.Port(), 30000+i)
		}
	}
	natGo(r, 2*sec, "pod-b", natUDP(natL2B, "192.168.1.101", 5002), "drop "+dataplane.DropNATExhausted.String())
	return r, logs
}

func natUDP(mac dataplane.MAC, src string, sport uint16) natPkt {
	return natPkt{smac: mac, dmac: natRouter, src: src, sport: sport, dst: "203.0.113.5", dport: 53, proto: "udp"}
}

// TestNATPoolExhaustionLog exhausts a pool of two UDP ports: the next
// connection is dropped as nat-ports-exhausted, counted by the pipeline and
// the pool, and logged once; other protocols' ports are unaffected.
func TestNATPoolExhaustionLog(t *testing.T) {
	exhausted := "drop " + dataplane.DropNATExhausted.String()
	check := func(t *testing.T, sw *Switch, drops, events uint64, bindings int) {
		t.Helper()
		if n := sw.Pipeline().Drops.Get(dataplane.DropNATExhausted); n != drops {
			t.Errorf("pipeline counted %d %s drops, want %d", n, dataplane.DropNATExhausted, drops)
		}
		if st := natPool(t, sw, "192.168.1.10"); st.Exhausted != events {
			t.Errorf("pool counted %d exhaustion events, want %d", st.Exhausted, events)
		}
		if n := sw.NAT().Bindings(); n != bindings {
			t.Errorf("NAT bindings = %d, want %d", n, bindings)
		}
	}

	r, logs := natExhausted(t)
	sw := r.sw
	st := natPool(t, sw, "192.168.1.10")
	if st.Capacity[nat.ClassUDP] != 2 || st.InUse[nat.ClassUDP] != 2 {
		t.Fatalf("UDP capacity %d, in use %d; want 2 and 2", st.Capacity[nat.ClassUDP], st.InUse[nat.ClassUDP])
	}
	check(t, sw, 1, 1, 2)
	// The pool is pod-a's too.
	natGo(r, 2*sec, "pod-a", natUDP(natL2A, "192.168.1.100", 5003), exhausted)
	check(t, sw, 2, 2, 2)
	// TCP ports and ICMP identifiers are other classes.
	if got := natOut(r, 2*sec, "pod-b", natPkt{smac: natL2B, dmac: natRouter, src: "192.168.1.101", sport: 5000, dst: "203.0.113.5", dport: 80, proto: "tcp", flags: "S"}); got.Port() != 30000 {
		t.Errorf("TCP left from port %d, want 30000", got.Port())
	}
	if got := natOut(r, 2*sec, "pod-b", natPkt{smac: natL2B, dmac: natRouter, src: "192.168.1.101", sport: 9, dst: "203.0.113.5", proto: "echo"}); got.Port() != 9 {
		t.Errorf("echo left with identifier %d, want 9 (ICMP ignores the port range)", got.Port())
	}
	check(t, sw, 2, 2, 4)
	// One warning for the burst.
	if n := strings.Count(logs.String(), "NAT pool exhausted"); n != 1 ||
		!strings.Contains(logs.String(), "ip=192.168.1.10") || !strings.Contains(logs.String(), "proto=udp") || !strings.Contains(logs.String(), "range=30000-30001") {
		t.Errorf("%d warnings logged, want 1 naming the pool, protocol and range:\n%s", n, logs.String())
	}

	t.Run("a port freed serves a new connection", func(t *testing.T) {
		r, _ := natExhausted(t)
		// Keep 5001's connection alive; let 5000's expire.
		natOut(r, 3*sec, "pod-b", natUDP(natL2B, "192.168.1.101", 5001))
		r.sw.Pipeline().FlowTable().Expire(sec + 10*sec + 1)
		if st := natPool(t, r.sw, "192.168.1.10"); st.InUse[nat.ClassUDP] != 1 {
			t.Fatalf("%d UDP bindings after 5000's connection expired, want 1", st.InUse[nat.ClassUDP])
		}
		if got := natOut(r, 12*sec, "pod-b", natUDP(natL2B, "192.168.1.101", 5004)); got.Port() != 30000 {
			t.Errorf("new connection left from port %d, want 30000 (freed)", got.Port())
		}
	})

	t.Run("a retry of the refused connection binds once a port is free", func(t *testing.T) {
		r, _ := natExhausted(t)
		// The pod retries from 5002 while the pool is still full.
		natOut(r, 3*sec, "pod-b", natUDP(natL2B, "192.168.1.101", 5001))
		natGo(r, 3*sec, "pod-b", natUDP(natL2B, "192.168.1.101", 5002), exhausted)
		check(t, r.sw, 2, 2, 2)
		// 5000's connection ends: its port is free.
		r.sw.Pipeline().FlowTable().Expire(sec + 10*sec + 1)
		if st := natPool(t, r.sw, "192.168.1.10"); st.InUse[nat.ClassUDP] != 1 {
			t.Fatalf("%d UDP bindings after 5000's connection expired, want 1", st.InUse[nat.ClassUDP])
		}
		p, trace := natAt(r, 12*sec, "pod-b", natUDP(natL2B, "192.168.1.101", 5002))
		if got := outName(r.sw, p); got != "uplink" {
			t.Fatalf("retry from 5002 with port 30000 free: %s on path %v, want uplink\ntrace:\n%s", got, p.Path, trace)
		}
	})
}

// TestHNSNATVXLANPort: replies to a translated UDP connection reach the pod
// whatever port it was given, the VXLAN port included.
func TestHNSNATVXLANPort(t *testing.T) {
	tests := []struct {
		name string
		base string
		edit func(t *testing.T, d doc)
		port string
		pod  natPkt // from the pod, sport: the VXLAN port
	}{
		{name: "Overlay", base: natDoc, port: "ov-a",
			pod: natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: 4789, dst: "203.0.113.5", dport: 53, proto: "udp", payload: "query"}},
		{name: "Overlay with VxlanPort 8472", base: natDoc, port: "ov-a", edit: func(t *testing.T, d doc) {
			hnsAdd(t, at(d, "Networks", 0), "Policies", `{"Type": "VxlanPort", "Settings": {"Port": 8472}}`)
		}, pod: natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: 8472, dst: "203.0.113.5", dport: 53, proto: "udp", payload: "query"}},
		{name: "L2Bridge", base: natL2Doc, port: "pod-a",
			pod: natPkt{smac: natL2A, dmac: natRouter, src: "192.168.1.100", sport: 4789, dst: "203.0.113.5", dport: 53, proto: "udp", payload: "query"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var edit func(d doc)
			if tt.edit != nil {
				edit = func(d doc) { tt.edit(t, d) }
			}
			r := ulNewRig(t, mustParse(t, string(editJSON(t, tt.base, edit))))
			ext := natOut(r, sec, tt.port, tt.pod)
			rep := natPkt{smac: natRouter, dmac: natHost, src: tt.pod.dst, sport: tt.pod.dport, dst: ext.Addr().String(), dport: ext.Port(),
				proto: "udp", payload: "an answer that is no VXLAN header"}
			natGo(r, sec, "uplink", rep, tt.port)
		})
	}
}
