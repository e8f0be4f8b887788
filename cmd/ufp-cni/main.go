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

import (
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/ufp-dev/ufp/api"
)

// opTimeout bounds one CNI operation's calls to ufpd and IPAM.
const opTimeout = 2 * time.Minute

func main() {
	p := &plugin{
		newClient: func(socket string) ufpd { return api.NewClient(socket) },
		ipam:      delegatedIPAM{},
		checkNS:   checkNamespace,
		stdout:    os.Stdout,
		timeout:   opTimeout,
	}
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    p.add,
		Del:    p.del,
		Check:  p.check,
		Status: p.status,
		GC:     p.gc,
	}, version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"),
		"ufp-cni: CNI plugin for ufpd, the ufp vswitch daemon (docs/CNI.md)")
}
