package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
)

// DefaultSubnetFile is where flannel writes the node's pod subnet; a conf
// in flannel's shape without an ipam of its own takes its addresses from
// there, as flannel's own plugin does.
const DefaultSubnetFile = "/run/flannel/subnet.env"

// NetConf is ufp-cni's network configuration, with a flannel-style
// delegate's fields merged in. It is read-only once parseConf returns.
type NetConf struct {
	CNIVersion   string          `json:"cniVersion,omitempty"`
	Name         string          `json:"name"`
	Type         string          `json:"type"`
	Capabilities map[string]bool `json:"capabilities,omitempty"`
	DNS          types.DNS       `json:"dns"`
	// PrevResult is the result of ADD (CHECK and DEL get it).
	PrevResult json.RawMessage `json:"prevResult,omitempty"`
	// ValidAttachments are GC's attachments still in use;
	// OldAttachments is the spelling of the CNI 1.1.0 text, which libcni
	// sends too.
	ValidAttachments []types.GCAttachment `json:"cni.dev/valid-attachments,omitempty"`
	OldAttachments   []types.GCAttachment `json:"cni.dev/attachments,omitempty"`

	// Socket is ufpd's API socket (default api.DefaultSocket).
	Socket string `json:"socket,omitempty"`
	// Network is the HNS network in ufpd the endpoints join (default:
	// Name).
	Network string `json:"network,omitempty"`

	// APIVersion is the HNS API the Windows policies were written for:
	// 1 (HNS, the default) or 2 (HCN). Both shapes are read either way.
	APIVersion int `json:"apiVersion,omitempty"`
	// Policies and AdditionalArgs are Windows endpoint policies:
	// win-bridge and win-overlay spell the list policies,
	// windows-container-networking's plugins AdditionalArgs.
	Policies       []WinPolicy `json:"policies,omitempty"`
	AdditionalArgs []WinPolicy `json:"AdditionalArgs,omitempty"`
	// LoopbackDSR (or OptionalFlags.LoopbackDSR) lets a pod reach itself
	// through a Service VIP; ufpd's load balancers always do (their
	// SourceVIP), so it adds no endpoint policy.
	LoopbackDSR   bool          `json:"loopbackDSR,omitempty"`
	OptionalFlags OptionalFlags `json:"optionalFlags"`
	// IPMasq asks for outbound NAT (an OutBoundNAT policy if the conf
	// has none); IPMasqNetwork is win-bridge's exception to it.
	IPMasq        bool   `json:"ipMasq,omitempty"`
	IPMasqNetwork string `json:"ipMasqNetwork,omitempty"`
	// EndpointMACPrefix is the first two bytes of endpoints' MACs, "0E-2A"
	// as win-overlay writes it (the default).
	EndpointMACPrefix string `json:"endpointMacPrefix,omitempty"`
	// SubnetFile is flannel's subnet file, read when the conf is in
	// flannel's shape and has no ipam (default DefaultSubnetFile).
	SubnetFile string `json:"subnetFile,omitempty"`
	// RuntimeConfig holds the capability arguments the runtime passes.
	RuntimeConfig RuntimeConfig `json:"runtimeConfig"`

	// Filled in by parseConf.
	ipamType string                     // ipam.type: the IPAM plugin
	ipamConf []byte                     // the configuration IPAM plugins get
	kind     string                     // the Windows plugin the conf was written for, if any
	where    map[string]string          // field (lower case) -> its path prefix ("" or "delegate.")
	raw      map[string]json.RawMessage // the conf as given, top level
}

// OptionalFlags are windows-container-networking's flags.
type OptionalFlags struct {
	LoopbackDSR bool `json:"loopbackDSR,omitempty"`
	// ForceBridgeGateway (Windows) makes the gateway the bridge's; the
	// pod's gateway is always its ufpd subnet's, so it changes nothing.
	ForceBridgeGateway bool `json:"forceBridgeGateway,omitempty"`
}

// RuntimeConfig are the capability arguments ufp-cni takes: dns and
// portMappings.
type RuntimeConfig struct {
	DNS          RuntimeDNS    `json:"dns"`
	PortMappings []PortMapping `json:"portMappings,omitempty"`
}

// RuntimeDNS is the dns capability's argument.
type RuntimeDNS struct {
	Servers  []string `json:"servers,omitempty"`
	Searches []string `json:"searches,omitempty"`
	Options  []string `json:"options,omitempty"`
}

// PortMapping is one entry of the portMappings capability's argument.
type PortMapping struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
}

// confError is an error in the network configuration.
func confError(err error) error {
	return types.NewError(types.ErrInvalidNetworkConfig, err.Error(), "")
}

