package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/inspect"
)

// The daemon and its HNS objects: networks, endpoints, load balancers.

func (c *cli) status(args []string) error {
	if _, err := c.parse(args, nil, 0, 0); err != nil {
		return err
	}
	st, err := c.client.Status(c.ctx)
	if err != nil {
		return err
	}
	if c.json() {
		return printJSON(c.stdout, st)
	}
	k := newKV(c.stdout)
	k.add("socket", "%s", c.client.Socket())
	k.add("pid", "%d", st.PID)
	k.add("generation", "%d", st.Generation)
	k.add("revision", "%d", st.Revision)
	k.add("state", "%s", orDash(st.State))
	k.add("ports", "%d", st.Ports)
	k.add("devices", "%d", st.Devices)
	k.add("metrics", "%s", orDash(st.Metrics))
	if r := st.Restored; r != nil {
		k.add("restored", "from %s at revision %d: %s, %s, %s", r.From, r.Revision,
			plural(r.Networks, "network"), plural(r.Endpoints, "endpoint"), plural(r.LoadBalancers, "load balancer"))
		if len(r.Reattached) > 0 {
			k.add("", "reattached: %s", strings.Join(r.Reattached, ", "))
		}
		if len(r.Recreated) > 0 {
			k.add("", "recreated: %s", strings.Join(r.Recreated, ", "))
		}
		for _, f := range r.Failed {
			k.add("", "failed: %s: %s", f.Port, f.Error)
		}
	}
	return k.flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (c *cli) networks(args []string) error {
	if _, err := c.parse(args, nil, 0, 0); err != nil {
		return err
	}
	l, err := c.client.Networks(c.ctx)
	if err != nil {
		return err
	}
	if c.json() {
		return printJSON(c.stdout, l)
	}
	t := newTable(c.stdout, "NAME", "TYPE", "SUBNETS", "POLICIES")
	for _, n := range l {
		var subnets []string
		for _, ip := range n.Ipams {
			for _, s := range ip.Subnets {
				subnets = append(subnets, s.IpAddressPrefix)
			}
		}
		t.row(n.Name, n.Type, strings.Join(subnets, ","), fmt.Sprint(len(n.Policies)))
	}
	return t.flush()
}

func (c *cli) network(args []string) error {
	pos, err := c.parse(args, nil, 1, 1)
	if err != nil {
		return err
	}
	n, err := c.client.Network(c.ctx, pos[0])
	if err != nil {
		return err
	}
	if c.json() {
		return printJSON(c.stdout, n)
	}
	k := newKV(c.stdout)
	k.add("name", "%s", n.Name)
	k.add("type", "%s", n.Type)
	var subnets []string
	for _, ip := range n.Ipams {
		for _, s := range ip.Subnets {
			subnets = append(subnets, s.IpAddressPrefix)
			for _, r := range s.Routes {
				route := fmt.Sprintf("  route %s via %s", r.DestinationPrefix, r.NextHop)
				if r.Metric != 0 {
					route += fmt.Sprintf(" metric %d", r.Metric)
				}
				subnets = append(subnets, route)
			}
			for _, p := range s.Policies {
				subnets = append(subnets, "  "+policyString(p))
			}
		}
	}
	k.list("subnets", subnets)
	k.list("policies", policyStrings(n.Policies))
	return k.flush()
}

func policyString(p hns.PolicyConfig) string {
	if s := compactJSON(p.Settings); s != "" {
		return p.Type + " " + s
	}
	return p.Type
}

func policyStrings(ps []hns.PolicyConfig) []string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = fmt.Sprintf("[%d] %s", i, policyString(p))
	}
	return s
}

// ownerFlag is -owner: an Owner to select, which may be empty (objects
// without one).
type ownerFlag struct {
	owner string
	set   bool
}

func (o *ownerFlag) String() string { return o.owner }

func (o *ownerFlag) Set(s string) error {
	o.owner, o.set = s, true
	return nil
}

const ownerUsage = "list the objects of this `owner` only (-owner '': those without one)"

