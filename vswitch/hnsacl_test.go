package vswitch

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/encap"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vfp"
)

// ACL and NetworkACL policies at the HNS level: validation, lowering into
// ACL_LAYER, and verdicts through the switch (directions, families,
// priorities and ties, port ranges, stateful replies, policy changes,
// network-wide ACLs, and ACLs beside NAT and load balancing).

// aclDoc is a dual-stack L2Bridge network with three pods and no policy;
// tests add ACLs to it. The router beyond the uplink (both families'
// gateway) is 02:00:00:00:00:99.
const aclDoc = `{
  "switch": {"name": "node-1"},
  "Uplink": {
    "Name": "uplink", "MacAddress": "02:00:00:00:00:fe",
    "IpAddresses": ["192.168.1.10"],
    "Neighbors": [
      {"IpAddress": "192.168.1.1", "MacAddress": "02:00:00:00:00:99"},
      {"IpAddress": "fd00:1::1", "MacAddress": "02:00:00:00:00:99"}
    ]
  },
  "Networks": [
    {"Name": "cbr0", "Type": "L2Bridge",
      "Ipams": [{"Subnets": [
        {"IpAddressPrefix": "192.168.1.0/24", "Routes": [{"NextHop": "192.168.1.1", "DestinationPrefix": "0.0.0.0/0"}]},
        {"IpAddressPrefix": "fd00:1::/64", "Routes": [{"NextHop": "fd00:1::1", "DestinationPrefix": "::/0"}]}]}]}
  ],
  "Endpoints": [
    {"Name": "pod-a", "HostComputeNetwork": "cbr0", "MacAddress": "02:00:00:00:00:0a",
     "IpConfigurations": [{"IpAddress": "192.168.1.100"}, {"IpAddress": "fd00:1::100"}]},
    {"Name": "pod-b", "HostComputeNetwork": "cbr0", "MacAddress": "02:00:00:00:00:0b",
     "IpConfigurations": [{"IpAddress": "192.168.1.101"}, {"IpAddress": "fd00:1::101"}]},
    {"Name": "pod-c", "HostComputeNetwork": "cbr0", "MacAddress": "02:00:00:00:00:0c",
     "IpConfigurations": [{"IpAddress": "192.168.1.102"}, {"IpAddress": "fd00:1::102"}]}
  ]
}`

var (
	aclRouter = dataplane.MAC{2, 0, 0, 0, 0, 0x99}
	aclHost   = dataplane.MAC{2, 0, 0, 0, 0, 0xfe}
	aclMACs   = map[string]dataplane.MAC{
		"pod-a": {2, 0, 0, 0, 0, 0x0a}, "pod-b": {2, 0, 0, 0, 0, 0x0b}, "pod-c": {2, 0, 0, 0, 0, 0x0c},
	}
	// aclAddrs are the IPv4 and IPv6 addresses of aclDoc's pods and of
	// "ext", a host beyond the router.
	aclAddrs = map[string][2]string{
		"pod-a": {"192.168.1.100", "fd00:1::100"}, "pod-b": {"192.168.1.101", "fd00:1::101"},
		"pod-c": {"192.168.1.102", "fd00:1::102"}, "ext": {"203.0.113.5", "2001:db8::5"},
	}
)

// aclEP adds the ACL policy with settings s to endpoint ep of d.
func aclEP(t *testing.T, d doc, ep int, s string) {
	t.Helper()
	hnsAdd(t, hnsEndpoint(d, ep), "Policies", `{"Type": "ACL", "Settings": `+s+`}`)
}

// aclNet adds the NetworkACL policy with settings s to network 0 of d.
func aclNet(t *testing.T, d doc, s string) {
	t.Helper()
	hnsAdd(t, hnsNet0(d), "Policies", `{"Type": "NetworkACL", "Settings": `+s+`}`)
}

func TestHNSACLBaseDocumentParses(t *testing.T) {
	if _, err := ParseConfig([]byte(aclDoc)); err != nil {
		t.Fatal(err)
	}
}

