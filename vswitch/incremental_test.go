package vswitch

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/internal/scaledoc"
)

// incShape is the document TestIncrementalMatchesFull changes: small, so
// that every step can be compiled whole beside it.
var incShape = scaledoc.Shape{Services: 12, Backends: 3, Locals: 3, Nodes: 4}

// incChange is one random change of a node agent's kind (or of another
// kind, or an invalid one), applied to c; fresh numbers new remote
// endpoints.
type incChange struct {
	name string
	edit func(rng *rand.Rand, c *Config, fresh *int)
}

var incChanges = []incChange{
	{"drop a backend", func(rng *rand.Rand, c *Config, _ *int) {
		lb := &c.LoadBalancers[rng.IntN(len(c.LoadBalancers))]
		if n := len(lb.HostComputeEndpoints); n > 0 {
			j := rng.IntN(n)
			lb.HostComputeEndpoints = slices.Delete(lb.HostComputeEndpoints, j, j+1)
		}
	}},
	{"add a remote backend", func(rng *rand.Rand, c *Config, fresh *int) {
		e := incShape.Remote(*fresh)
		*fresh++
		c.Endpoints = slices.Insert(c.Endpoints, rng.IntN(len(c.Endpoints)+1), e)
		lb := &c.LoadBalancers[rng.IntN(len(c.LoadBalancers))]
		lb.HostComputeEndpoints = append(lb.HostComputeEndpoints, e.Name)
	}},
	{"replace a Service's backends", func(rng *rand.Rand, c *Config, fresh *int) {
		lb := &c.LoadBalancers[rng.IntN(len(c.LoadBalancers))]
		old := lb.HostComputeEndpoints
		lb.HostComputeEndpoints = nil
		for range rng.IntN(4) {
			e := incShape.Remote(*fresh)
			*fresh++
			c.Endpoints = append(c.Endpoints, e)
			lb.HostComputeEndpoints = append(lb.HostComputeEndpoints, e.Name)
		}
		c.Endpoints = slices.DeleteFunc(c.Endpoints, func(e hns.EndpointConfig) bool {
			return slices.Contains(old, e.Name) && e.Flags == hns.EndpointFlagRemote && !incListed(c, e.Name)
		})
	}},
	{"delete the unlisted remote endpoints", func(_ *rand.Rand, c *Config, _ *int) {
		c.Endpoints = slices.DeleteFunc(c.Endpoints, func(e hns.EndpointConfig) bool {
			return e.Flags == hns.EndpointFlagRemote && !incListed(c, e.Name)
		})
	}},
	{"add a local backend", func(rng *rand.Rand, c *Config, _ *int) {
		lb := &c.LoadBalancers[rng.IntN(len(c.LoadBalancers))]
		if name := scaledoc.Local(rng.IntN(incShape.Locals)).Name; !slices.Contains(lb.HostComputeEndpoints, name) {
			lb.HostComputeEndpoints = append(lb.HostComputeEndpoints, name)
		}
	}},
	{"drain a backend", func(rng *rand.Rand, c *Config, _ *int) {
		lb := &c.LoadBalancers[rng.IntN(len(c.LoadBalancers))]
		if n := len(lb.HostComputeEndpoints); n > 0 {
			j := rng.IntN(n)
			lb.DrainingEndpoints = append(lb.DrainingEndpoints, lb.HostComputeEndpoints[j])
			lb.HostComputeEndpoints = slices.Delete(lb.HostComputeEndpoints, j, j+1)
		}
	}},
	{"bring a draining backend back", func(rng *rand.Rand, c *Config, _ *int) {
		lb := &c.LoadBalancers[rng.IntN(len(c.LoadBalancers))]
		if n := len(lb.DrainingEndpoints); n > 0 {
			j := rng.IntN(n)
			lb.HostComputeEndpoints = append(lb.HostComputeEndpoints, lb.DrainingEndpoints[j])
			lb.DrainingEndpoints = slices.Delete(lb.DrainingEndpoints, j, j+1)
		}
	}},
	{"drop a draining backend", func(rng *rand.Rand, c *Config, _ *int) {
		lb := &c.LoadBalancers[rng.IntN(len(c.LoadBalancers))]
		if n := len(lb.DrainingEndpoints); n > 0 {
			j := rng.IntN(n)
			lb.DrainingEndpoints = slices.Delete(lb.DrainingEndpoints, j, j+1)
		}
	}},
	{"swap two endpoints", func(rng *rand.Rand, c *Config, _ *int) {
		i, j := rng.IntN(len(c.Endpoints)), rng.IntN(len(c.Endpoints))
		c.Endpoints[i], c.Endpoints[j] = c.Endpoints[j], c.Endpoints[i]
	}},
	{"move a remote endpoint to another address", func(rng *rand.Rand, c *Config, fresh *int) {
		i := rng.IntN(len(c.Endpoints))
		if c.Endpoints[i].Flags == hns.EndpointFlagRemote {
			c.Endpoints[i].IpConfigurations = []hns.IpConfigConfig{{IpAddress: incShape.RemoteIP(*fresh).String()}}
			*fresh++
		}
	}},
	// Invalid changes: refused, by the whole compile.
	{"delete a listed remote endpoint", func(rng *rand.Rand, c *Config, _ *int) {
		c.Endpoints = slices.Delete(c.Endpoints, len(c.Endpoints)-1, len(c.Endpoints))
	}},
	{"list an unknown endpoint", func(rng *rand.Rand, c *Config, _ *int) {
		lb := &c.LoadBalancers[rng.IntN(len(c.LoadBalancers))]
		lb.HostComputeEndpoints = append(lb.HostComputeEndpoints, "remote.nowhere")
	}},
	{"list a backend twice", func(rng *rand.Rand, c *Config, _ *int) {
		lb := &c.LoadBalancers[rng.IntN(len(c.LoadBalancers))]
		if len(lb.HostComputeEndpoints) > 0 {
			lb.HostComputeEndpoints = append(lb.HostComputeEndpoints, lb.HostComputeEndpoints[0])
		}
	}},
	{"add a remote endpoint at another's address", func(rng *rand.Rand, c *Config, fresh *int) {
		e := incShape.Remote(rng.IntN(*fresh))
		e.Name = fmt.Sprintf("remote.copy-%d", *fresh)
		*fresh++
		c.Endpoints = append(c.Endpoints, e)
	}},
	{"add a remote endpoint at the SourceVIP", func(_ *rand.Rand, c *Config, fresh *int) {
		e := incShape.Remote(*fresh)
		*fresh++
		e.IpConfigurations[0].IpAddress = scaledoc.SourceVIP.String()
		c.Endpoints = append(c.Endpoints, e)
	}},
	{"add a remote endpoint at a ClusterIP", func(rng *rand.Rand, c *Config, fresh *int) {
		e := incShape.Remote(*fresh)
		*fresh++
		e.IpConfigurations[0].IpAddress = scaledoc.ClusterIP(rng.IntN(incShape.Services)).String()
		c.Endpoints = append(c.Endpoints, e)
	}},
	{"add a remote endpoint named as a pod", func(rng *rand.Rand, c *Config, fresh *int) {
		e := incShape.Remote(*fresh)
		*fresh++
		e.Name = scaledoc.Local(rng.IntN(incShape.Locals)).Name
		c.Endpoints = append(c.Endpoints, e)
	}},
	{"list a backend as active and draining", func(rng *rand.Rand, c *Config, _ *int) {
		lb := &c.LoadBalancers[rng.IntN(len(c.LoadBalancers))]
		if len(lb.HostComputeEndpoints) > 0 {
			lb.DrainingEndpoints = append(lb.DrainingEndpoints, lb.HostComputeEndpoints[0])
		}
	}},
	// Changes of another kind: compiled whole.
	{"give a Service another owner", func(rng *rand.Rand, c *Config, _ *int) {
		lb := &c.LoadBalancers[rng.IntN(len(c.LoadBalancers))]
		lb.Owner = fmt.Sprintf("owner-%d", rng.IntN(3))
	}},
	{"make a pod unhealthy", func(rng *rand.Rand, c *Config, _ *int) {
		i := rng.IntN(len(c.Endpoints))
		if c.Endpoints[i].Flags == 0 {
			c.Endpoints[i].Unhealthy = !c.Endpoints[i].Unhealthy
		}
	}},
}

