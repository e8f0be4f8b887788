package api

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/ufp-dev/ufp/inspect"
)

// Ports lists the switch's ports.
func (c *Client) Ports(ctx context.Context) ([]inspect.PortInfo, error) {
	var l []inspect.PortInfo
	return l, c.Do(ctx, http.MethodGet, path("/ports"), nil, &l)
}

// Layers returns a port's layers, groups and rules with their counters.
func (c *Client) Layers(ctx context.Context, port string) ([]inspect.LayerInfo, error) {
	var l []inspect.LayerInfo
	return l, c.Do(ctx, http.MethodGet, path("/ports/%s/layers", url.PathEscape(port)), nil, &l)
}

// Flows lists the cached flows that f matches.
func (c *Client) Flows(ctx context.Context, f FlowFilter) (*FlowList, error) {
	var l FlowList
	return &l, c.Do(ctx, http.MethodGet, path("/flows")+f.query(), nil, &l)
}

// FlushFlows removes the cached flows that f matches (whole
// connections) and returns how many flows went.
func (c *Client) FlushFlows(ctx context.Context, f FlowFilter) (int, error) {
	var r FlushResult
	err := c.Do(ctx, http.MethodDelete, path("/flows")+f.query(), nil, &r)
	return r.Removed, err
}

// Counters returns the switch's statistics.
func (c *Client) Counters(ctx context.Context) (*inspect.Stats, error) {
	var s inspect.Stats
	return &s, c.Do(ctx, http.MethodGet, path("/counters"), nil, &s)
}

// Rules returns every rule of the running policy with its counters.
func (c *Client) Rules(ctx context.Context) ([]inspect.RuleCount, error) {
	var l []inspect.RuleCount
	return l, c.Do(ctx, http.MethodGet, path("/rules"), nil, &l)
}

// Trace traces the packet req describes through the switch without
// sending anything.
func (c *Client) Trace(ctx context.Context, req *inspect.TraceRequest) (*inspect.TraceResult, error) {
	var r inspect.TraceResult
	return &r, c.Do(ctx, http.MethodPost, path("/trace"), req, &r)
}

// Capture streams a live capture of port, as pcapng, to w until ctx ends
// or opt.Count frames were captured.
func (c *Client) Capture(ctx context.Context, port string, w io.Writer, opt CaptureOptions) error {
	q := url.Values{}
	if opt.Count > 0 {
		q.Set("count", strconv.Itoa(opt.Count))
	}
	if opt.Snaplen > 0 {
		q.Set("snaplen", strconv.Itoa(opt.Snaplen))
	}
	if opt.Direction != "" {
		q.Set("direction", opt.Direction)
	}
	p := path("/ports/%s/capture", url.PathEscape(port))
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	resp, err := c.send(ctx, http.MethodGet, p, nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	if ctx.Err() != nil {
		return nil // the caller ended the capture
	}
	return err
}
