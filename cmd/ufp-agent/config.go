package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/ufp-dev/ufp/agent"
	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
)

// options are the agent's settings: from the configuration file
// (--config, JSON or YAML, field names as below), overridden by the
// flags given on the command line.
type options struct {
	Kubeconfig         string   `json:"kubeconfig,omitempty"`
	HostnameOverride   string   `json:"hostnameOverride,omitempty"`
	NodeIP             []string `json:"nodeIP,omitempty"`
	ClusterCIDR        []string `json:"clusterCIDR,omitempty"`
	SourceVIP          []string `json:"sourceVIP,omitempty"`
	EnableDSR          bool     `json:"enableDSR,omitempty"`
	Network            string   `json:"network,omitempty"`
	UfpdSocket         string   `json:"ufpdSocket,omitempty"`
	ProxyName          string   `json:"proxyName,omitempty"`
	MinSyncPeriod      duration `json:"minSyncPeriod,omitempty"`
	SyncPeriod         duration `json:"syncPeriod,omitempty"`
	MetricsBindAddress string   `json:"metricsBindAddress,omitempty"`
	HealthzBindAddress string   `json:"healthzBindAddress,omitempty"`
	EnableProfiling    bool     `json:"enableProfiling,omitempty"`
	LogLevel           string   `json:"logLevel,omitempty"`

	// The node's pod network (flanneld's job).
	PodNetwork         bool   `json:"podNetwork,omitempty"`
	NetworkType        string `json:"networkType,omitempty"`
	VNI                int    `json:"vni,omitempty"`
	VXLANPort          int    `json:"vxlanPort,omitempty"`
	VtepMAC            string `json:"vtepMAC,omitempty"`
	ManageNetwork      bool   `json:"manageNetwork,omitempty"`
	SubnetFile         string `json:"subnetFile,omitempty"`
	FlannelAnnotations bool   `json:"flannelAnnotations,omitempty"`
	MTU                int    `json:"mtu,omitempty"`
	IPMasq             bool   `json:"ipMasq,omitempty"`
}

// duration is a time.Duration written as Go writes one ("10ms", "30s").
type duration time.Duration

func (d duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration such as \"10ms\" or \"30s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration such as \"10ms\" or \"30s\"", s)
	}
	*d = duration(v)
	return nil
}

func defaults() options {
	return options{
		UfpdSocket:         api.DefaultSocket,
		MinSyncPeriod:      duration(10 * time.Millisecond),
		SyncPeriod:         duration(30 * time.Second),
		MetricsBindAddress: "127.0.0.1:10249",
		HealthzBindAddress: "127.0.0.1:10256",
		LogLevel:           "info",
		NetworkType:        hns.TypeOverlay,
		VNI:                agent.DefaultVNI,
		VXLANPort:          agent.DefaultVXLANPort,
		ManageNetwork:      true,
		SubnetFile:         agent.DefaultSubnetFile,
		FlannelAnnotations: true,
		IPMasq:             true,
	}
}

// setting is one option: its flag, its field in the file, and where it
// lives in options.
type setting struct {
	flag, field, usage string
	str                *string
	list               *[]string
	boolean            *bool
	dur                *duration
	num                *int
}

