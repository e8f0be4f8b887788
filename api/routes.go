package api

import (
	"context"
	"net/http"
	"net/url"
)

// RoutesOwnedBy lists the routes to other nodes' pod subnets whose Owner
// is exactly owner ("": those without one).
func (c *Client) RoutesOwnedBy(ctx context.Context, owner string) ([]Route, error) {
	var l []Route
	return l, c.Do(ctx, http.MethodGet, path("/routes")+"?"+url.Values{"owner": {owner}}.Encode(), nil, &l)
}