// parseConf reads a network configuration: the top level, and a
// flannel-style delegate object whose fields count as the top level's.
// A field given in both places is an error, as is anything invalid;
// errors name the field.
func parseConf(b []byte) (*NetConf, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, confError(fmt.Errorf("network configuration: %w", err))
	}
	merged := maps.Clone(top)
	where := map[string]string{}
	kind := ""
	d, flannel := lookupFold(top, "delegate")
	if flannel && !isNull(d) {
		var del map[string]json.RawMessage
		if err := json.Unmarshal(d, &del); err != nil {
			return nil, confError(fmt.Errorf("delegate: not an object: %w", err))
		}
		for _, k := range slices.Sorted(maps.Keys(del)) {
			v := del[k]
			lk := strings.ToLower(k)
			switch lk {
			case "type":
				if err := json.Unmarshal(v, &kind); err != nil {
					return nil, confError(fmt.Errorf("delegate.type: %w", err))
				}
				continue
			case "name", "cniversion":
				if tv, ok := lookupFold(top, k); ok && !bytes.Equal(compactJSON(tv), compactJSON(v)) {
					return nil, confError(fmt.Errorf("delegate.%s: %s differs from the top level's %s", k, v, tv))
				}
				continue
			}
			if _, dup := lookupFold(top, k); dup {
				return nil, confError(fmt.Errorf("delegate.%s: %s is given at the top level too; give it in one place", k, k))
			}
			merged[k] = v
			where[lk] = "delegate."
		}
	}
	for k := range merged {
		if strings.EqualFold(k, "delegate") {
			delete(merged, k)
		}
	}
	mb, err := json.Marshal(merged)
	if err != nil {
		return nil, err
	}
	n := &NetConf{where: where, raw: top}
	if err := json.Unmarshal(mb, n); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, confError(fmt.Errorf("%s%s: %v is not %v", n.at(te.Field), te.Field, te.Value, te.Type))
		}
		return nil, confError(fmt.Errorf("network configuration: %w", err))
	}
	if kind == "" {
		kind = n.Type
	}
	n.kind = kind
	if err := n.validate(); err != nil {
		return nil, confError(err)
	}
	if err := n.setIPAM(merged, b); err != nil {
		return nil, confError(err)
	}
	return n, nil
}

// at returns the path prefix of a top-level field: "delegate." if the
// delegate gave it.
func (n *NetConf) at(field string) string {
	f, _, _ := strings.Cut(field, ".")
	return n.where[strings.ToLower(f)]
}

func (n *NetConf) validate() error {
	if n.Name == "" {
		return fmt.Errorf("name: the network configuration needs a name")
	}
	if n.Socket == "" {
		n.Socket = api.DefaultSocket
	} else if !strings.HasPrefix(n.Socket, "/") {
		return fmt.Errorf("%ssocket: %q is not an absolute path", n.at("socket"), n.Socket)
	}
	if n.Network == "" {
		n.Network = n.Name
	}
	switch n.APIVersion {
	case 0, 1, 2:
	default:
		return fmt.Errorf("%sapiVersion: %d is not an HNS API version (1 or 2)", n.at("apiVersion"), n.APIVersion)
	}
	if _, err := parseMACPrefix(n.EndpointMACPrefix); err != nil {
		return fmt.Errorf("%sendpointMacPrefix: %w", n.at("endpointMacPrefix"), err)
	}
	for i, s := range n.DNS.Nameservers {
		if _, err := netip.ParseAddr(s); err != nil {
			return fmt.Errorf("%sdns.nameservers[%d]: %q is not an IP address", n.at("dns"), i, s)
		}
	}
	for i, s := range n.RuntimeConfig.DNS.Servers {
		if _, err := netip.ParseAddr(s); err != nil {
			return fmt.Errorf("runtimeConfig.dns.servers[%d]: %q is not an IP address", i, s)
		}
	}
	return nil
}

// expectedNetworkType is the HNS network type the Windows plugin the conf
// was written for attaches to ("" for any).
func (n *NetConf) expectedNetworkType() string {
	switch strings.ToLower(n.kind) {
	case "win-overlay", "sdnoverlay":
		return hns.TypeOverlay
	case "win-bridge", "sdnbridge", "l2bridge":
		return hns.TypeL2Bridge
	}
	return ""
}

