package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/ufp-dev/ufp/vswitch"
)

// fileConfig is what ufpd's configuration file holds: the switch's policy
// document and the devices that back its ports.
type fileConfig struct {
	// Policy is a vswitch policy document, HNS level (Uplink, Networks,
	// Endpoints, LoadBalancers) or VFP level (ports).
	Policy json.RawMessage `json:"policy"`
	// Devices bind the policy's ports to real devices. A port without a
	// device is in the policy but receives nothing (frames to it are
	// counted as having no device).
	Devices []deviceConfig `json:"devices"`
	Log     logConfig      `json:"log"`
	// API is the control API's Unix socket (off unless set).
	API apiConfig `json:"api"`
	// State is the file the running configuration is persisted to after
	// every change made through the API, and restored from at start
	// (off unless set). Once it exists, it is the configuration: the
	// file's policy and devices only seed it.
	State string `json:"state,omitempty"`
	// Metrics is the Prometheus endpoint (off unless set).
	Metrics metricsConfig `json:"metrics"`
	// Holder is where the devices' descriptors are kept so that they
	// outlive a crash of ufpd (docs/UFPD.md, "Restarts"): "auto" (the
	// default: systemd's descriptor store under systemd, else a
	// descriptor holder process on the socket STATE.holder when a state
	// file is set) or "off".
	Holder string `json:"holder,omitempty"`
}

type apiConfig struct {
	// Socket is the path of the API's Unix socket (api.DefaultSocket is
	// /run/ufp/ufpd.sock). It is made readable and writable by ufpd's
	// user only.
	Socket string `json:"socket,omitempty"`
}

type metricsConfig struct {
	// Listen is the TCP address the metrics are served on, at /metrics
	// (e.g. 127.0.0.1:9464).
	Listen string `json:"listen,omitempty"`
}

// deviceConfig is the device of one port.
type deviceConfig struct {
	// Port is the name of the policy's port (an endpoint's Name, the
	// uplink's, Uplink.HostPort's).
	Port string `json:"port"`
	// Type is "tap" (a pod's vNIC or the host's, made by ufpd), "tun" (an
	// L3 port made by ufpd: a Linux TUN or a Wintun adapter), "afpacket"
	// (the uplink on an existing interface, through an AF_PACKET socket)
	// or "afxdp" (the same through AF_XDP sockets and an XDP program,
	// falling back to AF_PACKET where the kernel or the driver cannot).
	Type string `json:"type"`
	// Name is the interface's name: for tap and tun the name it gets in
	// its namespace (default eth0 in another namespace, the port's name
	// otherwise); for afpacket and afxdp the existing interface to use.
	Name string `json:"name,omitempty"`
	// NetNS is the network namespace the interface is in (afpacket,
	// afxdp) or is moved into (tap, tun): a path (/var/run/netns/pod-a,
	// /proc/PID/ns/net) or a name under /var/run/netns. Empty: ufpd's.
	NetNS string `json:"netns,omitempty"`
}

type logConfig struct {
	// Level is debug, info (default), warn or error.
	Level string `json:"level,omitempty"`
	// Format is text (default) or json.
	Format string `json:"format,omitempty"`
}

// config is a validated configuration: the policy compiled by the switch
// and the devices checked against its ports.
type config struct {
	policy  *vswitch.Config
	devices []deviceConfig
	log     logConfig
	api     apiConfig
	state   string
	metrics metricsConfig
	holder  string
	// resume, for a configuration read back from the state, is what it
	// was read from (loadState); nil otherwise.
	resume *resumed
}

