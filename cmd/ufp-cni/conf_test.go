package main

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// pol is a policy as ufpd gets it, written compactly for comparison.
type pol struct{ typ, settings string }

func policiesOf(t *testing.T, tr *translation) []pol {
	t.Helper()
	var out []pol
	for _, p := range tr.Policies {
		out = append(out, pol{p.Type, string(compactJSON(p.Settings))})
	}
	return out
}

// TestSampleConfs parses the real shapes under testdata and checks what
// their policies become.
func TestSampleConfs(t *testing.T) {
	for _, tc := range []struct {
		file        string
		network     string
		netType     string
		ipamType    string
		ipam        string // the ipam object IPAM plugins get, compact
		dns         []string
		policies    []pol
		ignored     int
		providerIPs []string
	}{
		{
			file: "win-bridge.conf", network: "cbr0", netType: "L2Bridge", ipamType: "host-local",
			ipam: `{"type":"host-local","subnet":"10.10.0.0/24"}`, dns: []string{"11.0.0.10"},
			policies: []pol{
				{"OutBoundNAT", `{"Exceptions":["192.168.0.0/16","11.0.0.0/8","10.137.196.0/23"]}`},
			},
			ignored: 3, // two ROUTEs without NextHop, loopbackDSR
		},
		{
			file: "win-overlay.conf", network: "vxlan0", netType: "Overlay", ipamType: "host-local",
			ipam: `{"type":"host-local","subnet":"10.132.0.0/24"}`,
			policies: []pol{
				{"OutBoundNAT", `{"Exceptions":["172.30.0.0/16"]}`}, // ipMasq: it has one
			},
			ignored:     1,
			providerIPs: []string{"10.0.133.170"},
		},
		{
			file: "flannel.conf", network: "cbr0", netType: "L2Bridge", ipamType: "host-local",
			ipam: `{"ranges":[[{"subnet":"10.244.1.0/24","gateway":"10.244.1.1"}],[{"subnet":"fd00:244:1::/64","gateway":"fd00:244:1::1"}]],"type":"host-local"}`,
			dns:  []string{"11.0.0.10"},
			policies: []pol{
				{"OutBoundNAT", `{"Exceptions":["192.168.0.0/16","11.0.0.0/8","10.137.196.0/23"]}`},
			},
			ignored: 3,
		},
		{
			file: "flannel-sdnoverlay.conf", network: "vxlan0", netType: "Overlay", ipamType: "host-local",
			ipam: `{"type":"host-local","subnet":"10.244.1.0/24"}`,
			policies: []pol{
				{"OutBoundNAT", `{"Exceptions":["10.244.0.0/16","10.96.0.0/12"]}`},
			},
			ignored:     2,
			providerIPs: []string{"192.168.50.1"},
		},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			n, err := parseConf(b)
			if err != nil {
				t.Fatal(err)
			}
			if n.Network != tc.network || n.expectedNetworkType() != tc.netType || n.ipamType != tc.ipamType {
				t.Errorf("network %q type %q ipam %q, want %q %q %q", n.Network, n.expectedNetworkType(), n.ipamType, tc.network, tc.netType, tc.ipamType)
			}
			if n.Socket != "/run/ufp/ufpd.sock" {
				t.Errorf("socket %q, want the default", n.Socket)
			}
			var ic struct {
				IPAM json.RawMessage `json:"ipam"`
			}
			if err := json.Unmarshal(n.ipamConf, &ic); err != nil {
				t.Fatal(err)
			}
			if got := string(compactJSON(ic.IPAM)); got != tc.ipam {
				t.Errorf("IPAM plugins get ipam %s, want %s", got, tc.ipam)
			}
			if got := strings.Join(n.resultDNS().Nameservers, ","); got != strings.Join(tc.dns, ",") {
				t.Errorf("dns %s, want %v", got, tc.dns)
			}
			tr, err := translate(n)
			if err != nil {
				t.Fatal(err)
			}
			got := policiesOf(t, tr)
			if len(got) != len(tc.policies) {
				t.Fatalf("policies %v, want %v", got, tc.policies)
			}
			for i := range got {
				if got[i] != tc.policies[i] {
					t.Errorf("policies[%d] = %v, want %v", i, got[i], tc.policies[i])
				}
			}
			if len(tr.Ignored) != tc.ignored {
				t.Errorf("ignored %q, want %d entries", tr.Ignored, tc.ignored)
			}
			var pas []string
			for _, pa := range tr.ProviderAddresses {
				pas = append(pas, pa.addr.String())
			}
			if strings.Join(pas, ",") != strings.Join(tc.providerIPs, ",") {
				t.Errorf("provider addresses %v, want %v", pas, tc.providerIPs)
			}
		})
	}
}

