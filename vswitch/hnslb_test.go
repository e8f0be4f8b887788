package vswitch

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/encap"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vfp"
)

// Service load balancing at the HNS level (validation of LoadBalancers and
// remote endpoints, and their lowering), switch.loadBalancers and the lb
// action at the VFP level, and rejected policies leaving the running one
// in place.

// hlbVFPDoc is a VFP-level document with one load balancer of a local and
// a remote backend, balanced at pod-a's port and at the uplink.
const hlbVFPDoc = `{
  "switch": {"name": "vfp",
    "natPools": [{"ip": "192.0.2.1"}],
    "loadBalancers": [
      {"name": "svc", "targetPort": 8080, "sourceVIP": "192.0.2.1", "backends": [
        {"ip": "10.0.0.11", "modify": {"dstMAC": "02:00:00:00:00:0b"}},
        {"ip": "10.0.1.5", "remote": true, "modify": {"dstMAC": "02:00:00:00:01:01"}}]}]},
  "ports": [
    {"name": "pod-a", "mac": "02:00:00:00:00:0a", "ips": ["10.0.0.10"],
     "layers": [{"name": "NAT_LAYER", "groups": [{"name": "load-balancers", "rules": [
       {"name": "lb", "priority": 100, "match": {"direction": "out", "protocols": ["tcp"], "dstIPs": ["10.96.0.10"], "dstPorts": ["80"]},
        "action": {"type": "allow", "lb": "svc"}, "terminating": true, "stateful": true}]}]}]},
    {"name": "pod-b", "mac": "02:00:00:00:00:0b", "ips": ["10.0.0.11"]},
    {"name": "uplink", "mac": "02:00:00:00:00:fe", "ips": ["192.0.2.1"], "uplink": true,
     "layers": [{"name": "NAT_LAYER", "groups": [{"name": "load-balancers", "rules": [
       {"name": "lb", "priority": 100, "match": {"direction": "out", "protocols": ["tcp"], "dstIPs": ["192.0.2.1"], "dstPorts": ["30080"]},
        "action": {"type": "allow", "lb": "svc", "lbRoute": true}, "terminating": true, "stateful": true}]}]}]}
  ]
}`

// Shorthands into lbDoc and hlbVFPDoc.
func hlbLB(d doc, i int) doc         { return at(d, "LoadBalancers", i) }
func hlbPM(d doc, i, j int) doc      { return at(d, "LoadBalancers", i, "PortMappings", j) }
func hlbEP(d doc, i int) doc         { return at(d, "Endpoints", i) }
func hlbVFPLB(d doc, i int) doc      { return at(d, "switch", "loadBalancers", i) }
func hlbVFPBackend(d doc, i int) doc { return at(d, "switch", "loadBalancers", 0, "backends", i) }
func hlbVFPRule(d doc) doc           { return at(d, "ports", 0, "layers", 0, "groups", 0, "rules", 0) }
func hlbVFPUplinkRule(d doc) doc     { return at(d, "ports", 2, "layers", 0, "groups", 0, "rules", 0) }

// hlbL2Doc is natL2Doc with a remote endpoint (far-1, on another host of
// the same L2Bridge network) and a Service of pod-b and far-1.
func hlbL2Doc(t *testing.T) string {
	t.Helper()
	return string(editJSON(t, natL2Doc, func(d doc) {
		hnsAdd(t, d, "Endpoints", `{"Name": "far-1", "HostComputeNetwork": "cbr0", "Flags": 1,
			"IpConfigurations": [{"IpAddress": "192.168.7.5"}]}`)
		hnsAdd(t, d, "LoadBalancers", `{"Name": "svc", "HostComputeEndpoints": ["pod-b", "far-1"], "SourceVIP": "192.168.1.50",
			"FrontendVIPs": ["10.96.0.50"], "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80}]}`)
	}))
}

