package vswitch

import (
	"encoding"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/encap"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vfp"
)

// hnsOverlayPolicy is a small valid HNS-level document with one Overlay
// network. Its network policies are, by index: 0 ProviderAddress,
// 1 DrMacAddress, 2 VxlanPort, 3 and 4 RemoteSubnetRoute (a /16 first, then
// a /24, so that lowering has to reorder them).
const hnsOverlayPolicy = `{
  "switch": {"name": "node-1"},
  "Uplink": {
    "Name": "uplink",
    "MacAddress": "02:00:00:00:00:fe",
    "Neighbors": [
      {"IpAddress": "192.168.1.20", "MacAddress": "02:00:00:00:01:fe"},
      {"IpAddress": "192.168.1.30", "MacAddress": "02:00:00:00:02:fe"}
    ]
  },
  "Networks": [
    {
      "Name": "flannel.4096",
      "Type": "Overlay",
      "Ipams": [
        {
          "Type": "Static",
          "Subnets": [
            {
              "IpAddressPrefix": "10.244.0.0/24",
              "Routes": [{"NextHop": "10.244.0.1", "DestinationPrefix": "0.0.0.0/0"}],
              "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]
            }
          ]
        }
      ],
      "Policies": [
        {"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.1.10"}},
        {"Type": "DrMacAddress", "Settings": {"Address": "02:00:00:00:00:01"}},
        {"Type": "VxlanPort", "Settings": {"Port": 4789}},
        {"Type": "RemoteSubnetRoute", "Settings": {
          "DestinationPrefix": "10.245.0.0/16", "IsolationId": 4096,
          "ProviderAddress": "192.168.1.30", "DistributedRouterMacAddress": "02:00:00:00:02:01"}},
        {"Type": "RemoteSubnetRoute", "Settings": {
          "DestinationPrefix": "10.244.1.0/24", "IsolationId": 4096,
          "ProviderAddress": "192.168.1.20", "DistributedRouterMacAddress": "02:00:00:00:01:01"}}
      ]
    }
  ],
  "Endpoints": [
    {
      "Name": "pod-a",
      "HostComputeNetwork": "flannel.4096",
      "MacAddress": "02:00:00:00:00:0a",
      "IpConfigurations": [{"IpAddress": "10.244.0.10", "PrefixLength": 24}]
    },
    {
      "Name": "pod-b",
      "HostComputeNetwork": "flannel.4096",
      "MacAddress": "02:00:00:00:00:0b",
      "IpConfigurations": [{"IpAddress": "10.244.0.11", "PrefixLength": 24}]
    }
  ]
}`

// hnsL2BridgePolicy is a small valid HNS-level document with one dual-stack
// L2Bridge network; pod-a has an SDNRoute (its Policies[0]).
const hnsL2BridgePolicy = `{
  "switch": {"name": "node-1"},
  "Uplink": {
    "Name": "uplink",
    "MacAddress": "02:00:00:00:00:fe",
    "Neighbors": [
      {"IpAddress": "192.168.1.1", "MacAddress": "02:00:00:00:00:99"},
      {"IpAddress": "192.168.1.30", "MacAddress": "02:00:00:00:00:30"}
    ]
  },
  "Networks": [
    {
      "Name": "cbr0",
      "Type": "L2Bridge",
      "Ipams": [
        {
          "Subnets": [
            {
              "IpAddressPrefix": "192.168.1.0/24",
              "Routes": [{"NextHop": "192.168.1.1", "DestinationPrefix": "0.0.0.0/0"}]
            },
            {
              "IpAddressPrefix": "fd00:1::/64",
              "Routes": [{"NextHop": "fd00:1::1", "DestinationPrefix": "::/0"}]
            }
          ]
        }
      ],
      "Policies": [
        {"Type": "NetAdapterName", "Settings": {"NetworkAdapterName": "uplink"}}
      ]
    }
  ],
  "Endpoints": [
    {
      "Name": "pod-a",
      "HostComputeNetwork": "cbr0",
      "MacAddress": "02:00:00:00:00:0a",
      "IpConfigurations": [
        {"IpAddress": "192.168.1.100", "PrefixLength": 24},
        {"IpAddress": "fd00:1::100", "PrefixLength": 64}
      ],
      "Policies": [
        {"Type": "SDNRoute", "Settings": {"DestinationPrefix": "172.16.0.0/16", "NextHop": "192.168.1.30"}}
      ]
    },
    {
      "Name": "pod-b",
      "HostComputeNetwork": "cbr0",
      "MacAddress": "02:00:00:00:00:0b",
      "IpConfigurations": [
        {"IpAddress": "192.168.1.101", "PrefixLength": 24},
        {"IpAddress": "fd00:1::101", "PrefixLength": 64}
      ]
    }
  ]
}`

// hnsAdd appends the JSON value s to the list o[key], creating it if need be.
func hnsAdd(t *testing.T, o doc, key, s string) {
	t.Helper()
	l, _ := o[key].([]any)
	o[key] = append(l, jsonValue(t, s))
}

// Shorthands into the base documents.
func hnsNet0(d doc) doc    { return at(d, "Networks", 0) }
func hnsSubnet0(d doc) doc { return at(d, "Networks", 0, "Ipams", 0, "Subnets", 0) }
func hnsNetPolicy(d doc, i int) doc {
	return at(d, "Networks", 0, "Policies", i, "Settings")
}
func hnsEndpoint(d doc, i int) doc { return at(d, "Endpoints", i) }
func hnsIPConfig(d doc, ep int) doc {
	return at(d, "Endpoints", ep, "IpConfigurations", 0)
}

// hnsDelPolicy removes the network policy of Networks[0] at index i.
func hnsDelPolicy(d doc, i int) {
	n := hnsNet0(d)
	n["Policies"] = slices.Delete(n["Policies"].([]any), i, i+1)
}

// hnsSecondOverlay is a second Overlay network that does not overlap
// hnsOverlayPolicy's; tests add policies to it.
const hnsSecondOverlay = `{
  "Name": "vxlan2", "Type": "Overlay",
  "Ipams": [{"Subnets": [{"IpAddressPrefix": "10.250.0.0/24",
    "Routes": [{"NextHop": "10.250.0.1", "DestinationPrefix": "0.0.0.0/0"}],
    "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 5000}}]}]}],
  "Policies": [
    {"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.1.10"}},
    {"Type": "DrMacAddress", "Settings": {"Address": "02:00:00:00:00:02"}}
  ]
}`

