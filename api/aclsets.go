package api

import (
	"context"
	"net/http"
	"net/url"
)

// ACLSetsOwnedBy lists the ACL sets whose Owner is exactly owner ("":
// those without one), GET /v1/aclsets?owner=.
func (c *Client) ACLSetsOwnedBy(ctx context.Context, owner string) ([]ACLSet, error) {
	var l []ACLSet
	return l, c.Do(ctx, http.MethodGet, path("/aclsets")+"?"+url.Values{"owner": {owner}}.Encode(), nil, &l)
}