func TestHNSLBBaseDocumentsParse(t *testing.T) {
	for name, s := range map[string]string{"lbDoc": lbDoc, "hlbVFPDoc": hlbVFPDoc, "hlbL2Doc": hlbL2Doc(t)} {
		if _, err := ParseConfig([]byte(s)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestHNSLBErrors(t *testing.T) {
	const (
		web    = `LoadBalancers[0] "web"`
		web6   = `LoadBalancers[1] "web6"`
		far    = `LoadBalancers[2] "far"`
		farDSR = `LoadBalancers[3] "far-dsr"`
		node   = `LoadBalancers[5] "nodeport"`
		sticky = `LoadBalancers[6] "sticky"`
		remote = `Endpoints[3] "remote-1"`
		ovA    = `Endpoints[0] "ov-a"`
		vfp    = "switch.loadBalancers[0]"
		rule   = "ports[0].layers[0].groups[0].rules[0]"
	)
	l2 := hlbL2Doc(t)
	tests := []struct {
		name string
		base string // lbDoc when empty
		edit func(t *testing.T, d doc)
		want string // a substring of the error: the object, the field, what is wrong
	}{
		// LoadBalancers: names and flags.
		{name: "no name", edit: func(t *testing.T, d doc) { delete(hlbLB(d, 4), "Name") },
			want: "LoadBalancers[4].Name: a load balancer needs a name"},
		{name: "duplicate name", edit: func(t *testing.T, d doc) { hlbLB(d, 6)["Name"] = "web" },
			want: `LoadBalancers[6] "web".Name: LoadBalancers[0] has this name`},
		{name: "unknown flag bits", edit: func(t *testing.T, d doc) { hlbLB(d, 0)["Flags"] = 4 },
			want: web + ".Flags: 4 has bits ufp does not know (1 DSR, 2 IPv6)"},
		{name: "unknown field", edit: func(t *testing.T, d doc) { hlbLB(d, 0)["SessionAffinity"] = true },
			want: `LoadBalancers[0].SessionAffinity: unknown field "SessionAffinity"`},
		{name: "switch.loadBalancers at the HNS level", edit: func(t *testing.T, d doc) {
			at(d, "switch")["loadBalancers"] = jsonValue(t, `[{"name": "x", "backends": []}]`)
		}, want: "switch.loadBalancers: at the HNS level LoadBalancers make them"},

		// SourceVIP.
		{name: "SourceVIP not an address", edit: func(t *testing.T, d doc) { hlbLB(d, 0)["SourceVIP"] = "10.244.0" },
			want: web + `.SourceVIP: "10.244.0" is not an IP address`},
		{name: "SourceVIP of the wrong family", edit: func(t *testing.T, d doc) { hlbLB(d, 0)["SourceVIP"] = "fd00:244::250" },
			want: web + ".SourceVIP: fd00:244::250 is not IPv4: the load balancer is IPv4 (Flags bit 2 is IPv6)"},
		{name: "IPv4 SourceVIP of an IPv6 load balancer", edit: func(t *testing.T, d doc) { hlbLB(d, 1)["SourceVIP"] = "10.244.0.250" },
			want: web6 + ".SourceVIP: 10.244.0.250 is not IPv6: the load balancer is IPv6 (Flags bit 2 is IPv6)"},
		{name: "SourceVIP multicast", edit: func(t *testing.T, d doc) { hlbLB(d, 0)["SourceVIP"] = "224.0.0.5" },
			want: web + ".SourceVIP: 224.0.0.5 is not a unicast address"},
		{name: "SourceVIP an underlay neighbour", edit: func(t *testing.T, d doc) { hlbLB(d, 0)["SourceVIP"] = "192.168.1.20" },
			want: web + ".SourceVIP: 192.168.1.20 is an underlay neighbour (Uplink.Neighbors), not this host"},
		{name: "SourceVIP a subnet gateway", edit: func(t *testing.T, d doc) { hlbLB(d, 0)["SourceVIP"] = "10.244.0.1" },
			want: web + `.SourceVIP: 10.244.0.1 is the gateway of Networks[0] "ovl"`},
		{name: "SourceVIP an endpoint's address", edit: func(t *testing.T, d doc) { hlbLB(d, 0)["SourceVIP"] = "10.244.0.10" },
			want: ovA + ".IpConfigurations[0].IpAddress: 10.244.0.10 is a NAT address (VirtualIP, VIP or SourceVIP)"},
		{name: "remote backends without SourceVIP", edit: func(t *testing.T, d doc) { delete(hlbLB(d, 2), "SourceVIP") },
			want: far + ".SourceVIP: the load balancer has remote endpoints, and without DSR their replies would not come back through this host"},
		{name: "DSR from the network without SourceVIP", edit: func(t *testing.T, d doc) { hlbPM(d, 3, 0)["Flags"] = 0 },
			want: farDSR + ".SourceVIP: the load balancer has remote endpoints, and connections from the network (the port mapping is not ILB) reach them translated to it"},

		// FrontendVIPs.
		{name: "frontend not an address", edit: func(t *testing.T, d doc) { hlbLB(d, 0)["FrontendVIPs"] = []any{"10.96.0.10", "svc.local"} },
			want: web + `.FrontendVIPs[1]: "svc.local" is not an IP address`},
		{name: "frontend of the wrong family", edit: func(t *testing.T, d doc) { hlbLB(d, 1)["FrontendVIPs"] = []any{"10.96.0.11"} },
			want: web6 + ".FrontendVIPs[0]: 10.96.0.11 is not IPv6: the load balancer is IPv6 (Flags bit 2 is IPv6)"},
		{name: "frontend broadcast", edit: func(t *testing.T, d doc) { hlbLB(d, 0)["FrontendVIPs"] = []any{"255.255.255.255"} },
			want: web + ".FrontendVIPs[0]: 255.255.255.255 is not a unicast address"},
		{name: "frontend listed twice", edit: func(t *testing.T, d doc) { hlbLB(d, 0)["FrontendVIPs"] = []any{"10.96.0.10", "10.96.0.10"} },
			want: web + ".FrontendVIPs[1]: 10.96.0.10 is listed twice"},
		{name: "frontend an underlay neighbour", edit: func(t *testing.T, d doc) { hlbLB(d, 0)["FrontendVIPs"] = []any{"192.168.1.1"} },
			want: web + ".FrontendVIPs[0]: 192.168.1.1 is an underlay neighbour (Uplink.Neighbors), not this host"},
		{name: "frontend a subnet gateway", edit: func(t *testing.T, d doc) { hlbLB(d, 1)["FrontendVIPs"] = []any{"fd00:244::1"} },
			want: web6 + `.FrontendVIPs[0]: fd00:244::1 is the gateway of Networks[0] "ovl"`},
		{name: "frontend an endpoint's address", edit: func(t *testing.T, d doc) { hlbLB(d, 0)["FrontendVIPs"] = []any{"10.244.0.12"} },
			want: `Endpoints[2] "ov-c".IpConfigurations[0].IpAddress: 10.244.0.12 is a frontend of ` + web + ".PortMappings[0]"},
		{name: "IPv6 NodePort without an IPv6 host address", edit: func(t *testing.T, d doc) {
			natUplink(d)["IpAddresses"] = []any{"192.168.1.10"}
			delete(hlbLB(d, 1), "FrontendVIPs")
		}, want: web6 + ".FrontendVIPs: none given, so the Service is on the host's IPv6 address (a NodePort), but Uplink.IpAddresses has none"},

		// Frontends taken.
		{name: "frontend port taken by another load balancer", edit: func(t *testing.T, d doc) { hlbLB(d, 6)["FrontendVIPs"] = []any{"10.96.0.10"} },
			want: sticky + ".PortMappings[0].ExternalPort: tcp/80 on 10.96.0.10 is taken by " + web + ".PortMappings[0]"},
		{name: "frontend port taken within a load balancer", edit: func(t *testing.T, d doc) {
			hnsAdd(t, hlbLB(d, 0), "PortMappings", `{"Protocol": 17, "InternalPort": 53, "ExternalPort": 53}`)
		}, want: web + ".PortMappings[2].ExternalPort: udp/53 on 10.96.0.10 is taken by " + web + ".PortMappings[1]"},
		{name: "NodePort taken by a PortMapping", edit: func(t *testing.T, d doc) {
			hlbEP(d, 0)["Policies"] = jsonValue(t, `[{"Type": "PortMapping", "Settings": {"Protocol": 6, "InternalPort": 80, "ExternalPort": 30080}}]`)
		}, want: node + ".PortMappings[0].ExternalPort: tcp/30080 on 192.168.1.10 is taken by " + ovA + ".Policies[0]"},
		{name: "NodePort on the VXLAN port", edit: func(t *testing.T, d doc) {
			hnsAdd(t, hlbLB(d, 5), "PortMappings", `{"Protocol": 17, "InternalPort": 4789, "ExternalPort": 4789}`)
		}, want: node + ".PortMappings[1].ExternalPort: udp/4789 on the host is the VXLAN port: the uplink decapsulates what arrives there"},
		{name: "NodePort on a VxlanPort network policy's port", edit: func(t *testing.T, d doc) {
			hnsAdd(t, at(d, "Networks", 0), "Policies", `{"Type": "VxlanPort", "Settings": {"Port": 4790}}`)
			hnsAdd(t, hlbLB(d, 5), "PortMappings", `{"Protocol": 17, "InternalPort": 53, "ExternalPort": 4790}`)
		}, want: node + ".PortMappings[1].ExternalPort: udp/4790 on the host is the VXLAN port"},

		// HostComputeEndpoints.
		{name: "backend listed twice", edit: func(t *testing.T, d doc) { hlbLB(d, 0)["HostComputeEndpoints"] = []any{"ov-b", "ov-c", "ov-b"} },
			want: web + `.HostComputeEndpoints[2]: "ov-b" is listed twice (also HostComputeEndpoints[0])`},
		{name: "backend not found", edit: func(t *testing.T, d doc) { hlbLB(d, 0)["HostComputeEndpoints"] = []any{"ov-b", "ov-d"} },
			want: web + `.HostComputeEndpoints[1]: no endpoint is named "ov-d"`},
		{name: "local backend without an address of the family", edit: func(t *testing.T, d doc) {
			hlbEP(d, 2)["IpConfigurations"] = jsonValue(t, `[{"IpAddress": "10.244.0.12"}]`)
		}, want: web6 + `.HostComputeEndpoints[1]: endpoint "ov-c" has no IPv6 address`},
		{name: "remote backend without an address of the family", edit: func(t *testing.T, d doc) {
			hlbLB(d, 1)["HostComputeEndpoints"] = []any{"ov-b", "remote-1"}
		}, want: web6 + `.HostComputeEndpoints[1]: endpoint "remote-1" has no IPv6 address`},

		// DrainingEndpoints.
		{name: "backend both active and draining", edit: func(t *testing.T, d doc) { hlbLB(d, 0)["DrainingEndpoints"] = []any{"ov-c"} },
			want: web + `.DrainingEndpoints[0]: "ov-c" is also HostComputeEndpoints[1]: a backend is either active or draining`},
		{name: "draining backend listed twice", edit: func(t *testing.T, d doc) {
			hlbLB(d, 0)["HostComputeEndpoints"] = []any{"ov-b"}
			hlbLB(d, 0)["DrainingEndpoints"] = []any{"ov-c", "remote-1", "ov-c"}
		}, want: web + `.DrainingEndpoints[2]: "ov-c" is listed twice (also DrainingEndpoints[0])`},
		{name: "draining backend not found", edit: func(t *testing.T, d doc) { hlbLB(d, 0)["DrainingEndpoints"] = []any{"ov-d"} },
			want: web + `.DrainingEndpoints[0]: no endpoint is named "ov-d"`},
		{name: "draining backend without an address of the family", edit: func(t *testing.T, d doc) {
			hlbLB(d, 1)["HostComputeEndpoints"] = []any{"ov-b"}
			hlbLB(d, 1)["DrainingEndpoints"] = []any{"ov-c", "remote-1"}
		}, want: web6 + `.DrainingEndpoints[1]: endpoint "remote-1" has no IPv6 address`},
		{name: "draining remote backend without SourceVIP", edit: func(t *testing.T, d doc) {
			hlbLB(d, 0)["HostComputeEndpoints"] = []any{"ov-b"}
			hlbLB(d, 0)["DrainingEndpoints"] = []any{"remote-1"}
			delete(hlbLB(d, 0), "SourceVIP")
		}, want: web + `.SourceVIP: the load balancer has remote endpoints, and without DSR their replies would not come back through this host`},

		// PortMappings.
		{name: "no port mappings", edit: func(t *testing.T, d doc) { hlbLB(d, 0)["PortMappings"] = []any{} },
			want: web + ".PortMappings: a load balancer needs at least one port mapping"},
		{name: "protocol ICMP", edit: func(t *testing.T, d doc) { hlbPM(d, 0, 1)["Protocol"] = 1 },
			want: web + ".PortMappings[1].Protocol: 1 is not 6 (TCP) or 17 (UDP)"},
		{name: "protocol missing", edit: func(t *testing.T, d doc) { delete(hlbPM(d, 0, 0), "Protocol") },
			want: web + ".PortMappings[0].Protocol: 0 is not 6 (TCP) or 17 (UDP)"},
		{name: "ExternalPort 0", edit: func(t *testing.T, d doc) { hlbPM(d, 0, 0)["ExternalPort"] = 0 },
			want: web + ".PortMappings[0].ExternalPort: a port mapping needs the Service's port"},
		{name: "InternalPort missing", edit: func(t *testing.T, d doc) { delete(hlbPM(d, 0, 1), "InternalPort") },
			want: web + ".PortMappings[1].InternalPort: a port mapping needs the backends' port"},
		{name: "InternalPort out of range", edit: func(t *testing.T, d doc) { hlbPM(d, 0, 0)["InternalPort"] = 65536 },
			want: `LoadBalancers[0].PortMappings[0].InternalPort: want an integer from 0 to 65535, got 65536`},
		{name: "unknown port mapping flag bits", edit: func(t *testing.T, d doc) { hlbPM(d, 0, 0)["Flags"] = 1 | 32 },
			want: web + ".PortMappings[0].Flags: 33 has bits ufp does not know (1 ILB, 2 LocalRoutedVIP, 4 UseMux, 8 PreserveDIP, 16 VipExternalIP)"},
		{name: "DistributionType 3", edit: func(t *testing.T, d doc) { hlbPM(d, 0, 0)["DistributionType"] = 3 },
			want: web + ".PortMappings[0].DistributionType: 3 is not 0 (per connection), 1 (client IP and protocol) or 2 (client IP)"},
		{name: "AffinityTimeoutSeconds without a distribution by client", edit: func(t *testing.T, d doc) { hlbPM(d, 6, 0)["DistributionType"] = 0 },
			want: sticky + ".PortMappings[0].AffinityTimeoutSeconds: affinity is by client: set DistributionType 2 (client IP) or 1"},
		{name: "unknown port mapping field", edit: func(t *testing.T, d doc) { hlbPM(d, 0, 0)["TargetPort"] = 8080 },
			want: `LoadBalancers[0].PortMappings[0].TargetPort: unknown field "TargetPort"`},

		// Remote endpoints.
		{name: "unknown endpoint flag bits", edit: func(t *testing.T, d doc) { hlbEP(d, 3)["Flags"] = 3 },
			want: remote + ".Flags: 3 has bits ufp does not know (1 RemoteEndpoint)"},
		{name: "remote endpoint MAC multicast", edit: func(t *testing.T, d doc) { hlbEP(d, 3)["MacAddress"] = "01:00:5e:00:00:01" },
			want: remote + ".MacAddress: 01:00:5e:00:00:01 is not a unicast address"},
		{name: "remote endpoint without addresses", edit: func(t *testing.T, d doc) { hlbEP(d, 3)["IpConfigurations"] = []any{} },
			want: remote + ".IpConfigurations: an endpoint needs at least one address"},
		{name: "remote endpoint address not an address", edit: func(t *testing.T, d doc) {
			hlbEP(d, 3)["IpConfigurations"] = jsonValue(t, `[{"IpAddress": "10.244.1.5/24"}]`)
		}, want: remote + `.IpConfigurations[0].IpAddress: "10.244.1.5/24" is not an IP address`},
		{name: "remote endpoint address loopback", edit: func(t *testing.T, d doc) {
			hlbEP(d, 3)["IpConfigurations"] = jsonValue(t, `[{"IpAddress": "127.0.0.1"}]`)
		}, want: remote + ".IpConfigurations[0].IpAddress: 127.0.0.1 is not a unicast address"},
		{name: "remote endpoint in the local subnets", edit: func(t *testing.T, d doc) {
			hlbEP(d, 3)["IpConfigurations"] = jsonValue(t, `[{"IpAddress": "10.244.0.77"}]`)
		}, want: remote + `.IpConfigurations[0].IpAddress: 10.244.0.77 is in network "ovl"'s local subnets: a remote endpoint is on another host`},
		{name: "remote endpoint with a local endpoint's address", edit: func(t *testing.T, d doc) {
			hnsAdd(t, d, "Endpoints", `{"Name": "remote-2", "HostComputeNetwork": "ovl", "Flags": 1, "IpConfigurations": [{"IpAddress": "10.244.1.5"}]}`)
		}, want: `Endpoints[4] "remote-2".IpConfigurations[0].IpAddress: 10.244.1.5 is already used by ` + remote},
		{name: "remote endpoint with two IPv4 addresses", edit: func(t *testing.T, d doc) {
			hlbEP(d, 3)["IpConfigurations"] = jsonValue(t, `[{"IpAddress": "10.244.1.5"}, {"IpAddress": "10.244.1.6"}]`)
		}, want: remote + ".IpConfigurations[1].IpAddress: the endpoint has an IPv4 address already"},
		{name: "remote endpoint in no RemoteSubnetRoute", edit: func(t *testing.T, d doc) {
			hlbEP(d, 3)["IpConfigurations"] = jsonValue(t, `[{"IpAddress": "10.244.2.5"}]`)
		}, want: remote + `.IpConfigurations[0].IpAddress: 10.244.2.5 is in no RemoteSubnetRoute of network "ovl", so its host is unknown`},
		{name: "remote endpoint with an OutBoundNAT policy", edit: func(t *testing.T, d doc) {
			hlbEP(d, 3)["Policies"] = jsonValue(t, `[{"Type": "OutBoundNAT", "Settings": {}}]`)
		}, want: remote + `.Policies[0].Type: a remote endpoint takes only a ProviderAddress policy, not "OutBoundNAT"`},
		{name: "remote endpoint's ProviderAddress not its route's", edit: func(t *testing.T, d doc) {
			at(d, "Endpoints", 3, "Policies", 0, "Settings")["ProviderAddress"] = "192.168.1.30"
		}, want: remote + `.Policies[0].Settings.ProviderAddress: 192.168.1.30, but Networks[0] "ovl".Policies[2].Settings routes 10.244.1.5 to 192.168.1.20`},
		{name: "remote endpoint's ProviderAddress not an address", edit: func(t *testing.T, d doc) {
			at(d, "Endpoints", 3, "Policies", 0, "Settings")["ProviderAddress"] = "host-2"
		}, want: remote + `.Policies[0].Settings.ProviderAddress: "host-2" is not an IP address`},
		{name: "remote endpoint's ProviderAddress policy with an unknown field", edit: func(t *testing.T, d doc) {
			at(d, "Endpoints", 3, "Policies", 0, "Settings")["Address"] = "192.168.1.20"
		}, want: remote + `.Policies[0].Settings.Address: unknown field "Address"`},
		// hns/lb.go's backend checks this too, but the route is rejected
		// first: that check cannot fail.
		{name: "remote endpoint's host of a family the network does not send from", edit: func(t *testing.T, d doc) {
			hnsAdd(t, natUplink(d), "Neighbors", `{"IpAddress": "fd00:1::20", "MacAddress": "02:00:00:00:01:fe"}`)
			hnsAdd(t, at(d, "Networks", 0), "Policies", `{"Type": "RemoteSubnetRoute", "Settings": {"DestinationPrefix": "fd00:245::/64",
				"IsolationId": 4096, "ProviderAddress": "fd00:1::20", "DistributedRouterMacAddress": "02:00:00:00:01:01"}}`)
			hnsAdd(t, d, "Endpoints", `{"Name": "remote-6", "HostComputeNetwork": "ovl", "Flags": 1, "IpConfigurations": [{"IpAddress": "fd00:245::5"}]}`)
			hlbLB(d, 1)["HostComputeEndpoints"] = []any{"ov-b", "remote-6"}
			hlbLB(d, 1)["SourceVIP"] = "fd00:244::250"
		}, want: `Networks[0] "ovl".Policies[3].Settings.ProviderAddress: fd00:1::20 is IPv6, but the network has no IPv6 ProviderAddress to send from`},
		{name: "remote endpoint unhealthy", edit: func(t *testing.T, d doc) { hlbEP(d, 3)["Unhealthy"] = true },
			want: remote + ".Unhealthy: a remote endpoint is drained per load balancer: list it in the load balancers' DrainingEndpoints"},
		{name: "ProviderAddress of an L2Bridge remote endpoint", base: l2, edit: func(t *testing.T, d doc) {
			hlbEP(d, 2)["Policies"] = jsonValue(t, `[{"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.1.30"}}]`)
		}, want: `Endpoints[2] "far-1".Policies[0]: only remote endpoints of Overlay networks have a provider address`},
		{name: "L2Bridge remote endpoint with no MAC and no router", base: l2, edit: func(t *testing.T, d doc) {
			natUplink(d)["Neighbors"] = jsonValue(t, `[{"IpAddress": "192.168.1.30", "MacAddress": "02:00:00:00:00:30"}]`)
			delete(natEPPolicy(d, 0, 0), "Nat66") // OutBoundNAT over IPv6 needs the IPv6 router
		}, want: `LoadBalancers[0] "svc".HostComputeEndpoints[1]: remote endpoint "far-1" has no MacAddress, and no router of network "cbr0" is in Uplink.Neighbors to send to`},

		// switch.loadBalancers at the VFP level.
		{name: "VFP: no name", base: hlbVFPDoc, edit: func(t *testing.T, d doc) { hlbVFPLB(d, 0)["name"] = "" },
			want: vfp + ".name: a load balancer needs a name"},
		{name: "VFP: duplicate name", base: hlbVFPDoc, edit: func(t *testing.T, d doc) {
			hnsAdd(t, at(d, "switch"), "loadBalancers", `{"name": "svc", "backends": [{"ip": "10.0.0.11"}]}`)
		}, want: `switch.loadBalancers[1].name: "svc" is also the name of another load balancer`},
		{name: "VFP: bad distribution", base: hlbVFPDoc, edit: func(t *testing.T, d doc) { hlbVFPLB(d, 0)["distribution"] = "round-robin" },
			want: vfp + `.distribution: distribution "round-robin": not one of connection, source-ip-protocol, source-ip`},
		{name: "VFP: sourceVIP not an address", base: hlbVFPDoc, edit: func(t *testing.T, d doc) { hlbVFPLB(d, 0)["sourceVIP"] = "vip" },
			want: vfp + `.sourceVIP: "vip" is not an IP address`},
		{name: "VFP: sourceVIP without a pool", base: hlbVFPDoc, edit: func(t *testing.T, d doc) { hlbVFPLB(d, 0)["sourceVIP"] = "192.0.2.9" },
			want: vfp + ".sourceVIP: 192.0.2.9 is not in switch.natPools"},
		{name: "VFP: backend not an address", base: hlbVFPDoc, edit: func(t *testing.T, d doc) { hlbVFPBackend(d, 1)["ip"] = "10.0.1" },
			want: vfp + `.backends[1].ip: "10.0.1" is not an IP address`},
		{name: "VFP: backend multicast", base: hlbVFPDoc, edit: func(t *testing.T, d doc) { hlbVFPBackend(d, 0)["ip"] = "ff02::1" },
			want: vfp + ".backends[0].ip: ff02::1 is not a unicast address"},
		{name: "VFP: mixed families", base: hlbVFPDoc, edit: func(t *testing.T, d doc) {
			delete(hlbVFPLB(d, 0), "sourceVIP")
			hlbVFPBackend(d, 1)["ip"], hlbVFPBackend(d, 1)["remote"] = "fd00::5", false
		}, want: vfp + ".backends[1].ip: fd00::5 is IPv6, the load balancer's other backends IPv4: one family per load balancer"},
		{name: "VFP: backend of another family than the sourceVIP", base: hlbVFPDoc, edit: func(t *testing.T, d doc) {
			hlbVFPLB(d, 0)["backends"] = jsonValue(t, `[{"ip": "fd00::11"}]`)
		}, want: vfp + ".backends[0].ip: fd00::11 is not of sourceVIP 192.0.2.1's family"},
		{name: "VFP: duplicate backend", base: hlbVFPDoc, edit: func(t *testing.T, d doc) { hlbVFPBackend(d, 1)["ip"] = "10.0.0.11" },
			want: vfp + ".backends[1].ip: 10.0.0.11 is listed twice"},
		{name: "VFP: backend route rewrites an address", base: hlbVFPDoc, edit: func(t *testing.T, d doc) {
			hlbVFPBackend(d, 0)["modify"] = doc{"dstMAC": "02:00:00:00:00:0b", "dstIP": "10.0.0.12"}
		}, want: vfp + ".backends[0].modify: a backend's route sets MACs only"},
		{name: "VFP: backend route with a bad MAC", base: hlbVFPDoc, edit: func(t *testing.T, d doc) {
			hlbVFPBackend(d, 0)["modify"] = doc{"dstMAC": "02:00:00:00:00"}
		}, want: vfp + `.backends[0].modify.dstMAC: "02:00:00:00:00" is not a MAC address`},
		{name: "VFP: unknown backend field", base: hlbVFPDoc, edit: func(t *testing.T, d doc) { hlbVFPBackend(d, 0)["weight"] = 2 },
			want: vfp + `.backends[0].weight: unknown field "weight"`},
		{name: "VFP: remote backends without sourceVIP", base: hlbVFPDoc, edit: func(t *testing.T, d doc) {
			delete(hlbVFPLB(d, 0), "sourceVIP")
		}, want: rule + `.action.lb: load balancer "svc" has remote backends and no sourceVIP: their replies would not come back through this switch`},
		{name: "VFP: DSR balanced at the uplink without sourceVIP", base: hlbVFPDoc, edit: func(t *testing.T, d doc) {
			delete(hlbVFPLB(d, 0), "sourceVIP")
			hlbVFPLB(d, 0)["dsr"] = true
		}, want: `ports[2].layers[0].groups[0].rules[0].action.lb: load balancer "svc" has remote backends and no sourceVIP`},

		// The lb action at the VFP level.
		{name: "VFP: lb names no load balancer", base: hlbVFPDoc, edit: func(t *testing.T, d doc) { at(hlbVFPRule(d), "action")["lb"] = "svc2" },
			want: rule + `.action.lb: "svc2" is not in switch.loadBalancers`},
		{name: "VFP: lb on a block action", base: hlbVFPDoc, edit: func(t *testing.T, d doc) { at(hlbVFPRule(d), "action")["type"] = "block" },
			want: rule + ".action.lb: a block action does not balance"},
		{name: "VFP: lb with snat", base: hlbVFPDoc, edit: func(t *testing.T, d doc) { at(hlbVFPRule(d), "action")["snat"] = "192.0.2.1" },
			want: rule + ".action.lb: an action that balances does not also snat (the load balancer's sourceVIP does)"},
		{name: "VFP: lb with modify.dstIP", base: hlbVFPDoc, edit: func(t *testing.T, d doc) {
			at(hlbVFPRule(d), "action")["modify"] = doc{"dstIP": "10.0.0.11"}
		}, want: rule + ".action.lb: the load balancer translates the destination; the action may not also modify it or push"},
		{name: "VFP: lb with modify.dstPort", base: hlbVFPDoc, edit: func(t *testing.T, d doc) {
			at(hlbVFPRule(d), "action")["modify"] = doc{"dstPort": 8080}
		}, want: rule + ".action.lb: the load balancer translates the destination; the action may not also modify it or push"},
		{name: "VFP: lb with push", base: hlbVFPDoc, edit: func(t *testing.T, d doc) {
			at(hlbVFPRule(d), "action")["push"] = jsonValue(t, `{"vni": 4096, "srcMAC": "02:00:00:00:00:fe", "dstMAC": "02:00:00:00:01:fe", "srcIP": "192.0.2.1", "dstIP": "192.0.2.2"}`)
		}, want: rule + ".action.lb: the load balancer translates the destination; the action may not also modify it or push"},
		{name: "VFP: lbRoute without lb", base: hlbVFPDoc, edit: func(t *testing.T, d doc) { delete(at(hlbVFPUplinkRule(d), "action"), "lb") },
			want: "ports[2].layers[0].groups[0].rules[0].action.lbRoute: only an action that balances (lb) routes to a backend"},
		{name: "VFP: lb on a non-stateful rule", base: hlbVFPDoc, edit: func(t *testing.T, d doc) { delete(hlbVFPRule(d), "stateful") },
			want: rule + ".stateful: a rule that load-balances (lb) must be stateful, or connections could not keep their backend"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := editJSON(t, hnsOr(tt.base, lbDoc), func(d doc) { tt.edit(t, d) })
			hnsWantRejected(t, b, tt.want)
		})
	}
}

// hlbGroups returns the lowered document's load-balancers groups, by
// "port/layer", as their match and rule lines.
func hlbGroups(c *Config) map[string][]string {
	gs := map[string][]string{}
	for _, p := range c.Ports {
		for _, l := range p.Layers {
			for gi, g := range l.Groups {
				if g.Name != "load-balancers" {
					continue
				}
				k := p.Name + "/" + l.Name
				if gi != 0 {
					k += fmt.Sprintf(" (group %d)", gi)
				}
				if g.Shared != "" {
					// Every port's names the one group its kind shares.
					i := slices.IndexFunc(c.Switch.SharedGroups, func(sg vfp.GroupConfig) bool { return sg.Name == g.Shared })
					if i < 0 || g.Match != nil || len(g.Rules) > 0 {
						gs[k] = append(gs[k], "shared group "+g.Shared+" missing, or with rules of its own")
						continue
					}
					g = c.Switch.SharedGroups[i]
				}
				var m strings.Builder
				m.WriteString("group")
				natMatchLine(&m, g.Match)
				gs[k] = append(gs[k], m.String())
				for _, r := range g.Rules {
					gs[k] = append(gs[k], ruleLine(r))
				}
			}
		}
	}
	return gs
}

// hlbBalancers returns the lowered switch.loadBalancers as JSON lines.
func hlbBalancers(t *testing.T, c *Config) []string {
	t.Helper()
	var ls []string
	for _, b := range c.Switch.LoadBalancers {
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, string(j))
	}
	return ls
}

func TestHNSLBLower(t *testing.T) {
	const (
		dr      = `"srcMAC":"02:00:00:00:00:01"`
		toB     = `{"ip":"10.244.0.11","modify":{` + dr + `,"dstMAC":"02:00:00:00:00:1b"}}`
		toC     = `{"ip":"10.244.0.12","modify":{` + dr + `,"dstMAC":"02:00:00:00:00:1c"}}`
		toB6    = `{"ip":"fd00:244::11","modify":{` + dr + `,"dstMAC":"02:00:00:00:00:1b"}}`
		toC6    = `{"ip":"fd00:244::12","modify":{` + dr + `,"dstMAC":"02:00:00:00:00:1c"}}`
		toR1    = `{"ip":"10.244.1.5","remote":true,"modify":{` + dr + `,"dstMAC":"02:00:00:00:01:01"},"push":{"vni":4096,"srcMAC":"02:00:00:00:00:fe","dstMAC":"02:00:00:00:01:fe","srcIP":"192.168.1.10","dstIP":"192.168.1.20","dontFragment":true}}`
		ovAEnc  = "VNET_ENCAP_LAYER"
		lbRules = "dir=out"
	)
	// lbDoc's rules at an endpoint (the pods reach every frontend; the
	// NodePort as LocalRoutedVIP) and at the uplink (all but the ILB
	// DSR Service's), priorities from 100 in document order.
	rule := func(prio int, vip, proto string, port int, lb string, route bool) string {
		s := fmt.Sprintf("%d lb-%s-%s-%d proto=%s dst=%s dport=%d allow lb=%s", prio, vip, proto, port, proto, vip, port, lb)
		if route {
			s += " route"
		}
		return s + " stateful"
	}
	podRules := func(route bool) []string {
		return []string{"group " + lbRules,
			rule(100, "10.96.0.10", "tcp", 80, "web/tcp/80", route),
			rule(101, "10.96.0.10", "udp", 53, "web/udp/53", route),
			rule(102, "fd00:96::10", "tcp", 80, "web6/tcp/80", route),
			rule(103, "10.96.0.20", "tcp", 80, "far/tcp/80", route),
			rule(104, "10.96.0.21", "tcp", 80, "far-dsr/tcp/80", route),
			rule(105, "10.96.0.30", "tcp", 80, "empty/tcp/80", route),
			rule(106, "10.96.0.30", "udp", 53, "empty/udp/53", route),
			rule(107, "192.168.1.10", "tcp", 30080, "nodeport/tcp/30080", route),
			rule(108, "10.96.0.40", "tcp", 80, "sticky/tcp/80", route),
			rule(109, "fd00:96::30", "tcp", 80, "empty6/tcp/80", route),
		}
	}
	upRules := []string{"group " + lbRules,
		rule(100, "10.96.0.10", "tcp", 80, "web/tcp/80", true),
		rule(101, "10.96.0.10", "udp", 53, "web/udp/53", true),
		rule(102, "fd00:96::10", "tcp", 80, "web6/tcp/80", true),
		rule(103, "10.96.0.20", "tcp", 80, "far/tcp/80", true),
		rule(104, "10.96.0.30", "tcp", 80, "empty/tcp/80", true),
		rule(105, "10.96.0.30", "udp", 53, "empty/udp/53", true),
		rule(106, "192.168.1.10", "tcp", 30080, "nodeport/tcp/30080", true),
		rule(107, "10.96.0.40", "tcp", 80, "sticky/tcp/80", true),
		rule(108, "fd00:96::30", "tcp", 80, "empty6/tcp/80", true),
	}
	baseLBs := []string{
		`{"name":"web/tcp/80","backends":[` + toB + `,` + toC + `],"targetPort":8080,"distribution":"connection","sourceVIP":"10.244.0.250"}`,
		`{"name":"web/udp/53","backends":[` + toB + `,` + toC + `],"targetPort":5353,"distribution":"connection","sourceVIP":"10.244.0.250"}`,
		`{"name":"web6/tcp/80","backends":[` + toB6 + `,` + toC6 + `],"targetPort":8080,"distribution":"connection"}`,
		`{"name":"far/tcp/80","backends":[` + toR1 + `],"targetPort":8080,"distribution":"connection","sourceVIP":"10.244.0.250"}`,
		`{"name":"far-dsr/tcp/80","backends":[` + toR1 + `],"targetPort":8080,"distribution":"connection","dsr":true}`,
		`{"name":"empty/tcp/80","backends":null,"targetPort":80,"distribution":"connection"}`,
		`{"name":"empty/udp/53","backends":null,"targetPort":53,"distribution":"connection"}`,
		`{"name":"nodeport/tcp/30080","backends":[` + toB + `],"targetPort":8080,"distribution":"connection"}`,
		`{"name":"sticky/tcp/80","backends":[` + toB + `,` + toC + `],"targetPort":8080,"distribution":"source-ip","affinityTimeout":"1m0s","sourceVIP":"10.244.0.250"}`,
		`{"name":"empty6/tcp/80","backends":null,"targetPort":80,"distribution":"connection"}`,
	}
	tests := []struct {
		name   string
		base   string // lbDoc when empty
		edit   func(t *testing.T, d doc)
		layers map[string][]string // port: its layers in order
		groups map[string][]string // "port/layer": the load-balancers group
		lbs    []string            // switch.loadBalancers, or one of them by index (lb)
		lb     int
		pools  []vfp.NATPoolConfig
		upIPs  []netip.Addr
	}{
		{
			name: "lbDoc",
			layers: map[string][]string{"ov-a": {hns.LayerNAT, ovAEnc}, "ov-b": {hns.LayerNAT, ovAEnc}, "ov-c": {hns.LayerNAT, ovAEnc},
				"uplink": {encap.LayerPARoute, hns.LayerNAT}},
			groups: map[string][]string{
				"ov-a/" + hns.LayerNAT: podRules(false), "ov-b/" + hns.LayerNAT: podRules(false), "ov-c/" + hns.LayerNAT: podRules(false),
				"uplink/" + hns.LayerNAT: upRules,
			},
			lbs: baseLBs, lb: -1,
			// The SourceVIP's pool; the host's, with the NodePort
			// reserved.
			pools: []vfp.NATPoolConfig{{IP: addr("10.244.0.250")}, {IP: addr("192.168.1.10"), Reserved: []vfp.Reservation{{Proto: vfp.TCP, Port: 30080}}}},
			// The uplink answers for the SourceVIP.
			upIPs: addrs("192.168.1.10", "fd00:1::10", "10.244.0.250"),
		},
		{
			name: "NodePort without LocalRoutedVIP: from the network only",
			edit: func(t *testing.T, d doc) { delete(hlbPM(d, 5, 0), "Flags") },
			groups: map[string][]string{
				"ov-a/" + hns.LayerNAT: {"group " + lbRules,
					rule(100, "10.96.0.10", "tcp", 80, "web/tcp/80", false),
					rule(101, "10.96.0.10", "udp", 53, "web/udp/53", false),
					rule(102, "fd00:96::10", "tcp", 80, "web6/tcp/80", false),
					rule(103, "10.96.0.20", "tcp", 80, "far/tcp/80", false),
					rule(104, "10.96.0.21", "tcp", 80, "far-dsr/tcp/80", false),
					rule(105, "10.96.0.30", "tcp", 80, "empty/tcp/80", false),
					rule(106, "10.96.0.30", "udp", 53, "empty/udp/53", false),
					rule(107, "10.96.0.40", "tcp", 80, "sticky/tcp/80", false),
					rule(108, "fd00:96::30", "tcp", 80, "empty6/tcp/80", false),
				},
				"uplink/" + hns.LayerNAT: upRules,
			},
		},
		{
			name: "ILB: not from the network",
			edit: func(t *testing.T, d doc) { hlbPM(d, 0, 1)["Flags"] = hns.LBPortILB },
			groups: map[string][]string{
				"ov-a/" + hns.LayerNAT: podRules(false),
				"uplink/" + hns.LayerNAT: {"group " + lbRules,
					rule(100, "10.96.0.10", "tcp", 80, "web/tcp/80", true),
					rule(101, "fd00:96::10", "tcp", 80, "web6/tcp/80", true),
					rule(102, "10.96.0.20", "tcp", 80, "far/tcp/80", true),
					rule(103, "10.96.0.30", "tcp", 80, "empty/tcp/80", true),
					rule(104, "10.96.0.30", "udp", 53, "empty/udp/53", true),
					rule(105, "192.168.1.10", "tcp", 30080, "nodeport/tcp/30080", true),
					rule(106, "10.96.0.40", "tcp", 80, "sticky/tcp/80", true),
					rule(107, "fd00:96::30", "tcp", 80, "empty6/tcp/80", true),
				},
			},
		},
		{
			name: "two frontends, PreserveDIP, client-IP-and-protocol distribution",
			edit: func(t *testing.T, d doc) {
				hlbLB(d, 6)["FrontendVIPs"] = []any{"10.96.0.40", "10.96.0.41"}
				hlbPM(d, 6, 0)["Flags"] = hns.LBPortPreserveDIP
				hlbPM(d, 6, 0)["DistributionType"] = 1
			},
			groups: map[string][]string{
				"ov-a/" + hns.LayerNAT: append(slices.Clone(podRules(false)[:9]),
					// The backends own the frontend address: the
					// rule routes to them.
					rule(108, "10.96.0.40", "tcp", 80, "sticky/tcp/80", true),
					rule(109, "10.96.0.41", "tcp", 80, "sticky/tcp/80", true),
					rule(110, "fd00:96::30", "tcp", 80, "empty6/tcp/80", false)),
			},
			lb: 8, lbs: []string{`{"name":"sticky/tcp/80","backends":[` + toB + `,` + toC + `],"targetPort":8080,"preserveDst":true,"distribution":"source-ip-protocol","affinityTimeout":"1m0s","sourceVIP":"10.244.0.250"}`},
		},
		{
			name: "VipExternalIP: the host answers for the frontend, whose port is reserved",
			edit: func(t *testing.T, d doc) { hlbPM(d, 6, 0)["Flags"] = hns.LBPortVipExternalIP },
			pools: []vfp.NATPoolConfig{{IP: addr("10.244.0.250")}, {IP: addr("192.168.1.10"), Reserved: []vfp.Reservation{{Proto: vfp.TCP, Port: 30080}}},
				{IP: addr("10.96.0.40"), Reserved: []vfp.Reservation{{Proto: vfp.TCP, Port: 80}}}},
			upIPs: addrs("192.168.1.10", "fd00:1::10", "10.244.0.250", "10.96.0.40"),
		},
		{
			name: "draining backends: unhealthy, after the active ones",
			edit: func(t *testing.T, d doc) {
				hlbLB(d, 2)["HostComputeEndpoints"] = []any{"ov-c"}
				hlbLB(d, 2)["DrainingEndpoints"] = []any{"remote-1", "ov-b"}
			},
			lb: 3, lbs: []string{`{"name":"far/tcp/80","backends":[` + toC + `,` + strings.Replace(toR1, `"remote":true`, `"remote":true,"unhealthy":true`, 1) +
				`,{"ip":"10.244.0.11","unhealthy":true,"modify":{` + dr + `,"dstMAC":"02:00:00:00:00:1b"}}],"targetPort":8080,"distribution":"connection","sourceVIP":"10.244.0.250"}`},
		},
		{
			name: "unhealthy endpoint, affinity of a day",
			edit: func(t *testing.T, d doc) {
				hlbEP(d, 2)["Unhealthy"] = true
				hlbPM(d, 6, 0)["AffinityTimeoutSeconds"] = 86400
			},
			lb: 8, lbs: []string{`{"name":"sticky/tcp/80","backends":[` + toB + `,{"ip":"10.244.0.12","unhealthy":true,"modify":{` + dr + `,"dstMAC":"02:00:00:00:00:1c"}}],"targetPort":8080,"distribution":"source-ip","affinityTimeout":"24h0m0s","sourceVIP":"10.244.0.250"}`},
		},
		{
			name: "IPv6 NodePort with DSR, and an IPv6 SourceVIP",
			edit: func(t *testing.T, d doc) {
				delete(hlbLB(d, 1), "FrontendVIPs")
				hlbLB(d, 1)["SourceVIP"] = "fd00:244::250"
				hlbLB(d, 1)["Flags"] = hns.LBFlagIPv6 | hns.LBFlagDSR
			},
			groups: map[string][]string{
				"uplink/" + hns.LayerNAT: {"group " + lbRules,
					rule(100, "10.96.0.10", "tcp", 80, "web/tcp/80", true),
					rule(101, "10.96.0.10", "udp", 53, "web/udp/53", true),
					rule(102, "fd00:1::10", "tcp", 80, "web6/tcp/80", true),
					rule(103, "10.96.0.20", "tcp", 80, "far/tcp/80", true),
					rule(104, "10.96.0.30", "tcp", 80, "empty/tcp/80", true),
					rule(105, "10.96.0.30", "udp", 53, "empty/udp/53", true),
					rule(106, "192.168.1.10", "tcp", 30080, "nodeport/tcp/30080", true),
					rule(107, "10.96.0.40", "tcp", 80, "sticky/tcp/80", true),
					rule(108, "fd00:96::30", "tcp", 80, "empty6/tcp/80", true),
				},
			},
			lb: 2, lbs: []string{`{"name":"web6/tcp/80","backends":[` + toB6 + `,` + toC6 + `],"targetPort":8080,"distribution":"connection","sourceVIP":"fd00:244::250","dsr":true}`},
			pools: []vfp.NATPoolConfig{{IP: addr("10.244.0.250")}, {IP: addr("fd00:244::250")}, {IP: addr("fd00:1::10"), Reserved: []vfp.Reservation{{Proto: vfp.TCP, Port: 80}}},
				{IP: addr("192.168.1.10"), Reserved: []vfp.Reservation{{Proto: vfp.TCP, Port: 30080}}}},
		},
		{
			// A local backend gets the frame from the subnet's router,
			// as a port mapping's endpoint does.
			name: "L2Bridge: the endpoints' rules route; the remote endpoint through the subnet's router",
			base: hlbL2Doc(t),
			groups: map[string][]string{
				"pod-a/" + hns.LayerNAT:  {"group " + lbRules, rule(100, "10.96.0.50", "tcp", 80, "svc/tcp/80", true)},
				"uplink/" + hns.LayerNAT: {"group " + lbRules, rule(100, "10.96.0.50", "tcp", 80, "svc/tcp/80", true)},
			},
			lb: 0, lbs: []string{`{"name":"svc/tcp/80","backends":[{"ip":"192.168.1.101","modify":{"srcMAC":"02:00:00:00:00:99","dstMAC":"02:00:00:00:00:2b"}},` +
				`{"ip":"192.168.7.5","remote":true,"modify":{"srcMAC":"02:00:00:00:00:fe","dstMAC":"02:00:00:00:00:99"}}],"targetPort":8080,"distribution":"connection","sourceVIP":"192.168.1.50"}`},
		},
		{
			name: "L2Bridge: a remote endpoint with a MAC is sent to it",
			base: hlbL2Doc(t),
			edit: func(t *testing.T, d doc) { hlbEP(d, 2)["MacAddress"] = "02:00:00:00:07:05" },
			lb:   0, lbs: []string{`{"name":"svc/tcp/80","backends":[{"ip":"192.168.1.101","modify":{"srcMAC":"02:00:00:00:00:99","dstMAC":"02:00:00:00:00:2b"}},` +
				`{"ip":"192.168.7.5","remote":true,"modify":{"srcMAC":"02:00:00:00:00:fe","dstMAC":"02:00:00:00:07:05"}}],"targetPort":8080,"distribution":"connection","sourceVIP":"192.168.1.50"}`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var edit func(d doc)
			if tt.edit != nil {
				edit = func(d doc) { tt.edit(t, d) }
			}
			low := hnsLower(t, editJSON(t, hnsOr(tt.base, lbDoc), edit))
			for port, want := range tt.layers {
				if got := hnsLayerNames(hnsPort(t, low, port)); !slices.Equal(got, want) {
					t.Errorf("%s: layers %v, want %v", port, got, want)
				}
			}
			got := hlbGroups(low)
			for k, want := range tt.groups {
				if !slices.Equal(got[k], want) {
					t.Errorf("%s: load-balancers group\n  %s\nwant\n  %s", k, strings.Join(got[k], "\n  "), strings.Join(want, "\n  "))
				}
			}
			// The group comes first in every NAT_LAYER that has it.
			for k := range got {
				if strings.Contains(k, "(group") {
					t.Errorf("%s: the load-balancers group is not the layer's first", k)
				}
			}
			lbs := hlbBalancers(t, low)
			switch {
			case tt.lbs == nil:
			case tt.lb < 0:
				if !slices.Equal(lbs, tt.lbs) {
					t.Errorf("switch.loadBalancers\n  %s\nwant\n  %s", strings.Join(lbs, "\n  "), strings.Join(tt.lbs, "\n  "))
				}
			case tt.lb >= len(lbs) || lbs[tt.lb] != tt.lbs[0]:
				t.Errorf("switch.loadBalancers[%d]\n  %s\nwant\n  %s", tt.lb, strings.Join(lbs, "\n  "), tt.lbs[0])
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
			// The lowered document is a valid VFP-level document that a
			// switch runs, with a load balancer for every lb action.
			out, err := json.Marshal(low)
			if err != nil {
				t.Fatal(err)
			}
			again, err := ParseConfig(out)
			if err != nil {
				t.Fatalf("ParseConfig(lowered): %v", err)
			}
			sw, err := New(again)
			if err != nil {
				t.Fatalf("New(lowered): %v", err)
			}
			if n := len(sw.pol.Load().lbs); n != len(low.Switch.LoadBalancers) {
				t.Errorf("the switch has %d load balancers, the document %d", n, len(low.Switch.LoadBalancers))
			}
		})
	}
}

// hlbApply applies lbDoc with edit, decoded without validation as a
// caller holding a Config would pass it.
func hlbApply(t *testing.T, sw *Switch, edit func(d doc)) error {
	t.Helper()
	var c Config
	if err := json.Unmarshal(editJSON(t, lbDoc, edit), &c); err != nil {
		t.Fatal(err)
	}
	return sw.Apply(&c)
}

// Balanced connections survive rejected policies: the running policy, its
// generation, its load balancers, the NAT pools and the affinity tables
// stay, and the connections' packets keep their backend and translation
// on the fast path.
func TestLBApplyKeepsPolicy(t *testing.T) {
	r := ulNewRig(t, mustParse(t, lbDoc))
	sw := r.sw
	r.now = 1 * sec
	// A ClusterIP connection to a local backend, one to the remote
	// backend through the SourceVIP, and a sticky client.
	to := r.lbConnect("ov-a", 5000, "10.96.0.10", 80, 8080)
	rep := natPkt{smac: lbMACOf[to], dmac: lbDR, src: lbIPOf[to], sport: 8080, dst: "10.244.0.10", dport: 5000, proto: "tcp", flags: "SA"}
	back := rep
	back.smac, back.dmac, back.src, back.sport = lbDR, lbOvA, "10.96.0.10", 80
	r.out(to, natFrame(t, rep), "ov-a", natFrame(t, back))
	farSyn := natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: 5001, dst: "10.96.0.20", dport: 80, proto: "tcp", flags: "S"}
	p := r.out("ov-a", natFrame(t, farSyn), "uplink", nil)
	_, _, _, farSrc, _ := lbInner(t, p.Bytes())
	sticky := r.lbConnect("ov-a", 5002, "10.96.0.40", 80, 8080)

	cfg, gen, pools, lbs := sw.Config(), sw.Generation(), sw.NAT().Stats(), sw.pol.Load().lbs
	sw.mu.Lock()
	aff := sw.env.LB.Affinities()
	sw.mu.Unlock()
	lowered := func(t *testing.T) doc {
		b, err := json.Marshal(hnsLower(t, []byte(lbDoc)))
		if err != nil {
			t.Fatal(err)
		}
		return jsonValue(t, string(b)).(doc)
	}
	bad := []struct {
		name string
		edit func(t *testing.T, d doc)
		vfp  func(t *testing.T, d doc) // edits the lowered lbDoc instead
		// value edits the lowered lbDoc as a Go value, what JSON cannot
		// carry.
		value func(c *Config)
		want  string
	}{
		{name: "duplicate load balancer name", edit: func(t *testing.T, d doc) { hlbLB(d, 6)["Name"] = "web" },
			want: `LoadBalancers[6] "web".Name: LoadBalancers[0] has this name`},
		{name: "web's backends gone and the frontend taken", edit: func(t *testing.T, d doc) {
			hlbLB(d, 0)["HostComputeEndpoints"] = []any{}
			hlbLB(d, 6)["FrontendVIPs"] = []any{"10.96.0.10"}
		}, want: `LoadBalancers[6] "sticky".PortMappings[0].ExternalPort: tcp/80 on 10.96.0.10 is taken by`},
		{name: "remote backends without SourceVIP", edit: func(t *testing.T, d doc) { delete(hlbLB(d, 2), "SourceVIP") },
			want: `LoadBalancers[2] "far".SourceVIP: the load balancer has remote endpoints`},
		{name: "backend not found", edit: func(t *testing.T, d doc) { hlbLB(d, 0)["HostComputeEndpoints"] = []any{"ov-c", "ov-x"} },
			want: `LoadBalancers[0] "web".HostComputeEndpoints[1]: no endpoint is named "ov-x"`},
		{name: "affinity without a distribution by client", edit: func(t *testing.T, d doc) { delete(hlbPM(d, 6, 0), "DistributionType") },
			want: `LoadBalancers[6] "sticky".PortMappings[0].AffinityTimeoutSeconds`},
		{name: "remote endpoint unhealthy", edit: func(t *testing.T, d doc) { hlbEP(d, 3)["Unhealthy"] = true },
			want: `Endpoints[3] "remote-1".Unhealthy`},
		{name: "VFP level: lb names no load balancer", vfp: func(t *testing.T, d doc) {
			at(d, "switch", "sharedGroups", 0, "rules", 0, "action")["lb"] = "web/tcp/81"
		}, want: `switch.sharedGroups[0].rules[0].action.lb: "web/tcp/81" is not in switch.loadBalancers`},
		{name: "VFP level: a backend twice", vfp: func(t *testing.T, d doc) {
			b := at(d, "switch", "loadBalancers", 0)
			b["backends"] = append(b["backends"].([]any), at(b, "backends", 0))
		}, want: "switch.loadBalancers[0].backends[2].ip: 10.244.0.11 is listed twice"},
		{name: "VFP level: bad distribution", value: func(c *Config) { c.Switch.LoadBalancers[8].Distribution = "sticky" },
			want: `switch.loadBalancers[8].distribution: distribution "sticky"`},
	}
	for i, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.vfp != nil || tt.value != nil {
				d := lowered(t)
				if tt.vfp != nil {
					tt.vfp(t, d)
				}
				b, _ := json.Marshal(d)
				var c Config
				if err := json.Unmarshal(b, &c); err != nil {
					t.Fatal(err)
				}
				if tt.value != nil {
					tt.value(&c)
				}
				err = sw.Apply(&c)
			} else {
				err = hlbApply(t, sw, func(d doc) { tt.edit(t, d) })
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Apply = %v, want an error containing %q", err, tt.want)
			}
			if sw.Config() != cfg || sw.Generation() != gen {
				t.Errorf("policy changed after a rejected Apply: generation %d -> %d", gen, sw.Generation())
			}
			if now := sw.pol.Load().lbs; !maps.Equal(now, lbs) {
				t.Errorf("load balancers changed after a rejected Apply")
			}
			if now := sw.NAT().Stats(); !slices.Equal(now, pools) {
				t.Errorf("NAT pools changed after a rejected Apply:\n  %+v\nwas\n  %+v", now, pools)
			}
			sw.mu.Lock()
			same := maps.Equal(sw.env.LB.Affinities(), aff)
			sw.mu.Unlock()
			if !same {
				t.Errorf("affinity tables changed after a rejected Apply")
			}
			// The connections go on, on the fast path, as before.
			r.now = int64(2+i) * sec
			ack := natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: 5000, dst: "10.96.0.10", dport: 80, proto: "tcp", flags: "A"}
			want := ack
			want.smac, want.dmac, want.dst, want.dport = lbDR, lbMACOf[to], lbIPOf[to], 8080
			if p := r.out("ov-a", natFrame(t, ack), to, natFrame(t, want)); p.Path != dataplane.PathFast {
				t.Errorf("ACK to %s on path %s, want the fast path", to, p.Path)
			}
			rep.flags, back.flags = "A", "A"
			r.out(to, natFrame(t, rep), "ov-a", natFrame(t, back))
			farAck := farSyn
			farAck.flags = "A"
			p := r.out("ov-a", natFrame(t, farAck), "uplink", nil)
			if _, _, _, src, _ := lbInner(t, p.Bytes()); src != farSrc || p.Path != dataplane.PathFast {
				t.Errorf("the remote connection's ACK left from %s on path %s, want %s on the fast path", src, p.Path, farSrc)
			}
			if got := r.lbConnect("ov-a", uint16(6000+i), "10.96.0.40", 80, 8080); got != sticky {
				t.Errorf("a new sticky connection went to %s, the client's affinity is %s", got, sticky)
			}
		})
	}
	if n := sw.NAT().Bindings(); n != 1 {
		t.Errorf("NAT bindings = %d, want 1 (the remote connection's)", n)
	}
	// A valid document is still taken; the connections keep their
	// backends through it.
	if err := hlbApply(t, sw, nil); err != nil {
		t.Fatal(err)
	}
	if sw.Generation() != gen+1 {
		t.Errorf("generation %d after a good Apply, want %d", sw.Generation(), gen+1)
	}
	r.now = 30 * sec
	ack := natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: 5000, dst: "10.96.0.10", dport: 80, proto: "tcp", flags: "A"}
	r.expect("ov-a", natFrame(t, ack), to)
}

