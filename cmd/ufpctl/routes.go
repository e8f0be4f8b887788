package main

import (
	"fmt"
	"strconv"

	"github.com/ufp-dev/ufp/api"
)

// ufpctl routes and route NAME: the routes to other nodes' pod subnets
// (written in batches, read only here).

func (c *cli) routes(args []string) error {
	var owner ownerFlag
	if _, err := c.parse(args, func(fl *flagSet) { fl.Var(&owner, "owner", ownerUsage) }, 0, 0); err != nil {
		return err
	}
	var l []api.Route
	var err error
	if owner.set {
		l, err = c.client.RoutesOwnedBy(c.ctx, owner.owner)
	} else {
		l, err = c.client.Routes(c.ctx)
	}
	if err != nil {
		return err
	}
	if c.json() {
		return printJSON(c.stdout, l)
	}
	t := newTable(c.stdout, "NAME", "NETWORK", "PREFIX", "VIA", "VNI", "ROUTER MAC", "OWNER")
	for i := range l {
		r := &l[i]
		t.row(r.Name, r.HostComputeNetwork, r.DestinationPrefix, routeVia(r), routeVNI(r), orDash(r.DistributedRouterMacAddress), orDash(r.Owner))
	}
	return t.flush()
}

func (c *cli) route(args []string) error {
	pos, err := c.parse(args, nil, 1, 1)
	if err != nil {
		return err
	}
	r, err := c.client.Route(c.ctx, pos[0])
	if err != nil {
		return err
	}
	if c.json() {
		return printJSON(c.stdout, r)
	}
	k := newKV(c.stdout)
	k.add("name", "%s", r.Name)
	k.add("network", "%s", r.HostComputeNetwork)
	k.add("prefix", "%s", r.DestinationPrefix)
	k.add("via", "%s", routeVia(r))
	k.add("vni", "%s", routeVNI(r))
	k.add("router mac", "%s", orDash(r.DistributedRouterMacAddress))
	k.add("owner", "%s", orDash(r.Owner))
	return k.flush()
}

// routeVia is where a route goes: VXLAN to a provider address (Overlay),
// or a next hop on the underlay (L2Bridge).
func routeVia(r *api.Route) string {
	if r.ProviderAddress != "" {
		return fmt.Sprintf("vxlan %s", r.ProviderAddress)
	}
	return orDash(r.NextHop)
}

// routeVNI is a route's VNI: its own, or the network's (0).
func routeVNI(r *api.Route) string {
	switch {
	case r.IsolationId != 0:
		return strconv.FormatUint(uint64(r.IsolationId), 10)
	case r.ProviderAddress != "":
		return "(network's)"
	}
	return "-"
}
