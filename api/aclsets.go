package api

import (
	"context"
	"net/http"
	"net/url"
)

// ACL sets are written by batches (Batch.ACLSets, DeleteACLSets); the
// client reads them.

// ACLSets lists the ACL sets.
func (c *Client) ACLSets(ctx context.Context) ([]ACLSet, error) {
	var l []ACLSet
	return l, c.Do(ctx, http.MethodGet, path("/aclsets"), nil, &l)
}

// ACLSetsOwnedBy lists the ACL sets whose Owner is exactly owner ("":
// those without one).
func (c *Client) ACLSetsOwnedBy(ctx context.Context, owner string) ([]ACLSet, error) {
	var l []ACLSet
	return l, c.Do(ctx, http.MethodGet, path("/aclsets")+"?"+url.Values{"owner": {owner}}.Encode(), nil, &l)
}

// ACLSet returns the ACL set named name.
func (c *Client) ACLSet(ctx context.Context, name string) (*ACLSet, error) {
	var s ACLSet
	return &s, c.Do(ctx, http.MethodGet, path("/aclsets/%s", url.PathEscape(name)), nil, &s)
}
