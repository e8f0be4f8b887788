//go:build linux

package device

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// This file holds a Link's redirects (Link.Redirects) and the change of a
// Link's routes and redirects on an interface that stays (UpdateLink).
//
// A redirect is a destination NAT in the output path of the namespace's
// own stack: a connection it makes to one of its addresses and a port
// would be delivered locally, and is sent through the interface instead.
// They are an nftables table of the link's own, named after it
// (RedirectTable), holding one set of (protocol, port) per address and
// one rule per address: written whole by `nft -f` in one transaction (so
// that applying it again changes nothing), and deleted by that name. The
// kernel's NAT sees only a connection's first packet; nothing is added to
// the switch's packet path.

// RedirectTable is the name of the nftables table (family inet) that
// holds the redirects of the interface name: "ufp_" and the name, with
// every character other than a letter, a digit or '_' as '_'.
func RedirectTable(name string) string {
	b := []byte("ufp_" + name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// validateRedirect checks one redirect of a Link.
func validateRedirect(r Redirect) error {
	switch {
	case r.Proto != unix.IPPROTO_TCP && r.Proto != unix.IPPROTO_UDP:
		return fmt.Errorf("protocol %d: not TCP (6) or UDP (17)", r.Proto)
	case r.Port == 0:
		return errors.New("port 0")
	case !r.From.IsValid() || !r.To.IsValid() || r.From.Zone() != "" || r.To.Zone() != "" || r.From.Is4In6() || r.To.Is4In6():
		return fmt.Errorf("%s -> %s: not IPv4 or IPv6 addresses", r.From, r.To)
	case r.From.Is4() != r.To.Is4():
		return fmt.Errorf("%s -> %s: not of one family", r.From, r.To)
	}
	return nil
}

// redirectScript is the nft script that makes table the one holding rs
// (none: deletes it), whether or not it exists: created empty, deleted,
// and made again, in one transaction.
func redirectScript(table string, rs []Redirect) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "table inet %s {}\ndelete table inet %s\n", table, table)
	if len(rs) == 0 {
		return b.Bytes()
	}
	type key struct{ from, to netip.Addr }
	byAddr := map[key][]Redirect{}
	var keys []key
	for _, r := range rs {
		k := key{r.From, r.To}
		if _, ok := byAddr[k]; !ok {
			keys = append(keys, k)
		}
		byAddr[k] = append(byAddr[k], r)
	}
	slices.SortFunc(keys, func(a, b key) int {
		if c := a.from.Compare(b.from); c != 0 {
			return c
		}
		return a.to.Compare(b.to)
	})
	fmt.Fprintf(&b, "table inet %s {\n", table)
	for i, k := range keys {
		fmt.Fprintf(&b, "\tset ports%d {\n\t\ttype inet_proto . inet_service\n", i)
		var elems []string
		for _, r := range byAddr[k] {
			elems = append(elems, fmt.Sprintf("%d . %d", r.Proto, r.Port))
		}
		slices.Sort(elems)
		elems = slices.Compact(elems)
		fmt.Fprintf(&b, "\t\telements = { %s }\n\t}\n", strings.Join(elems, ", "))
	}
	b.WriteString("\tchain output {\n\t\ttype nat hook output priority -100; policy accept;\n")
	for i, k := range keys {
		fam := "ip"
		if k.from.Is6() {
			fam = "ip6"
		}
		fmt.Fprintf(&b, "\t\t%s daddr %s meta l4proto . th dport @ports%d dnat %s to %s\n", fam, k.from, i, fam, k.to)
	}
	b.WriteString("\t}\n}\n")
	return b.Bytes()
}