// TestHNSLBRejectsWhatCannotWork lists documents that are well formed but
// cannot work as written (a review found lowering accepted them): each is
// rejected, naming the object and field, and why says what would happen.
func TestHNSLBRejectsWhatCannotWork(t *testing.T) {
	tests := []struct {
		name string
		edit func(t *testing.T, d doc)
		want string
		why  string
	}{
		{name: "the host's address as a frontend on the VXLAN port",
			edit: func(t *testing.T, d doc) {
				hnsAdd(t, d, "LoadBalancers", `{"Name": "vx", "HostComputeEndpoints": ["ov-b"], "FrontendVIPs": ["192.168.1.10"],
					"PortMappings": [{"Protocol": 17, "InternalPort": 53, "ExternalPort": 4789}]}`)
			},
			want: `LoadBalancers[8] "vx".PortMappings[0].ExternalPort: udp/4789 on the host is the VXLAN port`,
			why:  "the uplink decapsulates udp/4789: from the network the Service's datagrams are dropped as bad-vxlan"},
		{name: "a VipExternalIP frontend on the VXLAN port",
			edit: func(t *testing.T, d doc) {
				hnsAdd(t, d, "LoadBalancers", `{"Name": "vx", "HostComputeEndpoints": ["ov-b"], "FrontendVIPs": ["192.168.1.77"],
					"PortMappings": [{"Protocol": 17, "InternalPort": 53, "ExternalPort": 4789, "Flags": 16}]}`)
			},
			want: `LoadBalancers[8] "vx".PortMappings[0].ExternalPort: udp/4789 on 192.168.1.77 (VipExternalIP) is the VXLAN port`,
			why:  "the switch answers ARP for it on the uplink, which decapsulates udp/4789"},
		{name: "a remote endpoint's address as a frontend",
			edit: func(t *testing.T, d doc) { hlbLB(d, 6)["FrontendVIPs"] = []any{"10.244.1.5"} },
			want: `LoadBalancers[6] "sticky".FrontendVIPs[0]: 10.244.1.5 is the address of Endpoints[3] "remote-1", a remote endpoint`,
			why:  "connections of pods to remote-1:80 would be balanced instead"},
		{name: "a remote endpoint's address as the SourceVIP",
			edit: func(t *testing.T, d doc) {
				for _, i := range []int{0, 2, 6} {
					hlbLB(d, i)["SourceVIP"] = "10.244.1.5"
				}
			},
			want: `LoadBalancers[0] "web".SourceVIP: 10.244.1.5`,
			why:  "the backends' replies to it would go to the remote pod's host"},
		{name: "a SourceVIP in a RemoteSubnetRoute",
			edit: func(t *testing.T, d doc) {
				for _, i := range []int{0, 2, 6} {
					hlbLB(d, i)["SourceVIP"] = "10.244.1.99"
				}
			},
			want: `LoadBalancers[0] "web".SourceVIP: 10.244.1.99`,
			why:  "a remote backend's replies to a SourceVIP in a remote host's pod subnet are routed to that host, not back to this one"},
		{name: "another Service's frontend as the SourceVIP",
			edit: func(t *testing.T, d doc) {
				for _, i := range []int{0, 2} {
					hlbLB(d, i)["SourceVIP"] = "10.96.0.40"
				}
			},
			want: `.SourceVIP: 10.96.0.40`,
			why:  "the SourceVIP of web and far is sticky's frontend: the backends' replies to it would be balanced"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := editJSON(t, lbDoc, func(d doc) { tt.edit(t, d) })
			_, err := ParseConfig(b)
			switch {
			case err == nil:
				t.Errorf("the document is accepted: %s", tt.why)
			case !strings.Contains(err.Error(), tt.want):
				t.Errorf("ParseConfig error\n  %v\nwant it to contain\n  %s", err, tt.want)
			}
		})
	}
}

