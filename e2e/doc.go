// Package e2e holds end-to-end tests of the switch with real TCP/IP stacks
// on its ports and no operating-system devices, so that they run anywhere
// and without root.
//
// Each pod, and each host beyond the uplink, is a gVisor network stack
// (golang.zx2c4.com/wireguard/tun/netstack) attached to the running switch
// (vswitch.Switch.Serve) through an L3 port (device.NewL3), which gives its
// IP packets the Ethernet header the switch expects and strips it again on
// the way back. The policies are HNS-level documents like the ones the
// win-bridge and win-overlay CNI plugins and kube-proxy program. The tests
// check what applications see: TCP handshakes and verified transfers, UDP
// requests and responses, ICMP echo, the addresses a server sees across
// OutBoundNAT and load balancing, and connections that live through policy
// changes.
//
// The package holds tests only.
package e2e
