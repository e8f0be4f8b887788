package proxy

import (
	"encoding/json"
	"testing"

	"github.com/ufp-dev/ufp/hns"
)

// nodeDocument is node n1's HNS document: an Overlay network "pods" with
// this node's subnets (10.0.1.0/24, fd00:1::/64) and routes to n2's
// (10.0.2.0/24, fd00:2::/64), ufpd's local endpoints pod-a and pod-b.
const nodeDocument = `{
  "switch": {"name": "n1"},
  "Uplink": {
    "MacAddress": "02:00:00:00:00:fe",
    "IpAddresses": ["192.168.0.1", "fd00::1"],
    "Neighbors": [{"IpAddress": "192.168.0.2", "MacAddress": "02:00:00:00:01:fe"}]
  },
  "Networks": [{
    "Name": "pods", "Type": "Overlay",
    "Ipams": [{"Subnets": [
      {"IpAddressPrefix": "10.0.1.0/24", "Routes": [{"NextHop": "10.0.1.1", "DestinationPrefix": "0.0.0.0/0"}],
       "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]},
      {"IpAddressPrefix": "fd00:1::/64", "Routes": [{"NextHop": "fd00:1::1", "DestinationPrefix": "::/0"}],
       "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]}
    ]}],
    "Policies": [
      {"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.0.1"}},
      {"Type": "DrMacAddress", "Settings": {"Address": "02:00:00:00:00:01"}},
      {"Type": "RemoteSubnetRoute", "Settings": {"DestinationPrefix": "10.0.2.0/24", "IsolationId": 4096,
        "ProviderAddress": "192.168.0.2", "DistributedRouterMacAddress": "02:00:00:00:01:01"}},
      {"Type": "RemoteSubnetRoute", "Settings": {"DestinationPrefix": "fd00:2::/64", "IsolationId": 4096,
        "ProviderAddress": "192.168.0.2", "DistributedRouterMacAddress": "02:00:00:00:01:01"}}
    ]
  }],
  "Endpoints": [
    {"Name": "pod-a", "HostComputeNetwork": "pods", "MacAddress": "02:00:00:00:00:0a",
     "IpConfigurations": [{"IpAddress": "10.0.1.5", "PrefixLength": 24}, {"IpAddress": "fd00:1::5", "PrefixLength": 64}]},
    {"Name": "pod-b", "HostComputeNetwork": "pods", "MacAddress": "02:00:00:00:00:0b",
     "IpConfigurations": [{"IpAddress": "10.0.1.6", "PrefixLength": 24}]}
  ]
}`

// lowerResult lowers node n1's document with r's objects, as ufpd would
// take them.
func lowerResult(t testing.TB, r Result) error {
	var d hns.Document
	if err := json.Unmarshal([]byte(nodeDocument), &d); err != nil {
		t.Fatal(err)
	}
	for _, e := range r.Remotes {
		d.Endpoints = append(d.Endpoints, e.EndpointConfig)
	}
	d.LoadBalancers = append(d.LoadBalancers, r.LoadBalancers...)
	_, err := hns.Lower(&d)
	return err
}

// TestServiceLowers checks that ufpd's validation takes what every case
// of TestService makes: the shapes, flags and names fit hns.
func TestServiceLowers(t *testing.T) {
	if err := lowerResult(t, Result{}); err != nil {
		t.Fatalf("the node's document alone: %v", err)
	}
	// What ufpd refuses, and the translation avoids: remote backends
	// without a SourceVIP.
	bad := Result{
		LoadBalancers: lbs(noVIP(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "remote.10.0.2.7"))),
		Remotes:       remotes("10.0.2.7"),
	}
	if err := lowerResult(t, bad); err == nil {
		t.Fatal("remote backends without a SourceVIP or DSR: accepted")
	}
	for _, tc := range serviceCases {
		t.Run(tc.name, func(t *testing.T) {
			if err := lowerResult(t, tc.run()); err != nil {
				t.Error(err)
			}
		})
	}
}
