package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
)

// Client talks to ufpd over its Unix socket. The zero value is not
// usable: make one with NewClient. Safe for concurrent use.
type Client struct {
	hc     *http.Client
	socket string
}

// NewClient returns a client of the ufpd listening on socket (""
// means DefaultSocket).
func NewClient(socket string) *Client {
	if socket == "" {
		socket = DefaultSocket
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}
	return &Client{hc: &http.Client{Transport: tr}, socket: socket}
}

// Socket returns the socket the client connects to.
func (c *Client) Socket() string { return c.socket }

// Do sends a request with body in (nil: none) as JSON and decodes the
// answer into out (nil: discarded). An error answer is returned as an
// *Error; a failure to reach ufpd names the socket.
func (c *Client) Do(ctx context.Context, method, p string, in, out any) error {
	resp, err := c.send(ctx, method, p, in, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("ufpd %s %s: reading the answer: %w", method, p, err)
	}
	return nil
}

func (c *Client) send(ctx context.Context, method, p string, in any, hdr http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://ufpd"+p, nil)
	if err != nil {
		return nil, err
	}
	if in != nil {
		b, err := encodeBody(in)
		if err != nil {
			return nil, err
		}
		req.Body, req.ContentLength = b.reader(), b.n
		req.GetBody = func() (io.ReadCloser, error) { return b.reader(), nil }
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ufpd at %s: %w", c.socket, err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		e := &Error{Status: resp.StatusCode}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(b, e) != nil || e.Message == "" {
			e.Message = fmt.Sprintf("ufpd %s %s: %s: %s", method, p, resp.Status, bytes.TrimSpace(b))
		}
		return nil, e
	}
	return resp, nil
}

// IsNotFound reports whether err is ufpd's answer that an object does not
// exist.
func IsNotFound(err error) bool { return statusIs(err, http.StatusNotFound) }

// IsConflict reports whether err is ufpd's answer that the request
// conflicts with an object that exists (or with a newer revision).
func IsConflict(err error) bool {
	return statusIs(err, http.StatusConflict) || statusIs(err, http.StatusPreconditionFailed)
}

func statusIs(err error, status int) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == status
}

// Status returns the daemon's status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var s Status
	return &s, c.Do(ctx, http.MethodGet, path("/status"), nil, &s)
}

// Config returns the running configuration.
func (c *Client) Config(ctx context.Context) (*Config, error) {
	var cfg Config
	return &cfg, c.Do(ctx, http.MethodGet, path("/config"), nil, &cfg)
}

// SetConfig replaces the whole running configuration.
func (c *Client) SetConfig(ctx context.Context, cfg *Config) error {
	return c.Do(ctx, http.MethodPut, path("/config"), cfg, nil)
}

// Networks lists the networks.
func (c *Client) Networks(ctx context.Context) ([]Network, error) {
	var l []Network
	return l, c.Do(ctx, http.MethodGet, path("/networks"), nil, &l)
}

// Network returns the network named name.
func (c *Client) Network(ctx context.Context, name string) (*Network, error) {
	var n Network
	return &n, c.Do(ctx, http.MethodGet, path("/networks/%s", url.PathEscape(name)), nil, &n)
}

// CreateNetwork adds a network; one of that name is a conflict.
func (c *Client) CreateNetwork(ctx context.Context, n *Network) error {
	return c.Do(ctx, http.MethodPost, path("/networks"), n, nil)
}

// UpdateNetwork replaces the network named n.Name.
func (c *Client) UpdateNetwork(ctx context.Context, n *Network) error {
	return c.Do(ctx, http.MethodPut, path("/networks/%s", url.PathEscape(n.Name)), n, nil)
}

// DeleteNetwork removes a network; one that endpoints are on is a
// conflict.
func (c *Client) DeleteNetwork(ctx context.Context, name string) error {
	return c.Do(ctx, http.MethodDelete, path("/networks/%s", url.PathEscape(name)), nil, nil)
}

// Endpoints lists the endpoints with their status.
func (c *Client) Endpoints(ctx context.Context) ([]Endpoint, error) {
	var l []Endpoint
	return l, c.Do(ctx, http.MethodGet, path("/endpoints"), nil, &l)
}

// EndpointFilter selects endpoints in a listing (GET /v1/endpoints?owner=
// &remote=). The zero value selects them all.
type EndpointFilter struct {
	// Owner, with ByOwner, selects the endpoints whose Owner is exactly
	// it; "" selects those without one (made by hand or by ufp-cni).
	Owner   string
	ByOwner bool
	// Remote, with ByRemote, selects remote endpoints (Flags 1) if true,
	// local ones if false: a node agent lists the node's pods without
	// the remote backends it made.
	Remote   bool
	ByRemote bool
}

