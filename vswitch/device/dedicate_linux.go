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

// Dedicate keeps the kernel's network stack of namespace netns ("" for the
// caller's) off interface ifname, and returns a function that puts the
// settings back as they were. Without it, the kernel answers ARP requests
// for the host's address on the uplink with the uplink's own MAC, and
// traffic for the host bypasses the switch.
func Dedicate(ifname, netns string) (restore func() error, err error) {
	if strings.ContainsAny(ifname, "/.") || ifname == "" {
		return nil, fmt.Errorf("dedicate %q: not an interface name", ifname)
	}
	var old []string
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
	want := make([]string, len(dedicated))
	err = InNetNS(netns, func() error {
		for i, d := range dedicated {
			b, err := os.ReadFile("/proc/sys/net/" + fmt.Sprintf(d.key, ifname))
			if err != nil {
				if d.key[:4] == "ipv6" && errors.Is(err, os.ErrNotExist) {
					old, want[i] = append(old, ""), "" // no IPv6 in this kernel
					continue
				}
				return fmt.Errorf("dedicate %s: %w", ifname, err)
			}
			old, want[i] = append(old, strings.TrimSpace(string(b))), d.value
		}
		return set(want)
	})
	if err != nil {
		return nil, err
	}
	return func() error { return InNetNS(netns, func() error { return set(old) }) }, nil
}