func settings(o *options) []setting {
	return []setting{
		{flag: "kubeconfig", field: "kubeconfig", str: &o.Kubeconfig, usage: "kubeconfig `file` (default: in-cluster config, else $KUBECONFIG)"},
		{flag: "hostname-override", field: "hostnameOverride", str: &o.HostnameOverride, usage: "the node's `name` (default: the host name, lowercased)"},
		{flag: "node-ip", field: "nodeIP", list: &o.NodeIP, usage: "the node's `addresses`, comma-separated, one per family (default: the Node's InternalIP and ExternalIP)"},
		{flag: "cluster-cidr", field: "clusterCIDR", list: &o.ClusterCIDR, usage: "the pods' address `ranges`, comma-separated"},
		{flag: "source-vip", field: "sourceVIP", list: &o.SourceVIP, usage: "`addresses` connections to remote backends are translated to, comma-separated, one per family"},
		{flag: "enable-dsr", field: "enableDSR", boolean: &o.EnableDSR, usage: "program load balancers with direct server return"},
		{flag: "network", field: "network", str: &o.Network, usage: "the ufpd (HNS) `network` remote endpoints go on (required)"},
		{flag: "ufpd-socket", field: "ufpdSocket", str: &o.UfpdSocket, usage: "ufpd's API `socket`"},
		{flag: "proxy-name", field: "proxyName", str: &o.ProxyName, usage: "serve the Services labelled service.kubernetes.io/service-proxy-name=`NAME` (default: those without the label)"},
		{flag: "min-sync-period", field: "minSyncPeriod", dur: &o.MinSyncPeriod, usage: "least `time` between two syncs"},
		{flag: "sync-period", field: "syncPeriod", dur: &o.SyncPeriod, usage: "`time` between full resyncs"},
		{flag: "metrics-bind-address", field: "metricsBindAddress", str: &o.MetricsBindAddress, usage: "`address` of /metrics (empty: not served)"},
		{flag: "healthz-bind-address", field: "healthzBindAddress", str: &o.HealthzBindAddress, usage: "`address` of /healthz and /readyz (empty: not served)"},
		{flag: "profiling", field: "enableProfiling", boolean: &o.EnableProfiling, usage: "serve Go's profiles (net/http/pprof) under /debug/pprof/ on the metrics address"},
		{flag: "log-level", field: "logLevel", str: &o.LogLevel, usage: "`level` of the logs: debug, info, warn or error"},
		{flag: "pod-network", field: "podNetwork", boolean: &o.PodNetwork, usage: "run the node's pod network, flanneld's job: the network from the Node's pod CIDRs, routes to every other Node's, flannel's subnet file and annotations (off: Services only, as kube-proxy)"},
		{flag: "network-type", field: "networkType", str: &o.NetworkType, usage: "the pod network's `type`: Overlay (VXLAN) or L2Bridge (host-gateway routes)"},
		{flag: "vni", field: "vni", num: &o.VNI, usage: "the overlay's VXLAN `VNI` (Linux flannel's default is 1)"},
		{flag: "vxlan-port", field: "vxlanPort", num: &o.VXLANPort, usage: "VXLAN's UDP `port` (Linux flannel's default is 8472)"},
		{flag: "vtep-mac", field: "vtepMAC", str: &o.VtepMAC, usage: "the network's DrMacAddress, published as flannel's VtepMAC (default: derived from the node name)"},
		{flag: "manage-network", field: "manageNetwork", boolean: &o.ManageNetwork, usage: "create the network from the Node and replace it when ufpd's differs (off: the operator's; differences are only reported)"},
		{flag: "subnet-file", field: "subnetFile", str: &o.SubnetFile, usage: "where flannel's subnet `file` is written for ufp-cni (empty: not written)"},
		{flag: "flannel-annotations", field: "flannelAnnotations", boolean: &o.FlannelAnnotations, usage: "publish flannel's annotations (backend type and data, public-ip) on the Node"},
		{flag: "mtu", field: "mtu", num: &o.MTU, usage: "FLANNEL_MTU, the pods' `MTU` (default: 1450 on Overlay, 1500 on L2Bridge)"},
		{flag: "ip-masq", field: "ipMasq", boolean: &o.IPMasq, usage: "FLANNEL_IPMASQ in the subnet file"},
	}
}

// listFlag is a comma-separated list flag.
type listFlag struct{ l *[]string }

func (f listFlag) String() string {
	if f.l == nil {
		return ""
	}
	return strings.Join(*f.l, ",")
}

func (f listFlag) Set(s string) error {
	*f.l = nil
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*f.l = append(*f.l, v)
		}
	}
	return nil
}

type durFlag struct{ d *duration }

func (f durFlag) String() string {
	if f.d == nil {
		return ""
	}
	return time.Duration(*f.d).String()
}

func (f durFlag) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration such as 10ms or 30s", s)
	}
	*f.d = duration(v)
	return nil
}

