package netpol

import (
	"fmt"
	"strings"

	"github.com/ufp-dev/ufp/hns"
)

// aclString is a one-line form of a: "Id Action Direction prio P
// proto=... remote=... lports=... rports=..." (empty fields left out).
func aclString(a hns.ACLSettings) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s %d", a.Id, a.Action, a.Direction, a.Priority)
	for _, f := range []struct{ k, v string }{{"proto", a.Protocols}, {"local", a.LocalAddresses}, {"remote", a.RemoteAddresses}, {"lports", a.LocalPorts}, {"rports", a.RemotePorts}} {
		if f.v != "" {
			fmt.Fprintf(&b, " %s=%s", f.k, f.v)
		}
	}
	return b.String()
}
