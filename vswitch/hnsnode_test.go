package vswitch

import (
	"strings"
	"testing"
)

// hnsUplinkOnly is a node's document before its node agent made the
// pods' network: the uplink and the host's vNIC alone
// (deploy/configmap.yaml's ufpd.json, rendered for a node).
const hnsUplinkOnly = `{
  "Uplink": {
    "Name": "uplink",
    "MacAddress": "02:00:00:00:00:fe",
    "IpAddresses": ["192.168.1.10/24"],
    "DefaultGateway": "192.168.1.1",
    "Neighbors": [{"IpAddress": "192.168.1.1", "MacAddress": "02:00:00:00:00:99"}],
    "HostPort": "vEthernet"
  }
}`

// TestHNSUplinkOnly checks that an HNS-level document without networks
// compiles to the uplink and the host's vNIC, the node's stack on the
// switch until a network comes through the API, and that a network added
// to it later compiles with its endpoints.
func TestHNSUplinkOnly(t *testing.T) {
	c, err := ParseConfig([]byte(hnsUplinkOnly))
	if err != nil {
		t.Fatal(err)
	}
	if !c.IsHNS() {
		t.Fatal("an uplink-only document is not read as HNS-level")
	}
	ports, err := c.CompilePorts()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range ports {
		names = append(names, p.Name)
		if p.Name == "vEthernet" && (!p.Host || len(p.IPs) != 1 || p.IPs[0].String() != "192.168.1.10") {
			t.Errorf("vEthernet: host %v, addresses %v; want the host's vNIC with 192.168.1.10", p.Host, p.IPs)
		}
	}
	if got := strings.Join(names, ","); got != "uplink,vEthernet" && got != "vEthernet,uplink" {
		t.Errorf("ports %s, want the uplink and vEthernet", got)
	}

	withNet := strings.Replace(hnsUplinkOnly, `"HostPort": "vEthernet"
  }`, `"HostPort": "vEthernet"
  },
  "Networks": [{"Name": "ufp", "Type": "L2Bridge", "Ipams": [{"Subnets": [{"IpAddressPrefix": "10.244.1.0/24",
    "Routes": [{"NextHop": "10.244.1.1", "DestinationPrefix": "0.0.0.0/0"}]}]}]}],
  "Endpoints": [{"Name": "pod-a", "HostComputeNetwork": "ufp", "MacAddress": "02:00:00:00:01:0a",
    "IpConfigurations": [{"IpAddress": "10.244.1.10"}]}]`, 1)
	c, err = ParseConfig([]byte(withNet))
	if err != nil {
		t.Fatalf("the document with a network: %v", err)
	}
	if ports, err = c.CompilePorts(); err != nil || len(ports) != 3 {
		t.Fatalf("the document with a network: %d ports, %v; want 3 (uplink, vEthernet, pod-a)", len(ports), err)
	}
}
