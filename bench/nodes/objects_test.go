package main

import (
	"encoding/json"
	"net/netip"
	"testing"

	"github.com/ufp-dev/ufp/hns"
)

// TestNodes: every node index up to maxNodes has its own pod CIDRs,
// addresses, VtepMAC and route names; the CIDRs are in the cluster CIDRs
// the agent is given, and the annotations are flannel's JSON.
func TestNodes(t *testing.T) {
	cluster4, cluster6 := netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/48")
	seen := map[string]int{}
	for i := self; i < maxNodes+2; i++ {
		for _, s := range []string{podCIDR(i).String(), podCIDR6(i).String(), underlay(i).String(), underlay6(i).String(), vtepMAC(i)} {
			if j, dup := seen[s]; dup {
				t.Fatalf("%s is node %d's and %d's", s, i, j)
			}
			seen[s] = i
		}
		if !cluster4.Contains(podCIDR(i).Addr()) || !cluster6.Contains(podCIDR6(i).Addr()) || podCIDR6(i) != podCIDR6(i).Masked() {
			t.Fatalf("node %d: %s, %s", i, podCIDR(i), podCIDR6(i))
		}
	}
	n := otherNode(5)
	var data struct {
		VNI     int
		VtepMAC string
	}
	if err := json.Unmarshal([]byte(n.Annotations["flannel.alpha.coreos.com/backend-v6-data"]), &data); err != nil || data.VNI != vni || data.VtepMAC != vtepMAC(7) {
		t.Fatalf("backend data %+v %v", data, err)
	}
	if r := routeNames(5); len(r) != 2 || r["node/node-7/10.244.7.0_24"] != "192.168.0.7" || r["node/node-7/fd00:10:244:7::_64"] != "fd00:1::7" {
		t.Fatalf("route names %v", r)
	}
	// ufpd takes what it starts with.
	d := hns.Document{Uplink: uplink(), Networks: []hns.NetworkConfig{placeholder()}}
	if _, err := hns.Lower(&d); err != nil {
		t.Fatalf("ufpd's configuration: %v", err)
	}
}
