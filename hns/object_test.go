package hns

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// objectDoc is an overlay node: two pods, a remote endpoint behind a
// RemoteSubnetRoute, and two Services.
const objectDoc = `{
  "Uplink": {"MacAddress": "02:00:00:00:00:fe", "IpAddresses": ["192.168.50.1/24"],
    "Neighbors": [{"IpAddress": "192.168.50.2", "MacAddress": "02:00:00:00:00:02"}]},
  "Networks": [{"Name": "ovl", "Type": "Overlay",
    "Ipams": [{"Subnets": [{"IpAddressPrefix": "10.244.1.0/24",
      "Routes": [{"NextHop": "10.244.1.1", "DestinationPrefix": "0.0.0.0/0"}],
      "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]}]}],
    "Policies": [
      {"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.50.1"}},
      {"Type": "DrMacAddress", "Settings": {"Address": "02:00:00:00:01:01"}},
      {"Type": "RemoteSubnetRoute", "Settings": {"DestinationPrefix": "10.244.2.0/24", "IsolationId": 4096,
        "ProviderAddress": "192.168.50.2", "DistributedRouterMacAddress": "02:00:00:00:02:01"}}]}],
  "Endpoints": [
    {"Name": "pod-a", "HostComputeNetwork": "ovl", "MacAddress": "02:00:00:00:01:0a", "IpConfigurations": [{"IpAddress": "10.244.1.10"}]},
    {"Name": "pod-b", "HostComputeNetwork": "ovl", "MacAddress": "02:00:00:00:01:0b", "IpConfigurations": [{"IpAddress": "10.244.1.11"}]},
    {"Name": "remote.10.244.2.5", "HostComputeNetwork": "ovl", "Flags": 1, "IpConfigurations": [{"IpAddress": "10.244.2.5"}],
     "Owner": "ufp-agent/node-1"}],
  "LoadBalancers": [
    {"Name": "default.web.tcp80.v4.cluster", "HostComputeEndpoints": ["pod-a", "remote.10.244.2.5"], "SourceVIP": "10.244.1.250",
     "FrontendVIPs": ["10.96.0.10"], "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80}], "Owner": "ufp-agent/node-1"},
    {"Name": "default.db.tcp5432.v4.cluster", "HostComputeEndpoints": ["pod-b"], "SourceVIP": "10.244.1.250",
     "FrontendVIPs": ["10.96.0.11"], "PortMappings": [{"Protocol": 6, "InternalPort": 5432, "ExternalPort": 5432}], "Owner": "ufp-agent/node-1"}]
}`

func objectDocument(t *testing.T, edit func(d *Document)) *Document {
	t.Helper()
	var d Document
	if err := json.Unmarshal([]byte(objectDoc), &d); err != nil {
		t.Fatal(err)
	}
	edit(&d)
	return &d
}

