package main

import (
	"fmt"
	"strings"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
)

// aclsets lists the ACL sets (a node agent's NetworkPolicies, one set
// per endpoint).
func (c *cli) aclsets(args []string) error {
	var owner ownerFlag
	if _, err := c.parse(args, func(fl *flagSet) { fl.Var(&owner, "owner", ownerUsage) }, 0, 0); err != nil {
		return err
	}
	var l []api.ACLSet
	var err error
	if owner.set {
		l, err = c.client.ACLSetsOwnedBy(c.ctx, owner.owner)
	} else {
		l, err = c.client.ACLSets(c.ctx)
	}
	if err != nil {
		return err
	}
	if c.json() {
		return printJSON(c.stdout, l)
	}
	t := newTable(c.stdout, "NAME", "ENDPOINT", "ACLS", "OWNER")
	for i := range l {
		s := &l[i]
		t.row(s.Name, s.Endpoint, fmt.Sprint(len(s.ACLs)), orDash(s.Owner))
	}
	return t.flush()
}

// aclset shows an ACL set with its ACLs.
func (c *cli) aclset(args []string) error {
	pos, err := c.parse(args, nil, 1, 1)
	if err != nil {
		return err
	}
	s, err := c.client.ACLSet(c.ctx, pos[0])
	if err != nil {
		return err
	}
	if c.json() {
		return printJSON(c.stdout, s)
	}
	k := newKV(c.stdout)
	k.add("name", "%s", s.Name)
	k.add("endpoint", "%s", s.Endpoint)
	k.add("owner", "%s", orDash(s.Owner))
	acls := make([]string, len(s.ACLs))
	for i := range s.ACLs {
		acls[i] = aclString(&s.ACLs[i])
	}
	k.list("acls", acls)
	return k.flush()
}

// aclString is an ACL on one line: "web: Allow In TCP remote 10.0.0.0/8
// local ports 80 priority 100".
func aclString(a *hns.ACLSettings) string {
	parts := []string{a.Action, a.Direction, orDash(a.Protocols)}
	for _, f := range []struct{ name, v string }{
		{"local", a.LocalAddresses}, {"remote", a.RemoteAddresses}, {"local ports", a.LocalPorts}, {"remote ports", a.RemotePorts},
	} {
		if f.v != "" {
			parts = append(parts, f.name+" "+f.v)
		}
	}
	parts = append(parts, fmt.Sprintf("priority %d", a.Priority))
	id := a.Id
	if id == "" {
		id = "-"
	}
	return id + ": " + strings.Join(parts, " ")
}
