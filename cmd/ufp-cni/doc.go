// Command ufp-cni is a CNI plugin (spec 1.1; 0.3.0 to 1.1.0 accepted)
// that attaches containers to ufpd, the ufp vswitch daemon. Each
// attachment is an HNS endpoint in one of ufpd's networks, backed by a
// TAP interface ufpd makes in the container's namespace and sets up
// (MAC, addresses, routes, MTU).
//
// The network configuration takes the standard CNI fields, ufp's own
// (socket, network) and the endpoint policies that win-bridge, win-overlay
// and flannel's Windows cni.conf files carry, so that a Windows node's
// configuration works unchanged; docs/CNI.md describes every field.
//
//	ADD    IPAM (delegated), then the endpoint in ufpd; the result names
//	       the interface, its addresses, gateways and routes
//	DEL    the endpoint and the IPAM allocation; missing ones are fine
//	CHECK  the endpoint, its policies, addresses and device in ufpd, the
//	       interface in the namespace, and IPAM's own check
//	STATUS ufpd answers and has the network; IPAM's status
//	GC     endpoints of this configuration that no valid attachment
//	       names are removed; IPAM's GC
package main