// TestObjectError checks that Lower blames the object at fault, whatever
// the check that failed, and no object for errors of the document's
// other parts.
func TestObjectError(t *testing.T) {
	if _, err := Lower(objectDocument(t, func(*Document) {})); err != nil {
		t.Fatalf("the base document: %v", err)
	}
	web, db := "default.web.tcp80.v4.cluster", "default.db.tcp5432.v4.cluster"
	for _, tc := range []struct {
		name      string
		edit      func(d *Document)
		kind, obj string // "" for no object
		msg       string
	}{
		{name: "backend unknown", edit: func(d *Document) { d.LoadBalancers[1].HostComputeEndpoints = []string{"pod-z"} },
			kind: KindLoadBalancer, obj: db, msg: `LoadBalancers[1] "` + db + `".HostComputeEndpoints[0]: no endpoint is named "pod-z"`},
		{name: "frontend taken by an earlier Service", edit: func(d *Document) {
			d.LoadBalancers[1].FrontendVIPs = []string{"10.96.0.10"}
			d.LoadBalancers[1].PortMappings[0].ExternalPort = 80
		},
			kind: KindLoadBalancer, obj: db, msg: "is taken by"},
		{name: "no port mapping", edit: func(d *Document) { d.LoadBalancers[0].PortMappings = nil },
			kind: KindLoadBalancer, obj: web, msg: ".PortMappings: a load balancer needs at least one port mapping"},
		{name: "frontend is a remote endpoint's", edit: func(d *Document) { d.LoadBalancers[1].FrontendVIPs = []string{"10.244.2.5"} },
			kind: KindLoadBalancer, obj: db, msg: "a remote endpoint"},
		{name: "frontend is a pod's address", edit: func(d *Document) { d.LoadBalancers[1].FrontendVIPs = []string{"10.244.1.11"} },
			kind: KindLoadBalancer, obj: db, msg: `Endpoints[1] "pod-b".IpConfigurations[0].IpAddress: 10.244.1.11 is a frontend of`},
		{name: "a SourceVIP that is another Service's frontend", edit: func(d *Document) {
			d.LoadBalancers[1].FrontendVIPs = []string{"10.244.1.250"}
			d.LoadBalancers[1].SourceVIP = ""
		}, kind: KindLoadBalancer, obj: db, msg: `.SourceVIP: 10.244.1.250 is a frontend of LoadBalancers[1]`},
		{name: "remote endpoint outside every route", edit: func(d *Document) { d.Endpoints[2].IpConfigurations[0].IpAddress = "10.244.3.5" },
			kind: KindEndpoint, obj: "remote.10.244.2.5", msg: "is in no RemoteSubnetRoute"},
		{name: "remote endpoint in the local subnet", edit: func(d *Document) { d.Endpoints[2].IpConfigurations[0].IpAddress = "10.244.1.77" },
			kind: KindEndpoint, obj: "remote.10.244.2.5", msg: "local subnets"},
		{name: "local endpoint's address twice", edit: func(d *Document) { d.Endpoints[1].IpConfigurations[0].IpAddress = "10.244.1.10" },
			kind: KindEndpoint, obj: "pod-b", msg: `is already used by Endpoints[0] "pod-a"`},
		{name: "endpoint's address is a NAT address", edit: func(d *Document) { d.Endpoints[1].IpConfigurations[0].IpAddress = "10.244.1.250" },
			kind: KindEndpoint, obj: "pod-b", msg: "is a NAT address"},
		{name: "endpoint without a name", edit: func(d *Document) { d.Endpoints[1].Name = "" },
			kind: KindEndpoint, obj: "", msg: "Endpoints[1].Name: an endpoint needs a name"},
		{name: "endpoint's owner not printable", edit: func(d *Document) { d.Endpoints[2].Owner = "agent\x00" },
			kind: KindEndpoint, obj: "remote.10.244.2.5", msg: `Endpoints[2] "remote.10.244.2.5".Owner: "agent\x00" has a character that is not printable`},
		{name: "load balancer's owner too long", edit: func(d *Document) { d.LoadBalancers[0].Owner = strings.Repeat("a", 254) },
			kind: KindLoadBalancer, obj: web, msg: ".Owner: 254 bytes, more than 253"},
		{name: "load balancer's owner not UTF-8", edit: func(d *Document) { d.LoadBalancers[0].Owner = "\xff" },
			kind: KindLoadBalancer, obj: web, msg: "is not UTF-8 text"},
		{name: "the uplink", edit: func(d *Document) { d.Uplink.MacAddress = "zz" }, msg: "Uplink.MacAddress"},
		{name: "a network", edit: func(d *Document) { d.Networks[0].Type = "Transparent" }, msg: `Networks[0] "ovl".Type`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Lower(objectDocument(t, tc.edit))
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v, want one containing %q", err, tc.msg)
			}
			var oe *ObjectError
			switch {
			case !errors.As(err, &oe):
				if tc.kind != "" {
					t.Errorf("no object blamed, want %s %q", tc.kind, tc.obj)
				}
			case tc.kind == "":
				t.Errorf("%s %q blamed, want no object", oe.Kind, oe.Name)
			case oe.Kind != tc.kind || oe.Name != tc.obj:
				t.Errorf("%s %q blamed, want %s %q", oe.Kind, oe.Name, tc.kind, tc.obj)
			}
		})
	}
}

func TestCheckOwner(t *testing.T) {
	for _, tc := range []struct {
		owner string
		ok    bool
	}{
		{"", true},
		{"ufp-agent/node-1", true},
		{"ufp-agent/nœud", true},
		{strings.Repeat("x", MaxOwnerLen), true},
		{strings.Repeat("x", MaxOwnerLen+1), false},
		{"a\tb", false},
		{"a\nb", false},
		{"\u200b", false}, // a zero-width space is a format character
		{"\xc3", false},
	} {
		if err := CheckOwner("Owner", tc.owner); (err == nil) != tc.ok {
			t.Errorf("CheckOwner(%q): %v, want ok %v", tc.owner, err, tc.ok)
		}
	}
}