func TestHNSBaseDocumentsParse(t *testing.T) {
	for name, s := range map[string]string{"overlay": hnsOverlayPolicy, "l2bridge": hnsL2BridgePolicy} {
		if _, err := ParseConfig([]byte(s)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The additions the error cases build on are valid on their own.
	b := editJSON(t, hnsOverlayPolicy, func(d doc) { hnsAdd(t, d, "Networks", hnsSecondOverlay) })
	if _, err := ParseConfig(b); err != nil {
		t.Errorf("overlay with a second overlay network: %v", err)
	}
}

func TestHNSParseErrors(t *testing.T) {
	const (
		net0 = `Networks[0] "flannel.4096"`
		sub0 = net0 + `.Ipams[0].Subnets[0]`
		br0  = `Networks[0] "cbr0"`
		epA  = `Endpoints[0] "pod-a"`
		epB  = `Endpoints[1] "pod-b"`
	)
	tests := []struct {
		name string
		// base is the valid document edited (hnsOverlayPolicy when empty).
		base string
		edit func(t *testing.T, d doc)
		want string // a substring of the error: the object, the field, what is wrong
	}{
		// Document shape.
		{name: "ports and Networks", edit: func(t *testing.T, d doc) {
			hnsAdd(t, d, "ports", `{"name": "p", "mac": "02:00:00:00:00:77"}`)
		}, want: "ports: a document is written either with ports (VFP level) or with Networks and Endpoints (HNS level), not both"},
		{name: "missing Uplink", edit: func(t *testing.T, d doc) { delete(d, "Uplink") },
			want: "Uplink: an HNS-level document needs the Uplink"},
		{name: "switch gateway at the HNS level", edit: func(t *testing.T, d doc) {
			d["switch"].(doc)["gateway"] = jsonValue(t, `{"mac": "02:00:00:00:00:01", "ips": ["10.244.0.1"]}`)
		}, want: "switch.gateway: at the HNS level gateways come from the networks' subnets"},
		{name: "switch vxlanPort and a network's VxlanPort differ", edit: func(t *testing.T, d doc) {
			d["switch"].(doc)["vxlanPort"] = 8472
			hnsAdd(t, hnsNet0(d), "Policies", `{"Type": "VxlanPort", "Settings": {"Port": 4789}}`)
		}, want: "differs from switch.vxlanPort (8472): one switch decodes VXLAN on one port"},
		{name: "unknown field in a network", edit: func(t *testing.T, d doc) { hnsNet0(d)["Mode"] = "x" },
			want: `Networks[0].Mode: unknown field "Mode"`},

		// Uplink.
		{name: "uplink MAC multicast", edit: func(t *testing.T, d doc) { d["Uplink"].(doc)["MacAddress"] = "01:00:5e:00:00:01" },
			want: "Uplink.MacAddress: 01:00:5e:00:00:01 is not a unicast address"},
		{name: "uplink MTU too small", edit: func(t *testing.T, d doc) { d["Uplink"].(doc)["Mtu"] = 1000 },
			want: "Uplink.Mtu: 1000 is below 1280"},
		{name: "neighbor listed twice", edit: func(t *testing.T, d doc) {
			hnsAdd(t, d["Uplink"].(doc), "Neighbors", `{"IpAddress": "192.168.1.20", "MacAddress": "02:00:00:00:03:fe"}`)
		}, want: "Uplink.Neighbors[2].IpAddress: 192.168.1.20 is listed twice"},

		// Networks.
		{name: "duplicate network name", edit: func(t *testing.T, d doc) {
			hnsAdd(t, d, "Networks", strings.Replace(hnsSecondOverlay, `"vxlan2"`, `"flannel.4096"`, 1))
		}, want: `Networks[1] "flannel.4096".Name: another network has this name`},
		{name: "network without a name", edit: func(t *testing.T, d doc) { hnsNet0(d)["Name"] = "" },
			want: "Networks[0].Name: a network needs a name"},
		{name: "unknown network type", edit: func(t *testing.T, d doc) { hnsNet0(d)["Type"] = "ICS" },
			want: net0 + `.Type: "ICS" is not supported (want L2Bridge or Overlay)`},
		{name: "network without a type", edit: func(t *testing.T, d doc) { delete(hnsNet0(d), "Type") },
			want: net0 + ".Type: a network needs a type"},
		{name: "unknown IPAM type", edit: func(t *testing.T, d doc) { at(d, "Networks", 0, "Ipams", 0)["Type"] = "DHCP" },
			want: net0 + `.Ipams[0].Type: "DHCP" is not supported (want Static)`},
		{name: "no IPAMs", edit: func(t *testing.T, d doc) { delete(hnsNet0(d), "Ipams") },
			want: net0 + ".Ipams: a network needs at least one subnet"},
		{name: "unknown network policy type", edit: func(t *testing.T, d doc) { at(d, "Networks", 0, "Policies", 2)["Type"] = "Bogus" },
			want: net0 + `.Policies[2].Type: "Bogus" is not a network policy ufp knows (ProviderAddress, RemoteSubnetRoute, VxlanPort, DrMacAddress, NetAdapterName, NetworkACL)`},
		{name: "network policy without a type", edit: func(t *testing.T, d doc) { at(d, "Networks", 0, "Policies", 2)["Type"] = "" },
			want: net0 + ".Policies[2].Type: a policy needs a type"},
		{name: "HostRoute", base: hnsL2BridgePolicy, edit: func(t *testing.T, d doc) {
			hnsAdd(t, hnsNet0(d), "Policies", `{"Type": "HostRoute", "Settings": {}}`)
		}, want: br0 + ".Policies[1]: HostRoute needs the host's own vNIC on the switch: set Uplink.HostPort"},
		{name: "NetAdapterName not the uplink", base: hnsL2BridgePolicy, edit: func(t *testing.T, d doc) {
			hnsNetPolicy(d, 0)["NetworkAdapterName"] = "eth1"
		}, want: br0 + `.Policies[0].Settings.NetworkAdapterName: "eth1" is not the uplink "uplink"`},

		// Subnets.
		{name: "subnet prefix with host bits", edit: func(t *testing.T, d doc) { hnsSubnet0(d)["IpAddressPrefix"] = "10.244.0.1/24" },
			want: sub0 + ".IpAddressPrefix: 10.244.0.1/24 has host bits set (did you mean 10.244.0.0/24?)"},
		{name: "subnet prefix not a prefix", edit: func(t *testing.T, d doc) { hnsSubnet0(d)["IpAddressPrefix"] = "10.244.0.0" },
			want: sub0 + `.IpAddressPrefix: "10.244.0.0" is not an IP prefix`},
		{name: "non-default subnet route", edit: func(t *testing.T, d doc) {
			at(hnsSubnet0(d), "Routes", 0)["DestinationPrefix"] = "10.0.0.0/8"
		}, want: sub0 + `.Routes[0].DestinationPrefix: "10.0.0.0/8": only the default route (0.0.0.0/0 or ::/0) is taken from a subnet; route other prefixes with SDNRoute`},
		{name: "gateway outside the subnet", edit: func(t *testing.T, d doc) { at(hnsSubnet0(d), "Routes", 0)["NextHop"] = "10.244.9.1" },
			want: sub0 + ".Routes[0].NextHop: the gateway 10.244.9.1 is not in the subnet 10.244.0.0/24"},
		{name: "IPv6 default route in an IPv4 subnet", edit: func(t *testing.T, d doc) {
			at(hnsSubnet0(d), "Routes", 0)["DestinationPrefix"] = "::/0"
		}, want: sub0 + ".Routes[0].NextHop: the gateway 10.244.0.1 is not in the subnet 10.244.0.0/24"},
		{name: "two default routes", edit: func(t *testing.T, d doc) {
			hnsAdd(t, hnsSubnet0(d), "Routes", `{"NextHop": "10.244.0.2", "DestinationPrefix": "0.0.0.0/0"}`)
		}, want: sub0 + ".Routes[1]: the subnet has a default route already"},
		{name: "overlapping subnets in one network", edit: func(t *testing.T, d doc) {
			hnsAdd(t, at(d, "Networks", 0, "Ipams", 0), "Subnets",
				`{"IpAddressPrefix": "10.244.0.128/25", "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]}`)
		}, want: net0 + " subnet 10.244.0.128/25: overlaps " + net0 + " subnet 10.244.0.0/24"},
		{name: "overlapping subnets in two IPAMs", edit: func(t *testing.T, d doc) {
			hnsAdd(t, hnsNet0(d), "Ipams",
				`{"Subnets": [{"IpAddressPrefix": "10.244.0.0/16", "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]}]}`)
		}, want: net0 + " subnet 10.244.0.0/16: overlaps " + net0 + " subnet 10.244.0.0/24"},
		{name: "overlapping subnets across networks", edit: func(t *testing.T, d doc) {
			hnsAdd(t, d, "Networks", `{"Name": "cbr0", "Type": "L2Bridge", "Ipams": [{"Subnets": [{"IpAddressPrefix": "10.244.0.0/16"}]}]}`)
		}, want: `Networks[1] "cbr0" subnet 10.244.0.0/16: overlaps ` + net0 + " subnet 10.244.0.0/24"},
		{name: "VSID on an L2Bridge subnet", base: hnsL2BridgePolicy, edit: func(t *testing.T, d doc) {
			hnsAdd(t, at(d, "Networks", 0, "Ipams", 0, "Subnets", 0), "Policies", `{"Type": "VSID", "Settings": {"IsolationId": 7}}`)
		}, want: br0 + ".Ipams[0].Subnets[0].Policies[0]: VSID applies to subnets of Overlay networks"},
		{name: "unknown subnet policy", edit: func(t *testing.T, d doc) { at(hnsSubnet0(d), "Policies", 0)["Type"] = "ACL" },
			want: sub0 + `.Policies[0].Type: "ACL" is not a subnet policy ufp knows (VSID)`},

		// VNIs.
		{name: "VSID 0", edit: func(t *testing.T, d doc) { at(hnsSubnet0(d), "Policies", 0, "Settings")["IsolationId"] = 0 },
			want: sub0 + ".Policies[0].Settings.IsolationId: 0 is out of range (a VNI is 1 to 16777215)"},
		{name: "VSID 1<<24", edit: func(t *testing.T, d doc) { at(hnsSubnet0(d), "Policies", 0, "Settings")["IsolationId"] = 1 << 24 },
			want: sub0 + ".Policies[0].Settings.IsolationId: 16777216 is out of range (a VNI is 1 to 16777215)"},
		{name: "VSID without settings", edit: func(t *testing.T, d doc) { delete(at(hnsSubnet0(d), "Policies", 0), "Settings") },
			want: sub0 + ".Policies[0].Settings.IsolationId: 0 is out of range"},
		{name: "remote route IsolationId 0", edit: func(t *testing.T, d doc) { hnsNetPolicy(d, 3)["IsolationId"] = 0 },
			want: net0 + ".Policies[3].Settings.IsolationId: 0 is out of range (a VNI is 1 to 16777215)"},
		{name: "remote route IsolationId 1<<24", edit: func(t *testing.T, d doc) { hnsNetPolicy(d, 4)["IsolationId"] = 1 << 24 },
			want: net0 + ".Policies[4].Settings.IsolationId: 16777216 is out of range (a VNI is 1 to 16777215)"},
		{name: "remote route IsolationId beyond uint32", edit: func(t *testing.T, d doc) { hnsNetPolicy(d, 4)["IsolationId"] = 1 << 32 },
			want: net0 + ".Policies[4].Settings.IsolationId: want an integer from 0 to 4294967295, got 4294967296"},

		// Overlay requirements.
		{name: "overlay without ProviderAddress", edit: func(t *testing.T, d doc) { hnsDelPolicy(d, 0) },
			want: net0 + ".Policies: an Overlay network needs a ProviderAddress policy"},
		{name: "overlay without DrMacAddress", edit: func(t *testing.T, d doc) { hnsDelPolicy(d, 1) },
			want: net0 + ".Policies: an Overlay network needs a DrMacAddress policy"},
		{name: "overlay subnet without VSID", edit: func(t *testing.T, d doc) { delete(hnsSubnet0(d), "Policies") },
			want: net0 + ": subnet 10.244.0.0/24 of an Overlay network needs a VSID policy (its VNI)"},
		{name: "two IPv4 provider addresses", edit: func(t *testing.T, d doc) {
			hnsAdd(t, hnsNet0(d), "Policies", `{"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.1.11"}}`)
		}, want: net0 + ".Policies[5].Settings.ProviderAddress: the network has the IPv4 provider address 192.168.1.10 already"},
		{name: "ProviderAddress on L2Bridge", base: hnsL2BridgePolicy, edit: func(t *testing.T, d doc) {
			hnsAdd(t, hnsNet0(d), "Policies", `{"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.1.10"}}`)
		}, want: br0 + ".Policies[1]: ProviderAddress applies to Overlay networks"},
		{name: "DrMacAddress equal to the uplink MAC", edit: func(t *testing.T, d doc) { hnsNetPolicy(d, 1)["Address"] = "02:00:00:00:00:fe" },
			want: net0 + ".Policies[1].Settings.Address: 02:00:00:00:00:fe is the host's own MAC (Uplink.MacAddress)"},
		{name: "two DrMacAddresses", edit: func(t *testing.T, d doc) {
			hnsAdd(t, hnsNet0(d), "Policies", `{"Type": "DrMacAddress", "Settings": {"Address": "02:00:00:00:00:03"}}`)
		}, want: net0 + ".Policies[5]: the network has a DrMacAddress already"},
		{name: "VxlanPort 0", edit: func(t *testing.T, d doc) { hnsNetPolicy(d, 2)["Port"] = 0 },
			want: net0 + ".Policies[2].Settings.Port: 0 is not a UDP port"},
		{name: "VxlanPort disagrees between two overlay networks", edit: func(t *testing.T, d doc) {
			hnsAdd(t, d, "Networks", hnsSecondOverlay)
			hnsAdd(t, at(d, "Networks", 1), "Policies", `{"Type": "VxlanPort", "Settings": {"Port": 8472}}`)
		}, want: `Networks[1] "vxlan2".Policies[2].Settings.Port: 8472 differs from ` + net0 + ".Policies[2].Settings.Port (4789): one switch decodes VXLAN on one port"},
		{name: "VxlanPort on L2Bridge", base: hnsL2BridgePolicy, edit: func(t *testing.T, d doc) {
			hnsAdd(t, hnsNet0(d), "Policies", `{"Type": "VxlanPort", "Settings": {"Port": 4789}}`)
		}, want: br0 + ".Policies[1]: VxlanPort applies to Overlay networks"},

		// Remote subnet routes.
		{name: "remote route overlaps a local subnet", edit: func(t *testing.T, d doc) { hnsNetPolicy(d, 4)["DestinationPrefix"] = "10.244.0.0/16" },
			want: net0 + ".Policies[4].Settings.DestinationPrefix: 10.244.0.0/16 overlaps " + net0 + " subnet 10.244.0.0/24"},
		{name: "remote route overlaps another network's subnet", edit: func(t *testing.T, d doc) {
			hnsAdd(t, d, "Networks", `{"Name": "cbr0", "Type": "L2Bridge", "Ipams": [{"Subnets": [{"IpAddressPrefix": "10.245.7.0/24"}]}]}`)
		}, want: net0 + `.Policies[3].Settings.DestinationPrefix: 10.245.0.0/16 overlaps Networks[1] "cbr0" subnet 10.245.7.0/24`},
		{name: "two remote routes overlap", edit: func(t *testing.T, d doc) { hnsNetPolicy(d, 4)["DestinationPrefix"] = "10.245.1.0/24" },
			want: net0 + ".Policies[4].Settings.DestinationPrefix: 10.245.1.0/24 overlaps 10.245.0.0/16 of " + net0 + ".Policies[3].Settings"},
		{name: "two remote routes with the same prefix", edit: func(t *testing.T, d doc) { hnsNetPolicy(d, 4)["DestinationPrefix"] = "10.245.0.0/16" },
			want: net0 + ".Policies[4].Settings.DestinationPrefix: 10.245.0.0/16 overlaps 10.245.0.0/16 of " + net0 + ".Policies[3].Settings"},
		{name: "remote route prefix with host bits", edit: func(t *testing.T, d doc) { hnsNetPolicy(d, 4)["DestinationPrefix"] = "10.244.1.1/24" },
			want: net0 + ".Policies[4].Settings.DestinationPrefix: 10.244.1.1/24 has host bits set"},
		{name: "remote provider address has no neighbor MAC", edit: func(t *testing.T, d doc) { hnsNetPolicy(d, 4)["ProviderAddress"] = "192.168.1.40" },
			want: net0 + ".Policies[4].Settings.ProviderAddress: no MAC is known for 192.168.1.40: list it (or the router toward it) in Uplink.Neighbors"},
		{name: "IPv6 remote provider address without a local IPv6 one", edit: func(t *testing.T, d doc) {
			hnsAdd(t, d["Uplink"].(doc), "Neighbors", `{"IpAddress": "fd00:1::20", "MacAddress": "02:00:00:00:01:fe"}`)
			hnsNetPolicy(d, 4)["ProviderAddress"] = "fd00:1::20"
		}, want: net0 + ".Policies[4].Settings.ProviderAddress: fd00:1::20 is IPv6, but the network has no IPv6 ProviderAddress to send from"},
		{name: "remote provider address is the local one", edit: func(t *testing.T, d doc) { hnsNetPolicy(d, 4)["ProviderAddress"] = "192.168.1.10" },
			want: net0 + ".Policies[4].Settings.ProviderAddress: 192.168.1.10 is this host's own provider address"},
		{name: "remote router MAC missing", edit: func(t *testing.T, d doc) { delete(hnsNetPolicy(d, 4), "DistributedRouterMacAddress") },
			want: net0 + ".Policies[4].Settings.DistributedRouterMacAddress: a MAC address is required"},
		{name: "RemoteSubnetRoute on L2Bridge", base: hnsL2BridgePolicy, edit: func(t *testing.T, d doc) {
			hnsAdd(t, hnsNet0(d), "Policies", `{"Type": "RemoteSubnetRoute", "Settings": {"DestinationPrefix": "10.1.0.0/16",
				"IsolationId": 7, "ProviderAddress": "192.168.1.30", "DistributedRouterMacAddress": "02:00:00:00:01:01"}}`)
		}, want: br0 + ".Policies[1]: RemoteSubnetRoute applies to Overlay networks"},

		// Settings decoding.
		{name: "unknown field in network policy Settings", edit: func(t *testing.T, d doc) { hnsNetPolicy(d, 1)["Addr"] = "x" },
			want: net0 + `.Policies[1].Settings.Addr: unknown field "Addr"`},
		{name: "unknown field in RemoteSubnetRoute Settings", edit: func(t *testing.T, d doc) { hnsNetPolicy(d, 3)["VSID"] = 4096 },
			want: net0 + `.Policies[3].Settings.VSID: unknown field "VSID"`},
		{name: "unknown field in subnet policy Settings", edit: func(t *testing.T, d doc) {
			at(hnsSubnet0(d), "Policies", 0, "Settings")["Vni"] = 1
		}, want: sub0 + `.Policies[0].Settings.Vni: unknown field "Vni"`},
		{name: "unknown field in endpoint policy Settings", base: hnsL2BridgePolicy, edit: func(t *testing.T, d doc) {
			at(d, "Endpoints", 0, "Policies", 0, "Settings")["Metric"] = 5
		}, want: epA + `.Policies[0].Settings.Metric: unknown field "Metric"`},
		{name: "string in a numeric setting", edit: func(t *testing.T, d doc) { hnsNetPolicy(d, 3)["IsolationId"] = "4096" },
			want: net0 + `.Policies[3].Settings.IsolationId: want a number, got "4096"`},
		{name: "number in a string setting", edit: func(t *testing.T, d doc) { hnsNetPolicy(d, 0)["ProviderAddress"] = 7 },
			want: net0 + ".Policies[0].Settings.ProviderAddress: want a string, got the number 7"},
		{name: "string in a bool setting", base: hnsL2BridgePolicy, edit: func(t *testing.T, d doc) {
			at(d, "Endpoints", 0, "Policies", 0, "Settings")["NeedEncap"] = "false"
		}, want: epA + `.Policies[0].Settings.NeedEncap: want true or false, got "false"`},
		{name: "port out of range in Settings", edit: func(t *testing.T, d doc) { hnsNetPolicy(d, 2)["Port"] = 70000 },
			want: net0 + ".Policies[2].Settings.Port: want an integer from 0 to 65535, got 70000"},
		{name: "Settings is a list", edit: func(t *testing.T, d doc) { at(d, "Networks", 0, "Policies", 2)["Settings"] = []any{4789} },
			want: net0 + ".Policies[2].Settings: want an object, got a list"},
		{name: "Settings is a string", edit: func(t *testing.T, d doc) { at(d, "Networks", 0, "Policies", 0)["Settings"] = "192.168.1.10" },
			want: net0 + `.Policies[0].Settings: want an object, got "192.168.1.10"`},

		// Endpoints.
		{name: "duplicate endpoint name", edit: func(t *testing.T, d doc) { hnsEndpoint(d, 1)["Name"] = "pod-a" },
			want: `Endpoints[1] "pod-a".Name: another endpoint has this name`},
		{name: "endpoint named as the uplink", edit: func(t *testing.T, d doc) { hnsEndpoint(d, 1)["Name"] = "uplink" },
			want: `Endpoints[1] "uplink".Name: the uplink has this name`},
		{name: "endpoint without a name", edit: func(t *testing.T, d doc) { hnsEndpoint(d, 1)["Name"] = "" },
			want: "Endpoints[1].Name: an endpoint needs a name"},
		{name: "unknown HostComputeNetwork", edit: func(t *testing.T, d doc) { hnsEndpoint(d, 1)["HostComputeNetwork"] = "flannel.4097" },
			want: epB + `.HostComputeNetwork: no network is named "flannel.4097"`},
		{name: "endpoint IP outside the subnets", edit: func(t *testing.T, d doc) { hnsIPConfig(d, 1)["IpAddress"] = "10.9.0.11" },
			want: epB + `.IpConfigurations[0].IpAddress: 10.9.0.11 is outside network "flannel.4096"'s subnets (10.244.0.0/24)`},
		{name: "endpoint IP in a remote subnet", edit: func(t *testing.T, d doc) { hnsIPConfig(d, 1)["IpAddress"] = "10.244.1.11" },
			want: epB + `.IpConfigurations[0].IpAddress: 10.244.1.11 is outside network "flannel.4096"'s subnets`},
		{name: "endpoint IP is the gateway", edit: func(t *testing.T, d doc) { hnsIPConfig(d, 1)["IpAddress"] = "10.244.0.1" },
			want: epB + ".IpConfigurations[0].IpAddress: 10.244.0.1 is the subnet's own, broadcast or gateway address"},
		{name: "endpoint IP is the IPv6 gateway", base: hnsL2BridgePolicy, edit: func(t *testing.T, d doc) {
			at(d, "Endpoints", 1, "IpConfigurations", 1)["IpAddress"] = "fd00:1::1"
		}, want: epB + ".IpConfigurations[1].IpAddress: fd00:1::1 is the subnet's own, broadcast or gateway address"},
		{name: "endpoint IP is the subnet address", edit: func(t *testing.T, d doc) { hnsIPConfig(d, 1)["IpAddress"] = "10.244.0.0" },
			want: epB + ".IpConfigurations[0].IpAddress: 10.244.0.0 is the subnet's own, broadcast or gateway address"},
		{name: "endpoint IP not an address", edit: func(t *testing.T, d doc) { hnsIPConfig(d, 1)["IpAddress"] = "10.244.0.11/24" },
			want: epB + `.IpConfigurations[0].IpAddress: "10.244.0.11/24" is not an IP address`},
		{name: "wrong PrefixLength", edit: func(t *testing.T, d doc) { hnsIPConfig(d, 1)["PrefixLength"] = 16 },
			want: epB + ".IpConfigurations[0].PrefixLength: 16, but the subnet 10.244.0.0/24 is a /24"},
		{name: "wrong IPv6 PrefixLength", base: hnsL2BridgePolicy, edit: func(t *testing.T, d doc) {
			at(d, "Endpoints", 0, "IpConfigurations", 1)["PrefixLength"] = 24
		}, want: epA + ".IpConfigurations[1].PrefixLength: 24, but the subnet fd00:1::/64 is a /64"},
		{name: "duplicate endpoint IP", edit: func(t *testing.T, d doc) { hnsIPConfig(d, 1)["IpAddress"] = "10.244.0.10" },
			want: epB + `.IpConfigurations[0].IpAddress: 10.244.0.10 is already used by ` + epA},
		{name: "endpoint without addresses", edit: func(t *testing.T, d doc) { delete(hnsEndpoint(d, 1), "IpConfigurations") },
			want: epB + ".IpConfigurations: an endpoint needs at least one address"},
		{name: "duplicate endpoint MAC", edit: func(t *testing.T, d doc) { hnsEndpoint(d, 1)["MacAddress"] = "02:00:00:00:00:0A" },
			want: epB + ".MacAddress: 02:00:00:00:00:0a is already used by " + epA},
		{name: "endpoint MAC is the uplink's", edit: func(t *testing.T, d doc) { hnsEndpoint(d, 1)["MacAddress"] = "02:00:00:00:00:fe" },
			want: epB + ".MacAddress: 02:00:00:00:00:fe is already used by the uplink (Uplink.MacAddress)"},
		{name: "endpoint MAC is the DrMacAddress", edit: func(t *testing.T, d doc) { hnsEndpoint(d, 1)["MacAddress"] = "02:00:00:00:00:01" },
			want: epB + ".MacAddress: 02:00:00:00:00:01 is already used by " + net0 + "'s DrMacAddress"},
		{name: "endpoint MAC is another network's DrMacAddress", edit: func(t *testing.T, d doc) {
			hnsAdd(t, d, "Networks", hnsSecondOverlay)
			hnsEndpoint(d, 1)["MacAddress"] = "02:00:00:00:00:02"
		}, want: epB + `.MacAddress: 02:00:00:00:00:02 is already used by Networks[1] "vxlan2"'s DrMacAddress`},
		{name: "endpoint MAC multicast", edit: func(t *testing.T, d doc) { hnsEndpoint(d, 1)["MacAddress"] = "ff:ff:ff:ff:ff:ff" },
			want: epB + ".MacAddress: ff:ff:ff:ff:ff:ff is not a unicast address"},
		{name: "endpoint MAC malformed", edit: func(t *testing.T, d doc) { hnsEndpoint(d, 1)["MacAddress"] = "02-00-00-00-00" },
			want: epB + `.MacAddress: "02-00-00-00-00" is not a MAC address`},
		{name: "unknown endpoint policy type", edit: func(t *testing.T, d doc) {
			hnsAdd(t, hnsEndpoint(d, 0), "Policies", `{"Type": "QOS", "Settings": {}}`)
		}, want: epA + `.Policies[0].Type: "QOS" is not an endpoint policy ufp knows (SDNRoute, EncapOverhead, OutBoundNAT, PortMapping, ACL)`},
		{name: "unknown field in an endpoint", edit: func(t *testing.T, d doc) { hnsEndpoint(d, 0)["VirtualNetwork"] = "x" },
			want: `Endpoints[0].VirtualNetwork: unknown field "VirtualNetwork"`},

		// EncapOverhead.
		{name: "EncapOverhead below IPv4 VXLAN", edit: func(t *testing.T, d doc) {
			hnsAdd(t, hnsEndpoint(d, 0), "Policies", `{"Type": "EncapOverhead", "Settings": {"Overhead": 40}}`)
		}, want: epA + ": EncapOverhead 40 is less than the 50 bytes VXLAN adds toward the network's provider addresses"},
		{name: "EncapOverhead below IPv6 VXLAN", edit: func(t *testing.T, d doc) {
			hnsAdd(t, hnsNet0(d), "Policies", `{"Type": "ProviderAddress", "Settings": {"ProviderAddress": "fd00:1::10"}}`)
			hnsAdd(t, hnsEndpoint(d, 0), "Policies", `{"Type": "EncapOverhead", "Settings": {"Overhead": 50}}`)
		}, want: epA + ": EncapOverhead 50 is less than the 70 bytes"},
		{name: "EncapOverhead leaves an MTU below 1280", edit: func(t *testing.T, d doc) {
			hnsAdd(t, hnsEndpoint(d, 0), "Policies", `{"Type": "EncapOverhead", "Settings": {"Overhead": 300}}`)
		}, want: epA + ".Policies[0].Settings.Overhead: 300 leaves the endpoint an MTU of 1200, below 1280"},
		{name: "EncapOverhead on L2Bridge", base: hnsL2BridgePolicy, edit: func(t *testing.T, d doc) {
			hnsAdd(t, hnsEndpoint(d, 1), "Policies", `{"Type": "EncapOverhead", "Settings": {"Overhead": 50}}`)
		}, want: epB + ".Policies[0]: EncapOverhead applies to endpoints of Overlay networks"},

		// SDNRoute.
		{name: "SDNRoute NeedEncap on L2Bridge", base: hnsL2BridgePolicy, edit: func(t *testing.T, d doc) {
			at(d, "Endpoints", 0, "Policies", 0, "Settings")["NeedEncap"] = true
		}, want: epA + ".Policies[0].Settings.NeedEncap: only endpoints of Overlay networks encapsulate"},
		{name: "SDNRoute without NeedEncap on Overlay", edit: func(t *testing.T, d doc) {
			hnsAdd(t, hnsEndpoint(d, 0), "Policies", `{"Type": "SDNRoute", "Settings": {"DestinationPrefix": "10.246.0.0/16", "NextHop": "192.168.1.20"}}`)
		}, want: epA + ".Policies[0].Settings.NeedEncap: an Overlay endpoint's routes must be encapsulated (set NeedEncap)"},
		{name: "SDNRoute NeedEncap to an unknown provider address", edit: func(t *testing.T, d doc) {
			hnsAdd(t, hnsEndpoint(d, 0), "Policies", `{"Type": "SDNRoute", "Settings": {"DestinationPrefix": "10.246.0.0/16", "NextHop": "192.168.1.99", "NeedEncap": true}}`)
		}, want: epA + ".Policies[0].Settings.NextHop: 192.168.1.99 is no RemoteSubnetRoute's ProviderAddress"},
		{name: "SDNRoute NeedEncap to the own provider address", edit: func(t *testing.T, d doc) {
			hnsAdd(t, hnsEndpoint(d, 0), "Policies", `{"Type": "SDNRoute", "Settings": {"DestinationPrefix": "10.246.0.0/16", "NextHop": "192.168.1.10", "NeedEncap": true}}`)
		}, want: epA + ".Policies[0].Settings.NextHop: 192.168.1.10 is this host's own provider address"},
		{name: "SDNRoute next hop without a MAC", base: hnsL2BridgePolicy, edit: func(t *testing.T, d doc) {
			at(d, "Endpoints", 0, "Policies", 0, "Settings")["NextHop"] = "192.168.1.31"
		}, want: epA + ".Policies[0].Settings.NextHop: no MAC is known for 192.168.1.31: list it in Uplink.Neighbors"},
		{name: "SDNRoute prefix with host bits", base: hnsL2BridgePolicy, edit: func(t *testing.T, d doc) {
			at(d, "Endpoints", 0, "Policies", 0, "Settings")["DestinationPrefix"] = "172.16.0.1/16"
		}, want: epA + ".Policies[0].Settings.DestinationPrefix: 172.16.0.1/16 has host bits set"},
		{name: "SDNRoute of a family the endpoint lacks", base: hnsL2BridgePolicy, edit: func(t *testing.T, d doc) {
			e := hnsEndpoint(d, 0)
			e["IpConfigurations"] = e["IpConfigurations"].([]any)[:1]
			hnsAdd(t, e, "Policies", `{"Type": "SDNRoute", "Settings": {"DestinationPrefix": "fd00:9::/64", "NextHop": "192.168.1.30"}}`)
		}, want: epA + ".Policies[1].Settings.DestinationPrefix: the endpoint has no IPv6 address to send to fd00:9::/64 from"},
		{name: "SDNRoute prefix twice", base: hnsL2BridgePolicy, edit: func(t *testing.T, d doc) {
			hnsAdd(t, hnsEndpoint(d, 0), "Policies", `{"Type": "SDNRoute", "Settings": {"DestinationPrefix": "172.16.0.0/16", "NextHop": "192.168.1.1"}}`)
		}, want: epA + ".Policies[1].Settings.DestinationPrefix: 172.16.0.0/16 is routed by " + epA + ".Policies[0].Settings already"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := tt.base
			if base == "" {
				base = hnsOverlayPolicy
			}
			b := editJSON(t, base, func(d doc) { tt.edit(t, d) })
			hnsWantRejected(t, b, tt.want)
		})
	}
}

// hnsWantRejected checks that ParseConfig rejects document b with an
// error containing want, an error of the input, not of its lowering: if
// b lowers, its lowered form compiles (lowersCompiles).
func hnsWantRejected(t *testing.T, b []byte, want string) {
	t.Helper()
	c, err := ParseConfig(b)
	if err == nil {
		t.Fatalf("ParseConfig accepted the document (%d ports after lowering), want an error containing %q\n%s", hnsPortCount(c), want, b)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("ParseConfig error\n  %v\nwant it to contain\n  %s", err, want)
	}
	lowersCompiles(t, b)
}

// texts writes vs as a policy file has them.
func texts[T encoding.TextMarshaler](vs []T) []string {
	var out []string
	for _, v := range vs {
		b, err := v.MarshalText()
		if err != nil {
			panic(err)
		}
		out = append(out, string(b))
	}
	return out
}

func hnsPortCount(c *Config) int {
	low, err := c.Lower()
	if err != nil {
		return -1
	}
	return len(low.Ports)
}

// TestHNSApplyInvalidKeepsPolicy checks that a switch running an HNS-level
// policy keeps it when it is given invalid HNS-level documents. The
// documents are decoded without validation, as a caller holding a Config
// value would pass them.
func TestHNSApplyInvalidKeepsPolicy(t *testing.T) {
	good, err := ParseConfig([]byte(hnsOverlayPolicy))
	if err != nil {
		t.Fatal(err)
	}
	sw, err := New(good)
	if err != nil {
		t.Fatal(err)
	}
	cfg, ports, gen := sw.Config(), slices.Clone(sw.Ports()), sw.Generation()
	if cfg != good {
		t.Fatalf("Config() is not the document the switch was created with")
	}
	bad := []struct {
		name string
		edit func(t *testing.T, d doc)
		want string
	}{
		{"duplicate endpoint IP", func(t *testing.T, d doc) { hnsIPConfig(d, 1)["IpAddress"] = "10.244.0.10" },
			`Endpoints[1] "pod-b".IpConfigurations[0].IpAddress: 10.244.0.10 is already used`},
		{"remote route overlaps a local subnet", func(t *testing.T, d doc) { hnsNetPolicy(d, 4)["DestinationPrefix"] = "10.244.0.0/23" },
			`Networks[0] "flannel.4096".Policies[4].Settings.DestinationPrefix: 10.244.0.0/23 overlaps`},
		{"missing Uplink", func(t *testing.T, d doc) { delete(d, "Uplink") }, "Uplink: an HNS-level document needs the Uplink"},
		{"VNI out of range", func(t *testing.T, d doc) { hnsNetPolicy(d, 3)["IsolationId"] = 1 << 24 },
			`Networks[0] "flannel.4096".Policies[3].Settings.IsolationId: 16777216 is out of range`},
		{"endpoint removed and network type unknown", func(t *testing.T, d doc) {
			d["Endpoints"] = d["Endpoints"].([]any)[:1]
			hnsNet0(d)["Type"] = "Transparent"
		}, `Networks[0] "flannel.4096".Type: "Transparent" is not supported`},
		{"ports and Networks", func(t *testing.T, d doc) {
			hnsAdd(t, d, "ports", `{"name": "p", "mac": "02:00:00:00:00:77"}`)
		}, "ports: a document is written either with ports"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			var c Config
			if err := json.Unmarshal(editJSON(t, hnsOverlayPolicy, func(d doc) { tt.edit(t, d) }), &c); err != nil {
				t.Fatal(err)
			}
			err := sw.Apply(&c)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Apply = %v, want an error containing %q", err, tt.want)
			}
			if sw.Config() != cfg {
				t.Errorf("Config() changed after a rejected Apply")
			}
			if sw.Generation() != gen {
				t.Errorf("generation %d -> %d after a rejected Apply", gen, sw.Generation())
			}
			if now := sw.Ports(); !slices.Equal(now, ports) {
				t.Errorf("Ports() changed after a rejected Apply: %d ports, was %d", len(now), len(ports))
			}
			for _, p := range ports {
				if q := sw.Port(p.Name); q != p {
					t.Errorf("Port(%q) changed after a rejected Apply", p.Name)
				}
			}
		})
	}
	// The switch still takes a valid document afterwards.
	if err := sw.Apply(mustParseHNS(t, hnsOverlayPolicy)); err != nil {
		t.Fatal(err)
	}
	if sw.Generation() != gen+1 {
		t.Errorf("generation %d after a good Apply, want %d", sw.Generation(), gen+1)
	}
}