// usageError is an invalid flag or configuration: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// parse reads the command line and the configuration file it names. The
// flags given override the file's fields. Errors name the flag or the
// field.
func parse(args []string, fl *flag.FlagSet) (*options, map[string]bool, error) {
	var cfgFile string
	flagged := defaults()
	fl.StringVar(&cfgFile, "config", "", "configuration `file` (JSON or YAML; the flags given override it)")
	for _, s := range settings(&flagged) {
		switch {
		case s.str != nil:
			fl.StringVar(s.str, s.flag, *s.str, s.usage)
		case s.list != nil:
			fl.Var(listFlag{s.list}, s.flag, s.usage)
		case s.boolean != nil:
			fl.BoolVar(s.boolean, s.flag, *s.boolean, s.usage)
		case s.dur != nil:
			fl.Var(durFlag{s.dur}, s.flag, s.usage)
		case s.num != nil:
			fl.IntVar(s.num, s.flag, *s.num, s.usage)
		}
	}
	if err := fl.Parse(args); err != nil {
		return nil, nil, usageError{err}
	}
	if fl.NArg() > 0 {
		return nil, nil, usageError{fmt.Errorf("unexpected argument %q", fl.Arg(0))}
	}
	given := map[string]bool{}
	fl.Visit(func(f *flag.Flag) { given[f.Name] = true })
	o := defaults()
	if cfgFile != "" {
		b, err := os.ReadFile(cfgFile)
		if err != nil {
			return nil, nil, usageError{fmt.Errorf("--config: %w", err)}
		}
		if err := decodeFile(b, &o); err != nil {
			return nil, nil, usageError{fmt.Errorf("--config %s: %w", cfgFile, err)}
		}
	}
	src, dst := settings(&flagged), settings(&o)
	for i, s := range src {
		if !given[s.flag] {
			continue
		}
		d := dst[i]
		switch {
		case s.str != nil:
			*d.str = *s.str
		case s.list != nil:
			*d.list = *s.list
		case s.boolean != nil:
			*d.boolean = *s.boolean
		case s.dur != nil:
			*d.dur = *s.dur
		case s.num != nil:
			*d.num = *s.num
		}
	}
	return &o, given, nil
}

// decodeFile decodes a configuration file (YAML, or JSON, which is
// YAML) into o strictly: a field unknown (or known only in another
// case) or of the wrong type is an error naming it.
func decodeFile(b []byte, o *options) error {
	j, err := yaml.YAMLToJSONStrict(b)
	if err != nil {
		return err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(j, &fields); err != nil {
		return fmt.Errorf("not an object of settings: %w", err)
	}
	byField := map[string]setting{}
	for _, s := range settings(o) {
		byField[s.field] = s
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s, ok := byField[k]
		if !ok {
			return fmt.Errorf("unknown field %q (docs/KUBERNETES.md lists them)", k)
		}
		var dst any
		switch {
		case s.str != nil:
			dst = s.str
		case s.list != nil:
			dst = s.list
		case s.boolean != nil:
			dst = s.boolean
		case s.dur != nil:
			dst = s.dur
		case s.num != nil:
			dst = s.num
		}
		if err := json.Unmarshal(fields[k], dst); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				err = fmt.Errorf("a %s is not a %s", te.Value, te.Type)
			}
			return fmt.Errorf("field %s: %w", k, err)
		}
	}
	return nil
}

// checked is what the options say, validated.
type checked struct {
	nodeName     string
	nodeIPs      []netip.Addr
	clusterCIDRs []netip.Prefix
	sourceVIPs   []netip.Addr
	logLevel     slog.Level
	podNetwork   *agent.PodNetwork // nil: none
}

