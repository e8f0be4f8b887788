package main

import (
	"os"
	"strings"
	"testing"
)

// TestDemoConfigValid keeps the embedded demo configuration valid.
func TestDemoConfigValid(t *testing.T) {
	c, err := parseConfig(demoConfig)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.devices) != 4 || c.devices[0].Name != "eth0" || c.devices[0].netnsPath() != "/var/run/netns/ufpdemo-pod-a" {
		t.Errorf("devices: %+v", c.devices)
	}
}

// TestConfigErrors checks that every invalid configuration is refused
// with an error naming the field.
func TestConfigErrors(t *testing.T) {
	policy := `{"switch": {}, "ports": [
	  {"name": "pod-a", "mac": "02:00:00:00:00:0a", "ips": ["10.0.0.10"]},
	  {"name": "pod-b", "mac": "02:00:00:00:00:0b", "ips": ["10.0.0.11"]},
	  {"name": "uplink", "mac": "02:00:00:00:00:fe", "uplink": true}]}`
	withDevices := func(devs string) string { return `{"policy": ` + policy + `, "devices": [` + devs + `]}` }
	for _, tc := range []struct{ name, doc, want string }{
		{"not JSON", `{"policy": `, "not a valid configuration"},
		{"unknown field", `{"policy": ` + policy + `, "devcies": []}`, `unknown field "devcies"`},
		{"no policy", `{"devices": []}`, "policy: the configuration needs a policy document"},
		{"bad policy", `{"policy": {"switch": {}, "ports": [{"name": "a", "mac": "zz"}]}}`, "policy: ports[0].mac"},
		{"trailing data", `{"policy": ` + policy + `} {}`, "unexpected data after the JSON document"},
		{"no port", withDevices(`{"type": "tap"}`), "devices[0].port: a device needs the name of its port"},
		{"unknown port", withDevices(`{"port": "pod-z", "type": "tap"}`), `devices[0].port: the policy has no port "pod-z"`},
		{"two devices", withDevices(`{"port": "pod-a", "type": "tap", "netns": "a"}, {"port": "pod-a", "type": "tap", "netns": "b"}`), `devices[1].port: port "pod-a" has a device already (devices[0])`},
		{"no type", withDevices(`{"port": "pod-a"}`), "devices[0].type: a device needs a type"},
		{"bad type", withDevices(`{"port": "pod-a", "type": "veth"}`), `devices[0].type: "veth" is not tap, tun or afpacket`},
		{"uplink as tap", withDevices(`{"port": "uplink", "type": "tap"}`), "devices[0].type: the uplink is an existing interface"},
		{"afpacket without name", withDevices(`{"port": "uplink", "type": "afpacket"}`), "devices[0].name: an afpacket device needs the interface"},
		{"afxdp without name", withDevices(`{"port": "uplink", "type": "afxdp"}`), "devices[0].name: an afxdp device needs the interface"},
		{"afxdp long name", withDevices(`{"port": "uplink", "type": "afxdp", "name": "a-very-long-interface"}`), "devices[0].name: \"a-very-long-interface\" is not an interface name"},
		{"afxdp and afpacket on one interface", withDevices(`{"port": "uplink", "type": "afxdp", "name": "eth0"}, {"port": "pod-a", "type": "afpacket", "name": "eth0"}`), `devices[1].name: interface "eth0" in that namespace is devices[0]'s too`},
		{"long name", withDevices(`{"port": "pod-a", "type": "tap", "name": "a-very-long-interface"}`), "devices[0].name: \"a-very-long-interface\" is not an interface name"},
		{"relative netns path", withDevices(`{"port": "pod-a", "type": "tap", "netns": "run/netns/x"}`), "devices[0].netns: \"run/netns/x\" is neither a name nor an absolute path"},
		{"same interface twice", withDevices(`{"port": "pod-a", "type": "tap", "netns": "x"}, {"port": "pod-b", "type": "tap", "netns": "/var/run/netns/x"}`), `devices[1].name: interface "eth0" in that namespace is devices[0]'s too`},
		{"log level", `{"policy": ` + policy + `, "log": {"level": "loud"}}`, `log.level: "loud" is not debug, info, warn or error`},
		{"log format", `{"policy": ` + policy + `, "log": {"format": "xml"}}`, `log.format: "xml" is not text or json`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
	if c, err := parseConfig([]byte(withDevices(`{"port": "uplink", "type": "afxdp", "netns": "node", "name": "eth0"}`))); err != nil {
		t.Errorf("afxdp uplink: %v", err)
	} else if d := c.devices[0]; d.Type != "afxdp" || d.Name != "eth0" || d.netnsPath() != "/var/run/netns/node" {
		t.Errorf("afxdp uplink: %+v", d)
	}
	c, err := parseConfig([]byte(withDevices(`{"port": "pod-a", "type": "tap", "netns": "x"}, {"port": "pod-b", "type": "tap"}`)))
	if err != nil {
		t.Fatal(err)
	}
	if c.devices[0].Name != "eth0" || c.devices[1].Name != "pod-b" {
		t.Errorf("default names: %q, %q", c.devices[0].Name, c.devices[1].Name)
	}
}

// TestRunUsage checks the command line: usage errors exit 2, -check
// validates without running.
func TestRunUsage(t *testing.T) {
	var out, errb strings.Builder
	if code := run(nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "usage: ufpd -config FILE") {
		t.Errorf("no arguments: exit %d, %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"-config", "/nonexistent/ufpd.json"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "no such file") {
		t.Errorf("missing file: exit %d, %q", code, errb.String())
	}
	path := t.TempDir() + "/ufpd.json"
	if err := writeFile(path, demoConfig); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run([]string{"-check", "-config", path}, &out, &errb); code != 0 || !strings.Contains(out.String(), "valid (4 devices)") {
		t.Errorf("-check: exit %d, %q %q", code, out.String(), errb.String())
	}
}

func writeFile(path string, b []byte) error { return os.WriteFile(path, b, 0o600) }