func (c *cli) endpoints(args []string) error {
	var owner ownerFlag
	var f api.EndpointFilter
	if _, err := c.parse(args, func(fl *flagSet) {
		fl.Var(&owner, "owner", ownerUsage)
		fl.Func("remote", "list remote endpoints (true) or local ones (false) only", func(s string) error {
			r, err := strconv.ParseBool(s)
			if err != nil {
				return fmt.Errorf("%q is not true or false", s)
			}
			f.Remote, f.ByRemote = r, true
			return nil
		})
	}, 0, 0); err != nil {
		return err
	}
	f.Owner, f.ByOwner = owner.owner, owner.set
	l, err := c.client.EndpointsWhere(c.ctx, f)
	if err != nil {
		return err
	}
	if c.json() {
		return printJSON(c.stdout, l)
	}
	t := newTable(c.stdout, "NAME", "NETWORK", "MAC", "IPS", "DEVICE", "PORT STATE")
	for i := range l {
		e := &l[i]
		t.row(e.Name, e.HostComputeNetwork, e.MacAddress, endpointIPs(e), deviceString(e.Device), portState(e))
	}
	return t.flush()
}

func endpointIPs(e *api.Endpoint) string {
	s := make([]string, len(e.IpConfigurations))
	for i, ic := range e.IpConfigurations {
		s[i] = ic.IpAddress
		if ic.PrefixLength != 0 {
			s[i] += fmt.Sprintf("/%d", ic.PrefixLength)
		}
	}
	return strings.Join(s, ",")
}

// deviceString is a device as type/netns/name ("-" for an empty part).
func deviceString(d *api.Device) string {
	if d == nil {
		return "-"
	}
	return fmt.Sprintf("%s/%s/%s", orDash(d.Type), orDash(d.NetNS), orDash(d.Name))
}

// portState says whether an endpoint's port is served by its device.
func portState(e *api.Endpoint) string {
	st := e.Status
	switch {
	case e.Flags&hns.EndpointFlagRemote != 0:
		return "remote"
	case st != nil && st.DeviceError != "":
		return "error: " + st.DeviceError
	case st == nil || st.Port == nil:
		return "no port"
	}
	return deviceState(st.Port.Device)
}

// deviceState is the state of a port's device.
func deviceState(d *inspect.DeviceInfo) string {
	switch {
	case d == nil:
		return "no device"
	case d.Error != "":
		return "error: " + d.Error
	case d.Serving:
		return "serving"
	}
	return "stopped"
}

func (c *cli) endpoint(args []string) error {
	pos, err := c.parse(args, nil, 1, 1)
	if err != nil {
		return err
	}
	e, err := c.client.Endpoint(c.ctx, pos[0])
	if err != nil {
		return err
	}
	if c.json() {
		return printJSON(c.stdout, e)
	}
	k := newKV(c.stdout)
	k.add("name", "%s", e.Name)
	k.add("network", "%s", e.HostComputeNetwork)
	k.add("mac", "%s", orDash(e.MacAddress))
	k.add("ips", "%s", orDash(endpointIPs(e)))
	if e.Flags != 0 {
		fl := fmt.Sprint(e.Flags)
		if e.Flags&hns.EndpointFlagRemote != 0 {
			fl += " (remote)"
		}
		k.add("flags", "%s", fl)
	}
	if e.Unhealthy {
		k.add("unhealthy", "yes: out of every load balancer for new connections")
	}
	if d := e.Device; d != nil {
		k.add("device", "%s %s in netns %s", d.Type, orDash(d.Name), orDash(d.NetNS))
	} else {
		k.add("device", "none")
	}
	k.add("port state", "%s", portState(e))
	if st := e.Status; st != nil && st.Port != nil {
		p := st.Port
		k.add("port", "%s (id %d), layers %s", p.Name, p.ID, orDash(strings.Join(p.Layers, ", ")))
		if d := p.Device; d != nil {
			k.add("traffic", "rx %d frames, tx %d frames, %d tx errors", d.RxFrames, d.TxFrames, d.TxErrors)
		}
	}
	k.list("policies", policyStrings(e.Policies))
	return k.flush()
}

