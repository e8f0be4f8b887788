package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ufp-dev/ufp/agent"
	"github.com/ufp-dev/ufp/hns"
)

// The cluster: the agent's node is node index self; other node k is
// node index k+1. Node index i has pod CIDRs 10.244.i.0/24 and
// fd00:10:244:i::/64, underlay addresses 192.168.i/256.i%256 and
// fd00:1::i.
const (
	self     = 1
	selfName = "node-1"
	network  = "pods"
	vni      = agent.DefaultVNI
	maxNodes = 250 // 10.244.0.0/16 holds node indexes up to 255
)

func nodeName(k int) string { return fmt.Sprintf("node-%d", k+2) }

func podCIDR(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i), 0}), 24)
}

func podCIDR6(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x10, 0x02, 0x44, 0, byte(i)}), 64)
}

func underlay(i int) netip.Addr { return netip.AddrFrom4([4]byte{192, 168, byte(i >> 8), byte(i)}) }

func underlay6(i int) netip.Addr {
	return netip.AddrFrom16([16]byte{0xfd, 0, 0, 1, 14: byte(i >> 8), 15: byte(i)})
}

// vtepMAC is node index i's VtepMAC.
func vtepMAC(i int) string { return fmt.Sprintf("0a:58:0a:f4:%02x:01", i) }

// ownNode is the agent's Node: pod CIDRs and addresses (the agent
// publishes its flannel annotations).
func ownNode() *corev1.Node {
	return node(selfName, self, false)
}

// otherNode is other node k as flanneld's vxlan backend leaves it.
func otherNode(k int) *corev1.Node { return node(nodeName(k), k+2, true) }

func node(name string, i int, flannel bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	n.Spec.PodCIDR = podCIDR(i).String()
	n.Spec.PodCIDRs = []string{podCIDR(i).String(), podCIDR6(i).String()}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: underlay(i).String()},
		{Type: corev1.NodeInternalIP, Address: underlay6(i).String()}}
	if flannel {
		data, _ := json.Marshal(map[string]any{"VNI": vni, "VtepMAC": vtepMAC(i)})
		n.Annotations = map[string]string{
			"flannel.alpha.coreos.com/backend-type":        "vxlan",
			"flannel.alpha.coreos.com/backend-data":        string(data),
			"flannel.alpha.coreos.com/backend-v6-data":     string(data),
			"flannel.alpha.coreos.com/public-ip":           underlay(i).String(),
			"flannel.alpha.coreos.com/public-ipv6":         underlay6(i).String(),
			"flannel.alpha.coreos.com/kube-subnet-manager": "true",
		}
	}
	return n
}

// routeNames are the agent's routes to other node k's pod CIDRs, with
// their provider addresses.
func routeNames(k int) map[string]string {
	return map[string]string{
		agent.RouteName(nodeName(k), podCIDR(k+2)):  underlay(k + 2).String(),
		agent.RouteName(nodeName(k), podCIDR6(k+2)): underlay6(k + 2).String(),
	}
}

// createNode creates n (the agent's own is created with its status:
// the API server drops a Create's status, so it is written after).
func createNode(ctx context.Context, cs kubernetes.Interface, n *corev1.Node) error {
	if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating Node %s: %w", n.Name, err)
	}
	if n.Name != selfName {
		return nil // an overlay route needs only the annotations
	}
	got, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err == nil {
		got.Status.Addresses = n.Status.Addresses
		_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, got, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("Node %s's status: %w", n.Name, err)
	}
	return nil
}

func deleteNode(ctx context.Context, cs kubernetes.Interface, name string) error {
	if err := cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting Node %s: %w", name, err)
	}
	return nil
}

// uplink is ufpd's uplink: the node's underlay addresses, and default
// gateways that every provider address is reached through.
func uplink() *hns.UplinkConfig {
	return &hns.UplinkConfig{
		MacAddress:       "02:00:00:00:00:fe",
		IpAddresses:      []string{underlay(self).String(), underlay6(self).String()},
		DefaultGateway:   "192.168.255.254",
		DefaultGatewayV6: "fd00:1::ffff",
		Neighbors: []hns.NeighborConfig{{IpAddress: "192.168.255.254", MacAddress: "02:00:00:00:ff:fe"},
			{IpAddress: "fd00:1::ffff", MacAddress: "02:00:00:00:ff:fe"}},
	}
}

// placeholder is a network ufpd starts with (an HNS-level configuration
// has one at least); the agent adds its own.
func placeholder() hns.NetworkConfig {
	return hns.NetworkConfig{Name: "host", Type: hns.TypeL2Bridge, Ipams: []hns.IpamConfig{{Type: "Static",
		Subnets: []hns.SubnetConfig{{IpAddressPrefix: "172.31.255.0/24",
			Routes: []hns.RouteConfig{{NextHop: "172.31.255.1", DestinationPrefix: "0.0.0.0/0"}}}}}}}
}