// loadConfig reads and validates the configuration file at path. Errors
// name the file and the field.
func loadConfig(path string) (*config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := parseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func parseConfig(b []byte) (*config, error) {
	var fc fileConfig
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fc); err != nil {
		return nil, fmt.Errorf("not a valid configuration: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("unexpected data after the JSON document")
	}
	if len(fc.Policy) == 0 {
		return nil, errors.New("policy: the configuration needs a policy document")
	}
	pol, err := vswitch.ParseConfig(fc.Policy)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	c := &config{policy: pol, devices: fc.Devices, log: fc.Log, api: fc.API, state: fc.State, metrics: fc.Metrics, holder: fc.Holder}
	switch c.holder {
	case "", "auto", "off":
	default:
		return nil, fmt.Errorf("holder: %q is not auto or off", c.holder)
	}
	if s := c.api.Socket; s != "" && !strings.HasPrefix(s, "/") {
		return nil, fmt.Errorf("api.socket: %q is not an absolute path", s)
	}
	if s := c.state; s != "" && !strings.HasPrefix(s, "/") {
		return nil, fmt.Errorf("state: %q is not an absolute path", s)
	}
	if a := c.metrics.Listen; a != "" {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("metrics.listen: %q is not host:port", a)
		}
	}
	if _, err := logLevel(c.log.Level); err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}
	switch c.log.Format {
	case "", "text", "json":
	default:
		return nil, fmt.Errorf("log.format: %q is not text or json", c.log.Format)
	}
	low, err := pol.Lower()
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	uplinks := map[string]bool{}
	for i := range low.Ports {
		uplinks[low.Ports[i].Name] = low.Ports[i].Uplink
	}
	if err := checkDevices(c.devices, uplinks); err != nil {
		return nil, err
	}
	return c, nil
}

// checkDevices checks devs against the policy's ports, given by name
// with whether each is the uplink, and fills in their defaults.
func checkDevices(devs []deviceConfig, uplinks map[string]bool) error {
	seen := map[string]int{}
	ifaces := map[string]int{}
	for i := range devs {
		d := &devs[i]
		at := fmt.Sprintf("devices[%d]", i)
		uplink, ok := uplinks[d.Port]
		switch {
		case d.Port == "":
			return fmt.Errorf("%s.port: a device needs the name of its port", at)
		case !ok:
			return fmt.Errorf("%s.port: the policy has no port %q", at, d.Port)
		}
		if j, dup := seen[d.Port]; dup {
			return fmt.Errorf("%s.port: port %q has a device already (devices[%d])", at, d.Port, j)
		}
		seen[d.Port] = i
		if err := d.check(at, d.Port, uplink); err != nil {
			return err
		}
		key := d.netnsPath() + "/" + d.Name
		if j, dup := ifaces[key]; dup {
			return fmt.Errorf("%s.name: interface %q in that namespace is devices[%d]'s too", at, d.Name, j)
		}
		ifaces[key] = i
	}
	return nil
}

// check validates d for port (the uplink if uplink) and fills in its
// defaults.
func (d *deviceConfig) check(at, port string, uplink bool) error {
	switch d.Type {
	case "tap", "tun":
		if uplink {
			return fmt.Errorf("%s.type: the uplink is an existing interface (afpacket or afxdp), not a %s ufpd makes", at, d.Type)
		}
		if d.Name == "" {
			d.Name = port
			if d.NetNS != "" {
				d.Name = "eth0"
			}
		}
	case "afpacket", "afxdp":
		if d.Name == "" {
			return fmt.Errorf("%s.name: an %s device needs the interface to use", at, d.Type)
		}
	case "":
		return fmt.Errorf("%s.type: a device needs a type (tap, tun or afpacket, or afxdp)", at)
	default:
		return fmt.Errorf("%s.type: %q is not tap, tun or afpacket, nor afxdp", at, d.Type)
	}
	if len(d.Name) > 15 || strings.ContainsAny(d.Name, "/ \t\n:") {
		return fmt.Errorf("%s.name: %q is not an interface name (at most 15 bytes, no '/', ':' or spaces)", at, d.Name)
	}
	if d.NetNS != "" && strings.Contains(d.NetNS, "/") && !strings.HasPrefix(d.NetNS, "/") {
		return fmt.Errorf("%s.netns: %q is neither a name nor an absolute path", at, d.NetNS)
	}
	return nil
}

// holderPath returns the socket of c's descriptor holder ("": none).
func (c *config) holderPath() string {
	if c.holder == "off" || c.state == "" {
		return ""
	}
	return c.state + ".holder"
}

// netnsPath returns the namespace path of d ("" for ufpd's own).
func (d *deviceConfig) netnsPath() string {
	if d.NetNS == "" || strings.HasPrefix(d.NetNS, "/") {
		return d.NetNS
	}
	return "/var/run/netns/" + d.NetNS
}

func logLevel(s string) (slog.Level, error) {
	var l slog.Level
	if s == "" {
		return slog.LevelInfo, nil
	}
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, fmt.Errorf("%q is not debug, info, warn or error", s)
	}
	return l, nil
}
