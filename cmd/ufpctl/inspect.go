package main

import (
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/inspect"
)

// The compiled switch: ports, layers and rules, flows, counters.

func (c *cli) ports(args []string) error {
	if _, err := c.parse(args, nil, 0, 0); err != nil {
		return err
	}
	l, err := c.client.Ports(c.ctx)
	if err != nil {
		return err
	}
	if c.json() {
		return printJSON(c.stdout, l)
	}
	t := newTable(c.stdout, "NAME", "ID", "MAC", "IPS", "ROLE", "MTU", "LAYERS", "DEVICE", "RX", "TX")
	for _, p := range l {
		role := flagList(p.Uplink, "uplink", p.Host, "host")
		mtu := ""
		if p.MTU != 0 {
			mtu = fmt.Sprint(p.MTU)
		}
		rx, tx := "", ""
		if d := p.Device; d != nil {
			rx, tx = fmt.Sprint(d.RxFrames), fmt.Sprint(d.TxFrames)
		}
		t.row(p.Name, fmt.Sprint(p.ID), p.MAC, joinAddrs(p.IPs), role, mtu, strings.Join(p.Layers, ","),
			deviceState(p.Device), rx, tx)
	}
	return t.flush()
}

// ruleFlags names a rule's flags.
func ruleFlags(terminating, stateful bool) string {
	return flagList(terminating, "terminating", stateful, "stateful")
}

