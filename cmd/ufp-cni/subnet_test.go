package main

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSubnetIPAM reads subnet files in flannel's format (as flanneld and
// ufp-agent write them): one host-local range per family, the file's
// address as the gateway, everything else ignored; errors name the file,
// the line and the variable.
func TestSubnetIPAM(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       string // the ipam object, compact; or
		err        string // a substring of the error
	}{
		{name: "dual-stack", file: "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_IPV6_NETWORK=fd00:244::/56\nFLANNEL_IPV6_SUBNET=fd00:244:1::1/64\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
			want: `{"ranges":[[{"subnet":"10.244.1.0/24","gateway":"10.244.1.1"}],[{"subnet":"fd00:244:1::/64","gateway":"fd00:244:1::1"}]],"type":"host-local"}`},
		{name: "IPv4", file: "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.2.1/24\nFLANNEL_MTU=1450\n",
			want: `{"ranges":[[{"subnet":"10.244.2.0/24","gateway":"10.244.2.1"}]],"type":"host-local"}`},
		{name: "IPv6 only", file: "FLANNEL_IPV6_SUBNET=fd00:244:3::1/64\n",
			want: `{"ranges":[[{"subnet":"fd00:244:3::/64","gateway":"fd00:244:3::1"}]],"type":"host-local"}`},
		{name: "IPv6 first", file: "FLANNEL_IPV6_SUBNET=fd00:244:3::1/64\nFLANNEL_SUBNET=10.244.3.1/24\n",
			want: `{"ranges":[[{"subnet":"fd00:244:3::/64","gateway":"fd00:244:3::1"}],[{"subnet":"10.244.3.0/24","gateway":"10.244.3.1"}]],"type":"host-local"}`},
		{name: "the network address: no gateway", file: "FLANNEL_SUBNET=10.244.4.0/24\n",
			want: `{"ranges":[[{"subnet":"10.244.4.0/24"}]],"type":"host-local"}`},
		{name: "spaces and CRLF", file: "  FLANNEL_SUBNET=10.244.5.1/24 \r\n# FLANNEL_SUBNET=10.0.0.1/8\n",
			want: `{"ranges":[[{"subnet":"10.244.5.0/24","gateway":"10.244.5.1"}]],"type":"host-local"}`},
		{name: "empty", file: "", err: "subnet.env has no FLANNEL_SUBNET"},
		{name: "network only", file: "FLANNEL_NETWORK=10.244.0.0/16\n", err: "has no FLANNEL_SUBNET"},
		{name: "not a prefix", file: "FLANNEL_MTU=1450\nFLANNEL_SUBNET=10.244.1.1\n", err: `subnet.env:2: FLANNEL_SUBNET: "10.244.1.1" is not a prefix`},
		{name: "twice", file: "FLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_SUBNET=10.244.2.1/24\n", err: "subnet.env:2: FLANNEL_SUBNET is given twice (line 1 too)"},
		{name: "IPv6 as FLANNEL_SUBNET", file: "FLANNEL_SUBNET=fd00:244:1::1/64\n", err: "subnet.env:1: FLANNEL_SUBNET: fd00:244:1::1/64 is not of its family"},
		{name: "IPv4 as FLANNEL_IPV6_SUBNET", file: "FLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_IPV6_SUBNET=10.244.2.1/24\n", err: "FLANNEL_IPV6_SUBNET: 10.244.2.1/24 is not of its family"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := subnetIPAM("subnet.env", []byte(tc.file))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %s, %v; want an error saying %q", got, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// FuzzSubnetIPAM checks that any subnet file gives an error or a
// host-local ipam with one range per family, each a masked prefix whose
// gateway, if any, lies in it.
func FuzzSubnetIPAM(f *testing.F) {
	f.Add([]byte("FLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_IPV6_SUBNET=fd00:244:1::1/64\n"))
	f.Add([]byte("FLANNEL_SUBNET=10.244.1.0/24\r\n"))
	f.Add([]byte("FLANNEL_SUBNET=::ffff:10.0.0.1/120\n"))
	f.Add([]byte("FLANNEL_IPV6_SUBNET=fe80::1%eth0/64\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := subnetIPAM("f", b)
		if err != nil {
			return
		}
		var ipam struct {
			Type   string `json:"type"`
			Ranges [][]struct {
				Subnet  string `json:"subnet"`
				Gateway string `json:"gateway"`
			} `json:"ranges"`
		}
		if err := json.Unmarshal(out, &ipam); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		if ipam.Type != "host-local" || len(ipam.Ranges) < 1 || len(ipam.Ranges) > 2 {
			t.Fatalf("%s: want host-local with one range per family", out)
		}
		fams := map[bool]bool{}
		for _, r := range ipam.Ranges {
			if len(r) != 1 {
				t.Fatalf("%s: a range set of %d ranges", out, len(r))
			}
			p, err := netip.ParsePrefix(r[0].Subnet)
			if err != nil || p != p.Masked() {
				t.Fatalf("%s: subnet %q is not a masked prefix", out, r[0].Subnet)
			}
			if fams[p.Addr().Is4()] {
				t.Fatalf("%s: two ranges of one family", out)
			}
			fams[p.Addr().Is4()] = true
			if r[0].Gateway != "" {
				if g, err := netip.ParseAddr(r[0].Gateway); err != nil || !p.Contains(g) {
					t.Fatalf("%s: gateway %q outside %s", out, r[0].Gateway, p)
				}
			}
		}
	})
}

// TestSubnetFileWithoutDelegate checks that a conf naming subnetFile and
// no ipam takes host-local ranges from the file even when it is not in
// flannel's shape (deploy/configmap.yaml's conflist), and that without
// either it is refused.
func TestSubnetFileWithoutDelegate(t *testing.T) {
	file := filepath.Join(t.TempDir(), "subnet.env")
	if err := os.WriteFile(file, []byte("FLANNEL_SUBNET=10.244.7.1/24\nFLANNEL_IPV6_SUBNET=fd00:244:7::1/64\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := parseConf([]byte(`{"cniVersion":"1.1.0","name":"ufp","type":"ufp-cni","subnetFile":"` + file + `"}`))
	if err != nil {
		t.Fatal(err)
	}
	var ic struct {
		IPAM json.RawMessage `json:"ipam"`
	}
	if err := json.Unmarshal(n.ipamConf, &ic); err != nil {
		t.Fatal(err)
	}
	want := `{"ranges":[[{"subnet":"10.244.7.0/24","gateway":"10.244.7.1"}],[{"subnet":"fd00:244:7::/64","gateway":"fd00:244:7::1"}]],"type":"host-local"}`
	if n.ipamType != "host-local" || string(compactJSON(ic.IPAM)) != want {
		t.Errorf("ipam %s %s, want host-local %s", n.ipamType, ic.IPAM, want)
	}
	if _, err := parseConf([]byte(`{"cniVersion":"1.1.0","name":"ufp","type":"ufp-cni","subnetFile":"` + file + `.gone"}`)); err == nil ||
		!strings.Contains(err.Error(), "ipam: none given, and flannel's subnet file (subnetFile): open "+file+".gone") {
		t.Errorf("a subnet file that is not there: %v", err)
	}
}
