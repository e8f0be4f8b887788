package main

import (
	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vswitch"
)

// Routes to other nodes' pod subnets (hns.RemoteRouteConfig): owned
// objects a batch creates, replaces and deletes by name as it does load
// balancers (Batch.Routes, Batch.DeleteRoutes), persisted with the policy
// (Config.Routes), and read by GET /v1/routes[?owner=] and
// GET /v1/routes/{name}. A route's name has slashes (the agent's
// "node/NODE/PREFIX"): the GET of one takes the rest of the path.

var routes = collection[api.Route]{
	kind:  hns.KindRoute,
	of:    func(doc *vswitch.Config) *[]api.Route { return &doc.Routes },
	name:  func(r *api.Route) *string { return &r.Name },
	owner: func(r *api.Route) string { return r.Owner },
}

var routeKind = batchKind[hns.RemoteRouteConfig]{
	kind:  hns.KindRoute,
	name:  routeName,
	owner: func(r *hns.RemoteRouteConfig) string { return r.Owner },
	equal: sameRoute,
}

func routeName(r *hns.RemoteRouteConfig) string { return r.Name }

// sameRoute reports whether two routes are equal (every field is a
// value).
func sameRoute(a, b *hns.RemoteRouteConfig) bool { return *a == *b }

// checkBatchRoutes is checkBatch for b's routes: each named once across
// routes and deleteRoutes, and given the batch's owner.
func checkBatchRoutes(b *api.Batch) error {
	err := batchNames(hns.KindRoute, "routes", len(b.Routes), func(i int) string { return b.Routes[i].Name },
		"deleteRoutes", b.DeleteRoutes)
	if err != nil {
		return err
	}
	for i := range b.Routes {
		r := &b.Routes[i]
		if err := ownedBy(hns.KindRoute, r.Name, "routes", i, &r.Owner, b.Owner); err != nil {
			return err
		}
	}
	return nil
}

// applyBatchRoutes merges b's routes into draft dr, counting them in
// res. The draft's list is the running one (a tracked draft's too):
// merge returns a new list and writes nothing of it. A node has a route
// per other node's subnet, hundreds: they are found by a walk, with no
// index.
func applyBatchRoutes(dr *draft, b *api.Batch, res *api.BatchResult) error {
	if len(b.Routes) == 0 && len(b.DeleteRoutes) == 0 {
		return nil
	}
	rs, err := merge(routeKind, batchList[hns.RemoteRouteConfig]{list: dr.doc.Routes}, b.Routes, b.DeleteRoutes, b.Owner, res, nil)
	if err != nil {
		return err
	}
	dr.doc.Routes = rs
	return nil
}
