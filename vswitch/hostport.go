package vswitch

import (
	"fmt"

	"github.com/ufp-dev/ufp/device"
	"github.com/ufp-dev/ufp/vfp"
)

// compileHost checks the host's vNIC against the uplink and enters it in
// the forwarding tables: it takes the uplink's MAC (frames for it that no
// layer claims are the host stack's) and its addresses become switchable
// from the pods. at names the port in errors.
func (p *compiled) compileHost(at string) error {
	h := p.host
	if h == nil {
		return nil
	}
	if p.uplink == nil {
		return fmt.Errorf("%s.host: the host's vNIC needs an uplink (it is the host on the underlay)", at)
	}
	if h.MAC != p.uplink.MAC {
		return fmt.Errorf("%s.mac: %s is not the uplink's %s: the host's vNIC has the uplink's MAC", at, h.MAC, p.uplink.MAC)
	}
	for j, a := range h.IPs {
		if !p.hostIPs[a] {
			return fmt.Errorf("%s.ips[%d]: %s is not an address of the uplink: the host's vNIC carries the host's own addresses", at, j, a)
		}
		if q := p.byIP[a]; q != nil {
			return fmt.Errorf("%s.ips[%d]: %s is already used by port %q", at, j, a, q.Name)
		}
		if _, gw := p.gwIPs[a]; gw {
			return fmt.Errorf("%s.ips[%d]: %s is the gateway's address", at, j, a)
		}
		p.byIP[a] = h
	}
	p.byMAC[h.MAC] = h
	return nil
}

// compile checks a port's link set-up against the port.
func compileLink(lc *vfp.LinkConfig, at string, port *Port) (device.Link, error) {
	var l device.Link
	for i, pf := range lc.Addresses {
		pat := fmt.Sprintf("%s.addresses[%d]", at, i)
		if !pf.IsValid() {
			return l, fmt.Errorf("%s: an address with a prefix length is required", pat)
		}
		if !port.HasIP(pf.Addr()) {
			return l, fmt.Errorf("%s: %s is not one of the port's ips", pat, pf.Addr())
		}
		l.Addrs = append(l.Addrs, pf)
	}
	for i, r := range lc.Routes {
		rat := fmt.Sprintf("%s.routes[%d]", at, i)
		dst := r.Destination
		switch {
		case !dst.IsValid():
			return l, fmt.Errorf("%s.destination: a prefix is required", rat)
		case dst.Addr().Is4In6():
			return l, fmt.Errorf("%s.destination: %s: write IPv4 prefixes in IPv4 form", rat, dst)
		case dst != dst.Masked():
			return l, fmt.Errorf("%s.destination: %s has host bits set (did you mean %s?)", rat, dst, dst.Masked())
		}
		rt := device.Route{Dst: dst, Via: r.NextHop, OnLink: r.OnLink}
		if rt.Via.IsValid() {
			if err := vfp.CheckAddr(rat+".nextHop", rt.Via); err != nil {
				return l, err
			}
			if rt.Via.Is4() != dst.Addr().Is4() {
				return l, fmt.Errorf("%s.nextHop: %s is not of the destination's family", rat, rt.Via)
			}
		} else if r.OnLink {
			return l, fmt.Errorf("%s.onLink: a route without a next hop is on the link already", rat)
		}
		l.Routes = append(l.Routes, rt)
	}
	for i, r := range lc.Redirects {
		rt, err := compileRedirect(r, fmt.Sprintf("%s.redirects[%d]", at, i), port)
		if err != nil {
			return l, err
		}
		l.Redirects = append(l.Redirects, rt)
	}
	if m := lc.GatewayMAC; !m.IsZero() {
		if err := vfp.CheckUnicastMAC(at+".gatewayMac", m); err != nil {
			return l, err
		}
		l.GatewayMAC = m
	}
	return l, nil
}

// compileRedirect checks one redirect of a port's link set-up (at) against
// the port: TCP or UDP, a port, from one of the port's addresses to an
// address of the same family that is not.
func compileRedirect(r vfp.LinkRedirectConfig, at string, port *Port) (device.Redirect, error) {
	switch {
	case r.Protocol != vfp.TCP && r.Protocol != vfp.UDP:
		return device.Redirect{}, fmt.Errorf("%s.protocol: %s: only tcp and udp are redirected", at, r.Protocol)
	case r.Port == 0:
		return device.Redirect{}, fmt.Errorf("%s.port: a port is required", at)
	}
	if err := vfp.CheckAddr(at+".from", r.From); err != nil {
		return device.Redirect{}, err
	}
	if err := vfp.CheckAddr(at+".to", r.To); err != nil {
		return device.Redirect{}, err
	}
	switch {
	case !port.HasIP(r.From):
		return device.Redirect{}, fmt.Errorf("%s.from: %s is not one of the port's ips: only the stack's own addresses are delivered locally", at, r.From)
	case port.HasIP(r.To):
		return device.Redirect{}, fmt.Errorf("%s.to: %s is one of the port's ips: redirected there, connections would stay local", at, r.To)
	case r.From.Is4() != r.To.Is4():
		return device.Redirect{}, fmt.Errorf("%s.to: %s is not of from's family", at, r.To)
	}
	return device.Redirect{Proto: uint8(r.Protocol), Port: r.Port, From: r.From, To: r.To}, nil
}
