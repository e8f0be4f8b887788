package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
)

// ufpd is what ufp-cni asks of ufpd's control API.
type ufpd interface {
	Status(ctx context.Context) (*api.Status, error)
	Network(ctx context.Context, name string) (*api.Network, error)
	Endpoint(ctx context.Context, name string) (*api.Endpoint, error)
	Endpoints(ctx context.Context) ([]api.Endpoint, error)
	CreateEndpoint(ctx context.Context, e *api.Endpoint) error
	DeleteEndpoint(ctx context.Context, name string) error
}

var _ ufpd = (*api.Client)(nil)

// ipamPlugin runs the IPAM plugin a conf names, with the conf IPAM
// plugins get on stdin and this process's CNI_* environment.
type ipamPlugin interface {
	Add(ctx context.Context, plugin string, conf []byte) (types.Result, error)
	Del(ctx context.Context, plugin string, conf []byte) error
	Check(ctx context.Context, plugin string, conf []byte) error
	Status(ctx context.Context, plugin string, conf []byte) error
	GC(ctx context.Context, plugin string, conf []byte) error
}

// delegatedIPAM runs IPAM plugins from CNI_PATH (pkg/invoke). The zero
// value is ready.
type delegatedIPAM struct{}

var _ ipamPlugin = delegatedIPAM{}

func (delegatedIPAM) Add(ctx context.Context, plugin string, conf []byte) (types.Result, error) {
	return invoke.DelegateAdd(ctx, plugin, conf, nil)
}
func (delegatedIPAM) Del(ctx context.Context, plugin string, conf []byte) error {
	return invoke.DelegateDel(ctx, plugin, conf, nil)
}
func (delegatedIPAM) Check(ctx context.Context, plugin string, conf []byte) error {
	return invoke.DelegateCheck(ctx, plugin, conf, nil)
}
func (delegatedIPAM) Status(ctx context.Context, plugin string, conf []byte) error {
	return invoke.DelegateStatus(ctx, plugin, conf, nil)
}
func (delegatedIPAM) GC(ctx context.Context, plugin string, conf []byte) error {
	return invoke.DelegateGC(ctx, plugin, conf, nil)
}

// plugin carries out the CNI operations. Its fields are set once, before
// the operation runs.
type plugin struct {
	// newClient returns a client of the ufpd listening on socket.
	newClient func(socket string) ufpd
	ipam      ipamPlugin
	// checkNS checks the interface in the namespace at path and returns
	// what is wrong with it.
	checkNS func(path string, want nsWant) []string
	// stdout takes ADD's result.
	stdout  io.Writer
	timeout time.Duration
}

// nsWant is what CHECK expects of the interface in the namespace.
type nsWant struct {
	ifName string
	mac    string
	addrs  []netip.Prefix
	routes []nsRoute
}

// nsRoute is a route through the interface.
type nsRoute struct {
	dst netip.Prefix
	gw  netip.Addr
}

// attachment names an attachment in errors.
func attachment(args *skel.CmdArgs) string {
	return fmt.Sprintf("container %s interface %s", args.ContainerID, args.IfName)
}

