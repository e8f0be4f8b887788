package main

import (
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/inspect"
)

// The packet trace: ufpctl trace asks ufpd what the switch would do with a
// packet and tells it so that one reads which rule decided it.

func (c *cli) trace(args []string) error {
	var (
		req      inspect.TraceRequest
		icmpType = -1
		icmpCode uint
		vxlan    string
	)
	pos, err := c.parse(args, func(fl *flagSet) {
		fl.StringVar(&req.TCPFlags, "flags", "", "TCP `flags` as tcpdump writes them: S, A (or .), F, R, P (default S)")
		fl.Func("icmp-type", "ICMP `type` (default an echo request)", func(v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return fmt.Errorf("%q is not a number", v)
			}
			icmpType = n
			return nil
		})
		fl.UintVar(&icmpCode, "icmp-code", 0, "ICMP `code`")
		fl.StringVar(&req.SrcMAC, "src-mac", "", "source `MAC` (default the sender's)")
		fl.StringVar(&req.DstMAC, "dst-mac", "", "destination `MAC` (default the one the sender would resolve)")
		fl.StringVar(&vxlan, "vxlan", "", "the packet arrives in VXLAN: `OUTERSRC[>OUTERDST]/VNI` (quote the >)")
		fl.IntVar(&req.Length, "length", 0, "L4 payload `bytes` (for MTU checks)")
		fl.BoolVar(&req.DontFragment, "df", false, "set DF on an IPv4 packet: one over the MTU is answered, not fragmented")
	}, 4, 4)
	if err != nil {
		return err
	}
	req.Port = pos[0]
	if _, err := api.ParseProto(pos[1]); err != nil {
		return c.usageErr("PROTO: %v", err)
	}
	req.Proto = pos[1]
	if req.Src, req.SrcPort, err = parseEndpoint(pos[2]); err != nil {
		return c.usageErr("SRC: %v", err)
	}
	if req.Dst, req.DstPort, err = parseEndpoint(pos[3]); err != nil {
		return c.usageErr("DST: %v", err)
	}
	if icmpType >= 0 {
		if icmpType > 255 {
			return c.usageErr("-icmp-type: %d is not 0-255", icmpType)
		}
		t := uint8(icmpType)
		req.ICMPType = &t
	}
	if icmpCode > 255 {
		return c.usageErr("-icmp-code: %d is not 0-255", icmpCode)
	}
	req.ICMPCode = uint8(icmpCode)
	if vxlan != "" {
		if req.VXLAN, err = parseVXLAN(vxlan); err != nil {
			return c.usageErr("-vxlan: %v", err)
		}
	}
	res, err := c.client.Trace(c.ctx, &req)
	if err != nil {
		return err
	}
	if c.json() {
		return printJSON(c.stdout, res)
	}
	return printTrace(c.stdout, req.Port, res)
}

// parseEndpoint reads an address with an optional port: 10.0.0.1,
// 10.0.0.1:80, fd00::1, [fd00::1], [fd00::1]:80.
func parseEndpoint(s string) (netip.Addr, uint16, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a, 0, nil
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a, 0, nil
		}
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("%q is not an address or address:port (IPv6 with a port is [addr]:port)", s)
	}
	return ap.Addr(), ap.Port(), nil
}

// parseVXLAN reads OUTERSRC[>OUTERDST]/VNI.
func parseVXLAN(s string) (*inspect.TraceOuter, error) {
	addrs, vni, ok := cutLast(s, "/")
	if !ok {
		return nil, fmt.Errorf("%q: want OUTERSRC[>OUTERDST]/VNI", s)
	}
	n, err := strconv.ParseUint(vni, 10, 32)
	if err != nil || n >= 1<<24 {
		return nil, fmt.Errorf("%q: VNI %q is not a number below 2^24", s, vni)
	}
	o := &inspect.TraceOuter{VNI: uint32(n)}
	src, dst, hasDst := strings.Cut(addrs, ">")
	if o.Src, err = netip.ParseAddr(src); err != nil {
		return nil, fmt.Errorf("%q: outer source %q is not an address", s, src)
	}
	if hasDst {
		if o.Dst, err = netip.ParseAddr(dst); err != nil {
			return nil, fmt.Errorf("%q: outer destination %q is not an address", s, dst)
		}
	}
	return o, nil
}