// incListed reports whether a load balancer of c lists endpoint name.
func incListed(c *Config, name string) bool {
	return slices.ContainsFunc(c.LoadBalancers, func(lb hns.LoadBalancerConfig) bool {
		return slices.Contains(lb.HostComputeEndpoints, name) || slices.Contains(lb.DrainingEndpoints, name)
	})
}

// incConn is a connection a client keeps to a Service across changes.
type incConn struct {
	sport   uint16
	backend netip.Addr // invalid: none open
}

// TestIncrementalMatchesFull applies random sequences of changes to one
// switch, most of them changes of backends that it compiles incrementally,
// and checks each step against the same document compiled whole by a new
// switch: the same error, or the same lowered document, the same backends,
// and the same backend for a new connection to every Service. Beside
// that, a connection to every Service kept across the changes stays with
// its backend while the Service has it, and ends (revalidation-failed)
// when it leaves.
func TestIncrementalMatchesFull(t *testing.T) {
	incremental, whole, refused := 0, 0, 0
	for seq := range 12 {
		rng := rand.New(rand.NewPCG(uint64(seq), 22))
		cfg := scaleConfig(incShape)
		r := ulNewRig(t, cfg)
		fresh := incShape.Services * incShape.Backends
		conns := make([]incConn, incShape.Services)
		sport := uint16(1000)
		for step := range 40 {
			ch := incChanges[rng.IntN(len(incChanges))]
			next, err := cfg.Clone()
			if err != nil {
				t.Fatal(err)
			}
			ch.edit(rng, next, &fresh)
			at := fmt.Sprintf("sequence %d step %d (%s)", seq, step, ch.name)
			want, wantErr := New(next)
			gotErr := r.sw.Apply(next)
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Fatalf("%s: Apply: %v\nwhole: %v", at, gotErr, wantErr)
			}
			if gotErr != nil {
				refused++
				continue
			}
			cfg = next
			pol := r.sw.pol.Load()
			if pol.incremental {
				incremental++
			} else {
				whole++
			}
			incSame(t, at, pol, want.pol.Load())
			fr := &ulRig{t: t, sw: want, w: want.Pipeline().NewWorker()}
			for i := range incShape.Services {
				sport++
				got, gotP := incSend(r, i, sport, "S")
				exp, expP := incSend(fr, i, sport, "S")
				// The source port its SourceVIP gives it depends on the
				// connections before it; the backend does not.
				if got != exp || incBackend(gotP) != incBackend(expP) {
					t.Fatalf("%s: Service %d, new connection: %s to %v\nwhole: %s to %v", at, i, got, incBackend(gotP), exp, incBackend(expP))
				}
				incKeep(t, at, r, i, &conns[i], pol.lbs[pol.lowered.Doc.Switch.LoadBalancers[i].Name].Backends(), &sport)
			}
		}
	}
	t.Logf("%d steps incremental, %d whole, %d refused", incremental, whole, refused)
	if incremental < 100 || whole < 20 || refused < 50 {
		t.Errorf("%d steps incremental, %d whole, %d refused: the changes do not exercise every path", incremental, whole, refused)
	}
}

