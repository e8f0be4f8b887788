package e2e

// A ufp node beside a node with Linux flannel's defaults.

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"testing"

	"github.com/ufp-dev/ufp/hns"
)

// TestMultiNodeLinuxFlannel: a ufp node joins a cluster on Linux
// flannel's VXLAN defaults (VNI 1, UDP port 8472) as deploy/'s ConfigMap
// runs one there: its ufpd starts with no network and switch.vxlanPort
// 8472, and its agent (--vni 1 --vxlan-port 8472) makes the network from
// its Node. Beside it, a flannel-style kernel node on VNI 1 and port
// 8472. Then:
//   - the network in ufpd is the agent's: VSID 1 on both subnets,
//     VxlanPort 8472, the router MAC the Node announces;
//   - the kernel node's vxlan devices send to port 8472;
//   - a pod on each node reaches the other, IPv4 and IPv6, both ways.
func TestMultiNodeLinuxFlannel(t *testing.T) {
	m := newMultiLab(t)
	m.vni, m.port, m.seed = linuxVNI, linuxPort, false
	n1, n3 := mnNode{1}, mnNode{3}
	k3 := m.kernelNode(t, n3, "k3")
	u1 := m.ufpNode(t, n1, "u1")
	macs := map[string][2]string{
		u1.name: m.waitAnnounced(t, u1.name, n1),
		k3.name: m.waitAnnounced(t, k3.name, n3),
	}
	u1.checkNetwork(t, macs[u1.name])
	u1.checkVXLAN(t, linuxVNI, linuxPort)
	k3.checkDstport(t, linuxPort)
	u1.waitRoutes(t, mnNodes{k3.name: n3}, macs)
	k3.waitRoutes(t, mnNodes{u1.name: n1}.cidrs())

	pods := []*mnPod{m.ufpPod(t, u1, "u1-a"), m.kernelPod(t, k3, "k3-a", 10)}
	if err := m.reachAll(pods, pods); err != nil {
		t.Error(err)
	}
	if errs := k3.failures(); len(errs) > 0 {
		t.Errorf("flannel on %s: %v", k3.name, errors.Join(errs...))
	}
}

// checkVXLAN checks that node u's network in ufpd has VSID vni on every
// subnet and a VxlanPort policy of port, and only those.
func (u *ufpNode) checkVXLAN(t *testing.T, vni uint32, port uint16) {
	t.Helper()
	nw, err := u.network()
	if err != nil {
		t.Fatal(err)
	}
	var vsids []uint32
	for _, ipam := range nw.Ipams {
		for _, s := range ipam.Subnets {
			got := []uint32{}
			for _, p := range s.Policies {
				if p.Type == "VSID" {
					var v hns.VsidSettings
					if err := json.Unmarshal(p.Settings, &v); err != nil {
						t.Fatalf("network %s, subnet %s: VSID %s: %v", nw.Name, s.IpAddressPrefix, p.Settings, err)
					}
					got = append(got, v.IsolationId)
				}
			}
			if !slices.Equal(got, []uint32{vni}) {
				t.Errorf("network %s, subnet %s: VSIDs %v, want [%d]", nw.Name, s.IpAddressPrefix, got, vni)
			}
			vsids = append(vsids, got...)
		}
	}
	if len(vsids) != 2 {
		t.Errorf("network %s: VSIDs %v, want one per family's subnet", nw.Name, vsids)
	}
	var ports []uint16
	for _, p := range nw.Policies {
		if p.Type == "VxlanPort" {
			var v hns.VxlanPortSettings
			if err := json.Unmarshal(p.Settings, &v); err != nil {
				t.Fatalf("network %s: VxlanPort %s: %v", nw.Name, p.Settings, err)
			}
			ports = append(ports, v.Port)
		}
	}
	if !slices.Equal(ports, []uint16{port}) {
		t.Errorf("network %s: VxlanPort policies %v, want [%d]", nw.Name, ports, port)
	}
}

// vxlanDstport is the "dstport N" of `ip -d link show`'s vxlan details.
var vxlanDstport = regexp.MustCompile(`\bvxlan\b.*\bdstport (\d+)\b`)

// checkDstport checks that both of node f's vxlan devices send to UDP
// port, as the kernel reports them.
func (f *flannelNode) checkDstport(t *testing.T, port int) {
	t.Helper()
	for _, v6 := range []bool{false, true} {
		out := f.l.in(t).must(f.ns, "ip", "-d", "link", "show", "dev", f.dev(v6))
		sm := vxlanDstport.FindStringSubmatch(out)
		if sm == nil || sm[1] != fmt.Sprint(port) {
			t.Errorf("flannel on %s: %s has no dstport %d:\n%s", f.name, f.dev(v6), port, out)
		}
	}
}