func mustParseHNS(t *testing.T, s string) *Config {
	t.Helper()
	c, err := ParseConfig([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// hnsMixedPolicy is hnsOverlayPolicy plus an L2Bridge network with one
// endpoint, so that the uplink gets both of its layers.
func hnsMixedPolicy(t *testing.T) []byte {
	return editJSON(t, hnsOverlayPolicy, func(d doc) {
		hnsAdd(t, d["Uplink"].(doc), "Neighbors", `{"IpAddress": "192.168.1.1", "MacAddress": "02:00:00:00:00:99"}`)
		hnsAdd(t, d, "Networks", `{"Name": "cbr0", "Type": "L2Bridge", "Ipams": [{"Subnets": [{"IpAddressPrefix": "192.168.1.0/24",
			"Routes": [{"NextHop": "192.168.1.1", "DestinationPrefix": "0.0.0.0/0"}]}]}]}`)
		hnsAdd(t, d, "Endpoints", `{"Name": "pod-c", "HostComputeNetwork": "cbr0", "MacAddress": "02:00:00:00:00:0c",
			"IpConfigurations": [{"IpAddress": "192.168.1.100", "PrefixLength": 24}],
			"Policies": [{"Type": "SDNRoute", "Settings": {"DestinationPrefix": "172.16.0.0/16", "NextHop": "192.168.1.30"}},
				{"Type": "SDNRoute", "Settings": {"DestinationPrefix": "172.16.5.0/24", "NextHop": "192.168.1.20"}}]}`)
	})
}

func hnsLower(t *testing.T, b []byte) *Config {
	t.Helper()
	c, err := ParseConfig(b)
	if err != nil {
		t.Fatalf("ParseConfig: %v\n%s", err, b)
	}
	low, err := c.Lower()
	if err != nil {
		t.Fatalf("Lower: %v", err)
	}
	return low
}

func hnsPort(t *testing.T, c *Config, name string) *vfp.PortConfig {
	t.Helper()
	for i := range c.Ports {
		if c.Ports[i].Name == name {
			return &c.Ports[i]
		}
	}
	t.Fatalf("the lowered document has no port %q", name)
	return nil
}

func hnsLayerNames(p *vfp.PortConfig) []string {
	var names []string
	for _, l := range p.Layers {
		names = append(names, l.Name)
	}
	return names
}

func TestHNSLower(t *testing.T) {
	low := hnsLower(t, hnsMixedPolicy(t))
	if low.IsHNS() {
		t.Errorf("the lowered document is still at the HNS level")
	}
	if n := len(low.Ports); n != 4 {
		t.Fatalf("%d ports, want 4 (3 endpoints and the uplink)", n)
	}

	// The uplink is last.
	up := &low.Ports[len(low.Ports)-1]
	if up.Name != "uplink" || !up.Uplink || up.MTU != hns.DefaultUplinkMTU || up.MAC.String() != "02:00:00:00:00:fe" {
		t.Errorf("last port = %q uplink=%v mtu=%d mac=%s, want the uplink with MTU 1500", up.Name, up.Uplink, up.MTU, up.MAC)
	}
	for _, p := range low.Ports[:len(low.Ports)-1] {
		if p.Uplink {
			t.Errorf("port %q is an uplink too", p.Name)
		}
	}
	if got, want := hnsLayerNames(up), []string{encap.LayerPARoute, encap.LayerMACRewrite}; !slices.Equal(got, want) {
		t.Errorf("uplink layers %v, want %v", got, want)
	}

	// Overlay endpoints.
	for _, name := range []string{"pod-a", "pod-b"} {
		p := hnsPort(t, low, name)
		if p.Underlay != "none" || p.MTU != 1500-encap.VXLANOverhead4 {
			t.Errorf("%s: underlay %q mtu %d, want none and 1450", name, p.Underlay, p.MTU)
		}
		if got := hnsLayerNames(p); !slices.Equal(got, []string{encap.LayerEncap}) {
			t.Errorf("%s: layers %v, want [%s]", name, got, encap.LayerEncap)
		}
	}
	// L2Bridge endpoint.
	c := hnsPort(t, low, "pod-c")
	if c.Underlay != "rewrite" || c.MTU != 1500 {
		t.Errorf("pod-c: underlay %q mtu %d, want rewrite and 1500", c.Underlay, c.MTU)
	}
	if got := hnsLayerNames(c); !slices.Equal(got, []string{encap.LayerRoute}) {
		t.Errorf("pod-c: layers %v, want [%s]", got, encap.LayerRoute)
	}

	// Remote subnet rules: longest prefix first, whatever the policy order.
	a := hnsPort(t, low, "pod-a")
	g := a.Layers[0].Groups[0]
	var dsts []string
	var prios []uint32
	for _, r := range g.Rules {
		dsts = append(dsts, texts(r.Match.DstIPs)...)
		prios = append(prios, *r.Priority)
	}
	if want := []string{"10.244.1.0/24", "10.245.0.0/16"}; !slices.Equal(dsts, want) {
		t.Errorf("pod-a encap rules match %v, want %v (longest prefix first)", dsts, want)
	}
	if !slices.IsSorted(prios) || len(slices.Compact(slices.Clone(prios))) != len(prios) {
		t.Errorf("pod-a encap rule priorities %v are not strictly increasing", prios)
	}
	if r := g.Rules[0]; r.Action.Push == nil || r.Action.Push.DstIP != addr("192.168.1.20") || r.Action.Push.SrcIP != addr("192.168.1.10") ||
		r.Action.Push.VNI != 4096 || r.Action.Push.DstPort != 4789 || r.Action.Push.DstMAC != macAddr("02:00:00:00:01:fe") ||
		r.Action.Modify == nil || r.Action.Modify.DstMAC != macAddr("02:00:00:00:01:01") {
		t.Errorf("pod-a rule for 10.244.1.0/24 = %+v push %+v", r.Action, r.Action.Push)
	}
	// SDN routes of the L2Bridge endpoint too.
	dsts = nil
	for _, r := range c.Layers[0].Groups[0].Rules {
		dsts = append(dsts, texts(r.Match.DstIPs)...)
	}
	if want := []string{"172.16.5.0/24", "172.16.0.0/16"}; !slices.Equal(dsts, want) {
		t.Errorf("pod-c route rules match %v, want %v (longest prefix first)", dsts, want)
	}

	// Gateways: the overlay's with the DrMacAddress, the L2Bridge's with
	// its neighbour MAC.
	if low.Switch.VXLANPort != 4789 {
		t.Errorf("switch.vxlanPort = %d, want 4789", low.Switch.VXLANPort)
	}
	gws := map[string]string{}
	for _, g := range low.Switch.Gateways {
		for _, ip := range g.IPs {
			gws[ip.String()] = g.MAC.String()
		}
	}
	if gws["10.244.0.1"] != "02:00:00:00:00:01" || gws["192.168.1.1"] != "02:00:00:00:00:99" || len(gws) != 2 {
		t.Errorf("gateways %v", gws)
	}

	// The lowered document is a valid VFP-level document: it survives a
	// JSON round trip through ParseConfig, and lowers to itself.
	b, err := json.Marshal(low)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseConfig(b)
	if err != nil {
		t.Fatalf("ParseConfig(lowered): %v\n%s", err, b)
	}
	if again.IsHNS() {
		t.Errorf("the round-tripped lowered document is at the HNS level")
	}
	if l2, err := again.Lower(); err != nil || l2 != again {
		t.Errorf("Lower of a VFP-level document = %p, %v; want the document itself (%p)", l2, err, again)
	}
	if b2, _ := json.Marshal(again); string(b2) != string(b) {
		t.Errorf("the lowered document changed in a JSON round trip:\n%s\n%s", b, b2)
	}
}

func TestHNSLowerOverlayMTU(t *testing.T) {
	tests := []struct {
		name string
		edit func(t *testing.T, d doc)
		want map[string]uint16 // port MTUs
	}{
		{name: "IPv4 provider address: 50 bytes", want: map[string]uint16{"pod-a": 1450, "pod-b": 1450, "uplink": 1500}},
		{name: "IPv6 provider address too: 70 bytes", edit: func(t *testing.T, d doc) {
			hnsAdd(t, hnsNet0(d), "Policies", `{"Type": "ProviderAddress", "Settings": {"ProviderAddress": "fd00:1::10"}}`)
		}, want: map[string]uint16{"pod-a": 1430, "pod-b": 1430, "uplink": 1500}},
		{name: "IPv6 provider address only: 70 bytes", edit: func(t *testing.T, d doc) {
			hnsNetPolicy(d, 0)["ProviderAddress"] = "fd00:1::10"
			hnsAdd(t, d["Uplink"].(doc), "Neighbors", `{"IpAddress": "fd00:1::20", "MacAddress": "02:00:00:00:01:fe"}`)
			hnsAdd(t, d["Uplink"].(doc), "Neighbors", `{"IpAddress": "fd00:1::30", "MacAddress": "02:00:00:00:02:fe"}`)
			hnsNetPolicy(d, 3)["ProviderAddress"] = "fd00:1::30"
			hnsNetPolicy(d, 4)["ProviderAddress"] = "fd00:1::20"
		}, want: map[string]uint16{"pod-a": 1430, "pod-b": 1430}},
		{name: "EncapOverhead above the need", edit: func(t *testing.T, d doc) {
			hnsAdd(t, hnsEndpoint(d, 0), "Policies", `{"Type": "EncapOverhead", "Settings": {"Overhead": 100}}`)
		}, want: map[string]uint16{"pod-a": 1400, "pod-b": 1450}},
		{name: "uplink MTU 9000", edit: func(t *testing.T, d doc) { d["Uplink"].(doc)["Mtu"] = 9000 },
			want: map[string]uint16{"pod-a": 8950, "pod-b": 8950, "uplink": 9000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var edit func(d doc)
			if tt.edit != nil {
				edit = func(d doc) { tt.edit(t, d) }
			}
			low := hnsLower(t, editJSON(t, hnsOverlayPolicy, edit))
			for name, mtu := range tt.want {
				if p := hnsPort(t, low, name); p.MTU != mtu {
					t.Errorf("%s: mtu %d, want %d", name, p.MTU, mtu)
				}
			}
		})
	}
}

func TestHNSLowerL2Bridge(t *testing.T) {
	low := hnsLower(t, []byte(hnsL2BridgePolicy))
	for _, name := range []string{"pod-a", "pod-b"} {
		if p := hnsPort(t, low, name); p.Underlay != "rewrite" || p.MTU != 1500 {
			t.Errorf("%s: underlay %q mtu %d, want rewrite and 1500", name, p.Underlay, p.MTU)
		}
	}
	up := &low.Ports[len(low.Ports)-1]
	if !up.Uplink || up.Name != "uplink" {
		t.Fatalf("last port %q is not the uplink", up.Name)
	}
	// No overlay network: no decapsulation layer.
	if got := hnsLayerNames(up); !slices.Equal(got, []string{encap.LayerMACRewrite}) {
		t.Errorf("uplink layers %v, want [%s]", got, encap.LayerMACRewrite)
	}
	if low.Switch.VXLANPort != 0 {
		t.Errorf("switch.vxlanPort = %d without an overlay network", low.Switch.VXLANPort)
	}
}

func TestHNSLowerVFPUnchanged(t *testing.T) {
	const vfp = `{"switch": {"name": "s"}, "ports": [
	  {"name": "pod-a", "mac": "02:00:00:00:00:0a", "ips": ["10.0.0.10"]},
	  {"name": "uplink", "mac": "02:00:00:00:00:fe", "uplink": true}]}`
	c := mustParseHNS(t, vfp)
	if c.IsHNS() {
		t.Fatal("a VFP-level document reports IsHNS")
	}
	before, _ := json.Marshal(c)
	low, err := c.Lower()
	if err != nil || low != c {
		t.Fatalf("Lower = %p, %v; want the document itself (%p)", low, err, c)
	}
	if after, _ := json.Marshal(c); string(after) != string(before) {
		t.Errorf("Lower changed the document:\n%s\n%s", before, after)
	}
	// An HNS-level document is not changed by Lower either.
	h := mustParseHNS(t, hnsOverlayPolicy)
	before, _ = json.Marshal(h)
	if _, err := h.Lower(); err != nil {
		t.Fatal(err)
	}
	if after, _ := json.Marshal(h); string(after) != string(before) {
		t.Errorf("Lower changed the HNS-level document")
	}
}

func TestHNSDualStack(t *testing.T) {
	dualOverlay := func(t *testing.T, d doc) {
		hnsAdd(t, at(d, "Networks", 0, "Ipams", 0), "Subnets", `{"IpAddressPrefix": "fd00:244::/64",
			"Routes": [{"NextHop": "fd00:244::1", "DestinationPrefix": "::/0"}],
			"Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]}`)
		hnsAdd(t, hnsNet0(d), "Policies", `{"Type": "RemoteSubnetRoute", "Settings": {"DestinationPrefix": "fd00:244:0:1::/64",
			"IsolationId": 4096, "ProviderAddress": "192.168.1.20", "DistributedRouterMacAddress": "02:00:00:00:01:01"}}`)
		hnsAdd(t, hnsEndpoint(d, 0), "IpConfigurations", `{"IpAddress": "fd00:244::10", "PrefixLength": 64}`)
		hnsAdd(t, hnsEndpoint(d, 1), "IpConfigurations", `{"IpAddress": "fd00:244::11"}`)
	}
	tests := []struct {
		name  string
		base  string
		edit  func(t *testing.T, d doc)
		ports map[string][]string // endpoint addresses
		mtu   uint16              // of pod-a
	}{
		{name: "L2Bridge", base: hnsL2BridgePolicy, mtu: 1500,
			ports: map[string][]string{"pod-a": {"192.168.1.100", "fd00:1::100"}, "pod-b": {"192.168.1.101", "fd00:1::101"}}},
		{name: "L2Bridge IPv6 first", base: hnsL2BridgePolicy, mtu: 1500, edit: func(t *testing.T, d doc) {
			e := hnsEndpoint(d, 1)
			l := e["IpConfigurations"].([]any)
			l[0], l[1] = l[1], l[0]
		}, ports: map[string][]string{"pod-b": {"fd00:1::101", "192.168.1.101"}}},
		{name: "Overlay, IPv4 provider addresses", edit: dualOverlay, mtu: 1450,
			ports: map[string][]string{"pod-a": {"10.244.0.10", "fd00:244::10"}, "pod-b": {"10.244.0.11", "fd00:244::11"}}},
		{name: "Overlay, both provider address families", mtu: 1430, edit: func(t *testing.T, d doc) {
			dualOverlay(t, d)
			hnsAdd(t, hnsNet0(d), "Policies", `{"Type": "ProviderAddress", "Settings": {"ProviderAddress": "fd00:1::10"}}`)
			hnsAdd(t, d["Uplink"].(doc), "Neighbors", `{"IpAddress": "fd00:1::40", "MacAddress": "02:00:00:00:04:fe"}`)
			hnsAdd(t, hnsNet0(d), "Policies", `{"Type": "RemoteSubnetRoute", "Settings": {"DestinationPrefix": "fd00:244:0:4::/64",
				"IsolationId": 4096, "ProviderAddress": "fd00:1::40", "DistributedRouterMacAddress": "02:00:00:00:04:01"}}`)
			hnsAdd(t, hnsEndpoint(d, 0), "Policies", `{"Type": "SDNRoute", "Settings": {"DestinationPrefix": "fd00:244:0:5::/64",
				"NextHop": "fd00:1::40", "NeedEncap": true}}`)
		}, ports: map[string][]string{"pod-a": {"10.244.0.10", "fd00:244::10"}}},
		{name: "Overlay and L2Bridge on one switch", mtu: 1450, edit: func(t *testing.T, d doc) {
			dualOverlay(t, d)
			hnsAdd(t, d, "Networks", `{"Name": "cbr0", "Type": "L2Bridge", "Ipams": [{"Subnets": [
				{"IpAddressPrefix": "192.168.1.0/24", "Routes": [{"NextHop": "192.168.1.1", "DestinationPrefix": "0.0.0.0/0"}]},
				{"IpAddressPrefix": "fd00:1::/64", "Routes": [{"NextHop": "fd00:1::1", "DestinationPrefix": "::/0"}]}]}]}`)
			hnsAdd(t, d, "Endpoints", `{"Name": "pod-c", "HostComputeNetwork": "cbr0", "MacAddress": "02:00:00:00:00:0c",
				"IpConfigurations": [{"IpAddress": "192.168.1.100", "PrefixLength": 24}, {"IpAddress": "fd00:1::100", "PrefixLength": 64}]}`)
		}, ports: map[string][]string{"pod-a": {"10.244.0.10", "fd00:244::10"}, "pod-c": {"192.168.1.100", "fd00:1::100"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := hnsOr(tt.base, hnsOverlayPolicy)
			var edit func(d doc)
			if tt.edit != nil {
				edit = func(d doc) { tt.edit(t, d) }
			}
			b := editJSON(t, base, edit)
			low := hnsLower(t, b)
			for name, ips := range tt.ports {
				if p := hnsPort(t, low, name); !slices.Equal(texts(p.IPs), ips) {
					t.Errorf("%s: ips %v, want %v", name, p.IPs, ips)
				}
			}
			if p := hnsPort(t, low, "pod-a"); p.MTU != tt.mtu {
				t.Errorf("pod-a: mtu %d, want %d", p.MTU, tt.mtu)
			}
			// A switch runs it.
			if _, err := New(mustParseHNS(t, string(b))); err != nil {
				t.Errorf("New: %v", err)
			}
		})
	}
}

func hnsOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestHNSVXLANPortSetting: a network's VxlanPort of 4789 is the port a
// switch without one decodes on (no restart), and switch.vxlanPort sets
// the port of Overlay networks without a policy of their own, so that a
// node's ufpd can start on Linux flannel's 8472 before its agent makes
// the network; a port that differs from the running one needs a restart.
func TestHNSVXLANPortSetting(t *testing.T) {
	const explicit = `{"Type": "VxlanPort", "Settings": {"Port": 4789}},`
	implicit := strings.Replace(hnsOverlayPolicy, explicit, "", 1)
	if implicit == hnsOverlayPolicy {
		t.Fatal("hnsOverlayPolicy has no VxlanPort policy of 4789 to take out")
	}
	sw, err := New(mustParseHNS(t, implicit))
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.Apply(mustParseHNS(t, hnsOverlayPolicy)); err != nil {
		t.Errorf("VxlanPort 4789 on a switch started without one: %v", err)
	}

	on8472 := strings.Replace(implicit, `"switch": {"name": "node-1"}`, `"switch": {"name": "node-1", "vxlanPort": 8472}`, 1)
	sw, err = New(mustParseHNS(t, on8472))
	if err != nil {
		t.Fatal(err)
	}
	if got := sw.pol.Load().vxlan; got != 8472 {
		t.Errorf("switch.vxlanPort 8472: the switch decodes VXLAN on %d", got)
	}
	with8472 := strings.Replace(hnsOverlayPolicy, `"Port": 4789`, `"Port": 8472`, 1)
	if err := sw.Apply(mustParseHNS(t, with8472)); err != nil {
		t.Errorf("VxlanPort 8472 on a switch started on 8472: %v", err)
	}
	if err := sw.Apply(mustParseHNS(t, hnsOverlayPolicy)); !errors.Is(err, ErrRestartNeeded) {
		t.Errorf("VxlanPort 4789 on a switch started on 8472: %v, want %v", err, ErrRestartNeeded)
	}
	both := strings.Replace(hnsOverlayPolicy, `"switch": {"name": "node-1"}`, `"switch": {"name": "node-1", "vxlanPort": 8472}`, 1)
	if _, err := ParseConfig([]byte(both)); err == nil || !strings.Contains(err.Error(), "differs from switch.vxlanPort (8472)") {
		t.Errorf("switch.vxlanPort 8472 and a VxlanPort of 4789: %v", err)
	}
}