func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// printTrace writes res, the trace of a packet entering by port, for
// people: the packet, the fast path, the layers' verdicts, the switch's
// account, the header changes and the verdict.
func printTrace(w io.Writer, port string, res *inspect.TraceResult) error {
	k := newKV(w)
	k.add("packet", "%s", res.Packet)
	k.add("in port", "%s (policy generation %d)", port, res.Generation)
	if f := res.Cached; f != nil {
		how := "out " + f.OutPort
		if f.Drop != "" {
			how = "drop (" + f.Drop + ")"
		}
		if f.HT != "" {
			how += " " + f.HT
		}
		k.add("fast path", "a cached flow takes it (decided under generation %d): %s", f.Generation, how)
		k.add("", "the slow path's decision below is how it was decided")
	} else {
		k.add("fast path", "no cached flow: the slow path decides")
	}
	if err := k.flush(); err != nil {
		return err
	}

	fmt.Fprintln(w)
	if len(res.Steps) == 0 {
		fmt.Fprintln(w, "layers: none crossed")
	} else {
		fmt.Fprintln(w, "layers (in the order crossed):")
		t := newIndentedTable(w, "  ", "PORT", "DIR", "LAYER", "GROUP", "RULE", "PRIORITY", "ACTION", "FLAGS")
		for _, s := range res.Steps {
			group, rule, prio := s.Group, s.Rule, fmt.Sprint(s.Priority)
			if s.Default {
				group, rule, prio = "", "default", ""
			}
			t.row(s.Port, s.Direction, s.Layer, group, rule, prio, s.Action, ruleFlags(s.Terminating, s.Stateful))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "slow path:")
	for _, l := range res.Lines {
		fmt.Fprintf(w, "  %s\n", l)
	}

	if res.Verdict == "forward" {
		fmt.Fprintln(w)
		if len(res.Changes) == 0 {
			fmt.Fprintln(w, "header changes: none")
		} else {
			fmt.Fprintln(w, "header changes:")
			for _, ch := range res.Changes {
				fmt.Fprintf(w, "  %s: %s -> %s\n", ch.Field, orNone(ch.From), orNone(ch.To))
			}
		}
		fmt.Fprintf(w, "ht: %s\n", orNone(res.HT))
	}
	if res.Answer != "" {
		fmt.Fprintf(w, "\nanswer (back out %s): %s\n", port, res.Answer)
	}
	fmt.Fprintf(w, "\nverdict: %s\n", verdict(res))
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// verdict is res's verdict in one line: where the packet goes, or why
// and where it is dropped, naming the rule that dropped it.
func verdict(res *inspect.TraceResult) string {
	switch res.Verdict {
	case "forward":
		if res.Fragments > 0 {
			return fmt.Sprintf("forward out %s as %d IPv4 fragments: %s", res.OutPort, res.Fragments, res.Output)
		}
		return fmt.Sprintf("forward out %s: %s", res.OutPort, res.Output)
	case "drop":
	default:
		return res.Verdict
	}
	v := fmt.Sprintf("drop (%s)", res.Drop)
	if n := len(res.Steps); n > 0 {
		s := res.Steps[n-1]
		if strings.HasPrefix(s.Action, "block") {
			if s.Default {
				return fmt.Sprintf("%s at port %s layer %s: its default (no rule matched)", v, s.Port, s.Layer)
			}
			return fmt.Sprintf("%s at port %s layer %s group %s rule %s", v, s.Port, s.Layer, s.Group, s.Rule)
		}
		return v + " by the switch after the layers allowed it: no rule dropped it (see the slow path above)"
	}
	return v + " before any layer: no rule dropped it (see the slow path above)"
}
