package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/deploy"
)

// TestDeployConfig renders deploy/configmap.yaml's ufpd.json with
// deploy/ufp-node.sh (as its ufpd-config step does on a node, with a
// node's uplink facts) and loads it as ufpd loads its file: the uplink,
// the host's vNIC carrying the node's addresses, the API socket and the
// state file where the DaemonSet mounts them.
func TestDeployConfig(t *testing.T) {
	tmpl, err := deploy.ConfigFile("ufpd.json")
	if err != nil {
		t.Fatal(err)
	}
	v4 := []string{"UPLINK=ens5", "UPLINK_MAC=52:54:00:12:34:56", "UPLINK_MTU=9001",
		"UPLINK_IPV4=192.168.1.10/24", "GATEWAY_IPV4=192.168.1.1", "GATEWAY_MAC_IPV4=52:54:00:00:00:01"}
	dual := append(v4[:len(v4):len(v4)], "UPLINK_IPV6=fd00:1::10/64", "GATEWAY_IPV6=fd00:1::1", "GATEWAY_MAC_IPV6=52:54:00:00:00:01")
	for _, tc := range []struct {
		name  string
		facts []string
		addrs []string // the vNIC's addresses
		want  string   // an error of the render or of the load; "" valid
	}{
		{name: "IPv4", facts: v4, addrs: []string{"192.168.1.10"}},
		{name: "dual-stack", facts: dual, addrs: []string{"192.168.1.10", "fd00:1::10"}},
		{name: "no uplink", facts: v4[1:], want: "UPLINK: required"},
		{name: "a MAC that is not one", facts: append(v4[:1:1], append([]string{"UPLINK_MAC=52:54:00:12:34"}, v4[2:]...)...), want: "Uplink.MacAddress"},
		{name: "a value with a separator", facts: append(v4[:1:1], append([]string{"UPLINK_MAC=a|b"}, v4[2:]...)...), want: "UPLINK_MAC: a|b is not a plain value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := render(t, tmpl, tc.facts)
			var c *config
			if err == nil {
				c, err = parseConfig(out)
			}
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v, want an error saying %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			ports, err := c.policy.CompilePorts()
			if err != nil {
				t.Fatal(err)
			}
			var vnic []string
			for _, p := range ports {
				if p.Host {
					for _, a := range p.IPs {
						vnic = append(vnic, a.String())
					}
				}
			}
			if strings.Join(vnic, ",") != strings.Join(tc.addrs, ",") {
				t.Errorf("the host's vNIC has %v, want %v", vnic, tc.addrs)
			}
			if len(c.devices) != 2 || c.devices[1].Type != "afpacket" || c.devices[1].Name != "ens5" || c.devices[0].Name != "vEthernet" {
				t.Errorf("devices %+v, want vEthernet and the uplink ens5 through AF_PACKET", c.devices)
			}
			if c.api.Socket != "/run/ufp/ufpd.sock" || c.state != "/var/lib/ufp/ufpd.state" || c.holderPath() == "" {
				t.Errorf("socket %q, state %q, holder %q; want the DaemonSet's host paths and a descriptor holder", c.api.Socket, c.state, c.holderPath())
			}
		})
	}
	if _, err := render(t, append(tmpl, `{"x": "${UPLINK_NAME}"}`...), v4); err == nil || !strings.Contains(err.Error(), "${UPLINK_NAME}") {
		t.Errorf("a template naming an unknown fact: %v, want an error naming it", err)
	}
}

// render runs ufp-node.sh render on tmpl with facts as its environment.
func render(t *testing.T, tmpl []byte, facts []string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command("sh", "../../deploy/ufp-node.sh", "render")
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, facts...)
	cmd.Stdin = bytes.NewReader(tmpl)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, &renderError{strings.TrimSpace(stderr.String())}
	}
	return out, nil
}

type renderError struct{ msg string }

func (e *renderError) Error() string { return e.msg }