// setIPAM finds the effective ipam object and the configuration IPAM
// plugins get: the conf as given when its top level has the ipam, else
// the top level with the delegate's ipam, or one made from flannel's
// subnet file, put in.
func (n *NetConf) setIPAM(merged map[string]json.RawMessage, stdin []byte) error {
	ipam, ok := lookupFold(merged, "ipam")
	_, top := lookupFold(n.raw, "ipam")
	if !ok || isNull(ipam) {
		if _, flannel := lookupFold(n.raw, "delegate"); !flannel && n.SubnetFile == "" {
			return fmt.Errorf("ipam: ufp-cni needs an IPAM plugin (ipam.type, e.g. host-local), or a subnetFile to take host-local ranges from")
		}
		file := n.SubnetFile
		if file == "" {
			file = DefaultSubnetFile
		}
		var err error
		if ipam, err = flannelIPAM(file); err != nil {
			return fmt.Errorf("ipam: none given, and %w", err)
		}
		top = false
	}
	var t struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(ipam, &t); err != nil {
		return fmt.Errorf("%sipam: %w", n.at("ipam"), err)
	}
	if t.Type == "" {
		return fmt.Errorf("%sipam.type: the IPAM plugin to run is required (e.g. host-local)", n.at("ipam"))
	}
	if strings.ContainsAny(t.Type, `/\`) {
		return fmt.Errorf("%sipam.type: %q is not a plugin name", n.at("ipam"), t.Type)
	}
	n.ipamType = t.Type
	if top {
		n.ipamConf = stdin
		return nil
	}
	m := maps.Clone(n.raw)
	for k := range m {
		if strings.EqualFold(k, "ipam") {
			delete(m, k)
		}
	}
	m["ipam"] = ipam
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	n.ipamConf = b
	return nil
}

// flannelIPAM makes a host-local ipam object from flannel's subnet file:
// FLANNEL_SUBNET (and FLANNEL_IPV6_SUBNET), whose address is the
// subnet's gateway.
func flannelIPAM(path string) (json.RawMessage, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("flannel's subnet file (subnetFile): %w", err)
	}
	return subnetIPAM(path, b)
}

// subnetIPAM is flannelIPAM of the subnet file b, named path in errors:
// one range per FLANNEL_SUBNET or FLANNEL_IPV6_SUBNET line, in the file's
// order; other lines are ignored.
func subnetIPAM(path string, b []byte) (json.RawMessage, error) {
	type rng struct {
		Subnet  string `json:"subnet"`
		Gateway string `json:"gateway,omitempty"`
	}
	var ranges [][]rng
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok || (k != "FLANNEL_SUBNET" && k != "FLANNEL_IPV6_SUBNET") {
			continue
		}
		if at, dup := seen[k]; dup {
			return nil, fmt.Errorf("%s:%d: %s is given twice (line %d too)", path, line, k, at)
		}
		seen[k] = line
		p, err := netip.ParsePrefix(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %s: %q is not a prefix", path, line, k, v)
		}
		if p.Addr().Is4() != (k == "FLANNEL_SUBNET") {
			return nil, fmt.Errorf("%s:%d: %s: %s is not of its family (IPv4 for FLANNEL_SUBNET, IPv6 for FLANNEL_IPV6_SUBNET)", path, line, k, p)
		}
		r := rng{Subnet: p.Masked().String()}
		if p.Addr() != p.Masked().Addr() {
			r.Gateway = p.Addr().String()
		}
		ranges = append(ranges, []rng{r})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(ranges) == 0 {
		return nil, fmt.Errorf("%s has no FLANNEL_SUBNET", path)
	}
	return json.Marshal(map[string]any{"type": "host-local", "ranges": ranges})
}

// lookupFold finds key in m, matching case-insensitively as
// encoding/json does.
func lookupFold(m map[string]json.RawMessage, key string) (json.RawMessage, bool) {
	if v, ok := m[key]; ok {
		return v, true
	}
	for k, v := range m {
		if strings.EqualFold(k, key) {
			return v, true
		}
	}
	return nil, false
}

func isNull(b json.RawMessage) bool { return string(bytes.TrimSpace(b)) == "null" }

func compactJSON(b json.RawMessage) []byte {
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return b
	}
	return out.Bytes()
}

// resultDNS is the DNS of the result: the conf's, with the dns
// capability's argument taking precedence.
func (n *NetConf) resultDNS() types.DNS {
	d := n.DNS
	rd := n.RuntimeConfig.DNS
	if len(rd.Servers) > 0 {
		d.Nameservers = rd.Servers
	}
	if len(rd.Searches) > 0 {
		d.Search = rd.Searches
	}
	if len(rd.Options) > 0 {
		d.Options = rd.Options
	}
	return d
}

// validAttachments returns GC's valid attachments.
func (n *NetConf) validAttachments() []types.GCAttachment {
	if n.ValidAttachments != nil {
		return n.ValidAttachments
	}
	return n.OldAttachments
}