func (c *cli) lbs(args []string) error {
	var owner ownerFlag
	if _, err := c.parse(args, func(fl *flagSet) { fl.Var(&owner, "owner", ownerUsage) }, 0, 0); err != nil {
		return err
	}
	var l []api.LoadBalancer
	var err error
	if owner.set {
		l, err = c.client.LoadBalancersOwnedBy(c.ctx, owner.owner)
	} else {
		l, err = c.client.LoadBalancers(c.ctx)
	}
	if err != nil {
		return err
	}
	if c.json() {
		return printJSON(c.stdout, l)
	}
	t := newTable(c.stdout, "NAME", "FRONTENDS", "PORTS", "BACKENDS", "FLAGS")
	for i := range l {
		lb := &l[i]
		ports := make([]string, len(lb.PortMappings))
		for j, pm := range lb.PortMappings {
			ports[j] = fmt.Sprintf("%s %d->%d", lbProto(pm.Protocol), pm.ExternalPort, pm.InternalPort)
		}
		t.row(lb.Name, frontends(lb), strings.Join(ports, ","), strings.Join(lbBackends(lb), ","), lbFlags(lb.Flags))
	}
	return t.flush()
}

func frontends(lb *api.LoadBalancer) string {
	if len(lb.FrontendVIPs) == 0 {
		return "(host)"
	}
	return strings.Join(lb.FrontendVIPs, ",")
}

func lbProto(p uint32) string {
	switch p {
	case 6:
		return "tcp"
	case 17:
		return "udp"
	}
	return fmt.Sprintf("proto-%d", p)
}

// lbFlags names a load balancer's flags.
func lbFlags(f uint32) string {
	return bitNames(f, []string{hns.LBFlagDSR: "DSR", hns.LBFlagIPv6: "IPv6"})
}

// portFlags names a port mapping's flags.
func portFlags(f uint32) string {
	return bitNames(f, []string{hns.LBPortILB: "ILB", hns.LBPortLocalRoutedVIP: "LocalRoutedVIP",
		hns.LBPortUseMux: "UseMux", hns.LBPortPreserveDIP: "PreserveDIP", hns.LBPortVipExternalIP: "VipExternalIP"})
}

// bitNames names the bits of f by names (indexed by bit value); unknown
// bits are written as numbers.
func bitNames(f uint32, names []string) string {
	var s []string
	for bit := uint32(1); bit != 0 && bit <= f; bit <<= 1 {
		if f&bit == 0 {
			continue
		}
		if int(bit) < len(names) && names[bit] != "" {
			s = append(s, names[bit])
		} else {
			s = append(s, fmt.Sprint(bit))
		}
	}
	return strings.Join(s, ",")
}

var distributions = []string{0: "per connection", 1: "client IP and protocol", 2: "client IP"}

func (c *cli) lb(args []string) error {
	pos, err := c.parse(args, nil, 1, 1)
	if err != nil {
		return err
	}
	lb, err := c.client.LoadBalancer(c.ctx, pos[0])
	if err != nil {
		return err
	}
	if c.json() {
		return printJSON(c.stdout, lb)
	}
	k := newKV(c.stdout)
	k.add("name", "%s", lb.Name)
	k.add("frontends", "%s", frontends(lb))
	k.add("flags", "%s", orDash(lbFlags(lb.Flags)))
	k.add("source vip", "%s", orDash(lb.SourceVIP))
	var ports []string
	for _, pm := range lb.PortMappings {
		s := fmt.Sprintf("%s %d->%d", lbProto(pm.Protocol), pm.ExternalPort, pm.InternalPort)
		if int(pm.DistributionType) < len(distributions) {
			s += ", " + distributions[pm.DistributionType]
		} else {
			s += fmt.Sprintf(", distribution %d", pm.DistributionType)
		}
		if pm.AffinityTimeoutSeconds != 0 {
			s += fmt.Sprintf(", affinity %ds", pm.AffinityTimeoutSeconds)
		}
		if f := portFlags(pm.Flags); f != "" {
			s += ", flags " + f
		}
		ports = append(ports, s)
	}
	k.list("ports", ports)
	k.list("backends", lb.HostComputeEndpoints)
	if len(lb.DrainingEndpoints) > 0 {
		k.list("draining", lb.DrainingEndpoints)
	}
	return k.flush()
}

// lbBackends lists lb's backends, the draining ones (no new connections)
// marked.
func lbBackends(lb *api.LoadBalancer) []string {
	if len(lb.DrainingEndpoints) == 0 {
		return lb.HostComputeEndpoints
	}
	out := slices.Clone(lb.HostComputeEndpoints)
	for _, name := range lb.DrainingEndpoints {
		out = append(out, name+" (draining)")
	}
	return out
}