// add is CNI ADD: IPAM, then the endpoint in ufpd (IPAM's allocation is
// released if that fails), then the result.
func (p *plugin) add(args *skel.CmdArgs) (err error) {
	n, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	tr, err := translate(n)
	if err != nil {
		return confError(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	c := p.newClient(n.Socket)
	netw, err := network(ctx, c, n)
	if err != nil {
		return err
	}
	if err := checkNetwork(n, tr, netw); err != nil {
		return confError(err)
	}
	name := endpointName(n.Name, args.ContainerID, args.IfName)
	switch _, err := c.Endpoint(ctx, name); {
	case err == nil:
		return fmt.Errorf("endpoint %s (%s) is in ufpd already: DEL the attachment first", name, attachment(args))
	case !api.IsNotFound(err):
		return fmt.Errorf("endpoint %s: %w", name, err)
	}

	r, err := p.ipam.Add(ctx, n.ipamType, n.ipamConf)
	if err != nil {
		return fmt.Errorf("ipam %s: ADD: %w", n.ipamType, err)
	}
	// From here on a failure releases the address, unless an endpoint
	// that may hold it could not be removed.
	release := true
	defer func() {
		if err == nil || !release {
			return
		}
		// A fresh context: the operation's may be what ran out.
		rctx, cancel := context.WithTimeout(context.Background(), p.timeout)
		defer cancel()
		if rerr := p.ipam.Del(rctx, n.ipamType, n.ipamConf); rerr != nil {
			err = errors.Join(err, fmt.Errorf("releasing the address: ipam %s: DEL: %w", n.ipamType, rerr))
		}
	}()
	// undo removes the endpoint again after a failure.
	undo := func(err error) error {
		dctx, cancel := context.WithTimeout(context.Background(), p.timeout)
		defer cancel()
		if derr := c.DeleteEndpoint(dctx, name); derr != nil && !api.IsNotFound(derr) {
			release = false
			return errors.Join(err, fmt.Errorf("removing endpoint %s again (its address stays allocated): %w", name, derr))
		}
		return err
	}
	res, err := types100.NewResultFromResult(r)
	if err != nil {
		return fmt.Errorf("ipam %s: its result: %w", n.ipamType, err)
	}
	ep, out, err := buildEndpoint(n, tr, netw, res, args, name)
	if err != nil {
		return err
	}
	if err := c.CreateEndpoint(ctx, ep); err != nil {
		err = fmt.Errorf("creating endpoint %s (%s) in ufpd: %w", name, attachment(args), err)
		var refused *api.Error
		if !errors.As(err, &refused) {
			// No answer: ufpd may have made the endpoint all the same.
			err = undo(err)
		}
		return err
	}
	versioned, err := out.GetAsVersion(n.CNIVersion)
	if err == nil {
		err = versioned.PrintTo(p.stdout)
	}
	if err != nil {
		// The result cannot be given: the failed ADD leaves nothing.
		return undo(fmt.Errorf("writing the result: %w", err))
	}
	return nil
}

// network returns the conf's network in ufpd.
func network(ctx context.Context, c ufpd, n *NetConf) (*api.Network, error) {
	netw, err := c.Network(ctx, n.Network)
	switch {
	case api.IsNotFound(err):
		return nil, fmt.Errorf("%snetwork: ufpd at %s has no network %q (the conf's network, default its name)", n.at("network"), n.Socket, n.Network)
	case err != nil:
		return nil, fmt.Errorf("network %q: %w", n.Network, err)
	}
	return netw, nil
}

// checkNetwork checks that netw is what the conf was written for: the
// network type its Windows plugin attaches to, and the provider address
// its ProviderAddress policies name.
func checkNetwork(n *NetConf, tr *translation, netw *api.Network) error {
	if want := n.expectedNetworkType(); want != "" && !strings.EqualFold(netw.Type, want) {
		return fmt.Errorf("network %q: ufpd's is %s, but the conf is %s's, which attaches to %s networks", netw.Name, netw.Type, n.kind, want)
	}
	if len(tr.ProviderAddresses) == 0 {
		return nil
	}
	var pas []netip.Addr
	for _, pc := range netw.Policies {
		if pc.Type != "ProviderAddress" {
			continue
		}
		var s hns.ProviderAddressSettings
		if json.Unmarshal(pc.Settings, &s) == nil {
			if a, err := netip.ParseAddr(s.ProviderAddress); err == nil {
				pas = append(pas, a)
			}
		}
	}
	for _, pa := range tr.ProviderAddresses {
		if !slices.Contains(pas, pa.addr) {
			return fmt.Errorf("%s: %s is not a provider address of network %q (%v): in ufp the provider address is the network's ProviderAddress policy", pa.at, pa.addr, netw.Name, pas)
		}
	}
	return nil
}

// subnet is one subnet of a network in ufpd, with its gateway (invalid:
// none).
type subnet struct {
	prefix netip.Prefix
	gw     netip.Addr
}

func networkSubnets(netw *api.Network) []subnet {
	var out []subnet
	for _, ipam := range netw.Ipams {
		for _, sc := range ipam.Subnets {
			p, err := netip.ParsePrefix(sc.IpAddressPrefix)
			if err != nil {
				continue // ufpd checked it
			}
			s := subnet{prefix: p}
			for _, r := range sc.Routes {
				if d, err := netip.ParsePrefix(r.DestinationPrefix); err == nil && d.Bits() == 0 {
					s.gw, _ = netip.ParseAddr(r.NextHop)
				}
			}
			out = append(out, s)
		}
	}
	return out
}

// buildEndpoint makes the endpoint of IPAM result res and the ADD result
// describing the interface ufpd will set up: the addresses with their
// subnet's prefix length, and a default route through the first
// address's subnet gateway of each family.
func buildEndpoint(n *NetConf, tr *translation, netw *api.Network, res *types100.Result, args *skel.CmdArgs, name string) (*api.Endpoint, *types100.Result, error) {
	subnets := networkSubnets(netw)
	out := &types100.Result{
		CNIVersion: types100.ImplementedSpecVersion,
		Interfaces: []*types100.Interface{{Name: args.IfName, Sandbox: args.Netns}},
		DNS:        n.resultDNS(),
	}
	var ipcs []hns.IpConfigConfig
	var addrs []netip.Addr
	gws := map[bool]netip.Addr{} // the default route's gateway by is-IPv4
	for i, ip := range res.IPs {
		a, ok := netip.AddrFromSlice(ip.Address.IP)
		if !ok {
			return nil, nil, fmt.Errorf("ipam %s: ips[%d]: %q is not an IP address", n.ipamType, i, ip.Address.IP)
		}
		a = a.Unmap()
		ones, _ := ip.Address.Mask.Size()
		at := fmt.Sprintf("ipam %s: ips[%d] %s/%d", n.ipamType, i, a, ones)
		si := slices.IndexFunc(subnets, func(s subnet) bool { return s.prefix.Contains(a) })
		if si < 0 {
			var ps []string
			for _, s := range subnets {
				ps = append(ps, s.prefix.String())
			}
			return nil, nil, fmt.Errorf("%s: outside network %q's subnets in ufpd (%s): the IPAM range must lie in them", at, netw.Name, strings.Join(ps, ", "))
		}
		sub := subnets[si]
		if ones != sub.prefix.Bits() {
			return nil, nil, fmt.Errorf("%s: the prefix length differs from ufpd's subnet %s", at, sub.prefix)
		}
		if ip.Gateway != nil {
			g, _ := netip.AddrFromSlice(ip.Gateway)
			if g.Unmap() != sub.gw {
				return nil, nil, fmt.Errorf("%s: gateway %s, but ufpd's subnet %s has %s: the pod's gateway is its subnet's (set the IPAM range's gateway to it)", at, ip.Gateway, sub.prefix, gwString(sub.gw))
			}
		}
		ipcs = append(ipcs, hns.IpConfigConfig{IpAddress: a.String(), PrefixLength: uint8(ones)})
		addrs = append(addrs, a)
		ipc := &types100.IPConfig{Interface: types100.Int(0), Address: net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(ones, a.BitLen())}}
		if sub.gw.IsValid() {
			ipc.Gateway = sub.gw.AsSlice()
			if _, ok := gws[a.Is4()]; !ok {
				gws[a.Is4()] = sub.gw
				dst := net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
				if a.Is4() {
					dst = net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
				}
				out.Routes = append(out.Routes, &types.Route{Dst: dst, GW: sub.gw.AsSlice()})
			}
		}
		out.IPs = append(out.IPs, ipc)
	}
	if len(addrs) == 0 {
		return nil, nil, fmt.Errorf("ipam %s: the result has no address", n.ipamType)
	}
	for i, r := range res.Routes {
		a, _ := netip.AddrFromSlice(r.Dst.IP)
		gw, ok := gws[a.Unmap().Is4()]
		var rgw netip.Addr
		if r.GW != nil {
			rgw, _ = netip.AddrFromSlice(r.GW)
			rgw = rgw.Unmap()
		}
		if !ok || rgw.IsValid() && rgw != gw {
			return nil, nil, fmt.Errorf("ipam %s: routes[%d] %s via %s: ufpd gives the interface a default route through its subnet's gateway (%s) and no other routes", n.ipamType, i, r.Dst.String(), gwString(rgw), gwString(gw))
		}
	}
	prefix, _ := parseMACPrefix(n.EndpointMACPrefix) // checked by parseConf
	mac, err := endpointMAC(prefix, addrs)
	if err != nil {
		return nil, nil, err
	}
	out.Interfaces[0].Mac = mac.String()
	ep := &api.Endpoint{
		EndpointConfig: hns.EndpointConfig{
			Name: name, HostComputeNetwork: n.Network, MacAddress: mac.String(),
			IpConfigurations: ipcs, Policies: tr.Policies,
		},
		Device: &api.Device{Type: "tap", NetNS: args.Netns, Name: args.IfName},
	}
	return ep, out, nil
}

func gwString(a netip.Addr) string {
	if !a.IsValid() {
		return "none"
	}
	return a.String()
}

// del is CNI DEL: the endpoint, then the IPAM allocation. An endpoint (or
// namespace) that is gone already is not an error; ufpd not answering is.
func (p *plugin) del(args *skel.CmdArgs) error {
	n, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	c := p.newClient(n.Socket)
	name := endpointName(n.Name, args.ContainerID, args.IfName)
	if err := c.DeleteEndpoint(ctx, name); err != nil && !api.IsNotFound(err) {
		return fmt.Errorf("removing endpoint %s (%s) from ufpd: %w", name, attachment(args), err)
	}
	if err := p.ipam.Del(ctx, n.ipamType, n.ipamConf); err != nil {
		return fmt.Errorf("ipam %s: DEL: %w", n.ipamType, err)
	}
	return nil
}

// check is CNI CHECK. It reports every problem it finds, each naming what
// is wrong.
func (p *plugin) check(args *skel.CmdArgs) error {
	n, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	tr, err := translate(n)
	if err != nil {
		return confError(err)
	}
	if len(n.PrevResult) == 0 || isNull(n.PrevResult) {
		return confError(errors.New("prevResult: CHECK needs the result of ADD"))
	}
	pr, err := version.NewResult(n.CNIVersion, n.PrevResult)
	if err != nil {
		return confError(fmt.Errorf("prevResult: %w", err))
	}
	prev, err := types100.NewResultFromResult(pr)
	if err != nil {
		return confError(fmt.Errorf("prevResult: %w", err))
	}
	want, err := wantFromResult(prev, args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	c := p.newClient(n.Socket)
	name := endpointName(n.Name, args.ContainerID, args.IfName)
	var problems []string
	switch ep, err := c.Endpoint(ctx, name); {
	case api.IsNotFound(err):
		problems = append(problems, fmt.Sprintf("endpoint %s: ufpd has no such endpoint", name))
	case err != nil:
		return fmt.Errorf("endpoint %s: %w", name, err)
	default:
		problems = append(problems, checkEndpoint(n, tr, ep, want, args)...)
	}
	problems = append(problems, p.checkNS(args.Netns, want)...)
	if err := p.ipam.Check(ctx, n.ipamType, n.ipamConf); err != nil {
		problems = append(problems, fmt.Sprintf("ipam %s: CHECK: %v", n.ipamType, err))
	}
	if len(problems) > 0 {
		return fmt.Errorf("CHECK of %s: %s", attachment(args), strings.Join(problems, "; "))
	}
	return nil
}

// wantFromResult is what ADD's result says of the interface: its MAC,
// addresses and routes.
func wantFromResult(res *types100.Result, args *skel.CmdArgs) (nsWant, error) {
	w := nsWant{ifName: args.IfName}
	idx := slices.IndexFunc(res.Interfaces, func(i *types100.Interface) bool {
		return i.Name == args.IfName && (i.Sandbox == "" || i.Sandbox == args.Netns)
	})
	if idx < 0 {
		return w, confError(fmt.Errorf("prevResult.interfaces: no interface %s in %s", args.IfName, args.Netns))
	}
	w.mac = res.Interfaces[idx].Mac
	for _, ip := range res.IPs {
		if ip.Interface != nil && *ip.Interface != idx {
			continue
		}
		a, ok := netip.AddrFromSlice(ip.Address.IP)
		if !ok {
			continue
		}
		ones, _ := ip.Address.Mask.Size()
		w.addrs = append(w.addrs, netip.PrefixFrom(a.Unmap(), ones))
	}
	for _, r := range res.Routes {
		a, ok := netip.AddrFromSlice(r.Dst.IP)
		if !ok {
			continue
		}
		ones, _ := r.Dst.Mask.Size()
		rt := nsRoute{dst: netip.PrefixFrom(a.Unmap(), ones)}
		if g, ok := netip.AddrFromSlice(r.GW); ok {
			rt.gw = g.Unmap()
		}
		w.routes = append(w.routes, rt)
	}
	return w, nil
}

// checkEndpoint compares the endpoint in ufpd with the conf and ADD's
// result.
func checkEndpoint(n *NetConf, tr *translation, ep *api.Endpoint, want nsWant, args *skel.CmdArgs) []string {
	var problems []string
	bad := func(format string, a ...any) {
		problems = append(problems, fmt.Sprintf("endpoint %s: ", ep.Name)+fmt.Sprintf(format, a...))
	}
	if ep.HostComputeNetwork != n.Network {
		bad("it is on network %q, the conf's is %q", ep.HostComputeNetwork, n.Network)
	}
	if m1, err1 := net.ParseMAC(ep.MacAddress); err1 != nil || m1.String() != strings.ToLower(want.mac) {
		bad("MacAddress %s, the ADD result's is %s", ep.MacAddress, want.mac)
	}
	var have, wantIPs []string
	for _, ic := range ep.IpConfigurations {
		have = append(have, ic.IpAddress)
	}
	for _, p := range want.addrs {
		wantIPs = append(wantIPs, p.Addr().String())
	}
	slices.Sort(have)
	slices.Sort(wantIPs)
	if !slices.Equal(have, wantIPs) {
		bad("IpConfigurations %v, the ADD result's addresses are %v", have, wantIPs)
	}
	if d := policyDiff(tr.Policies, ep.Policies); d != "" {
		bad("Policies: %s", d)
	}
	switch d := ep.Device; {
	case d == nil:
		bad("it has no device")
	case d.Type != "tap" || d.NetNS != args.Netns || (d.Name != "" && d.Name != args.IfName):
		bad("its device is %s %q in %q, not tap %q in %q", d.Type, d.Name, d.NetNS, args.IfName, args.Netns)
	}
	// A ufpd that reports no status leaves the device to the namespace
	// check.
	if st := ep.Status; st != nil {
		switch {
		case st.DeviceError != "":
			bad("its device is not serving: %s", st.DeviceError)
		case st.Port == nil:
			bad("it has no port in the switch")
		case st.Port.Device == nil:
			bad("its port has no device attached")
		case !st.Port.Device.Serving:
			bad("its device is not serving")
		}
	}
	return problems
}

// policyDiff says how ufpd's policies differ from the conf's ("" if they
// do not). Settings are compared as JSON values.
func policyDiff(want, have []api.Policy) string {
	one := func(p api.Policy) string { return p.Type + string(compactJSON(p.Settings)) }
	show := func(ps []api.Policy) string {
		var s []string
		for _, p := range ps {
			s = append(s, one(p))
		}
		return "[" + strings.Join(s, " ") + "]"
	}
	if len(want) != len(have) {
		return fmt.Sprintf("ufpd has %d %s, the conf makes %d %s", len(have), show(have), len(want), show(want))
	}
	for i := range want {
		if want[i].Type != have[i].Type || !sameJSON(want[i].Settings, have[i].Settings) {
			return fmt.Sprintf("[%d] is %s in ufpd, the conf makes %s", i, one(have[i]), one(want[i]))
		}
	}
	return ""
}

func sameJSON(a, b json.RawMessage) bool {
	var va, vb any
	if json.Unmarshal(orEmpty(a), &va) != nil || json.Unmarshal(orEmpty(b), &vb) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(va, vb)
}

func orEmpty(b json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(b)) == 0 {
		return json.RawMessage("{}")
	}
	return b
}

// errPluginNotAvailable is CNI 1.1's error 50: the plugin cannot service
// ADD (types.ErrPluginNotAvailable from cni v1.3.1 on).
const errPluginNotAvailable uint = 50

// status is CNI STATUS: ufpd answers, the network is there and of the
// conf's type, and IPAM is available.
func (p *plugin) status(args *skel.CmdArgs) error {
	n, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	tr, err := translate(n)
	if err != nil {
		return confError(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	c := p.newClient(n.Socket)
	unavailable := func(err error) error {
		return types.NewError(errPluginNotAvailable, err.Error(), "")
	}
	if _, err := c.Status(ctx); err != nil {
		return unavailable(fmt.Errorf("ufpd does not answer: %w", err))
	}
	netw, err := network(ctx, c, n)
	if err != nil {
		return unavailable(err)
	}
	if err := checkNetwork(n, tr, netw); err != nil {
		return unavailable(err)
	}
	if err := p.ipam.Status(ctx, n.ipamType, n.ipamConf); err != nil {
		return unavailable(fmt.Errorf("ipam %s: STATUS: %w", n.ipamType, err))
	}
	return nil
}

// gc is CNI GC: endpoints of this conf on its network that no valid
// attachment names are removed, then IPAM's GC runs. A GC without a list
// of valid attachments (cnitool gc) removes all of them.
func (p *plugin) gc(args *skel.CmdArgs) error {
	n, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	c := p.newClient(n.Socket)
	valid := map[string]bool{}
	for _, a := range n.validAttachments() {
		valid[endpointName(n.Name, a.ContainerID, a.IfName)] = true
	}
	eps, err := c.Endpoints(ctx)
	if err != nil {
		return fmt.Errorf("listing ufpd's endpoints: %w", err)
	}
	var errs []error
	for _, e := range eps {
		if e.HostComputeNetwork != n.Network || !isConfEndpoint(e.Name, n.Name) || valid[e.Name] {
			continue
		}
		if err := c.DeleteEndpoint(ctx, e.Name); err != nil && !api.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("removing stale endpoint %s: %w", e.Name, err))
		}
	}
	if err := p.ipam.GC(ctx, n.ipamType, n.ipamConf); err != nil {
		errs = append(errs, fmt.Errorf("ipam %s: GC: %w", n.ipamType, err))
	}
	return errors.Join(errs...)
}