func (f EndpointFilter) query() string {
	q := url.Values{}
	if f.ByOwner {
		q.Set("owner", f.Owner)
	}
	if f.ByRemote {
		q.Set("remote", strconv.FormatBool(f.Remote))
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// EndpointsWhere lists the endpoints that f selects, with their status.
func (c *Client) EndpointsWhere(ctx context.Context, f EndpointFilter) ([]Endpoint, error) {
	var l []Endpoint
	return l, c.Do(ctx, http.MethodGet, path("/endpoints")+f.query(), nil, &l)
}

// Endpoint returns the endpoint named name with its status.
func (c *Client) Endpoint(ctx context.Context, name string) (*Endpoint, error) {
	var e Endpoint
	return &e, c.Do(ctx, http.MethodGet, path("/endpoints/%s", url.PathEscape(name)), nil, &e)
}

// CreateEndpoint adds an endpoint and opens its device; one of that name
// is a conflict.
func (c *Client) CreateEndpoint(ctx context.Context, e *Endpoint) error {
	return c.Do(ctx, http.MethodPost, path("/endpoints"), e, nil)
}

// UpdateEndpoint replaces the endpoint named e.Name. An endpoint of an
// Owner (the node agent's) may be replaced or deleted by hand, but its
// owner puts it back as it wants it on its next sync.
func (c *Client) UpdateEndpoint(ctx context.Context, e *Endpoint) error {
	return c.Do(ctx, http.MethodPut, path("/endpoints/%s", url.PathEscape(e.Name)), e, nil)
}

// DeleteEndpoint removes an endpoint, closes its device (removing the
// interface ufpd made) and takes it out of every load balancer's
// backends.
func (c *Client) DeleteEndpoint(ctx context.Context, name string) error {
	return c.Do(ctx, http.MethodDelete, path("/endpoints/%s", url.PathEscape(name)), nil, nil)
}

// Policies returns an endpoint's policies.
func (c *Client) Policies(ctx context.Context, endpoint string) ([]Policy, error) {
	var l []Policy
	return l, c.Do(ctx, http.MethodGet, path("/endpoints/%s/policies", url.PathEscape(endpoint)), nil, &l)
}

// AddPolicy appends a policy to an endpoint's.
func (c *Client) AddPolicy(ctx context.Context, endpoint string, p *Policy) error {
	return c.Do(ctx, http.MethodPost, path("/endpoints/%s/policies", url.PathEscape(endpoint)), p, nil)
}

// SetPolicies replaces an endpoint's policies.
func (c *Client) SetPolicies(ctx context.Context, endpoint string, ps []Policy) error {
	return c.Do(ctx, http.MethodPut, path("/endpoints/%s/policies", url.PathEscape(endpoint)), ps, nil)
}

// DeletePolicy removes an endpoint's policy number i (from 0).
func (c *Client) DeletePolicy(ctx context.Context, endpoint string, i int) error {
	return c.Do(ctx, http.MethodDelete, path("/endpoints/%s/policies/%d", url.PathEscape(endpoint), i), nil, nil)
}

// Routes lists the routes to other nodes' pod subnets.
func (c *Client) Routes(ctx context.Context) ([]Route, error) {
	var l []Route
	return l, c.Do(ctx, http.MethodGet, path("/routes"), nil, &l)
}

// RoutesOwnedBy lists the routes whose Owner is exactly owner ("": those
// without one).
func (c *Client) RoutesOwnedBy(ctx context.Context, owner string) ([]Route, error) {
	var l []Route
	return l, c.Do(ctx, http.MethodGet, path("/routes")+"?"+url.Values{"owner": {owner}}.Encode(), nil, &l)
}

// Route returns the route named name.
func (c *Client) Route(ctx context.Context, name string) (*Route, error) {
	var r Route
	return &r, c.Do(ctx, http.MethodGet, path("/routes/%s", url.PathEscape(name)), nil, &r)
}

// LoadBalancers lists the load balancers.
func (c *Client) LoadBalancers(ctx context.Context) ([]LoadBalancer, error) {
	var l []LoadBalancer
	return l, c.Do(ctx, http.MethodGet, path("/loadbalancers"), nil, &l)
}

// LoadBalancersOwnedBy lists the load balancers whose Owner is exactly
// owner ("": those without one).
func (c *Client) LoadBalancersOwnedBy(ctx context.Context, owner string) ([]LoadBalancer, error) {
	var l []LoadBalancer
	return l, c.Do(ctx, http.MethodGet, path("/loadbalancers")+"?"+url.Values{"owner": {owner}}.Encode(), nil, &l)
}

// LoadBalancer returns the load balancer named name.
func (c *Client) LoadBalancer(ctx context.Context, name string) (*LoadBalancer, error) {
	var lb LoadBalancer
	return &lb, c.Do(ctx, http.MethodGet, path("/loadbalancers/%s", url.PathEscape(name)), nil, &lb)
}

// CreateLoadBalancer adds a load balancer; one of that name is a
// conflict.
func (c *Client) CreateLoadBalancer(ctx context.Context, lb *LoadBalancer) error {
	return c.Do(ctx, http.MethodPost, path("/loadbalancers"), lb, nil)
}

// UpdateLoadBalancer replaces the load balancer named lb.Name (an owned
// one as UpdateEndpoint says).
func (c *Client) UpdateLoadBalancer(ctx context.Context, lb *LoadBalancer) error {
	return c.Do(ctx, http.MethodPut, path("/loadbalancers/%s", url.PathEscape(lb.Name)), lb, nil)
}

// DeleteLoadBalancer removes a load balancer.
func (c *Client) DeleteLoadBalancer(ctx context.Context, name string) error {
	return c.Do(ctx, http.MethodDelete, path("/loadbalancers/%s", url.PathEscape(name)), nil, nil)
}
