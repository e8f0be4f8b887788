package vswitch

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/encap"
)

// Documents that lowered without an error but compiled to an invalid
// VFP-level policy: package hns refuses each, naming the HNS field.
func TestHNSRefusesWhatWouldNotCompile(t *testing.T) {
	// An L2Bridge network on a link-local subnet, whose endpoint backs a
	// load balancer.
	const linkLocal = `{
	  "Uplink": {"MacAddress": "02:00:00:00:00:fe", "IpAddresses": ["192.168.1.10"]},
	  "Networks": [{"Name": "ll", "Type": "L2Bridge", "Ipams": [{"Subnets": [{"IpAddressPrefix": "169.254.7.0/24"}]}]}],
	  "Endpoints": [{"Name": "pod-a", "HostComputeNetwork": "ll", "MacAddress": "02:00:00:00:00:0a",
	    "IpConfigurations": [{"IpAddress": "169.254.7.10"}]}],
	  "LoadBalancers": [{"Name": "svc", "HostComputeEndpoints": ["pod-a"], "FrontendVIPs": ["10.96.0.10"],
	    "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80}]}]
	}`
	for _, tt := range []struct {
		name string
		base string
		edit func(t *testing.T, d doc)
		want string
	}{
		{name: "host's vNIC named as the uplink", base: hostDoc, edit: func(t *testing.T, d doc) { at(d, "Uplink")["HostPort"] = "uplink" },
			want: `Uplink.HostPort: "uplink" is the uplink's name`},
		{name: "host's vNIC named as an endpoint", base: hostDoc, edit: func(t *testing.T, d doc) { at(d, "Uplink")["HostPort"] = "pod-a" },
			want: `Endpoints[0] "pod-a".Name: the host's vNIC (Uplink.HostPort) has this name`},
		{name: "host's address in IPv4-mapped IPv6 form", base: hostDoc, edit: func(t *testing.T, d doc) {
			at(d, "Uplink")["IpAddresses"] = []any{"::ffff:192.168.50.1/120"}
		}, want: `Uplink.IpAddresses[0]: "::ffff:192.168.50.1/120": write IPv4 addresses in IPv4 form`},
		{name: "host's address is a network's gateway", base: hostDoc, edit: func(t *testing.T, d doc) {
			at(d, "Uplink")["IpAddresses"] = []any{"10.244.1.1"}
		}, want: `Uplink.IpAddresses[0]: 10.244.1.1 is the gateway of Networks[0] "vxlan0"`},
		{name: "flow table", base: hostDoc, edit: func(t *testing.T, d doc) { d["switch"] = doc{"flowTable": doc{"maxFlows": -1}} },
			want: "switch.flowTable.maxFlows: must be positive, got -1"},
		{name: "a backend on a link-local address", base: linkLocal, edit: func(t *testing.T, d doc) {},
			want: `LoadBalancers[0] "svc".HostComputeEndpoints[0]: endpoint "pod-a"'s address 169.254.7.10 is not a unicast address`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hnsWantRejected(t, editJSON(t, tt.base, func(d doc) { tt.edit(t, d) }), tt.want)
		})
	}
}