// incSame checks that policies got (of the switch changed step by step)
// and want (compiled whole) lower to the same document and have the same
// load balancers.
func incSame(t *testing.T, at string, got, want *compiled) {
	t.Helper()
	if g, w := got.lowered.Doc, want.lowered.Doc; !reflect.DeepEqual(g, w) {
		for i := range w.Switch.LoadBalancers {
			if i < len(g.Switch.LoadBalancers) && !reflect.DeepEqual(g.Switch.LoadBalancers[i], w.Switch.LoadBalancers[i]) {
				t.Errorf("%s: switch.loadBalancers[%d]: %+v\nwhole: %+v", at, i, g.Switch.LoadBalancers[i], w.Switch.LoadBalancers[i])
			}
		}
		t.Fatalf("%s: the lowered documents differ (ports equal: %v)", at, reflect.DeepEqual(g.Ports, w.Ports))
	}
	if len(got.lbs) != len(want.lbs) {
		t.Fatalf("%s: %d load balancers, whole %d", at, len(got.lbs), len(want.lbs))
	}
	for name, b := range want.lbs {
		g := got.lbs[name]
		if g == nil || !slices.Equal(g.Backends(), b.Backends()) || g.Remote() != b.Remote() {
			t.Fatalf("%s: load balancer %s has backends %v, whole %v", at, name, g.Backends(), b.Backends())
		}
	}
}