// check validates o; an error names the flag if it was given, else the
// configuration file's field. hostname is the host's name.
func check(o *options, given map[string]bool, hostname func() (string, error)) (*checked, error) {
	name := func(flagName, field string) string {
		if given[flagName] {
			return "--" + flagName
		}
		return "config field " + field
	}
	var errs []error
	c := &checked{}
	addrs := func(flagName, field string, l []string) []netip.Addr {
		var out []netip.Addr
		var v4, v6 int
		for i, s := range l {
			a, err := netip.ParseAddr(s)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: item %d: %q is not an IP address", name(flagName, field), i+1, s))
				continue
			}
			a = a.Unmap()
			if a.Is4() {
				v4++
			} else {
				v6++
			}
			out = append(out, a)
		}
		if v4 > 1 || v6 > 1 {
			errs = append(errs, fmt.Errorf("%s: at most one address per family (dual-stack: IPv4,IPv6)", name(flagName, field)))
		}
		return out
	}
	c.nodeIPs = addrs("node-ip", "nodeIP", o.NodeIP)
	c.sourceVIPs = addrs("source-vip", "sourceVIP", o.SourceVIP)
	for i, s := range o.ClusterCIDR {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: item %d: %q is not a prefix such as 10.244.0.0/16", name("cluster-cidr", "clusterCIDR"), i+1, s))
			continue
		}
		c.clusterCIDRs = append(c.clusterCIDRs, p.Masked())
	}
	if o.Network == "" {
		errs = append(errs, fmt.Errorf("%s: required (the ufpd network remote endpoints go on)", name("network", "network")))
	}
	if o.UfpdSocket == "" {
		errs = append(errs, fmt.Errorf("%s: empty", name("ufpd-socket", "ufpdSocket")))
	}
	if o.MinSyncPeriod < 0 {
		errs = append(errs, fmt.Errorf("%s: %v is negative", name("min-sync-period", "minSyncPeriod"), time.Duration(o.MinSyncPeriod)))
	}
	if o.SyncPeriod <= 0 {
		errs = append(errs, fmt.Errorf("%s: %v is not positive", name("sync-period", "syncPeriod"), time.Duration(o.SyncPeriod)))
	} else if o.SyncPeriod < o.MinSyncPeriod {
		errs = append(errs, fmt.Errorf("%s: %v is shorter than the min sync period %v", name("sync-period", "syncPeriod"),
			time.Duration(o.SyncPeriod), time.Duration(o.MinSyncPeriod)))
	}
	for _, b := range []struct{ flag, field, v string }{
		{"metrics-bind-address", "metricsBindAddress", o.MetricsBindAddress},
		{"healthz-bind-address", "healthzBindAddress", o.HealthzBindAddress},
	} {
		if b.v == "" {
			continue
		}
		if _, err := netip.ParseAddrPort(b.v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not an address and port such as 127.0.0.1:10249", name(b.flag, b.field), b.v))
		}
	}
	if o.EnableProfiling && o.MetricsBindAddress == "" {
		errs = append(errs, fmt.Errorf("%s: the profiles are served on the metrics address, which is empty", name("profiling", "enableProfiling")))
	}
	if err := c.logLevel.UnmarshalText([]byte(o.LogLevel)); err != nil {
		errs = append(errs, fmt.Errorf("%s: %q is not debug, info, warn or error", name("log-level", "logLevel"), o.LogLevel))
	}
	if o.PodNetwork {
		c.podNetwork = podNetwork(o, name, &errs)
	}
	c.nodeName = strings.ToLower(o.HostnameOverride)
	if c.nodeName == "" {
		h, err := hostname()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: not given and the host name is unknown: %w", name("hostname-override", "hostnameOverride"), err))
		}
		c.nodeName = strings.ToLower(h)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, usageError{err}
	}
	return c, nil
}

// podNetwork checks the pod network's options; errors go to errs, named
// by name.
func podNetwork(o *options, name func(flagName, field string) string, errs *[]error) *agent.PodNetwork {
	p := &agent.PodNetwork{Type: o.NetworkType, Manage: o.ManageNetwork, SubnetFile: o.SubnetFile,
		Publish: o.FlannelAnnotations, MTU: o.MTU, IPMasq: o.IPMasq}
	bad := func(flagName, field, format string, args ...any) {
		*errs = append(*errs, fmt.Errorf("%s: "+format, append([]any{name(flagName, field)}, args...)...))
	}
	if o.NetworkType != hns.TypeOverlay && o.NetworkType != hns.TypeL2Bridge {
		bad("network-type", "networkType", "%q is neither %s nor %s", o.NetworkType, hns.TypeOverlay, hns.TypeL2Bridge)
	}
	if o.VNI < 1 || o.VNI > 1<<24-1 {
		bad("vni", "vni", "%d is not a VNI (1 to %d)", o.VNI, 1<<24-1)
	}
	if o.VXLANPort < 1 || o.VXLANPort > 65535 {
		bad("vxlan-port", "vxlanPort", "%d is not a UDP port (1 to 65535)", o.VXLANPort)
	}
	p.VNI, p.VXLANPort = uint32(max(o.VNI, 0)), uint16(max(o.VXLANPort, 0))
	if o.VtepMAC != "" {
		m, err := net.ParseMAC(o.VtepMAC)
		if err != nil || len(m) != 6 || m[0]&1 != 0 || bytes.Equal(m, make([]byte, 6)) {
			bad("vtep-mac", "vtepMAC", "%q is not a unicast Ethernet MAC such as 02:00:00:00:01:01", o.VtepMAC)
		} else {
			p.VtepMAC = m
		}
	}
	if o.MTU != 0 && (o.MTU < 576 || o.MTU > 65535) {
		bad("mtu", "mtu", "%d is not 576 to 65535", o.MTU)
	}
	if o.SubnetFile != "" && !filepath.IsAbs(o.SubnetFile) {
		bad("subnet-file", "subnetFile", "%q is not an absolute path", o.SubnetFile)
	}
	return p
}
