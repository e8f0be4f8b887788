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
