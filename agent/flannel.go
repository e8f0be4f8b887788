package agent

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/ufp-dev/ufp/hns"
)

// flannel's Node annotations, as its kube subnet manager and vxlan
// backend write them.
const (
	flannelPrefix       = "flannel.alpha.coreos.com/"
	annBackendType      = flannelPrefix + "backend-type"
	annBackendData      = flannelPrefix + "backend-data"
	annBackendV6Data    = flannelPrefix + "backend-v6-data"
	annPublicIP         = flannelPrefix + "public-ip"
	annPublicIPv6       = flannelPrefix + "public-ipv6"
	annKubeSubnetManage = flannelPrefix + "kube-subnet-manager"
)

// publishedAnnotations are the keys the agent publishes (and removes
// when it publishes them no more).
var publishedAnnotations = []string{annBackendType, annBackendData, annBackendV6Data, annPublicIP, annPublicIPv6, annKubeSubnetManage}

// vxlanData is the backend data of flannel's vxlan backend.
type vxlanData struct {
	VNI     uint32 `json:"VNI"`
	VtepMAC string `json:"VtepMAC"`
}

// flannelAnnotations keeps of m only flannel's annotations (nil if it
// has none).
func flannelAnnotations(m map[string]string) map[string]string {
	n := 0
	for k := range m {
		if strings.HasPrefix(k, flannelPrefix) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	if n == len(m) {
		return m
	}
	out := make(map[string]string, n)
	for k, v := range m {
		if strings.HasPrefix(k, flannelPrefix) {
			out[k] = v
		}
	}
	return out
}

// annotations are the flannel annotations the agent's node publishes:
// on an Overlay the vxlan backend's (backend-data with the VNI and
// VtepMAC, per family with a pod CIDR and an address, and the family's
// public-ip), on an L2Bridge the host-gw backend's (backend-data null).
func (p *PodNetwork) annotations(own *ownNode) map[string]string {
	m := map[string]string{annKubeSubnetManage: "true"}
	typ, data := "host-gw", "null"
	if p.Type == hns.TypeOverlay {
		typ = "vxlan"
		b, _ := json.Marshal(vxlanData{VNI: p.VNI, VtepMAC: p.VtepMAC.String()})
		data = string(b)
	}
	m[annBackendType] = typ
	for _, v6 := range []bool{false, true} {
		a := own.addr(v6)
		has := false
		for _, c := range own.cidrs {
			has = has || c.Addr().Is6() == v6
		}
		if !has || !a.IsValid() {
			continue
		}
		if v6 {
			m[annPublicIPv6], m[annBackendV6Data] = a.String(), data
		} else {
			m[annPublicIP], m[annBackendData] = a.String(), data
		}
	}
	return m
}

// annotationPatch is the JSON merge patch that gives a Node with
// annotations have the published annotations want (the agent's keys
// only: others are left alone), or nil if it has them.
func annotationPatch(have, want map[string]string) []byte {
	ch := map[string]any{}
	for _, k := range publishedAnnotations {
		w, ok := want[k]
		h, had := have[k]
		switch {
		case ok && (!had || h != w):
			ch[k] = w
		case !ok && had:
			ch[k] = nil
		}
	}
	if len(ch) == 0 {
		return nil
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ch}})
	return b
}

// remoteVTEP is what another node's flannel annotations say of one
// family: its public address, VNI and VtepMAC.
type remoteVTEP struct {
	addr netip.Addr
	vni  uint32
	mac  net.HardwareAddr
}

// vtepOf reads a node's vxlan annotations of a family; an error says
// what is missing or wrong, naming the annotation.
func vtepOf(ann map[string]string, v6 bool) (remoteVTEP, error) {
	var r remoteVTEP
	if t, ok := ann[annBackendType]; !ok {
		return r, fmt.Errorf("no %s annotation yet", annBackendType)
	} else if t != "vxlan" {
		return r, fmt.Errorf("%s is %q, not vxlan", annBackendType, t)
	}
	ipKey, dataKey := annPublicIP, annBackendData
	if v6 {
		ipKey, dataKey = annPublicIPv6, annBackendV6Data
	}
	s, ok := ann[ipKey]
	if !ok {
		return r, fmt.Errorf("no %s annotation", ipKey)
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Unmap().Is6() != v6 || a.Zone() != "" {
		return r, fmt.Errorf("%s: %q is not an %s address", ipKey, s, familyName(v6))
	}
	r.addr = a.Unmap()
	d, ok := ann[dataKey]
	if !ok {
		return r, fmt.Errorf("no %s annotation", dataKey)
	}
	var vd vxlanData
	if err := json.Unmarshal([]byte(d), &vd); err != nil {
		return r, fmt.Errorf("%s: %q is not vxlan backend data: %v", dataKey, d, err)
	}
	r.vni = vd.VNI
	if r.mac, err = net.ParseMAC(vd.VtepMAC); err != nil || len(r.mac) != 6 || r.mac[0]&1 != 0 {
		return r, fmt.Errorf("%s: VtepMAC %q is not a unicast Ethernet MAC", dataKey, vd.VtepMAC)
	}
	return r, nil
}

// routeInputsEqual reports whether two versions of a Node route the same:
// pod CIDRs, addresses and flannel annotations.
func routeInputsEqual(a, b *corev1.Node) bool {
	if a.Spec.PodCIDR != b.Spec.PodCIDR || !slices.Equal(a.Spec.PodCIDRs, b.Spec.PodCIDRs) ||
		len(a.Status.Addresses) != len(b.Status.Addresses) {
		return false
	}
	for i := range a.Status.Addresses {
		if a.Status.Addresses[i] != b.Status.Addresses[i] {
			return false
		}
	}
	return maps.Equal(flannelAnnotations(a.Annotations), flannelAnnotations(b.Annotations))
}