func (c *cli) layers(args []string) error {
	pos, err := c.parse(args, nil, 1, 1)
	if err != nil {
		return err
	}
	l, err := c.client.Layers(c.ctx, pos[0])
	if err != nil {
		return err
	}
	if c.json() {
		return printJSON(c.stdout, l)
	}
	if len(l) == 0 {
		fmt.Fprintf(c.stdout, "port %s has no layers: every packet is allowed as it is\n", pos[0])
		return nil
	}
	for i, li := range l {
		if i > 0 {
			fmt.Fprintln(c.stdout)
		}
		def := fmt.Sprintf("default out %s, in %s", li.DefaultOut, li.DefaultIn)
		if li.DefaultStateful {
			def += " (stateful)"
		}
		fmt.Fprintf(c.stdout, "layer %s: %s\n", li.Name, def)
		if len(li.Groups) == 0 {
			fmt.Fprintf(c.stdout, "  no groups\n")
		}
		for _, g := range li.Groups {
			if g.Shared != "" {
				// Its rules and counters are those of every port that
				// has the shared group.
				fmt.Fprintf(c.stdout, "  group %s (match %s; shared %s, counted for every port that has it)\n", g.Name, g.Match, g.Shared)
			} else {
				fmt.Fprintf(c.stdout, "  group %s (match %s)\n", g.Name, g.Match)
			}
			if len(g.Rules) == 0 {
				fmt.Fprintf(c.stdout, "    no rules\n")
				continue
			}
			t := newIndentedTable(c.stdout, "    ", "PRIORITY", "RULE", "MATCH", "ACTION", "FLAGS", "HITS", "PACKETS", "BYTES")
			for _, r := range g.Rules {
				t.row(fmt.Sprint(r.Priority), r.Name, r.Match, r.Action, ruleFlags(r.Terminating, r.Stateful),
					fmt.Sprint(r.Hits), fmt.Sprint(r.Packets), fmt.Sprint(r.Bytes))
			}
			if err := t.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *cli) rules(args []string) error {
	pos, err := c.parse(args, nil, 0, 1)
	if err != nil {
		return err
	}
	if len(pos) == 0 || c.json() {
		// The API's rule counters, of every port or of one.
		l, err := c.client.Rules(c.ctx)
		if err != nil {
			return err
		}
		if len(pos) == 1 {
			// An unknown port is an error, not an empty list.
			ls, err := c.client.Layers(c.ctx, pos[0])
			if err != nil {
				return err
			}
			// The port's own rules, and those of the shared groups it
			// has (listed once for every port that has them).
			shared := map[string]bool{}
			for _, li := range ls {
				for _, g := range li.Groups {
					if g.Shared != "" {
						shared[g.Shared] = true
					}
				}
			}
			l = slices.DeleteFunc(l, func(r inspect.RuleCount) bool { return r.Port != pos[0] && !(r.Shared && shared[r.Group]) })
		}
		if c.json() {
			return printJSON(c.stdout, nonNil(l))
		}
		t := newTable(c.stdout, "PORT", "LAYER", "GROUP", "RULE", "HITS", "PACKETS", "BYTES")
		for _, r := range l {
			port := r.Port
			if r.Shared {
				port = "(shared)"
			}
			t.row(port, r.Layer, r.Group, r.Rule, fmt.Sprint(r.Hits), fmt.Sprint(r.Packets), fmt.Sprint(r.Bytes))
		}
		return t.flush()
	}
	// One port's rules with what they match and do: its layers, flat.
	l, err := c.client.Layers(c.ctx, pos[0])
	if err != nil {
		return err
	}
	t := newTable(c.stdout, "LAYER", "GROUP", "PRIORITY", "RULE", "MATCH", "ACTION", "FLAGS", "HITS", "PACKETS", "BYTES")
	for _, li := range l {
		for _, g := range li.Groups {
			for _, r := range g.Rules {
				t.row(li.Name, g.Name, fmt.Sprint(r.Priority), r.Name, r.Match, r.Action, ruleFlags(r.Terminating, r.Stateful),
					fmt.Sprint(r.Hits), fmt.Sprint(r.Packets), fmt.Sprint(r.Bytes))
			}
		}
	}
	return t.flush()
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// flowFlags are the flags of flows and flows flush.
type flowFlags struct {
	port, proto, src, dst, sport, dport, limit string
}

func (f *flowFlags) define(fl *flagSet) {
	fl.StringVar(&f.port, "port", "", "flows entering or leaving by `port`")
	fl.StringVar(&f.proto, "proto", "", "`protocol`: tcp, udp, icmp, icmpv6 or a number")
	fl.StringVar(&f.src, "src", "", "source `address or prefix`")
	fl.StringVar(&f.dst, "dst", "", "destination `address or prefix`")
	fl.StringVar(&f.sport, "sport", "", "source `port` (an icmp echo's identifier)")
	fl.StringVar(&f.dport, "dport", "", "destination `port`")
	fl.StringVar(&f.limit, "limit", "", "list at most `n` flows (default: ufpd's, 1000; 0: all)")
}

// filter checks the flags as ufpd would and returns the filter.
func (f *flowFlags) filter() (api.FlowFilter, error) {
	q := url.Values{}
	for k, v := range map[string]string{"port": f.port, "proto": f.proto, "src": f.src, "dst": f.dst,
		"sport": f.sport, "dport": f.dport, "limit": f.limit} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if _, err := api.ParseFlowFilter(q); err != nil {
		return api.FlowFilter{}, fmt.Errorf("-%w", err)
	}
	ff := api.FlowFilter{Port: f.port, Proto: f.proto, Src: f.src, Dst: f.dst}
	sp, _ := strconv.ParseUint(f.sport, 10, 16)
	dp, _ := strconv.ParseUint(f.dport, 10, 16)
	ff.SrcPort, ff.DstPort = uint16(sp), uint16(dp)
	ff.Limit, _ = strconv.Atoi(f.limit)
	if f.limit == "0" {
		ff.Limit = -1 // all
	}
	return ff, nil
}

func (c *cli) flows(args []string) error {
	var ff flowFlags
	pos, err := c.parse(args, ff.define, 0, 1)
	if err != nil {
		return err
	}
	if len(pos) == 1 && pos[0] != "flush" {
		return c.usageErr("%q: the only subcommand is flush", pos[0])
	}
	f, err := ff.filter()
	if err != nil {
		return c.usageErr("%v", err)
	}
	if len(pos) == 1 {
		if ff.limit != "" {
			return c.usageErr("-limit: flush removes every flow that matches")
		}
		n, err := c.client.FlushFlows(c.ctx, f)
		if err != nil {
			return err
		}
		if c.json() {
			return printJSON(c.stdout, api.FlushResult{Removed: n})
		}
		fmt.Fprintf(c.stdout, "removed %s\n", plural(n, "flow"))
		return nil
	}
	l, err := c.client.Flows(c.ctx, f)
	if err != nil {
		return err
	}
	if c.json() {
		return printJSON(c.stdout, l)
	}
	t := newTable(c.stdout, "IN", "PROTO", "SRC", "DST", "OUT", "HT", "FLAGS", "PACKETS", "BYTES", "IDLE", "GEN")
	for _, fl := range l.Flows {
		out := fl.OutPort
		if fl.Drop != "" {
			out = "drop (" + fl.Drop + ")"
		}
		var flags []string
		if fl.Encap {
			flags = append(flags, fmt.Sprintf("encap vni %d", fl.VNI))
		}
		if fl.Stateful {
			flags = append(flags, "stateful")
		}
		if fl.Reply {
			flags = append(flags, "reply")
		}
		t.row(fl.InPort, fl.Proto, endpointString(&fl, true), endpointString(&fl, false),
			out, fl.HT, strings.Join(flags, ","), fmt.Sprint(fl.Packets), fmt.Sprint(fl.Bytes),
			fmt.Sprintf("%.1fs", fl.IdleSeconds), fmt.Sprint(fl.Generation))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if l.Matched > len(l.Flows) {
		fmt.Fprintf(c.stdout, "(%d of %s that matched; -limit shows more)\n", len(l.Flows), plural(l.Matched, "flow"))
	}
	return nil
}

// endpointString is one end of a flow: the address with the port for
// tcp and udp, with an icmp echo's identifier (src) or the type and
// code of another icmp message (dst).
func endpointString(fl *inspect.FlowInfo, src bool) string {
	a, port := fl.Dst, fl.DstPort
	if src {
		a, port = fl.Src, fl.SrcPort
	}
	switch {
	case fl.Proto == "tcp" || fl.Proto == "udp":
		return netip.AddrPortFrom(a, port).String()
	case fl.Echo && src:
		return fmt.Sprintf("%s id %d", a, port)
	case fl.Echo:
		return a.String()
	case (fl.Proto == "icmp" || fl.Proto == "icmpv6") && !src:
		return fmt.Sprintf("%s type %d code %d", a, port>>8, port&0xff)
	}
	return a.String()
}

func (c *cli) counters(args []string) error {
	if _, err := c.parse(args, nil, 0, 0); err != nil {
		return err
	}
	st, err := c.client.Counters(c.ctx)
	if err != nil {
		return err
	}
	if c.json() {
		return printJSON(c.stdout, st)
	}
	k := newKV(c.stdout)
	k.add("generation", "%d", st.Generation)
	k.add("packets", "%d fast path, %d slow path", st.FastPath, st.SlowPath)
	k.list("drops", dropLines(st.Drops))
	ft := st.FlowTable
	k.add("flow table", "%d of %d flows (%d per port); %d inserted, %d expired, %d early-dropped, %d evicted, %d refused (%d over a port's share)",
		ft.Flows, ft.Capacity, ft.PortShare, ft.Inserted, ft.Expired, ft.EarlyDropped, ft.Evicted, ft.Refused, ft.ShareRefused)
	k.add("devices", "%d failed, %d frames sent to a port with no device", st.DeviceFailures, st.TxNoDevice)
	k.add("over an MTU", "%d answered with ICMP fragmentation needed or packet too big, %d fragmented", st.ICMPTooBigSent, st.Fragmented)
	if err := k.flush(); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout)
	if len(st.NATPools) == 0 {
		fmt.Fprintln(c.stdout, "no NAT pools")
	} else {
		t := newTable(c.stdout, "NAT POOL", "IN USE", "TCP", "UDP", "ICMP", "SHARE T/U/I", "EXHAUSTED", "OVER SHARE", "FILTERING", "STATE")
		for _, p := range st.NATPools {
			use := func(proto string) string {
				u := p.Protocols[proto]
				return fmt.Sprintf("%d/%d", u.InUse, u.Total)
			}
			state := "active"
			if p.Retired {
				state = "retired"
			}
			share := fmt.Sprintf("%d/%d/%d", p.Protocols["tcp"].Share, p.Protocols["udp"].Share, p.Protocols["icmp"].Share)
			t.row(p.Address.String(), fmt.Sprintf("%d/%d", p.PortsInUse, p.PortsTotal), use("tcp"), use("udp"), use("icmp"),
				share, fmt.Sprint(p.Exhausted), fmt.Sprint(p.ShareExceeded), p.Filtering, state)
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(c.stdout)
	t := newTable(c.stdout, "PORT", "RX PACKETS", "RX BYTES", "TX PACKETS", "TX BYTES", "TX ERRORS", "FLOWS", "DROPS")
	for _, p := range st.Ports {
		t.row(p.Name, fmt.Sprint(p.RxPackets), fmt.Sprint(p.RxBytes), fmt.Sprint(p.TxPackets), fmt.Sprint(p.TxBytes),
			fmt.Sprint(p.TxErrors), fmt.Sprint(p.Flows), strings.Join(dropLines(p.Drops), ", "))
	}
	return t.flush()
}

// dropLines are drop counts as "reason count", by reason.
func dropLines(m map[string]uint64) []string {
	var s []string
	for _, r := range slices.Sorted(maps.Keys(m)) {
		s = append(s, fmt.Sprintf("%s %d", r, m[r]))
	}
	return s
}