// confWith is a minimal valid conf with extra top-level fields (a JSON
// object's members, without braces).
func confWith(extra string) string {
	s := `{"cniVersion":"1.1.0","name":"net1","type":"ufp-cni","ipam":{"type":"host-local"}`
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

// policies is a conf whose policies list holds the given values.
func policies(values ...string) string {
	var ps []string
	for _, v := range values {
		ps = append(ps, `{"name":"EndpointPolicy","value":`+v+`}`)
	}
	return confWith(`"policies":[` + strings.Join(ps, ",") + `]`)
}

// TestTranslate covers each policy type in both shapes.
func TestTranslate(t *testing.T) {
	for _, tc := range []struct {
		name string
		conf string
		want []pol
	}{
		{"outboundnat-v1", policies(`{"Type":"OutBoundNAT","VIP":"192.168.50.1","ExceptionList":["10.0.0.0/8"]}`),
			[]pol{{"OutBoundNAT", `{"VirtualIP":"192.168.50.1","Exceptions":["10.0.0.0/8"]}`}}},
		{"outboundnat-v2-both-lists", policies(`{"Type":"OutBoundNAT","Settings":{"ExceptionList":["10.0.0.0/8"],"Exceptions":["10.0.0.0/8","10.96.0.1"],"Destinations":["0.0.0.0/0"]}}`),
			[]pol{{"OutBoundNAT", `{"Exceptions":["10.0.0.0/8","10.96.0.1"],"Destinations":["0.0.0.0/0"]}`}}},
		{"outboundnat-v2-ipv6-flag", policies(`{"Type":"OutBoundNAT","Settings":{"Flags":2}}`),
			[]pol{{"OutBoundNAT", `{"Nat66":true}`}}},
		{"outboundnat-filtering", policies(`{"Type":"OutBoundNAT","Settings":{"Filtering":"EndpointIndependent"}}`),
			[]pol{{"OutBoundNAT", `{"Filtering":"EndpointIndependent"}`}}},
		{"outboundnat-port-share-v1", policies(`{"Type":"OutBoundNAT","VIP":"192.168.50.1","PortRange":"20000-29999","PortShare":512}`),
			[]pol{{"OutBoundNAT", `{"VirtualIP":"192.168.50.1","PortRange":"20000-29999","PortShare":512}`}}},
		{"outboundnat-port-share-v2", policies(`{"Type":"OutBoundNAT","Settings":{"Exceptions":["10.244.0.0/16"],"PortShare":65536}}`),
			[]pol{{"OutBoundNAT", `{"Exceptions":["10.244.0.0/16"],"PortShare":65536}`}}},
		{"outboundnat-template-empty-fields", policies(`{"Type":"OutBoundNAT","Settings":{"ExceptionList":["172.30.0.0/16"],"DestinationPrefix":"","NeedEncap":false}}`),
			[]pol{{"OutBoundNAT", `{"Exceptions":["172.30.0.0/16"]}`}}},
		{"route-v1-next-hop", policies(`{"Type":"ROUTE","DestinationPrefix":"10.96.0.0/12","NextHop":"192.168.50.2","NeedEncap":true}`),
			[]pol{{"SDNRoute", `{"DestinationPrefix":"10.96.0.0/12","NextHop":"192.168.50.2","NeedEncap":true}`}}},
		{"sdnroute-v2-next-hop", policies(`{"Type":"SdnRoute","Settings":{"DestinationPrefix":"10.97.0.0/16","NextHop":"192.168.50.2"}}`),
			[]pol{{"SDNRoute", `{"DestinationPrefix":"10.97.0.0/16","NextHop":"192.168.50.2"}`}}},
		{"sdnroute-no-next-hop", policies(`{"Type":"SDNROUTE","Settings":{"DestinationPrefix":"10.96.0.0/12","NeedEncap":true}}`), nil},
		{"nat-v1", policies(`{"Type":"NAT","Protocol":"tcp","InternalPort":80,"ExternalPort":8080}`),
			[]pol{{"PortMapping", `{"Protocol":6,"InternalPort":80,"ExternalPort":8080}`}}},
		{"portmapping-v2", policies(`{"Type":"PortMapping","Settings":{"Protocol":17,"InternalPort":53,"ExternalPort":5353,"VIP":"192.168.50.1"}}`),
			[]pol{{"PortMapping", `{"Protocol":17,"InternalPort":53,"ExternalPort":5353,"VIP":"192.168.50.1"}`}}},
		{"acl-v1", policies(`{"Type":"ACL","Protocol":6,"Action":"allow","Direction":"in","LocalPort":80,"RemoteAddresses":"10.0.0.0/8","RuleType":"Switch","Priority":200}`),
			[]pol{{"ACL", `{"Protocols":"6","Action":"Allow","Direction":"In","RemoteAddresses":"10.0.0.0/8","LocalPorts":"80","RuleType":"Switch","Priority":200}`}}},
		{"acl-v2", policies(`{"Type":"ACL","Settings":{"Id":"deny-ssh","Protocols":"TCP","Action":"Block","Direction":"Out","RemotePorts":"22","Priority":100}}`),
			[]pol{{"ACL", `{"Id":"deny-ssh","Protocols":"TCP","Action":"Block","Direction":"Out","RemotePorts":"22","Priority":100}`}}},
		{"encap-overhead", policies(`{"Type":"EncapOverhead","Settings":{"Overhead":50}}`),
			[]pol{{"EncapOverhead", `{"Overhead":50}`}}},
		{"provider-address-v1", policies(`{"Type":"PA","PA":"192.168.50.1"}`), nil},
		{"additional-args", confWith(`"AdditionalArgs":[{"Name":"EndpointPolicy","Value":{"Type":"OutBoundNAT","Settings":{"Exceptions":["10.244.0.0/16"]}}}]`),
			[]pol{{"OutBoundNAT", `{"Exceptions":["10.244.0.0/16"]}`}}},
		{"ipmasq-adds-outboundnat", confWith(`"ipMasq":true`), []pol{{"OutBoundNAT", `{}`}}},
		{"ipmasqnetwork-joins-exceptions", confWith(`"ipMasqNetwork":"10.244.0.0/16","policies":[{"name":"EndpointPolicy","value":{"Type":"OutBoundNAT","ExceptionList":["10.0.0.0/8"]}}]`),
			[]pol{{"OutBoundNAT", `{"Exceptions":["10.0.0.0/8","10.244.0.0/16"]}`}}},
		{"ipmasqnetwork-alone", confWith(`"ipMasqNetwork":"10.244.0.0/16"`), []pol{{"OutBoundNAT", `{"Exceptions":["10.244.0.0/16"]}`}}},
		{"port-mappings-capability", confWith(`"runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"},{"hostPort":53,"containerPort":53,"protocol":"UDP","hostIP":"192.168.50.1"}]}`),
			[]pol{{"PortMapping", `{"Protocol":6,"InternalPort":80,"ExternalPort":8080}`}, {"PortMapping", `{"Protocol":17,"InternalPort":53,"ExternalPort":53,"VIP":"192.168.50.1"}`}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := parseConf([]byte(tc.conf))
			if err != nil {
				t.Fatal(err)
			}
			tr, err := translate(n)
			if err != nil {
				t.Fatal(err)
			}
			got := policiesOf(t, tr)
			if len(got) != len(tc.want) {
				t.Fatalf("policies %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("policies[%d] = %v, want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// TestConfErrors checks that each invalid conf is refused with an error
// naming the field (and, for a policy, its list, index and type).
func TestConfErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		conf string
		want string
	}{
		{"not-json", `{"name":`, "network configuration:"},
		{"no-name", `{"cniVersion":"1.1.0","type":"ufp-cni","ipam":{"type":"host-local"}}`, "name: the network configuration needs a name"},
		{"no-ipam", `{"cniVersion":"1.1.0","name":"n","type":"ufp-cni"}`, "ipam: ufp-cni needs an IPAM plugin"},
		{"ipam-no-type", `{"cniVersion":"1.1.0","name":"n","type":"ufp-cni","ipam":{"subnet":"10.0.0.0/24"}}`, "ipam.type: the IPAM plugin to run is required"},
		{"ipam-type-path", `{"cniVersion":"1.1.0","name":"n","type":"ufp-cni","ipam":{"type":"../evil"}}`, `ipam.type: "../evil" is not a plugin name`},
		{"socket-relative", confWith(`"socket":"run/ufpd.sock"`), `socket: "run/ufpd.sock" is not an absolute path`},
		{"api-version", confWith(`"apiVersion":3`), "apiVersion: 3 is not an HNS API version"},
		{"mac-prefix", confWith(`"endpointMacPrefix":"0E2A"`), `endpointMacPrefix: "0E2A" is not two bytes`},
		{"mac-prefix-multicast", confWith(`"endpointMacPrefix":"01-00"`), `endpointMacPrefix: "01-00" is a multicast prefix`},
		{"dns-server", confWith(`"dns":{"nameservers":["dns.local"]}`), `dns.nameservers[0]: "dns.local" is not an IP address`},
		{"field-type", confWith(`"ipMasq":"yes"`), "ipMasq: string is not bool"},
		{"unknown-policy", policies(`{"Type":"OutBoundNAT"}`, `{"Type":"QOS","Settings":{"MaximumOutgoingBandwidthInBytes":1000}}`),
			`policies[1] (QOS): "QOS" is not an endpoint policy type ufp-cni knows`},
		{"policy-no-type", policies(`{"ExceptionList":["10.0.0.0/8"]}`), "policies[0].value.Type: a policy needs a type"},
		{"policy-name", confWith(`"policies":[{"name":"NetworkPolicy","value":{"Type":"OutBoundNAT"}}]`), `policies[0].name: "NetworkPolicy": ufp-cni applies endpoint policies`},
		{"policy-value", confWith(`"policies":[{"name":"EndpointPolicy","value":"OutBoundNAT"}]`), "policies[0].value: not a policy object"},
		{"exception", policies(`{"Type":"OutBoundNAT","ExceptionList":["10.0.0.0/8","ten/8"]}`), `policies[0] (OutBoundNAT).value.ExceptionList[1]: "ten/8" is neither a prefix nor an address`},
		{"exception-v2", policies(`{"Type":"OutBoundNAT","Settings":{"Exceptions":["x"]}}`), `policies[0] (OutBoundNAT).value.Settings.Exceptions[0]`},
		{"vip", policies(`{"Type":"OutBoundNAT","VIP":"host"}`), `policies[0] (OutBoundNAT).value.VirtualIP: "host" is not an IP address`},
		{"nat-flags", policies(`{"Type":"OutBoundNAT","Settings":{"Flags":1}}`), "policies[0] (OutBoundNAT).value.Settings.Flags: 1 has flags ufp does not implement"},
		{"nat-filtering", policies(`{"Type":"OutBoundNAT","Settings":{"Filtering":"FullCone"}}`), `policies[0] (OutBoundNAT).value.Settings.Filtering: "FullCone" is not a filtering behaviour`},
		{"nat-port-share-negative", policies(`{"Type":"OutBoundNAT","Settings":{"PortShare":-1}}`), "policies[0] (OutBoundNAT).value.Settings.PortShare: -1 is not 1 to 65536 ports"},
		{"nat-port-share-too-big", policies(`{"Type":"OutBoundNAT","PortShare":65537}`), "policies[0] (OutBoundNAT).value.PortShare: 65537 is not 1 to 65536 ports"},
		{"nat-port-share-type", policies(`{"Type":"OutBoundNAT","Settings":{"PortShare":"half"}}`), "policies[0] (OutBoundNAT).value.Settings.PortShare: a string is not a int"},
		{"unknown-field", policies(`{"Type":"SDNRoute","Settings":{"DestinationPrefix":"10.0.0.0/8","Metric":5}}`), "policies[0] (SDNRoute).value.Settings.Metric: not a field of this policy"},
		{"v1-beside-settings", policies(`{"Type":"SDNRoute","DestinationPrefix":"10.0.0.0/8","Settings":{"NeedEncap":true}}`), "policies[0] (SDNRoute).value.DestinationPrefix: the policy has Settings (HNS v2)"},
		{"wrong-type", policies(`{"Type":"ROUTE","DestinationPrefix":"10.0.0.0/8","NeedEncap":"yes"}`), "policies[0] (ROUTE).value.NeedEncap: a string is not a bool"},
		{"route-no-prefix", policies(`{"Type":"ROUTE","NeedEncap":true}`), "policies[0] (ROUTE).value.DestinationPrefix: a route needs one"},
		{"route-host-bits", policies(`{"Type":"ROUTE","DestinationPrefix":"10.0.0.1/8"}`), "policies[0] (ROUTE).value.DestinationPrefix: 10.0.0.1/8 has host bits set (did you mean 10.0.0.0/8?)"},
		{"route-family", policies(`{"Type":"ROUTE","DestinationPrefix":"10.0.0.0/8","NextHop":"fd00::1"}`), "policies[0] (ROUTE).value.NextHop: fd00::1 is not of the family of 10.0.0.0/8"},
		{"pa", policies(`{"Type":"ProviderAddress","Settings":{"ProviderAddress":"ip of host"}}`), `policies[0] (ProviderAddress).value.Settings.ProviderAddress: "ip of host" is not an IP address`},
		{"nat-protocol", policies(`{"Type":"NAT","Protocol":"sctp","InternalPort":80,"ExternalPort":80}`), `policies[0] (NAT).value.Protocol: "sctp" is not tcp or udp`},
		{"nat-port", policies(`{"Type":"PortMapping","Settings":{"Protocol":6,"ExternalPort":80}}`), "policies[0] (PortMapping).value.Settings.InternalPort: 0 is not a port"},
		{"acl-v1-v2-differ", policies(`{"Type":"ACL","Protocol":6,"Protocols":"17","Action":"Allow","Direction":"In"}`), `policies[0] (ACL).value.Protocol: 6 differs from Protocols "17"`},
		{"acl-service-name", policies(`{"Type":"ACL","Action":"Allow","Direction":"In","ServiceName":"svc"}`), "policies[0] (ACL).value.ServiceName: not a field of this policy"},
		{"port-mapping-capability", confWith(`"runtimeConfig":{"portMappings":[{"hostPort":80,"containerPort":80,"protocol":"sctp"}]}`), `runtimeConfig.portMappings[0].protocol: "sctp" is not tcp or udp`},
		{"ipmasqnetwork", confWith(`"ipMasqNetwork":"cluster"`), `ipMasqNetwork: "cluster" is neither a prefix nor an address`},
		{"delegate-dup", `{"cniVersion":"1.1.0","name":"n","type":"flannel","policies":[],"delegate":{"Policies":[],"ipam":{"type":"host-local"}}}`,
			"delegate.Policies: Policies is given at the top level too"},
		{"delegate-name", `{"cniVersion":"1.1.0","name":"n","type":"flannel","delegate":{"name":"m","ipam":{"type":"host-local"}}}`, `delegate.name: "m" differs from the top level's "n"`},
		{"delegate-policy", `{"cniVersion":"1.1.0","name":"n","type":"flannel","delegate":{"ipam":{"type":"host-local"},"AdditionalArgs":[{"Name":"EndpointPolicy","Value":{"Type":"L4WFPPROXY","Settings":{"Port":"15001"}}}]}}`,
			`delegate.AdditionalArgs[0] (L4WFPPROXY): "L4WFPPROXY" is not an endpoint policy type`},
		{"delegate-socket", `{"cniVersion":"1.1.0","name":"n","type":"flannel","delegate":{"socket":"x.sock","ipam":{"type":"host-local"}}}`, `delegate.socket: "x.sock" is not an absolute path`},
		{"delegate-not-object", `{"cniVersion":"1.1.0","name":"n","type":"flannel","delegate":[]}`, "delegate: not an object"},
		{"flannel-no-subnet-file", `{"cniVersion":"1.1.0","name":"n","type":"flannel","subnetFile":"testdata/none.env","delegate":{"type":"win-bridge"}}`,
			"ipam: none given, and flannel's subnet file (subnetFile): open testdata/none.env"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := parseConf([]byte(tc.conf))
			if err == nil {
				_, err = translate(n)
			}
			if err == nil {
				t.Fatalf("accepted; want an error with %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q\nwant it to hold %q", err, tc.want)
			}
		})
	}
}

// TestConfErrorCode checks that conf errors carry CNI's code for an
// invalid network configuration.
func TestConfErrorCode(t *testing.T) {
	_, err := parseConf([]byte(confWith(`"apiVersion":9`)))
	var e *types.Error
	if !errors.As(err, &e) || e.Code != types.ErrInvalidNetworkConfig {
		t.Errorf("error %#v, want a *types.Error with code %d", err, types.ErrInvalidNetworkConfig)
	}
}

func TestEndpointName(t *testing.T) {
	a := endpointName("cbr0", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "eth0")
	if a != endpointName("cbr0", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "eth0") {
		t.Error("endpointName is not stable")
	}
	if len(a) != 23 || !strings.HasPrefix(a, "cni-") {
		t.Errorf("endpointName = %q, want cni- and 19 more bytes", a)
	}
	for _, other := range []string{
		endpointName("cbr0", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "eth1"),
		endpointName("cbr0", "cnitool-77383ca0a0715733ca6f", "eth0"),
		endpointName("vxlan0", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "eth0"),
	} {
		if other == a {
			t.Errorf("endpointName %q for two attachments", a)
		}
	}
	for _, tc := range []struct {
		name, conf string
		want       bool
	}{
		{a, "cbr0", true},
		{a, "vxlan0", false},
		{endpointName("vxlan0", "c1", "eth0"), "vxlan0", true},
		{"pod-a", "cbr0", false},
		{a[:len(a)-1] + "g", "cbr0", false},
		{a + "0", "cbr0", false},
	} {
		if got := isConfEndpoint(tc.name, tc.conf); got != tc.want {
			t.Errorf("isConfEndpoint(%q, %q) = %v, want %v", tc.name, tc.conf, got, tc.want)
		}
	}
}

func TestEndpointMAC(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		addrs  []string
		want   string
	}{
		{"", []string{"10.244.1.5"}, "0e:2a:0a:f4:01:05"},
		{"0E-2A", []string{"fd00:244:1::5", "10.244.1.6"}, "0e:2a:0a:f4:01:06"},
		{"02:50", []string{"192.168.0.200"}, "02:50:c0:a8:00:c8"},
		{"", []string{"fd00:244:1::a:b"}, "0e:2a:00:0a:00:0b"},
	} {
		p, err := parseMACPrefix(tc.prefix)
		if err != nil {
			t.Fatal(err)
		}
		var as []netip.Addr
		for _, s := range tc.addrs {
			as = append(as, netip.MustParseAddr(s))
		}
		m, err := endpointMAC(p, as)
		if err != nil || m.String() != tc.want {
			t.Errorf("endpointMAC(%q, %v) = %v, %v; want %s", tc.prefix, tc.addrs, m, err, tc.want)
		}
	}
	if _, err := endpointMAC([2]byte{0x0e, 0x2a}, nil); err == nil {
		t.Error("endpointMAC of no address: no error")
	}
}