// incSend sends a TCP segment with flags from pod-0 port sport to Service
// i, and returns where it went and what left.
func incSend(r *ulRig, i int, sport uint16, flags string) (string, []byte) {
	pod := scaledoc.Local(0)
	mac, _ := dataplane.ParseMAC(pod.MacAddress)
	dr, _ := dataplane.ParseMAC("02:00:00:00:00:01")
	k := natPkt{smac: mac, dmac: dr, src: pod.IpConfigurations[0].IpAddress, sport: sport,
		dst: scaledoc.ClusterIP(i).String(), dport: 80, proto: "tcp", flags: flags}
	p, tr := r.run(pod.Name, natFrame(r.t, k), dataplane.Offload{})
	incTrace = tr
	if p.Drop != dataplane.NotDropped {
		return outName(r.sw, p), nil
	}
	return outName(r.sw, p), slices.Clone(p.Bytes())
}

// incKeep checks connection c to Service i, whose backends are now
// backends: it stays with its backend while that is one, and ends when
// it is not; then it is opened again if it is not open, and kept if it
// goes to a remote backend.
func incKeep(t *testing.T, at string, r *ulRig, i int, c *incConn, backends []netip.Addr, sport *uint16) {
	t.Helper()
	if c.backend.IsValid() {
		to, b := incSend(r, i, c.sport, "A")
		switch {
		case !slices.Contains(backends, c.backend):
			// Dropped, and answered with a reset from the Service.
			if to != scaledoc.Local(0).Name || !incReset(b) {
				t.Fatalf("%s: Service %d: the connection to %s, gone, went to %s (backends %v, incremental %v)\n%s", at, i, c.backend, to, backends, r.sw.pol.Load().incremental, incTrace)
			}
			c.backend = netip.Addr{}
		case incBackend(b) != c.backend:
			t.Fatalf("%s: Service %d: the connection to %s went to %s (%v)", at, i, c.backend, to, incBackend(b))
		}
	}
	if !c.backend.IsValid() {
		*sport++
		c.sport = *sport
		// Connections to remote backends (a connection of pod-0 to
		// itself, translated to the SourceVIP, is another story).
		if to, b := incSend(r, i, c.sport, "S"); to == "uplink" {
			c.backend = incBackend(b)
		}
	}
}

// incReset reports whether b is a TCP reset.
func incReset(b []byte) bool {
	var p dataplane.Parsed
	return p.Decode(b) == dataplane.NotDropped && p.Tenant().Proto == dataplane.ProtoTCP && p.Tenant().TCPFlags&dataplane.TCPRst != 0
}

// incBackend returns the destination of a frame to a backend: the inner
// destination of a VXLAN frame to a remote one, the destination of a
// frame to a pod.
func incBackend(b []byte) netip.Addr {
	var p dataplane.Parsed
	if p.Decode(b) != dataplane.NotDropped {
		return netip.Addr{}
	}
	return p.Tenant().DstAddr()
}

var incTrace string