// nftPath finds nft: on PATH, else in root's sbin directories, which an
// ordinary PATH may lack.
func nftPath() (string, error) {
	if p, err := exec.LookPath("nft"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/nft", "/sbin/nft", "/usr/local/sbin/nft"} {
		if p, err := exec.LookPath(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("nft (package nftables) not found")
}

// CanRedirect says why a Link's redirects cannot be made on this machine
// (nft is not installed), or returns nil.
func CanRedirect() error {
	_, err := nftPath()
	return err
}

// setRedirects makes the redirect table of interface name in the network
// namespace at nsPath hold exactly rs (none: removes it). kind names the
// device in errors.
func setRedirects(kind, nsPath, name string, rs []Redirect) error {
	nft, err := nftPath()
	if err != nil {
		return linkStepError(kind, name, "redirects", err)
	}
	script := redirectScript(RedirectTable(name), rs)
	return InNetNS(nsPath, func() error {
		// The child starts on this thread, in its namespace.
		cmd := exec.Command(nft, "-f", "-")
		cmd.Stdin = bytes.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			return linkStepError(kind, name, "redirects: nft", fmt.Errorf("%w: %s", err, bytes.TrimSpace(out)))
		}
		return nil
	})
}

// RemoveRedirects deletes the redirect table of interface name in the
// network namespace at nsPath, if there is one: what cleanup code calls
// for an interface left by a process that is gone.
func RemoveRedirects(name, nsPath string) error {
	return setRedirects("link", nsPath, name, nil)
}

// updateLink changes the routes and redirects of the interface l.Name in
// l.NetNS from old's to l's, leaving it otherwise as it is (its address,
// sockets and neighbours): routes old has and l has not are deleted,
// routes l has and old has not are added (replacing another to that
// destination through the interface), and the redirect table is written
// again if the redirects differ. Only the difference reaches the kernel:
// a change of a few routes among thousands costs a few requests. It
// refuses a change of anything else (the interface must be set up again
// for that) and reports the first step that failed.
func updateLink(old, l Link) error {
	if err := validateLink(l); err != nil {
		return fmt.Errorf("link %s: %w", l.Name, err)
	}
	if !SameButRoutes(old, l) {
		return fmt.Errorf("link %s: more than its routes and redirects changed", l.Name)
	}
	h, err := netlinkAt(l.NetNS)
	if err != nil {
		return fmt.Errorf("link %s: %w", l.Name, err)
	}
	defer h.Close()
	link, err := h.LinkByName(l.Name)
	if err != nil {
		return linkStepError("link", l.Name, "find link", err)
	}
	ifindex := link.Attrs().Index
	gone, added := routesChanged(old.Routes, l.Routes)
	have := make(map[Route]bool, len(gone))
	for _, r := range gone {
		have[r] = true
	}
	want := make(map[Route]bool, len(added))
	for _, r := range added {
		want[r] = true
	}
	for _, r := range gone {
		if want[r] {
			continue
		}
		err := h.RouteDel(linkRoute(ifindex, r))
		if err != nil && !errors.Is(err, unix.ESRCH) {
			return linkStepError("link", l.Name, "delete route "+routeString(r), err)
		}
	}
	for _, r := range added {
		if have[r] {
			continue
		}
		if err := h.RouteReplace(linkRoute(ifindex, r)); err != nil {
			return linkStepError("link", l.Name, "add route "+routeString(r), err)
		}
	}
	if !slices.Equal(old.Redirects, l.Redirects) {
		return setRedirects("link", l.NetNS, l.Name, l.Redirects)
	}
	return nil
}

// routesChanged returns the parts of old and now that differ: what is left
// of each once the routes both start and end with, in the same order, are
// set aside. Lowering lists routes in a stable order, so a Service added or
// removed leaves a few routes out of thousands, found without hashing
// them all.
func routesChanged(old, now []Route) (gone, added []Route) {
	i := 0
	for i < len(old) && i < len(now) && old[i] == now[i] {
		i++
	}
	j := 0
	for j < len(old)-i && j < len(now)-i && old[len(old)-1-j] == now[len(now)-1-j] {
		j++
	}
	return old[i : len(old)-j], now[i : len(now)-j]
}

// UpdateLink changes the routes and redirects of the TAP's interface from
// old's (the Link it was opened or last updated with) to l's, in place:
// the interface, its addresses and the stack's sockets and neighbours
// stay. Only the difference reaches the kernel: a change of a few routes
// among thousands costs a few requests, and the redirect table is written
// again only if the redirects differ. It refuses a change of anything
// else (the interface must be set up again for that: SameButRoutes) and
// returns the first step that failed. Not safe for concurrent use with
// itself or Close.
func (t *TAP) UpdateLink(old, l Link) error {
	if err := updateLink(old, l); err != nil {
		return err
	}
	t.redirNS, t.redirects = l.NetNS, len(l.Redirects) > 0
	return nil
}

// installRedirects gives the TAP's interface l's redirects, if it has
// any, and records them for Close.
func (t *TAP) installRedirects(l Link) error {
	if len(l.Redirects) == 0 {
		return nil
	}
	if err := setRedirects("tap", l.NetNS, l.Name, l.Redirects); err != nil {
		return err
	}
	t.redirNS, t.redirects = l.NetNS, true
	return nil
}

// removeRedirects deletes the TAP's redirect table, if it made one; a
// namespace that is gone took it along.
func (t *TAP) removeRedirects() error {
	if !t.redirects {
		return nil
	}
	err := setRedirects("tap", t.redirNS, t.name, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
