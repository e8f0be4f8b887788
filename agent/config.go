package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/ufp-dev/ufp/api"
	"k8s.io/client-go/kubernetes"
)

// UFPD is what the agent calls of ufpd's API; *api.Client has it.
type UFPD interface {
	Status(ctx context.Context) (*api.Status, error)
	EndpointsWhere(ctx context.Context, f api.EndpointFilter) ([]api.Endpoint, error)
	LoadBalancersOwnedBy(ctx context.Context, owner string) ([]api.LoadBalancer, error)
	Apply(ctx context.Context, b *api.Batch) (*api.BatchResult, error)
}

var _ UFPD = (*api.Client)(nil)

// Config is what an Agent is made from. Validate checks it; New calls
// Validate.
type Config struct {
	// NodeName is the Kubernetes Node the agent serves (required): its
	// objects in ufpd are owned by "ufp-agent/<NodeName>".
	NodeName string
	// Kube is the Kubernetes client (required).
	Kube kubernetes.Interface
	// UFPD is the node's ufpd (required).
	UFPD UFPD
	// Network is the HNS network remote endpoints go on (required).
	Network string
	// NodeIPs are the node's addresses (none: the Node's status
	// addresses). No Service VIP may be one of them.
	NodeIPs []netip.Addr
	// ClusterCIDRs are the pod address ranges; logged and checked for
	// shape only: ufpd's networks already say which addresses are
	// pods'.
	ClusterCIDRs []netip.Prefix
	// SourceVIPs are the addresses (at most one per family) that
	// connections to remote backends are translated to.
	SourceVIPs []netip.Addr
	// DSR programs load balancers with direct server return.
	DSR bool
	// ProxyName: serve only Services labelled
	// service.kubernetes.io/service-proxy-name=ProxyName; empty, only
	// Services without that label.
	ProxyName string
	// MinSyncPeriod is the least time between two syncs (changes in
	// between are applied together); 0 means 10 ms.
	MinSyncPeriod time.Duration
	// SyncPeriod is the time between full resyncs (ufpd listed again,
	// failed Services retried); 0 means 30 s.
	SyncPeriod time.Duration
	// StatusPeriod is how often ufpd's status is polled to notice a
	// restart or someone else's change; 0 means 1 s.
	StatusPeriod time.Duration
	// HealthTimeout is how long a queued change may wait for a
	// successful sync before /healthz fails; 0 means 2 SyncPeriods.
	HealthTimeout time.Duration
	// PodNetwork, if set, makes the agent run the node's pod network
	// (flanneld's job, network.go): Network made from the Node, routes
	// to every other Node's pod CIDRs, flannel's subnet file and
	// annotations. UFPD must then be a NetworkUFPD too.
	PodNetwork *PodNetwork
	// Log receives the agent's logs; nil means slog.Default().
	Log *slog.Logger
}

// Owner is the Owner of every object the agent of node writes.
func Owner(node string) string { return "ufp-agent/" + node }

// Validate checks c and fills in its defaults. Errors name the field.
func (c *Config) Validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("NodeName: required"))
	}
	if c.Kube == nil {
		errs = append(errs, errors.New("Kube: required"))
	}
	if c.UFPD == nil {
		errs = append(errs, errors.New("UFPD: required"))
	}
	if c.Network == "" {
		errs = append(errs, errors.New("Network: required"))
	}
	var v4, v6 int
	for i, a := range c.SourceVIPs {
		if !a.IsValid() {
			errs = append(errs, fmt.Errorf("SourceVIPs[%d]: not an address", i))
			continue
		}
		if a.Unmap().Is4() {
			v4++
		} else {
			v6++
		}
	}
	if v4 > 1 || v6 > 1 {
		errs = append(errs, errors.New("SourceVIPs: at most one per family"))
	}
	for i, a := range c.NodeIPs {
		if !a.IsValid() {
			errs = append(errs, fmt.Errorf("NodeIPs[%d]: not an address", i))
		}
	}
	for i, p := range c.ClusterCIDRs {
		if !p.IsValid() {
			errs = append(errs, fmt.Errorf("ClusterCIDRs[%d]: not a prefix", i))
		}
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"MinSyncPeriod", &c.MinSyncPeriod, 10 * time.Millisecond},
		{"SyncPeriod", &c.SyncPeriod, 30 * time.Second},
		{"StatusPeriod", &c.StatusPeriod, time.Second},
		{"HealthTimeout", &c.HealthTimeout, 0},
	} {
		if *d.v < 0 {
			errs = append(errs, fmt.Errorf("%s: %v is negative", d.name, *d.v))
		} else if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.HealthTimeout == 0 {
		c.HealthTimeout = 2 * c.SyncPeriod
	}
	if c.SyncPeriod < c.MinSyncPeriod {
		errs = append(errs, fmt.Errorf("SyncPeriod: %v is shorter than MinSyncPeriod %v", c.SyncPeriod, c.MinSyncPeriod))
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.PodNetwork != nil {
		if _, ok := c.UFPD.(NetworkUFPD); c.UFPD != nil && !ok {
			errs = append(errs, fmt.Errorf("UFPD: a %T has not the network and route calls a PodNetwork needs (NetworkUFPD)", c.UFPD))
		}
		pn := *c.PodNetwork // the caller's stays as it is
		c.PodNetwork = &pn
		errs = append(errs, pn.validate(c.NodeName))
	}
	return errors.Join(errs...)
}

// sourceVIP returns the source VIP of a family (invalid: none).
func (c *Config) sourceVIP(v6 bool) netip.Addr {
	for _, a := range c.SourceVIPs {
		if a.Unmap().Is4() != v6 {
			return a.Unmap()
		}
	}
	return netip.Addr{}
}
