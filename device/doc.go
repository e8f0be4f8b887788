// Package device holds the frame I/O of switch ports on real devices: TAP
// interfaces for pods and the host's own vNIC, TUN and Wintun interfaces
// for L3 ports (Ethernet synthesised and stripped at the port), and the
// uplink on a real interface through an AF_PACKET socket or AF_XDP sockets
// (OpenUplink). Each device implements vswitch.Device: frames move a batch
// at a time in dataplane.Packets.
//
// A TAP and an AF_PACKET uplink can outlive their process: their
// descriptor is lent (Control) to another process that keeps it, reads
// stop at a frame boundary (Quiesce), Close can leave the interface
// (KeepOnClose), and AdoptTAP and AdoptRaw serve a descriptor received
// from another process after checking that it is what it claims to be.
//
// Linux-only devices (TAP, AF_PACKET, AF_XDP, namespaces) are behind build tags;
// the L3 port over golang.zx2c4.com/wireguard/tun builds everywhere, so
// that Windows gets its Wintun port.
//
// It imports dataplane, netlink, cilium/ebpf and wireguard-go's tun, and
// nothing of the engine: the switch takes its devices through its own
// Device interface.
package device