// A frontend that is the host's own address holds its port on the host
// as a NodePort does: the host's NAT pool (here the SourceVIP's) must
// never hand it out.
func TestHNSLBHostFrontendReservesPort(t *testing.T) {
	b := editJSON(t, lbDoc, func(d doc) {
		for _, i := range []int{0, 2, 6} {
			hlbLB(d, i)["SourceVIP"] = "192.168.1.10"
		}
		hlbLB(d, 6)["FrontendVIPs"] = []any{"192.168.1.10"}
	})
	low := hnsLower(t, b)
	for _, p := range low.Switch.NATPools {
		if p.IP != addr("192.168.1.10") {
			continue
		}
		if !slices.Contains(p.Reserved, vfp.Reservation{Proto: vfp.TCP, Port: 80}) {
			t.Errorf("the host's pool reserves %v, not tcp/80 of sticky's frontend 192.168.1.10", p.Reserved)
		}
		return
	}
	t.Fatalf("no pool for the host's address: %+v", low.Switch.NATPools)
}

// A remote backend's replies reach the client when the SourceVIP is
// outside the Overlay network's local subnets (the host's own address,
// which HNS accepts): the SYN-ACK comes back in VXLAN to the SourceVIP,
// which the uplink's decapsulation rule does not admit, but the
// connection's reply flow takes it first.
func TestLBRemoteSourceVIPOutsideSubnets(t *testing.T) {
	r := ulNewRig(t, mustParse(t, string(editJSON(t, lbDoc, func(d doc) {
		for _, i := range []int{0, 2, 6} {
			hlbLB(d, i)["SourceVIP"] = "192.168.1.10"
		}
	}))))
	syn := natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: 4000, dst: "10.96.0.20", dport: 80, proto: "tcp", flags: "S"}
	p := r.out("ov-a", natFrame(t, syn), "uplink", nil)
	_, _, _, src, _ := lbInner(t, p.Bytes())
	if src.Addr() != addr("192.168.1.10") {
		t.Fatalf("the SYN left from %s, want the SourceVIP 192.168.1.10", src)
	}
	rep := natPkt{smac: lbRDR, dmac: lbDR, src: "10.244.1.5", sport: 8080, dst: src.Addr().String(), dport: src.Port(), proto: "tcp", flags: "SA"}
	in := ptVXLANFrom(t, "02:00:00:00:01:fe", "02:00:00:00:00:fe", "192.168.1.20", "192.168.1.10", 4096, natFrame(t, rep))
	got, trace := r.run("uplink", in, dataplane.Offload{})
	if name := outName(r.sw, got); name != "ov-a" {
		t.Fatalf("the backend's SYN-ACK to the SourceVIP %s went to %s, not to ov-a\n%s", src, name, trace)
	}
}

// An ILB port mapping (pods only) may use the VXLAN port even on the
// host's address: only frontends reached from the network are refused it,
// since the uplink decapsulates what arrives there, and ILB mappings are
// not balanced on the uplink.
func TestHNSLBILBHostFrontendOnVXLANPort(t *testing.T) {
	for _, port := range []string{"4790", "4789"} {
		b := editJSON(t, lbDoc, func(d doc) {
			hnsAdd(t, d, "LoadBalancers", `{"Name": "vx", "HostComputeEndpoints": ["ov-b"], "FrontendVIPs": ["192.168.1.10"],
				"PortMappings": [{"Protocol": 17, "InternalPort": 53, "ExternalPort": `+port+`, "Flags": 1}]}`)
		})
		if _, err := ParseConfig(b); err != nil {
			t.Errorf("an ILB (pods only) Service on the host's address, udp/%s: %v", port, err)
		}
	}
}
