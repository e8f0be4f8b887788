package api

import (
	"context"
	"net/http"

	"github.com/ufp-dev/ufp/hns"
)

// Batch is a set of changes to endpoints and load balancers that ufpd
// applies at once (POST /v1/batch): validated, compiled and swapped in
// together, persisted once, or refused whole with the running policy
// left as it was. It is how a program that owns many objects (the node
// agent) keeps them in step without one call per object.
type Batch struct {
	// Owner marks every object the batch writes (their Owner field is
	// set to it; one that names another owner is refused). A batch
	// creates objects or replaces and deletes objects of this owner; an
	// object of the same name made by anyone else is a conflict.
	// Required: at most 253 bytes of printable text.
	Owner string `json:"owner"`
	// Endpoints are created or replaced (by Name). Remote endpoints
	// (Flags 1) are what a batch usually carries; a local one may carry
	// its Device.
	Endpoints []Endpoint `json:"endpoints,omitempty"`
	// LoadBalancers are created or replaced (by Name).
	LoadBalancers []LoadBalancer `json:"loadBalancers,omitempty"`
	// DeleteEndpoints and DeleteLoadBalancers name objects to remove;
	// one that does not exist is counted as absent, not an error. An
	// endpoint that a load balancer still has as a backend after the
	// batch is a conflict (a batch edits no object it does not name).
	// A name appears once in a batch, across writes and deletes.
	DeleteEndpoints     []string `json:"deleteEndpoints,omitempty"`
	DeleteLoadBalancers []string `json:"deleteLoadBalancers,omitempty"`
	// Routes are routes to other nodes' pod subnets, and ACLSets sets of
	// ACLs on endpoints (a pod's NetworkPolicies), created or replaced by
	// Name; DeleteRoutes and DeleteACLSets name ones to remove, as for
	// endpoints.
	Routes        []Route  `json:"routes,omitempty"`
	ACLSets       []ACLSet `json:"aclSets,omitempty"`
	DeleteRoutes  []string `json:"deleteRoutes,omitempty"`
	DeleteACLSets []string `json:"deleteACLSets,omitempty"`
}

// Route is a route to another node's pod subnet (hns.RemoteRouteConfig).
type Route = hns.RemoteRouteConfig

// ACLSet is a set of ACLs a program owns on one endpoint
// (hns.ACLSetConfig).
type ACLSet = hns.ACLSetConfig

// BatchResult is what a batch did.
type BatchResult struct {
	// Revision is the configuration's revision after the batch (the
	// same as before if it changed nothing).
	Revision uint64 `json:"revision"`
	Created  int    `json:"created"`
	Replaced int    `json:"replaced"`
	Deleted  int    `json:"deleted"`
	// Unchanged counts objects the batch wrote as they already were;
	// Absent, deletions of objects that did not exist.
	Unchanged int `json:"unchanged"`
	Absent    int `json:"absent"`
}

// Apply sends batch b. A refusal is an *Error whose Object names the
// object at fault ("load balancer NAME", "endpoint NAME") when one is,
// and "batch" otherwise (docs/API.md, "Batches"); nothing of a refused
// batch is applied.
func (c *Client) Apply(ctx context.Context, b *Batch) (*BatchResult, error) {
	var r BatchResult
	if err := c.Do(ctx, http.MethodPost, path("/batch"), b, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
