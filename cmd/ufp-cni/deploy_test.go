package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/ufp-dev/ufp/deploy"
)

// TestDeployConflist reads deploy/configmap.yaml's conflist as the
// runtime does (libcni), hands ufp-cni its plugin's conf as libcni
// builds it (the list's name and cniVersion injected), with subnetFile
// pointed at a subnet file the agent could have written, and checks what
// ufp-cni makes of it: host-local with a range per family of the file,
// ufpd's socket and network, the policies translated.
func TestDeployConflist(t *testing.T) {
	b, err := deploy.ConfigFile("10-ufp.conflist")
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.NetworkConfFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Plugins) != 1 || list.Plugins[0].Network.Type != "ufp-cni" {
		t.Fatalf("the conflist's plugins %+v, want ufp-cni alone", list.Plugins)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name, file string
		ranges     int
	}{
		{"dual-stack", "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_IPV6_NETWORK=fd00:244::/56\nFLANNEL_IPV6_SUBNET=fd00:244:1::1/64\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n", 2},
		{"IPv4", "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, tc.name+".env")
			if err := os.WriteFile(file, []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			var orig map[string]any
			if err := json.Unmarshal(list.Plugins[0].Bytes, &orig); err != nil {
				t.Fatal(err)
			}
			if orig["subnetFile"] != DefaultSubnetFile {
				t.Errorf("subnetFile %v, want the agent's default %s", orig["subnetFile"], DefaultSubnetFile)
			}
			pc, err := libcni.InjectConf(list.Plugins[0], map[string]any{"name": list.Name, "cniVersion": list.CNIVersion, "subnetFile": file})
			if err != nil {
				t.Fatal(err)
			}
			n, err := parseConf(pc.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			if n.Network != "ufp" || n.Socket != "/run/ufp/ufpd.sock" || n.ipamType != "host-local" {
				t.Errorf("network %q socket %q ipam %q", n.Network, n.Socket, n.ipamType)
			}
			var ic struct {
				IPAM struct {
					Ranges [][]map[string]string `json:"ranges"`
				} `json:"ipam"`
			}
			if err := json.Unmarshal(n.ipamConf, &ic); err != nil {
				t.Fatal(err)
			}
			if len(ic.IPAM.Ranges) != tc.ranges || ic.IPAM.Ranges[0][0]["subnet"] != "10.244.1.0/24" || ic.IPAM.Ranges[0][0]["gateway"] != "10.244.1.1" {
				t.Errorf("host-local gets ranges %v, want %d from the subnet file, 10.244.1.0/24 first", ic.IPAM.Ranges, tc.ranges)
			}
			tr, err := translate(n)
			if err != nil {
				t.Fatal(err)
			}
			if got := policiesOf(t, tr); len(got) != 1 || got[0].typ != "OutBoundNAT" {
				t.Errorf("policies %v, want the OutBoundNAT", got)
			}
		})
	}
}