// TestHNSRefusesTooMany: a document with more endpoints than a switch has
// port IDs, or more remote subnet routes than the uplink's decapsulation
// layer has priorities for, is refused by hns, naming the field.
func TestHNSRefusesTooMany(t *testing.T) {
	if testing.Short() {
		t.Skip("builds documents of 60000 objects")
	}
	var b strings.Builder
	b.WriteString(`{"Uplink": {"MacAddress": "02:00:00:00:00:fe"},
	  "Networks": [{"Name": "big", "Type": "L2Bridge", "Ipams": [{"Subnets": [{"IpAddressPrefix": "10.0.0.0/8"}]}]}],
	  "Endpoints": [`)
	for i := range 65534 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"Name": "p%d", "HostComputeNetwork": "big", "MacAddress": "02:01:00:%02x:%02x:%02x", "IpConfigurations": [{"IpAddress": "10.%d.%d.%d"}]}`,
			i, byte(i>>16), byte(i>>8), byte(i), byte(i>>16)+1, byte(i>>8), byte(i))
	}
	b.WriteString(`]}`)
	hnsWantRejected(t, []byte(b.String()), `Endpoints[65533] "p65533": a switch has room for 65533 endpoints`)

	d := doc{}
	if err := json.Unmarshal([]byte(hnsOverlayPolicy), &d); err != nil {
		t.Fatal(err)
	}
	n := hnsNet0(d)
	ps := n["Policies"].([]any)
	var route doc
	for _, p := range ps {
		if p.(map[string]any)["Type"] == "RemoteSubnetRoute" {
			route = p.(map[string]any)
		}
	}
	for i := range encap.MaxRemoteRoutes + 1 {
		r := doc{"Type": "RemoteSubnetRoute", "Settings": map[string]any{}}
		for k, v := range route["Settings"].(map[string]any) {
			r["Settings"].(map[string]any)[k] = v
		}
		r["Settings"].(map[string]any)["DestinationPrefix"] = fmt.Sprintf("11.%d.%d.0/24", i>>8, byte(i))
		ps = append(ps, r)
	}
	n["Policies"] = ps
	bb, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	hnsWantRejected(t, bb, fmt.Sprintf("RemoteSubnetRoute: more than %d in the document", encap.MaxRemoteRoutes))
}

// FuzzHNSLowers edits the HNS-level base documents field by field with
// values of the kinds they hold (addresses, prefixes, MACs, names,
// numbers) and checks that what lowers compiles (lowersCompiles), and
// that an accepted document builds a switch. The input picks a base, then
// edits of three bytes each: what to do (set, delete, duplicate a list
// entry), where (a field or entry, in walk order), and which value.
func FuzzHNSLowers(f *testing.F) {
	bases := []string{hnsOverlayPolicy, hnsL2BridgePolicy, hostDoc, lbDoc, natDoc, natL2Doc}
	vocab := []any{
		"10.244.0.1", "10.244.0.10", "10.244.0.11", "10.244.1.1", "10.244.1.5", "10.96.0.10", "192.168.1.1", "192.168.1.10",
		"192.168.1.20", "192.168.50.1", "192.168.50.254", "::ffff:10.244.0.10", "fd00:1::10", "fd00:244::1", "169.254.0.1",
		"0.0.0.0", "255.255.255.255", "224.0.0.1", "10.244.0.0/24", "10.244.0.0/16", "10.244.1.0/24", "0.0.0.0/0", "::/0",
		"192.168.1.10/24", "::ffff:10.0.0.0/104", "02:00:00:00:00:fe", "02:00:00:00:00:01", "02:00:00:00:00:0a",
		"02:00:00:00:00:99", "01:00:5e:00:00:01", "00:00:00:00:00:00", "uplink", "pod-a", "pod-b", "host", "", "Overlay",
		"L2Bridge", "1024-2000", "80", "TCP", "Allow", "Block", "In", "Out",
		json.Number("0"), json.Number("1"), json.Number("2"), json.Number("6"), json.Number("17"), json.Number("80"),
		json.Number("4096"), json.Number("4789"), json.Number("65535"), json.Number("16777216"), true, false,
		// The host's services gateway (hns.HostServicesMAC, HostServicesGateway).
		"02:75:66:70:00:01", "fe80::ff:1",
	}
	for i := range bases {
		f.Add([]byte{byte(i)})
		f.Add([]byte{byte(i), 0, 3, 1, 1, 17, 32})
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 || len(in) > 1+3*16 {
			return
		}
		dec := json.NewDecoder(strings.NewReader(bases[int(in[0])%len(bases)]))
		dec.UseNumber()
		var d any
		if err := dec.Decode(&d); err != nil {
			t.Fatal(err)
		}
		for ops := in[1:]; len(ops) >= 3; ops = ops[3:] {
			slots := fuzzSlots(d, nil)
			s := slots[int(ops[1])%len(slots)]
			switch ops[0] % 4 {
			case 0, 1:
				s.set(vocab[int(ops[2])%len(vocab)])
			case 2:
				s.del()
			case 3:
				s.dup()
			}
		}
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		lowersCompiles(t, b)
		c, err := ParseConfig(b)
		if err != nil {
			return
		}
		if _, err := New(c); err != nil {
			t.Fatalf("accepted, but New fails: %v\n%s", err, b)
		}
	})
}

// fuzzSlot is a place in a generic JSON document: a field of an object
// or an entry of a list.
type fuzzSlot struct {
	set func(v any) // replaces the value
	del func()      // removes the field, or the entry
	dup func()      // appends a copy of the entry to its list (a field: nothing)
}

// fuzzSlots lists the slots of v and of everything in it, in walk order
// (objects by sorted key); set replaces v in its parent.
func fuzzSlots(v any, set func(any)) []fuzzSlot {
	var out []fuzzSlot
	switch v := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			setK := func(x any) { v[k] = x }
			out = append(out, fuzzSlot{set: setK, del: func() { delete(v, k) }, dup: func() {}})
			out = append(out, fuzzSlots(v[k], setK)...)
		}
	case []any:
		for i := range v {
			setI := func(x any) { v[i] = x }
			out = append(out, fuzzSlot{set: setI,
				del: func() { set(slices.Delete(slices.Clone(v), i, i+1)) },
				dup: func() { set(append(slices.Clone(v), v[i])) }})
			out = append(out, fuzzSlots(v[i], setI)...)
		}
	}
	if len(out) == 0 && set == nil {
		out = append(out, fuzzSlot{set: func(any) {}, del: func() {}, dup: func() {}})
	}
	return out
}