// kinds are the objects create, update and delete take.
var kinds = map[string]string{
	"network": "network", "networks": "network",
	"endpoint": "endpoint", "endpoints": "endpoint",
	"lb": "lb", "lbs": "lb", "loadbalancer": "lb", "loadbalancers": "lb",
}

func (c *cli) kind(s string) (string, error) {
	k, ok := kinds[s]
	if !ok {
		return "", c.usageErr("%q: want network, endpoint or lb", s)
	}
	return k, nil
}

// readObject reads the JSON object in file (- for standard input) into
// v strictly: an unknown field is an error naming it, as ufpd's would be.
func (c *cli) readObject(file string, v any) error {
	var b []byte
	var err error
	if file == "-" {
		b, err = io.ReadAll(c.stdin)
		file = "standard input"
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%s: no JSON object", file)
		}
		return fmt.Errorf("%s: %w", file, err)
	}
	if dec.More() {
		return fmt.Errorf("%s: unexpected data after the JSON object", file)
	}
	return nil
}

func (c *cli) create(args []string) error { return c.write(args, false) }

func (c *cli) update(args []string) error { return c.write(args, true) }

// write creates an object from a JSON file (update: replaces the object
// named in the file or by NAME).
func (c *cli) write(args []string, update bool) error {
	var file string
	most := 1
	if update {
		most = 2
	}
	pos, err := c.parse(args, func(fl *flagSet) {
		fl.StringVar(&file, "f", "", "the object's JSON `file` (- for standard input)")
	}, 1, most)
	if err != nil {
		return err
	}
	kind, err := c.kind(pos[0])
	if err != nil {
		return err
	}
	if file == "" {
		return c.usageErr("-f FILE is required")
	}
	// named fills in the object's name from the command line, or checks
	// that they agree.
	named := func(name *string) error {
		if len(pos) < 2 {
			if update && *name == "" {
				return fmt.Errorf("%s: the %s has no Name: give it in the JSON or as NAME", file, kindName(kind))
			}
			return nil
		}
		switch *name {
		case "":
			*name = pos[1]
		case pos[1]:
		default:
			return fmt.Errorf("%s: Name %q differs from NAME %q (objects are not renamed: delete and create)", file, *name, pos[1])
		}
		return nil
	}
	var obj any
	var name *string
	switch kind {
	case "network":
		n := &api.Network{}
		obj, name = n, &n.Name
	case "endpoint":
		e := &api.Endpoint{}
		obj, name = e, &e.Name
	case "lb":
		lb := &api.LoadBalancer{}
		obj, name = lb, &lb.Name
	}
	if err := c.readObject(file, obj); err != nil {
		return err
	}
	if err := named(name); err != nil {
		return err
	}
	switch o := obj.(type) {
	case *api.Network:
		if update {
			err = c.client.UpdateNetwork(c.ctx, o)
		} else {
			err = c.client.CreateNetwork(c.ctx, o)
		}
	case *api.Endpoint:
		o.Status = nil
		if update {
			err = c.client.UpdateEndpoint(c.ctx, o)
		} else {
			err = c.client.CreateEndpoint(c.ctx, o)
		}
	case *api.LoadBalancer:
		if update {
			err = c.client.UpdateLoadBalancer(c.ctx, o)
		} else {
			err = c.client.CreateLoadBalancer(c.ctx, o)
		}
	}
	if err != nil {
		return err
	}
	did := "created"
	if update {
		did = "updated"
	}
	fmt.Fprintf(c.stdout, "%s %s %s\n", kindName(kind), *name, did)
	return nil
}

func kindName(kind string) string {
	if kind == "lb" {
		return "load balancer"
	}
	return kind
}

func (c *cli) delete(args []string) error {
	pos, err := c.parse(args, nil, 2, 2)
	if err != nil {
		return err
	}
	kind, err := c.kind(pos[0])
	if err != nil {
		return err
	}
	name := pos[1]
	switch kind {
	case "network":
		err = c.client.DeleteNetwork(c.ctx, name)
	case "endpoint":
		err = c.client.DeleteEndpoint(c.ctx, name)
	case "lb":
		err = c.client.DeleteLoadBalancer(c.ctx, name)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "%s %s deleted\n", kindName(kind), name)
	return nil
}