func TestHNSACLErrors(t *testing.T) {
	const (
		epA  = `Endpoints[0] "pod-a"`
		set0 = epA + `.Policies[0].Settings`
		set1 = epA + `.Policies[1].Settings`
		net0 = `Networks[0] "cbr0"`
		nset = net0 + `.Policies[0].Settings`
	)
	tests := []struct {
		name string
		base string // aclDoc when empty
		edit func(t *testing.T, d doc)
		want string // the whole error
	}{
		// Action, Direction, RuleType, Priority.
		{name: "no Action", edit: func(t *testing.T, d doc) { aclEP(t, d, 0, `{"Direction": "In"}`) },
			want: set0 + ".Action: an ACL needs an action (Allow, Block or Pass)"},
		{name: "Action in lower case", edit: func(t *testing.T, d doc) { aclEP(t, d, 0, `{"Action": "allow", "Direction": "In"}`) },
			want: set0 + `.Action: "allow" is not an ACL action (want Allow, Block or Pass)`},
		{name: "Action Deny", edit: func(t *testing.T, d doc) { aclEP(t, d, 0, `{"Action": "Deny", "Direction": "In"}`) },
			want: set0 + `.Action: "Deny" is not an ACL action (want Allow, Block or Pass)`},
		{name: "Action a number", edit: func(t *testing.T, d doc) { aclEP(t, d, 0, `{"Action": 1, "Direction": "In"}`) },
			want: set0 + ".Action: want a string, got the number 1"},
		{name: "no Direction", edit: func(t *testing.T, d doc) { aclEP(t, d, 0, `{"Action": "Allow"}`) },
			want: set0 + ".Direction: an ACL needs a direction (In or Out)"},
		{name: "Direction Both", edit: func(t *testing.T, d doc) { aclEP(t, d, 0, `{"Action": "Allow", "Direction": "Both"}`) },
			want: set0 + `.Direction: "Both" is not an ACL direction (want In or Out)`},
		{name: "Direction in lower case", edit: func(t *testing.T, d doc) { aclEP(t, d, 0, `{"Action": "Allow", "Direction": "out"}`) },
			want: set0 + `.Direction: "out" is not an ACL direction (want In or Out)`},
		{name: "RuleType Host", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "In", "RuleType": "Host"}`)
		}, want: set0 + ".RuleType: Host rules are the host's own firewall, which ufp does not model (want Switch, or leave it empty)"},
		{name: "RuleType unknown", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "In", "RuleType": "Port"}`)
		}, want: set0 + `.RuleType: "Port" is not a rule type (want Switch, or leave it empty)`},
		{name: "Priority above 65535", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "In", "Priority": 65536}`)
		}, want: set0 + ".Priority: want an integer from 0 to 65535, got 65536"},
		{name: "Priority negative", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "In", "Priority": -1}`)
		}, want: set0 + ".Priority: want an integer from 0 to 65535, got -1"},
		{name: "Priority a string", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "In", "Priority": "100"}`)
		}, want: set0 + `.Priority: want a number, got "100"`},

		// Protocols.
		{name: "Protocols has an unknown name", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "In", "Protocols": "TCP,GRE"}`)
		}, want: set0 + `.Protocols: "GRE" is not a protocol (want a number from 0 to 255, or TCP, UDP, ICMP or ICMPv6)`},
		{name: "Protocols above 255", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "In", "Protocols": "256"}`)
		}, want: set0 + `.Protocols: "256" is not a protocol (want a number from 0 to 255, or TCP, UDP, ICMP or ICMPv6)`},
		{name: "Protocols negative", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "In", "Protocols": "-6"}`)
		}, want: set0 + `.Protocols: "-6" is not a protocol (want a number from 0 to 255, or TCP, UDP, ICMP or ICMPv6)`},
		{name: "Protocols with an empty entry", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "In", "Protocols": "6,,17"}`)
		}, want: set0 + `.Protocols: "6,,17" has an empty entry`},
		{name: "Protocols a number", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "In", "Protocols": 6}`)
		}, want: set0 + ".Protocols: want a string, got the number 6"},

		// Addresses.
		{name: "LocalAddresses not an address", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "In", "LocalAddresses": "192.168.1.100, 192.168.1.300"}`)
		}, want: set0 + `.LocalAddresses: "192.168.1.300" is not an IP address or prefix`},
		{name: "LocalAddresses with host bits", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "In", "LocalAddresses": "192.168.1.100/24"}`)
		}, want: set0 + ".LocalAddresses: 192.168.1.100/24 has host bits set (did you mean 192.168.1.0/24?)"},
		{name: "LocalAddresses prefix too long", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "In", "LocalAddresses": "192.168.1.0/33"}`)
		}, want: set0 + `.LocalAddresses: "192.168.1.0/33" is not an IP address or prefix`},
		{name: "LocalAddresses with a zone", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "In", "LocalAddresses": "fe80::1%eth0"}`)
		}, want: set0 + `.LocalAddresses: "fe80::1%eth0": zones are not allowed`},
		{name: "RemoteAddresses IPv4 in IPv6 form", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "In", "RemoteAddresses": "::ffff:10.0.0.1"}`)
		}, want: set0 + `.RemoteAddresses: "::ffff:10.0.0.1": write IPv4 addresses in IPv4 form`},
		{name: "RemoteAddresses IPv6 prefix with host bits", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "In", "RemoteAddresses": "10.0.0.0/8,2001:db8::1/32"}`)
		}, want: set0 + ".RemoteAddresses: 2001:db8::1/32 has host bits set (did you mean 2001:db8::/32?)"},
		{name: "RemoteAddresses with a trailing comma", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "In", "RemoteAddresses": "10.0.0.0/8,"}`)
		}, want: set0 + `.RemoteAddresses: "10.0.0.0/8," has an empty entry`},
		{name: "families that cannot meet: IPv4 local, IPv6 remote", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "Out", "LocalAddresses": "192.168.1.100", "RemoteAddresses": "2001:db8::/32"}`)
		}, want: set0 + ".RemoteAddresses: IPv6 only, and LocalAddresses IPv4 only: the ACL could never match a packet"},
		{name: "families that cannot meet: IPv6 local, IPv4 remote", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Block", "Direction": "In", "LocalAddresses": "fd00:1::100", "RemoteAddresses": "10.0.0.0/8,10.1.0.0/16"}`)
		}, want: set0 + ".RemoteAddresses: IPv4 only, and LocalAddresses IPv6 only: the ACL could never match a packet"},

		// Ports.
		{name: "LocalPorts range empty", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "In", "Protocols": "TCP", "LocalPorts": "80,90-85"}`)
		}, want: set0 + `.LocalPorts: the range "90-85" is empty`},
		{name: "LocalPorts a name", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "In", "Protocols": "TCP", "LocalPorts": "http"}`)
		}, want: set0 + `.LocalPorts: "http" is not a port or a range of ports (want 80 or 1000-2000, from 0 to 65535)`},
		{name: "RemotePorts above 65535", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "In", "Protocols": "UDP", "RemotePorts": "1024-65536"}`)
		}, want: set0 + `.RemotePorts: "1024-65536" is not a port or a range of ports (want 80 or 1000-2000, from 0 to 65535)`},
		{name: "RemotePorts three numbers", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "In", "Protocols": "UDP", "RemotePorts": "1-2-3"}`)
		}, want: set0 + `.RemotePorts: "1-2-3" is not a port or a range of ports (want 80 or 1000-2000, from 0 to 65535)`},
		{name: "ports without Protocols", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "In", "LocalPorts": "80"}`)
		}, want: set0 + ".LocalPorts: ports need Protocols TCP, UDP or both, and Protocols is empty (any protocol)"},
		{name: "remote ports with ICMP", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "Out", "Protocols": "TCP,ICMP", "RemotePorts": "53"}`)
		}, want: set0 + `.RemotePorts: ports need Protocols TCP, UDP or both, and Protocols "TCP,ICMP" has ICMP (1)`},
		{name: "ports with ICMPv6", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "Out", "Protocols": "icmpv6,udp", "LocalPorts": "53"}`)
		}, want: set0 + `.LocalPorts: ports need Protocols TCP, UDP or both, and Protocols "icmpv6,udp" has ICMPv6 (58)`},
		{name: "ports with protocol 47", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "Out", "Protocols": "6,17,47", "LocalPorts": "53", "RemotePorts": "53"}`)
		}, want: set0 + `.LocalPorts: ports need Protocols TCP, UDP or both, and Protocols "6,17,47" has 47`},

		// Shape of the Settings.
		{name: "unknown field in Settings", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "In", "Ports": "80"}`)
		}, want: set0 + `.Ports: unknown field "Ports"`},
		{name: "Settings is a list", edit: func(t *testing.T, d doc) {
			hnsAdd(t, hnsEndpoint(d, 0), "Policies", `{"Type": "ACL", "Settings": []}`)
		}, want: set0 + ": want an object, got a list"},
		{name: "no Settings", edit: func(t *testing.T, d doc) {
			hnsAdd(t, hnsEndpoint(d, 0), "Policies", `{"Type": "ACL"}`)
		}, want: set0 + ".Action: an ACL needs an action (Allow, Block or Pass)"},

		// Ids.
		{name: "duplicate Id", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Id": "web", "Action": "Allow", "Direction": "In"}`)
			aclEP(t, d, 0, `{"Id": "web", "Action": "Block", "Direction": "Out"}`)
		}, want: set1 + `.Id: "web" is the Id of ` + epA + `.Policies[0]: Ids are unique among ` + epA + `'s ACLs`},
		{name: "Id is another ACL's default name", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Action": "Allow", "Direction": "In"}`)
			aclEP(t, d, 0, `{"Id": "acl-0", "Action": "Block", "Direction": "Out"}`)
		}, want: set1 + `.Id: "acl-0" is the default name of ` + epA + `.Policies[0]: Ids are unique among ` + epA + `'s ACLs`},
		{name: "default name is another ACL's Id", edit: func(t *testing.T, d doc) {
			aclEP(t, d, 0, `{"Id": "acl-1", "Action": "Allow", "Direction": "In"}`)
			aclEP(t, d, 0, `{"Action": "Block", "Direction": "Out"}`)
		}, want: set1 + `.Id: the ACL's default name "acl-1" is the Id of ` + epA + `.Policies[0]: give it an Id`},

		// NetworkACL.
		{name: "NetworkACL without Action", edit: func(t *testing.T, d doc) { aclNet(t, d, `{"Direction": "Out"}`) },
			want: nset + ".Action: an ACL needs an action (Allow, Block or Pass)"},
		{name: "NetworkACL Host rule", edit: func(t *testing.T, d doc) {
			aclNet(t, d, `{"Action": "Block", "Direction": "In", "RuleType": "Host"}`)
		}, want: nset + ".RuleType: Host rules are the host's own firewall, which ufp does not model (want Switch, or leave it empty)"},
		{name: "NetworkACL ports without TCP or UDP", edit: func(t *testing.T, d doc) {
			aclNet(t, d, `{"Action": "Block", "Direction": "In", "Protocols": "1", "LocalPorts": "22"}`)
		}, want: nset + `.LocalPorts: ports need Protocols TCP, UDP or both, and Protocols "1" has ICMP (1)`},
		{name: "NetworkACL duplicate Id", edit: func(t *testing.T, d doc) {
			aclNet(t, d, `{"Id": "x", "Action": "Block", "Direction": "In"}`)
			aclNet(t, d, `{"Id": "x", "Action": "Allow", "Direction": "In"}`)
		}, want: net0 + `.Policies[1].Settings.Id: "x" is the Id of ` + net0 + `.Policies[0]: Ids are unique among ` + net0 + `'s ACLs`},
		{name: "NetworkACL unknown field", edit: func(t *testing.T, d doc) {
			aclNet(t, d, `{"Action": "Block", "Direction": "In", "Scope": "Network"}`)
		}, want: nset + `.Scope: unknown field "Scope"`},
		{name: "NetworkACL families that cannot meet", edit: func(t *testing.T, d doc) {
			aclNet(t, d, `{"Action": "Block", "Direction": "In", "LocalAddresses": "192.168.1.0/24", "RemoteAddresses": "::/0"}`)
		}, want: nset + ".RemoteAddresses: IPv6 only, and LocalAddresses IPv4 only: the ACL could never match a packet"},
		{name: "ACL on a remote endpoint", edit: func(t *testing.T, d doc) {
			hnsAdd(t, d, "Endpoints", `{"Name": "far", "HostComputeNetwork": "cbr0", "Flags": 1, "MacAddress": "02:00:00:00:07:01",
				"IpConfigurations": [{"IpAddress": "192.168.7.5"}],
				"Policies": [{"Type": "ACL", "Settings": {"Action": "Block", "Direction": "In"}}]}`)
		}, want: `Endpoints[3] "far".Policies[0].Type: a remote endpoint takes only a ProviderAddress policy, not "ACL"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := editJSON(t, hnsOr(tt.base, aclDoc), func(d doc) { tt.edit(t, d) })
			c, err := ParseConfig(b)
			if err == nil {
				t.Fatalf("ParseConfig accepted the document (%d ports after lowering), want\n  %s\n%s", hnsPortCount(c), tt.want, b)
			}
			if err.Error() != tt.want {
				t.Errorf("ParseConfig error\n  %v\nwant\n  %s", err, tt.want)
			}
		})
	}
}

func TestHNSACLLower(t *testing.T) {
	b := editJSON(t, aclDoc, func(d doc) {
		aclNet(t, d, `{"Id": "net-no-telnet", "Action": "Block", "Direction": "In", "Protocols": "TCP", "LocalPorts": "23", "Priority": 100}`)
		aclNet(t, d, `{"Action": "Pass", "Direction": "In", "Priority": 200}`)
		aclNet(t, d, `{"Id": "net-dns", "Action": "Allow", "Direction": "Out", "Protocols": "udp", "RemoteAddresses": "192.168.1.53",
			"RemotePorts": "53", "Priority": 100}`)
		aclEP(t, d, 1, `{"Id": "web", "Action": "Allow", "Direction": "In", "Protocols": "TCP",
			"LocalAddresses": "192.168.1.101, fd00:1::101", "RemoteAddresses": "192.168.1.0/24,fd00:1::/64",
			"LocalPorts": "80,8080-8090", "RemotePorts": "1024-65535", "Priority": 100}`)
		aclEP(t, d, 1, `{"Id": "pass-web", "Action": "Pass", "Direction": "In", "Protocols": "TCP", "LocalPorts": "80", "Priority": 100}`)
		aclEP(t, d, 1, `{"Id": "no-a", "Action": "Block", "Direction": "In", "RemoteAddresses": "192.168.1.100", "Priority": 100}`)
		aclEP(t, d, 1, `{"Id": "egress", "Action": "Allow", "Direction": "Out", "Protocols": "TCP,UDP", "LocalAddresses": "192.168.1.101",
			"RemoteAddresses": "10.0.0.0/8", "LocalPorts": "5000-6000", "RemotePorts": "443", "Priority": 50}`)
		aclEP(t, d, 1, `{"Action": "Block", "Direction": "In", "Priority": 65535}`)
		aclEP(t, d, 1, `{"Id": "icmp", "Action": "Allow", "Direction": "Out", "Protocols": "ICMP,icmpv6,47,1", "RuleType": "Switch"}`)
		// NAT_LAYER after the ACLs.
		hnsAdd(t, hnsEndpoint(d, 1), "Policies", `{"Type": "OutBoundNAT", "Settings": {}}`)
	})
	low := hnsLower(t, b)
	layers, groups, rules := natLayerDump(low)
	wantLayers := map[string][]string{
		// Every endpoint reaches the mappings of pod-b's pool (hairpin).
		"pod-a": {hns.LayerACL, hns.LayerNAT}, "pod-b": {hns.LayerACL, hns.LayerNAT}, "pod-c": {hns.LayerACL, hns.LayerNAT},
		"uplink": {hns.LayerNAT, encap.LayerMACRewrite},
	}
	for port, want := range wantLayers {
		if got := layers[port]; !slices.Equal(got, want) {
			t.Errorf("%s: layers %v, want %v", port, got, want)
		}
	}
	network := []string{
		"6553600 net-no-telnet dir=in proto=tcp dport=23 block",
		"6553601 net-dns dir=out proto=udp dst=192.168.1.53 dport=53 allow stateful",
		"13107200 acl-1 dir=in allow stateful non-terminating",
	}
	want := map[string][]string{
		"pod-a/ACL_LAYER/network-acls": network,
		"pod-b/ACL_LAYER/network-acls": network,
		"pod-c/ACL_LAYER/network-acls": network,
		"pod-b/ACL_LAYER/endpoint-acls": {
			"0 icmp dir=out proto=icmp,icmpv6,47 allow stateful",
			"3276800 egress dir=out proto=tcp,udp src=192.168.1.101 dst=10.0.0.0/8 sport=5000-6000 dport=443 allow stateful",
			"6553600 no-a dir=in src=192.168.1.100 block",
			"6553601 web dir=in proto=tcp src=192.168.1.0/24,fd00:1::/64 dst=192.168.1.101,fd00:1::101 sport=1024-65535 dport=80,8080-8090 allow stateful",
			"6553602 pass-web dir=in proto=tcp dport=80 allow stateful non-terminating",
			"4294901760 acl-4 dir=in block",
		},
	}
	for k, w := range want {
		if got := rules[k]; !slices.Equal(got, w) {
			t.Errorf("%s:\n  %s\nwant\n  %s", k, strings.Join(got, "\n  "), strings.Join(w, "\n  "))
		}
	}
	for _, port := range []string{"pod-a", "pod-c"} {
		if got, want := groups[port+"/"+hns.LayerACL], []string{hns.ACLNetworkGroup}; !slices.Equal(got, want) {
			t.Errorf("%s: ACL_LAYER groups %v, want %v", port, got, want)
		}
	}
	if got, want := groups["pod-b/"+hns.LayerACL], []string{hns.ACLNetworkGroup, hns.ACLEndpointGroup}; !slices.Equal(got, want) {
		t.Errorf("pod-b: ACL_LAYER groups %v, want %v", got, want)
	}
	for _, p := range low.Ports {
		for _, l := range p.Layers {
			if l.Name == hns.LayerACL && (l.Default == nil || *l.Default != (vfp.DefaultsConfig{Out: "allow", In: "allow", Stateful: true})) {
				t.Errorf("%s: ACL_LAYER default %+v, want a stateful allow both ways", p.Name, l.Default)
			}
		}
	}

	// Endpoint ACLs alone: no network group. No ACL at all: no layer.
	low = hnsLower(t, editJSON(t, aclDoc, func(d doc) {
		aclEP(t, d, 2, `{"Action": "Block", "Direction": "Out", "Protocols": "17"}`)
	}))
	layers, groups, rules = natLayerDump(low)
	if got := layers["pod-a"]; len(got) != 0 {
		t.Errorf("pod-a without ACLs: layers %v", got)
	}
	if got := groups["pod-c/"+hns.LayerACL]; !slices.Equal(got, []string{hns.ACLEndpointGroup}) {
		t.Errorf("pod-c: ACL_LAYER groups %v, want [%s]", got, hns.ACLEndpointGroup)
	}
	if got, want := rules["pod-c/ACL_LAYER/endpoint-acls"], []string{"0 acl-0 dir=out proto=udp block"}; !slices.Equal(got, want) {
		t.Errorf("pod-c rules %v, want %v", got, want)
	}

	// The lowered document is a valid VFP-level document, and a switch
	// runs it.
	out, err := json.Marshal(hnsLower(t, b))
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
}

// aclPkt is a packet between aclDoc's pods, or between a pod and "ext"
// beyond the router.
type aclPkt struct {
	from, to     string
	v6           bool
	proto        string // tcp, udp, echo, echo-reply
	sport, dport uint16
	flags        string
}

func (k aclPkt) frame() natPkt {
	fam := 0
	if k.v6 {
		fam = 1
	}
	n := natPkt{src: aclAddrs[k.from][fam], dst: aclAddrs[k.to][fam], sport: k.sport, dport: k.dport, proto: k.proto, flags: k.flags}
	switch {
	case k.from == "ext":
		n.smac, n.dmac = aclRouter, aclHost
	case k.to == "ext":
		n.smac, n.dmac = aclMACs[k.from], aclRouter
	default:
		n.smac, n.dmac = aclMACs[k.from], aclMACs[k.to]
	}
	return n
}

// reply is the answer to k, with TCP flags flags.
func (k aclPkt) reply(flags string) aclPkt {
	r := aclPkt{from: k.to, to: k.from, v6: k.v6, proto: k.proto, sport: k.dport, dport: k.sport, flags: flags}
	if k.proto == "echo" {
		r.proto, r.sport, r.dport = "echo-reply", k.sport, k.sport
	}
	return r
}

func (k aclPkt) String() string {
	fam := "v4"
	if k.v6 {
		fam = "v6"
	}
	return fmt.Sprintf("%s %s %s:%d -> %s:%d %s", fam, k.proto, k.from, k.sport, k.to, k.dport, k.flags)
}

// aclSend runs k through r and checks where it goes (a port name or "drop
// <reason>") and that the trace has every line of lines. It returns the
// packet and the trace.
func aclSend(r *ulRig, k aclPkt, want string, lines ...string) (*dataplane.Packet, string) {
	r.t.Helper()
	in := k.from
	if in == "ext" {
		in = "uplink"
	}
	p, trace := r.run(in, natFrame(r.t, k.frame()), dataplane.Offload{})
	if got := outName(r.sw, p); got != want {
		r.t.Fatalf("%s: %s, want %s\ntrace:\n%s", k, got, want, trace)
	}
	for _, l := range lines {
		if !slices.Contains(strings.Split(trace, "\n"), l) {
			r.t.Fatalf("%s: the trace has no line\n  %s\ntrace:\n%s", k, l, trace)
		}
	}
	return p, trace
}

// aclRule is the trace line of ACL_LAYER's verdict at port in direction
// dir: the rule name of group (network-acls or endpoint-acls), lowered
// from an ACL of Priority prio, tie index tie and action.
func aclRule(port, dir, group, name string, prio, tie uint32, action string) string {
	flags, verb := "terminating, stateful", "allow"
	switch action {
	case hns.ACLBlock:
		flags, verb = "terminating", "block"
	case hns.ACLPass:
		flags = "stateful"
	}
	return fmt.Sprintf("port %s %s: layer %s: group %s rule %s (priority %d, %s) -> %s", port, dir, hns.LayerACL, group, name, prio<<16|tie, flags, verb)
}

// aclDefault is the trace line of ACL_LAYER's default at port.
func aclDefault(port, dir string) string {
	return fmt.Sprintf("port %s %s: layer %s: no rule matched -> default allow (stateful)", port, dir, hns.LayerACL)
}

func aclRig(t *testing.T, base string, edit func(d doc)) *ulRig {
	t.Helper()
	return ulNewRig(t, mustParse(t, string(editJSON(t, base, edit))))
}

const aclBlocked = "drop blocked-by-policy"

func TestACLAllowAndBlock(t *testing.T) {
	r := aclRig(t, aclDoc, func(d doc) {
		aclEP(t, d, 1, `{"Id": "web4", "Action": "Allow", "Direction": "In", "Protocols": "TCP", "LocalPorts": "80",
			"RemoteAddresses": "192.168.1.0/24", "Priority": 100}`)
		aclEP(t, d, 1, `{"Id": "web6-a", "Action": "Allow", "Direction": "In", "Protocols": "TCP", "LocalPorts": "80",
			"RemoteAddresses": "fd00:1::100", "Priority": 100}`)
		aclEP(t, d, 1, `{"Id": "deny-in", "Action": "Block", "Direction": "In", "Priority": 65535}`)
		aclEP(t, d, 1, `{"Id": "no-ext4", "Action": "Block", "Direction": "Out", "RemoteAddresses": "203.0.113.0/24", "Priority": 100}`)
		aclEP(t, d, 1, `{"Id": "no-ext6-udp", "Action": "Block", "Direction": "Out", "Protocols": "UDP",
			"LocalAddresses": "fd00:1::101", "RemoteAddresses": "2001:db8::/32", "Priority": 100}`)
	})
	ep := func(port, dir, name string, prio, tie uint32, action string) string {
		return aclRule(port, dir, hns.ACLEndpointGroup, name, prio, tie, action)
	}
	for _, c := range []struct {
		k    aclPkt
		want string
		line string
	}{
		// In: the Allow rules, each family, the default deny.
		{aclPkt{from: "pod-a", to: "pod-b", proto: "tcp", sport: 5000, dport: 80, flags: "S"}, "pod-b", ep("pod-b", "in", "web4", 100, 2, hns.ACLAllow)},
		{aclPkt{from: "pod-c", to: "pod-b", proto: "tcp", sport: 5000, dport: 80, flags: "S"}, "pod-b", ep("pod-b", "in", "web4", 100, 2, hns.ACLAllow)},
		{aclPkt{from: "pod-a", to: "pod-b", v6: true, proto: "tcp", sport: 5000, dport: 80, flags: "S"}, "pod-b", ep("pod-b", "in", "web6-a", 100, 3, hns.ACLAllow)},
		{aclPkt{from: "pod-c", to: "pod-b", v6: true, proto: "tcp", sport: 5000, dport: 80, flags: "S"}, aclBlocked, ep("pod-b", "in", "deny-in", 65535, 0, hns.ACLBlock)},
		{aclPkt{from: "pod-a", to: "pod-b", proto: "tcp", sport: 5000, dport: 81, flags: "S"}, aclBlocked, ep("pod-b", "in", "deny-in", 65535, 0, hns.ACLBlock)},
		{aclPkt{from: "pod-a", to: "pod-b", proto: "udp", sport: 5000, dport: 80}, aclBlocked, ep("pod-b", "in", "deny-in", 65535, 0, hns.ACLBlock)},
		{aclPkt{from: "pod-a", to: "pod-b", proto: "echo", sport: 9, dport: 9}, aclBlocked, ep("pod-b", "in", "deny-in", 65535, 0, hns.ACLBlock)},
		{aclPkt{from: "ext", to: "pod-b", proto: "tcp", sport: 5000, dport: 80, flags: "S"}, aclBlocked, ep("pod-b", "in", "deny-in", 65535, 0, hns.ACLBlock)},
		// Out: blocks by remote prefix, family and protocol.
		{aclPkt{from: "pod-b", to: "ext", proto: "tcp", sport: 5000, dport: 443, flags: "S"}, aclBlocked, ep("pod-b", "out", "no-ext4", 100, 0, hns.ACLBlock)},
		{aclPkt{from: "pod-b", to: "ext", v6: true, proto: "udp", sport: 5000, dport: 53}, aclBlocked, ep("pod-b", "out", "no-ext6-udp", 100, 1, hns.ACLBlock)},
		{aclPkt{from: "pod-b", to: "ext", v6: true, proto: "tcp", sport: 5000, dport: 443, flags: "S"}, "uplink", aclDefault("pod-b", "out")},
		{aclPkt{from: "pod-b", to: "pod-a", proto: "tcp", sport: 5000, dport: 22, flags: "S"}, "pod-a", aclDefault("pod-b", "out")},
		// A pod without ACLs has no ACL_LAYER.
		{aclPkt{from: "pod-c", to: "pod-a", proto: "udp", sport: 5000, dport: 53}, "pod-a", ""},
	} {
		_, trace := aclSend(r, c.k, c.want, slices.DeleteFunc([]string{c.line}, func(s string) bool { return s == "" })...)
		if c.line == "" && strings.Contains(trace, hns.LayerACL) {
			t.Errorf("%s crossed an ACL layer:\n%s", c.k, trace)
		}
	}
	if n := r.sw.Pipeline().Drops.Get(dataplane.DropBlocked); n != 7 {
		t.Errorf("blocked-by-policy drops = %d, want 7", n)
	}
}

func TestACLPrioritiesTiesAndPortRanges(t *testing.T) {
	r := aclRig(t, aclDoc, func(d doc) {
		// docs/ACL.md's web server: web, hole and deny.
		aclEP(t, d, 1, `{"Id": "web", "Action": "Allow", "Direction": "In", "Protocols": "TCP", "LocalPorts": "80-90", "Priority": 200}`)
		aclEP(t, d, 1, `{"Id": "hole", "Action": "Block", "Direction": "In", "Protocols": "TCP", "LocalPorts": "85", "Priority": 100}`)
		// A tie: Block wins, although the Allow comes first.
		aclEP(t, d, 1, `{"Id": "dns-allow", "Action": "Allow", "Direction": "In", "Protocols": "UDP", "LocalPorts": "53", "Priority": 300}`)
		aclEP(t, d, 1, `{"Id": "dns-block", "Action": "Block", "Direction": "In", "Protocols": "UDP", "LocalPorts": "53", "Priority": 300}`)
		// A tie: Allow before Pass.
		aclEP(t, d, 1, `{"Id": "ntp-pass", "Action": "Pass", "Direction": "In", "Protocols": "UDP", "LocalPorts": "123", "Priority": 400}`)
		aclEP(t, d, 1, `{"Id": "ntp-allow", "Action": "Allow", "Direction": "In", "Protocols": "UDP", "LocalPorts": "123", "Priority": 400}`)
		// A tie of two Allows: document order.
		aclEP(t, d, 1, `{"Id": "first", "Action": "Allow", "Direction": "In", "Protocols": "UDP", "LocalPorts": "7", "Priority": 450}`)
		aclEP(t, d, 1, `{"Id": "second", "Action": "Allow", "Direction": "In", "Protocols": "UDP", "LocalPorts": "7", "Priority": 450}`)
		aclEP(t, d, 1, `{"Id": "ssh", "Action": "Allow", "Direction": "In", "Protocols": "TCP", "LocalPorts": "22", "RemotePorts": "1024-65535", "Priority": 500}`)
		aclEP(t, d, 1, `{"Id": "deny", "Action": "Block", "Direction": "In", "Priority": 65535}`)
		// Out, by remote port range, on pod-a.
		aclEP(t, d, 0, `{"Id": "no-8000s", "Action": "Block", "Direction": "Out", "Protocols": "TCP", "RemotePorts": "8000-8010", "Priority": 0}`)
	})
	ep := func(port, dir, name string, prio, tie uint32, action string) string {
		return aclRule(port, dir, hns.ACLEndpointGroup, name, prio, tie, action)
	}
	tcp := func(sport, dport uint16) aclPkt {
		return aclPkt{from: "pod-a", to: "pod-b", proto: "tcp", sport: sport, dport: dport, flags: "S"}
	}
	udp := func(dport uint16) aclPkt {
		return aclPkt{from: "pod-a", to: "pod-b", proto: "udp", sport: 4000, dport: dport}
	}
	for _, c := range []struct {
		k    aclPkt
		want string
		line string
	}{
		{tcp(5000, 79), aclBlocked, ep("pod-b", "in", "deny", 65535, 0, hns.ACLBlock)},
		{tcp(5000, 80), "pod-b", ep("pod-b", "in", "web", 200, 0, hns.ACLAllow)},
		{tcp(5000, 84), "pod-b", ep("pod-b", "in", "web", 200, 0, hns.ACLAllow)},
		{tcp(5000, 85), aclBlocked, ep("pod-b", "in", "hole", 100, 0, hns.ACLBlock)},
		{tcp(5000, 86), "pod-b", ep("pod-b", "in", "web", 200, 0, hns.ACLAllow)},
		{tcp(5000, 90), "pod-b", ep("pod-b", "in", "web", 200, 0, hns.ACLAllow)},
		{tcp(5000, 91), aclBlocked, ep("pod-b", "in", "deny", 65535, 0, hns.ACLBlock)},
		{udp(80), aclBlocked, ep("pod-b", "in", "deny", 65535, 0, hns.ACLBlock)},
		{aclPkt{from: "pod-a", to: "pod-b", proto: "echo", sport: 3, dport: 3}, aclBlocked, ep("pod-b", "in", "deny", 65535, 0, hns.ACLBlock)},
		{tcp(5000, 80).reply("SA"), "pod-a", ""},
		{udp(53), aclBlocked, ep("pod-b", "in", "dns-block", 300, 0, hns.ACLBlock)},
		{udp(123), "pod-b", ep("pod-b", "in", "ntp-allow", 400, 0, hns.ACLAllow)},
		{udp(7), "pod-b", ep("pod-b", "in", "first", 450, 0, hns.ACLAllow)},
		{tcp(1023, 22), aclBlocked, ep("pod-b", "in", "deny", 65535, 0, hns.ACLBlock)},
		{tcp(1024, 22), "pod-b", ep("pod-b", "in", "ssh", 500, 0, hns.ACLAllow)},
		{tcp(65535, 22), "pod-b", ep("pod-b", "in", "ssh", 500, 0, hns.ACLAllow)},
		{aclPkt{from: "pod-a", to: "pod-c", proto: "tcp", sport: 5000, dport: 7999, flags: "S"}, "pod-c", aclDefault("pod-a", "out")},
		{aclPkt{from: "pod-a", to: "pod-c", proto: "tcp", sport: 5000, dport: 8000, flags: "S"}, aclBlocked, ep("pod-a", "out", "no-8000s", 0, 0, hns.ACLBlock)},
		{aclPkt{from: "pod-a", to: "pod-c", proto: "tcp", sport: 5000, dport: 8010, flags: "S"}, aclBlocked, ep("pod-a", "out", "no-8000s", 0, 0, hns.ACLBlock)},
		{aclPkt{from: "pod-a", to: "pod-c", proto: "tcp", sport: 5000, dport: 8011, flags: "S"}, "pod-c", aclDefault("pod-a", "out")},
		// Ports are TCP and UDP only: a UDP datagram to 8000 passes.
		{aclPkt{from: "pod-a", to: "pod-c", proto: "udp", sport: 5000, dport: 8000}, "pod-c", aclDefault("pod-a", "out")},
	} {
		if c.line == "" {
			aclSend(r, c.k, c.want)
			continue
		}
		aclSend(r, c.k, c.want, c.line)
	}
}

func TestACLStatefulReplies(t *testing.T) {
	t.Run("Allow Out, Block In", func(t *testing.T) {
		r := aclRig(t, aclDoc, func(d doc) {
			aclEP(t, d, 0, `{"Id": "out", "Action": "Allow", "Direction": "Out", "Priority": 100}`)
			aclEP(t, d, 0, `{"Id": "deny-in", "Action": "Block", "Direction": "In", "Priority": 65535}`)
		})
		out := aclRule("pod-a", "out", hns.ACLEndpointGroup, "out", 100, 0, hns.ACLAllow)
		deny := aclRule("pod-a", "in", hns.ACLEndpointGroup, "deny-in", 65535, 0, hns.ACLBlock)
		for _, k := range []aclPkt{
			{from: "pod-a", to: "pod-b", proto: "tcp", sport: 5000, dport: 80, flags: "S"},
			{from: "pod-a", to: "pod-b", v6: true, proto: "tcp", sport: 5000, dport: 80, flags: "S"},
			{from: "pod-a", to: "ext", proto: "udp", sport: 5353, dport: 53},
			{from: "pod-a", to: "ext", v6: true, proto: "udp", sport: 5353, dport: 53},
			{from: "pod-a", to: "pod-c", proto: "echo", sport: 77, dport: 77},
			{from: "pod-a", to: "pod-c", v6: true, proto: "echo", sport: 77, dport: 77},
		} {
			to := k.to
			if to == "ext" {
				to = "uplink"
			}
			aclSend(r, k, to, out)
			// The reply is the connection's: it passes on the fast path.
			if p, trace := aclSend(r, k.reply("SA"), "pod-a"); p.Path != dataplane.PathFast {
				t.Errorf("reply to %s on the %s path\n%s", k, p.Path, trace)
			}
		}
		// New connections toward pod-a are blocked.
		aclSend(r, aclPkt{from: "pod-b", to: "pod-a", proto: "tcp", sport: 6000, dport: 22, flags: "S"}, aclBlocked, deny)
		aclSend(r, aclPkt{from: "ext", to: "pod-a", proto: "udp", sport: 53, dport: 5354}, aclBlocked, deny)
		aclSend(r, aclPkt{from: "pod-c", to: "pod-a", v6: true, proto: "echo", sport: 78, dport: 78}, aclBlocked, deny)
	})
	t.Run("network Pass Out is stateful", func(t *testing.T) {
		r := aclRig(t, aclDoc, func(d doc) {
			aclNet(t, d, `{"Id": "pass-out", "Action": "Pass", "Direction": "Out", "Priority": 100}`)
			aclEP(t, d, 0, `{"Id": "deny-in", "Action": "Block", "Direction": "In", "Priority": 65535}`)
		})
		k := aclPkt{from: "pod-a", to: "pod-b", proto: "tcp", sport: 5000, dport: 80, flags: "S"}
		aclSend(r, k, "pod-b", aclRule("pod-a", "out", hns.ACLNetworkGroup, "pass-out", 100, 0, hns.ACLPass))
		aclSend(r, k.reply("SA"), "pod-a")
	})
	t.Run("replies cross no ACL", func(t *testing.T) {
		// pod-b blocks what it sends to pod-a, but its replies to a
		// connection pod-a opened are the connection's.
		r := aclRig(t, aclDoc, func(d doc) {
			aclEP(t, d, 0, `{"Id": "out", "Action": "Allow", "Direction": "Out", "Priority": 100}`)
			aclEP(t, d, 1, `{"Id": "not-to-a", "Action": "Block", "Direction": "Out", "RemoteAddresses": "192.168.1.100", "Priority": 100}`)
		})
		k := aclPkt{from: "pod-a", to: "pod-b", proto: "udp", sport: 5000, dport: 53}
		aclSend(r, k, "pod-b", aclRule("pod-a", "out", hns.ACLEndpointGroup, "out", 100, 0, hns.ACLAllow), aclDefault("pod-b", "in"))
		aclSend(r, k.reply(""), "pod-a")
		aclSend(r, aclPkt{from: "pod-b", to: "pod-a", proto: "udp", sport: 53, dport: 5001}, aclBlocked,
			aclRule("pod-b", "out", hns.ACLEndpointGroup, "not-to-a", 100, 0, hns.ACLBlock))
	})
	t.Run("an answer opens no connection", func(t *testing.T) {
		// pod-a answers first (a SYN-ACK, an echo reply, a mid-stream
		// segment) what pod-b never asked: the default lets the answer
		// out, but without a reply flow, so pod-b's packets back are
		// still judged by pod-a's deny-in (which a reply flow would skip).
		r := aclRig(t, aclDoc, func(d doc) {
			aclEP(t, d, 0, `{"Id": "deny-in", "Action": "Block", "Direction": "In", "Priority": 65535}`)
		})
		deny := aclRule("pod-a", "in", hns.ACLEndpointGroup, "deny-in", 65535, 0, hns.ACLBlock)
		for _, c := range []struct{ answer, back aclPkt }{
			{aclPkt{from: "pod-a", to: "pod-b", proto: "tcp", sport: 22, dport: 40001, flags: "SA"}, aclPkt{from: "pod-b", to: "pod-a", proto: "tcp", sport: 40001, dport: 22, flags: "S"}},
			{aclPkt{from: "pod-a", to: "pod-b", proto: "tcp", sport: 22, dport: 40002, flags: "A"}, aclPkt{from: "pod-b", to: "pod-a", proto: "tcp", sport: 40002, dport: 22, flags: "A"}},
			{aclPkt{from: "pod-a", to: "pod-b", proto: "tcp", sport: 22, dport: 40003, flags: "SF"}, aclPkt{from: "pod-b", to: "pod-a", proto: "tcp", sport: 40003, dport: 22, flags: "S"}},
			{aclPkt{from: "pod-a", to: "pod-b", proto: "tcp", sport: 22, dport: 40004, flags: "SR"}, aclPkt{from: "pod-b", to: "pod-a", proto: "tcp", sport: 40004, dport: 22, flags: "S"}},
			{aclPkt{from: "pod-a", to: "pod-b", proto: "echo-reply", sport: 7, dport: 7}, aclPkt{from: "pod-b", to: "pod-a", proto: "echo", sport: 7, dport: 7}},
			{aclPkt{from: "pod-a", to: "pod-b", v6: true, proto: "echo-reply", sport: 8, dport: 8}, aclPkt{from: "pod-b", to: "pod-a", v6: true, proto: "echo", sport: 8, dport: 8}},
		} {
			aclSend(r, c.answer, "pod-b", aclDefault("pod-a", "out"), "stateful: not a connection's first packet: no reply flow")
			aclSend(r, c.back, aclBlocked, deny)
		}
	})
	t.Run("the default allow is stateful", func(t *testing.T) {
		// Nothing matches pod-a's SYN: the layer's default lets it out
		// and makes the connection stateful, so the reply passes pod-a's
		// default-deny In; a new connection from pod-b does not.
		r := aclRig(t, aclDoc, func(d doc) {
			aclEP(t, d, 0, `{"Id": "deny-in", "Action": "Block", "Direction": "In", "Priority": 65535}`)
		})
		k := aclPkt{from: "pod-a", to: "pod-b", proto: "tcp", sport: 5000, dport: 80, flags: "S"}
		aclSend(r, k, "pod-b", aclDefault("pod-a", "out"))
		aclSend(r, k.reply("SA"), "pod-a")
		aclSend(r, aclPkt{from: "pod-b", to: "pod-a", proto: "tcp", sport: 6000, dport: 22, flags: "S"}, aclBlocked,
			aclRule("pod-a", "in", hns.ACLEndpointGroup, "deny-in", 65535, 0, hns.ACLBlock))
	})
}

// aclApply applies aclDoc with edit, decoded without validation as a
// caller holding a Config would pass it.
func aclApply(t *testing.T, sw *Switch, edit func(d doc)) {
	t.Helper()
	var c Config
	if err := json.Unmarshal(editJSON(t, aclDoc, edit), &c); err != nil {
		t.Fatal(err)
	}
	if err := sw.Apply(&c); err != nil {
		t.Fatal(err)
	}
}

func TestACLPolicyChange(t *testing.T) {
	base := func(d doc) {
		aclEP(t, d, 0, `{"Id": "out", "Action": "Allow", "Direction": "Out", "Priority": 100}`)
		aclEP(t, d, 0, `{"Id": "deny-in", "Action": "Block", "Direction": "In", "Priority": 65535}`)
	}
	more := func(d doc) {
		base(d)
		aclEP(t, d, 0, `{"Id": "from-c", "Action": "Allow", "Direction": "In", "RemoteAddresses": "192.168.1.102", "Priority": 200}`)
	}
	blocked := func(d doc) {
		more(d)
		aclEP(t, d, 0, `{"Id": "no-80", "Action": "Block", "Direction": "Out", "Protocols": "TCP", "RemotePorts": "80", "Priority": 50}`)
	}
	r := aclRig(t, aclDoc, base)
	deny := aclRule("pod-a", "in", hns.ACLEndpointGroup, "deny-in", 65535, 0, hns.ACLBlock)
	established := func(sport, dport uint16) aclPkt {
		k := aclPkt{from: "pod-a", to: "pod-b", proto: "tcp", sport: sport, dport: dport, flags: "S"}
		aclSend(r, k, "pod-b")
		aclSend(r, k.reply("SA"), "pod-a")
		k.flags = "A"
		aclSend(r, k, "pod-b")
		return k
	}
	c1 := established(5000, 80)
	c2 := established(5001, 81)
	c3 := established(5002, 80)
	fromC := aclPkt{from: "pod-c", to: "pod-a", proto: "tcp", sport: 7000, dport: 22, flags: "S"}
	aclSend(r, fromC, aclBlocked, deny)

	// A change that allows more: established connections go on, in both
	// directions; what was blocked is allowed on its next packet.
	aclApply(t, r.sw, more)
	if _, trace := aclSend(r, c1, "pod-b"); !strings.Contains(trace, "revalidate connection") {
		t.Errorf("c1 was not revalidated:\n%s", trace)
	}
	aclSend(r, c1.reply("A"), "pod-a")
	aclSend(r, c2.reply("A"), "pod-a")
	aclSend(r, fromC, "pod-a", aclRule("pod-a", "in", hns.ACLEndpointGroup, "from-c", 200, 0, hns.ACLAllow))

	// A change that blocks: an affected connection's next packet is
	// dropped, whichever direction it goes; replies are no longer the
	// connection's and meet pod-a's Block In. An unaffected connection
	// goes on.
	aclApply(t, r.sw, blocked)
	noPort80 := aclRule("pod-a", "out", hns.ACLEndpointGroup, "no-80", 50, 0, hns.ACLBlock)
	if _, trace := aclSend(r, c1, aclBlocked, noPort80); !strings.Contains(trace, "revalidate connection") {
		t.Errorf("c1 was not revalidated:\n%s", trace)
	}
	aclSend(r, c1.reply("A"), aclBlocked, deny)
	aclSend(r, c3.reply("A"), aclBlocked, noPort80, deny) // first packet after the change is the reply
	aclSend(r, c3, aclBlocked)
	aclSend(r, c2.reply("A"), "pod-a")
	aclSend(r, c2, "pod-b")
	aclSend(r, aclPkt{from: "pod-a", to: "pod-b", proto: "tcp", sport: 5003, dport: 80, flags: "S"}, aclBlocked, noPort80)

	// The block lifted, the connection resumes.
	aclApply(t, r.sw, more)
	aclSend(r, c1, "pod-b")
	if p, _ := aclSend(r, c1.reply("A"), "pod-a"); p.Path != dataplane.PathFast {
		t.Errorf("c1's reply after the block was lifted on the %s path, want fast", p.Path)
	}
}

func TestACLNetworkWide(t *testing.T) {
	net := func(name string, prio, tie uint32, action string) string {
		return aclRule("pod-b", "in", hns.ACLNetworkGroup, name, prio, tie, action)
	}
	ep := func(name string, prio, tie uint32, action string) string {
		return aclRule("pod-b", "in", hns.ACLEndpointGroup, name, prio, tie, action)
	}
	tcp := func(to string, dport uint16) aclPkt {
		return aclPkt{from: "pod-a", to: to, proto: "tcp", sport: 5000, dport: dport, flags: "S"}
	}
	t.Run("Pass overridden by an endpoint Block", func(t *testing.T) {
		r := aclRig(t, aclDoc, func(d doc) {
			aclNet(t, d, `{"Id": "net-pass", "Action": "Pass", "Direction": "In", "Priority": 100}`)
			// Never reached: the group's first match is net-pass.
			aclNet(t, d, `{"Id": "net-block", "Action": "Block", "Direction": "In", "Priority": 200}`)
			aclEP(t, d, 1, `{"Id": "no-ssh", "Action": "Block", "Direction": "In", "Protocols": "TCP", "LocalPorts": "22", "Priority": 60000}`)
			aclEP(t, d, 1, `{"Id": "web", "Action": "Allow", "Direction": "In", "Protocols": "TCP", "LocalPorts": "80", "Priority": 60000}`)
		})
		aclSend(r, tcp("pod-b", 22), aclBlocked, ep("no-ssh", 60000, 0, hns.ACLBlock))
		aclSend(r, tcp("pod-b", 80), "pod-b", ep("web", 60000, 1, hns.ACLAllow))
		aclSend(r, tcp("pod-b", 443), "pod-b", net("net-pass", 100, 0, hns.ACLPass))
		aclSend(r, tcp("pod-c", 22), "pod-c", aclRule("pod-c", "in", hns.ACLNetworkGroup, "net-pass", 100, 0, hns.ACLPass))
	})
	t.Run("the baseline of docs/ACL.md", func(t *testing.T) {
		r := aclRig(t, aclDoc, func(d doc) {
			aclNet(t, d, `{"Id": "net-pass", "Action": "Pass", "Direction": "In", "Priority": 100}`)
			aclNet(t, d, `{"Id": "net-no-telnet", "Action": "Block", "Direction": "In", "Protocols": "TCP", "LocalPorts": "23", "Priority": 50}`)
			aclEP(t, d, 1, `{"Id": "no-ssh", "Action": "Block", "Direction": "In", "Protocols": "TCP", "LocalPorts": "22", "Priority": 60000}`)
			aclEP(t, d, 1, `{"Id": "telnet", "Action": "Allow", "Direction": "In", "Protocols": "TCP", "LocalPorts": "23", "Priority": 0}`)
		})
		aclSend(r, tcp("pod-b", 22), aclBlocked, ep("no-ssh", 60000, 0, hns.ACLBlock))
		k := tcp("pod-b", 443)
		aclSend(r, k, "pod-b", net("net-pass", 100, 0, hns.ACLPass))
		if p, _ := aclSend(r, k.reply("SA"), "pod-a"); p.Path != dataplane.PathFast {
			t.Errorf("the reply to a connection net-pass allowed took the %s path, want fast (stateful)", p.Path)
		}
		aclSend(r, tcp("pod-b", 23), aclBlocked, net("net-no-telnet", 50, 0, hns.ACLBlock))
		aclSend(r, tcp("pod-c", 23), aclBlocked, aclRule("pod-c", "in", hns.ACLNetworkGroup, "net-no-telnet", 50, 0, hns.ACLBlock))
		aclSend(r, tcp("pod-c", 22), "pod-c", aclRule("pod-c", "in", hns.ACLNetworkGroup, "net-pass", 100, 0, hns.ACLPass))
	})
	t.Run("network Block and Allow are final", func(t *testing.T) {
		r := aclRig(t, aclDoc, func(d doc) {
			aclNet(t, d, `{"Id": "net-no-telnet", "Action": "Block", "Direction": "In", "Protocols": "TCP", "LocalPorts": "23", "Priority": 100}`)
			aclNet(t, d, `{"Id": "net-web", "Action": "Allow", "Direction": "In", "Protocols": "TCP", "LocalPorts": "80", "Priority": 100}`)
			aclEP(t, d, 1, `{"Id": "telnet", "Action": "Allow", "Direction": "In", "Protocols": "TCP", "LocalPorts": "23", "Priority": 0}`)
			aclEP(t, d, 1, `{"Id": "deny", "Action": "Block", "Direction": "In", "Priority": 0}`)
		})
		aclSend(r, tcp("pod-b", 23), aclBlocked, net("net-no-telnet", 100, 0, hns.ACLBlock))
		aclSend(r, tcp("pod-c", 23), aclBlocked, aclRule("pod-c", "in", hns.ACLNetworkGroup, "net-no-telnet", 100, 0, hns.ACLBlock))
		aclSend(r, tcp("pod-b", 80), "pod-b", net("net-web", 100, 1, hns.ACLAllow))
		aclSend(r, tcp("pod-b", 81), aclBlocked, ep("deny", 0, 0, hns.ACLBlock))
		aclSend(r, tcp("pod-c", 81), "pod-c", aclDefault("pod-c", "in"))
	})
}

// ACLs beside outbound NAT and port mappings: an Out rule sees the pod's
// own address (NAT comes after), an In rule the mapped port (the mapping's
// translation comes before).
func TestACLWithNAT(t *testing.T) {
	r := aclRig(t, natDoc, func(d doc) {
		aclEP(t, d, 0, `{"Id": "no-https", "Action": "Block", "Direction": "Out", "Protocols": "TCP",
			"LocalAddresses": "10.244.0.10", "RemotePorts": "443", "Priority": 100}`)
		aclEP(t, d, 0, `{"Id": "nat-address", "Action": "Block", "Direction": "Out", "LocalAddresses": "192.168.1.10", "Priority": 50}`)
		aclEP(t, d, 0, `{"Id": "out", "Action": "Allow", "Direction": "Out", "LocalAddresses": "10.244.0.10,fd00:244::10", "Priority": 200}`)
		aclEP(t, d, 0, `{"Id": "external-port", "Action": "Block", "Direction": "In", "Protocols": "TCP", "LocalPorts": "8080", "Priority": 90}`)
		aclEP(t, d, 0, `{"Id": "mapped-web", "Action": "Allow", "Direction": "In", "Protocols": "TCP", "LocalAddresses": "10.244.0.10",
			"LocalPorts": "80", "RemoteAddresses": "198.51.100.0/24", "Priority": 100}`)
		aclEP(t, d, 0, `{"Id": "deny-in", "Action": "Block", "Direction": "In", "Priority": 65535}`)
	})
	ep := func(dir, name string, prio uint32, action string) string {
		return aclRule("ov-a", dir, hns.ACLEndpointGroup, name, prio, 0, action)
	}
	check := func(trace string, lines ...string) {
		t.Helper()
		for _, l := range lines {
			if !slices.Contains(strings.Split(trace, "\n"), l) {
				t.Fatalf("the trace has no line\n  %s\ntrace:\n%s", l, trace)
			}
		}
	}
	// Out, translated after the ACL; the reply passes although ov-a
	// blocks what it did not ask for.
	syn := natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: 5000, dst: "203.0.113.5", dport: 80, proto: "tcp", flags: "S"}
	_, trace := natAt(r, sec, "ov-a", syn)
	check(trace, ep("out", "out", 200, hns.ACLAllow))
	ext := natOut(r, sec, "ov-a", natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: 5001, dst: "203.0.113.5", dport: 80, proto: "tcp", flags: "S"})
	if want := netip.MustParseAddrPort("192.168.1.10:5001"); ext != want {
		t.Fatalf("SYN left as %s, want %s", ext, want)
	}
	natReply(r, sec, natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: 5001, dst: "203.0.113.5", dport: 80, proto: "tcp"}, ext, "SA", "ov-a")
	six := natPkt{smac: natOvA, dmac: natDR, src: "fd00:244::10", sport: 5002, dst: "2001:db8::5", dport: 80, proto: "tcp", flags: "S"}
	ext6 := natOut(r, sec, "ov-a", six)
	natReply(r, sec, six, ext6, "SA", "ov-a")
	https := syn
	https.dport = 443
	_, trace = natAt(r, sec, "ov-a", https)
	check(trace, ep("out", "no-https", 100, hns.ACLBlock))
	natGo(r, sec, "ov-a", https, aclBlocked)

	// In through the port mapping: the ACL sees ov-a's port 80 and the
	// client's address.
	in := natPkt{smac: natRouter, dmac: natHost, src: "198.51.100.7", sport: 40000, dst: "192.168.1.10", dport: 8080, proto: "tcp", flags: "S"}
	_, trace = natAt(r, sec, "uplink", natPkt{smac: natRouter, dmac: natHost, src: "198.51.100.7", sport: 40001, dst: "192.168.1.10", dport: 8080, proto: "tcp", flags: "S"})
	// Tied with no-https (a Block, first), though in the other direction.
	check(trace, aclRule("ov-a", "in", hns.ACLEndpointGroup, "mapped-web", 100, 1, hns.ACLAllow))
	natGo(r, sec, "uplink", in, "ov-a")
	rep := natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: 80, dst: "198.51.100.7", dport: 40000, proto: "tcp", flags: "SA"}
	natGo(r, sec, "ov-a", rep, "uplink")
	other := in
	other.src = "203.0.113.9"
	_, trace = natAt(r, sec, "uplink", other)
	check(trace, ep("in", "deny-in", 65535, hns.ACLBlock))
	natGo(r, sec, "uplink", other, aclBlocked)
	// Hairpin from ov-b to the mapping: ov-a sees ov-b's address.
	hb := natPkt{smac: natOvB, dmac: natDR, src: "10.244.0.11", sport: 41000, dst: "192.168.1.10", dport: 8080, proto: "tcp", flags: "S"}
	_, trace = natAt(r, sec, "ov-b", hb)
	check(trace, ep("in", "deny-in", 65535, hns.ACLBlock))
}

// ACLs beside load balancing: an Out rule at the client sees the
// Service's VIP and port (balancing comes after); an In rule at the
// backend sees its own address and target port, and the client's address
// (a local backend is never source-translated, with DSR or without), or
// the SourceVIP when the client is the backend itself.
func TestACLWithLoadBalancer(t *testing.T) {
	for _, dsr := range []bool{false, true} {
		t.Run(fmt.Sprintf("dsr=%v", dsr), func(t *testing.T) {
			r := aclRig(t, lbDoc, func(d doc) {
				hlbLB(d, 0)["HostComputeEndpoints"] = []any{"ov-b"}
				if dsr {
					hlbLB(d, 0)["Flags"] = 1
				}
				aclEP(t, d, 1, `{"Id": "from-a", "Action": "Allow", "Direction": "In", "Protocols": "TCP",
					"RemoteAddresses": "10.244.0.10", "LocalAddresses": "10.244.0.11", "LocalPorts": "8080", "Priority": 100}`)
				aclEP(t, d, 1, `{"Id": "from-source-vip", "Action": "Allow", "Direction": "In", "Protocols": "TCP",
					"RemoteAddresses": "10.244.0.250", "LocalPorts": "8080", "Priority": 110}`)
				aclEP(t, d, 1, `{"Id": "from-network", "Action": "Allow", "Direction": "In", "Protocols": "TCP",
					"RemoteAddresses": "198.51.100.0/24", "LocalPorts": "8080", "Priority": 120}`)
				aclEP(t, d, 1, `{"Id": "to-vip", "Action": "Block", "Direction": "In", "LocalAddresses": "10.96.0.10", "Priority": 50}`)
				aclEP(t, d, 1, `{"Id": "to-service-port", "Action": "Block", "Direction": "In", "Protocols": "TCP", "LocalPorts": "80", "Priority": 60}`)
				aclEP(t, d, 1, `{"Id": "deny-in", "Action": "Block", "Direction": "In", "Priority": 65535}`)
				aclEP(t, d, 0, `{"Id": "not-the-backend", "Action": "Block", "Direction": "Out", "Protocols": "TCP", "RemoteAddresses": "10.244.0.11", "Priority": 100}`)
				aclEP(t, d, 0, `{"Id": "web-vip", "Action": "Allow", "Direction": "Out", "Protocols": "TCP",
					"RemoteAddresses": "10.96.0.10", "RemotePorts": "80", "Priority": 200}`)
				aclEP(t, d, 2, `{"Id": "no-web", "Action": "Block", "Direction": "Out", "Protocols": "TCP",
					"RemoteAddresses": "10.96.0.10", "RemotePorts": "80", "Priority": 100}`)
			})
			rule := func(port, dir, name string, prio uint32, action string) string {
				return aclRule(port, dir, hns.ACLEndpointGroup, name, prio, 0, action)
			}
			send := func(in string, k natPkt, want string, lines ...string) {
				t.Helper()
				p, trace := r.run(in, natFrame(t, k), dataplane.Offload{})
				if got := outName(r.sw, p); got != want {
					t.Fatalf("%s:%d -> %s:%d from %s: %s, want %s\ntrace:\n%s", k.src, k.sport, k.dst, k.dport, in, got, want, trace)
				}
				for _, l := range lines {
					if !slices.Contains(strings.Split(trace, "\n"), l) {
						t.Fatalf("%s:%d -> %s:%d: the trace has no line\n  %s\ntrace:\n%s", k.src, k.sport, k.dst, k.dport, l, trace)
					}
				}
			}
			// A pod client: the VIP at its port, its own address at the
			// backend's.
			syn := natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: 5000, dst: "10.96.0.10", dport: 80, proto: "tcp", flags: "S"}
			send("ov-a", syn, "ov-b", rule("ov-a", "out", "web-vip", 200, hns.ACLAllow), rule("ov-b", "in", "from-a", 100, hns.ACLAllow))
			rep := natPkt{smac: lbOvB, dmac: lbDR, src: "10.244.0.11", sport: 8080, dst: "10.244.0.10", dport: 5000, proto: "tcp", flags: "SA"}
			send("ov-b", rep, "ov-a")
			send("ov-a", natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: 5001, dst: "10.244.0.11", dport: 8080, proto: "tcp", flags: "S"},
				aclBlocked, rule("ov-a", "out", "not-the-backend", 100, hns.ACLBlock))
			send("ov-c", natPkt{smac: lbOvC, dmac: lbDR, src: "10.244.0.12", sport: 5000, dst: "10.96.0.10", dport: 80, proto: "tcp", flags: "S"},
				aclBlocked, rule("ov-c", "out", "no-web", 100, hns.ACLBlock))
			send("ov-c", natPkt{smac: lbOvC, dmac: lbDR, src: "10.244.0.12", sport: 5000, dst: "10.96.0.10", dport: 53, proto: "udp"},
				aclBlocked, aclDefault("ov-c", "out"), rule("ov-b", "in", "deny-in", 65535, hns.ACLBlock))
			// Hairpin: the backend is its own client, and sees the
			// SourceVIP.
			send("ov-b", natPkt{smac: lbOvB, dmac: lbDR, src: "10.244.0.11", sport: 5000, dst: "10.96.0.10", dport: 80, proto: "tcp", flags: "S"},
				"ov-b", aclDefault("ov-b", "out"), rule("ov-b", "in", "from-source-vip", 110, hns.ACLAllow))
			// From the network to the NodePort: the client's address.
			send("uplink", natPkt{smac: natRouter, dmac: lbHost, src: "198.51.100.7", sport: 40000, dst: "192.168.1.10", dport: 30080, proto: "tcp", flags: "S"},
				"ov-b", rule("ov-b", "in", "from-network", 120, hns.ACLAllow))
			send("uplink", natPkt{smac: natRouter, dmac: lbHost, src: "203.0.113.7", sport: 40000, dst: "192.168.1.10", dport: 30080, proto: "tcp", flags: "S"},
				aclBlocked, rule("ov-b", "in", "deny-in", 65535, hns.ACLBlock))
		})
	}
}
