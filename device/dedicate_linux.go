package device

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// dedicated are the per-interface settings that keep the kernel's own
// network stack off an interface a switch owns (an uplink read and written
// through AF_PACKET), as a NIC bound to a Hyper-V switch has no protocols
// of the host's: the kernel neither answers ARP on it for the host's
// addresses (which live on the host's vNIC), nor runs IPv6 on it.
var dedicated = []struct{ key, value string }{
	{"ipv4/conf/%s/arp_ignore", "8"}, // reply to no ARP request
	{"ipv6/conf/%s/disable_ipv6", "1"},
}

// dedicatedMark starts the alias of an interface Dedicate changed: the
// settings it found, then the alias the interface had. The record lives
// on the interface, so that a process that dies without restoring leaves
// it for the next Dedicate, which restores the true originals rather than
// its own settings.
const dedicatedMark = "ufp-dedicated:"

// Dedicate keeps the kernel's network stack of namespace netns ("" for the
// caller's) off interface ifname, and returns a function that puts the
// settings back as they were. Without it, the kernel answers ARP requests
// for the host's address on the uplink with the uplink's own MAC, and
// traffic for the host bypasses the switch.
//
// The original settings (and alias) are recorded in the interface's alias
// until restore: if the process dies first, the next Dedicate of the
// interface reads them from there.
func Dedicate(ifname, netns string) (restore func() error, err error) {
	if strings.ContainsAny(ifname, "/.") || ifname == "" {
		return nil, fmt.Errorf("dedicate %q: not an interface name", ifname)
	}
	h, err := netlinkAt(netns)
	if err != nil {
		return nil, fmt.Errorf("dedicate %s: %w", ifname, err)
	}
	defer h.Close()
	link, err := h.LinkByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("dedicate %s: %w", ifname, err)
	}
	set := func(values []string) error {
		var errs []error
		for i, d := range dedicated {
			if values[i] == "" {
				continue
			}
			p := "/proc/sys/net/" + fmt.Sprintf(d.key, ifname)
			if err := os.WriteFile(p, []byte(values[i]), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("dedicate %s: %w", ifname, err))
			}
		}
		return errors.Join(errs...)
	}
	old, alias, recorded := parseDedicated(link.Attrs().Alias)
	want := make([]string, len(dedicated))
	err = InNetNS(netns, func() error {
		current := make([]string, len(dedicated))
		for i, d := range dedicated {
			b, err := os.ReadFile("/proc/sys/net/" + fmt.Sprintf(d.key, ifname))
			if err != nil {
				if d.key[:4] == "ipv6" && errors.Is(err, os.ErrNotExist) {
					continue // no IPv6 in this kernel
				}
				return fmt.Errorf("dedicate %s: %w", ifname, err)
			}
			current[i], want[i] = strings.TrimSpace(string(b)), d.value
		}
		if !recorded {
			old = current
		}
		return set(want)
	})
	if err != nil {
		return nil, err
	}
	if !recorded {
		if err := h.LinkSetAlias(link, dedicatedMark+strings.Join(old, ",")+":"+alias); err != nil {
			return nil, errors.Join(fmt.Errorf("dedicate %s: recording the settings: %w", ifname, err),
				InNetNS(netns, func() error { return set(old) }))
		}
	}
	return func() error {
		err := InNetNS(netns, func() error { return set(old) })
		h, herr := netlinkAt(netns)
		if herr != nil {
			return errors.Join(err, herr)
		}
		defer h.Close()
		if l, lerr := h.LinkByName(ifname); lerr == nil {
			err = errors.Join(err, h.LinkSetAlias(l, alias))
		}
		return err
	}, nil
}

// parseDedicated reads the record Dedicate leaves in an interface's alias:
// the original settings and alias, and whether there is a record.
func parseDedicated(a string) (old []string, alias string, ok bool) {
	rest, ok := strings.CutPrefix(a, dedicatedMark)
	if !ok {
		return nil, a, false
	}
	vals, alias, ok := strings.Cut(rest, ":")
	old = strings.Split(vals, ",")
	if !ok || len(old) != len(dedicated) {
		return nil, "", false // not ours after all: overwrite it
	}
	return old, alias, true
}
