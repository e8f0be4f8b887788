package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/inspect"
)

// fakeUfpd is ufpd's API in memory. Not safe for concurrent use.
type fakeUfpd struct {
	down      bool
	networks  []api.Network
	endpoints []api.Endpoint
	status    map[string]*api.EndpointStatus // by endpoint name; nil: none reported
	createErr error
	// lostAnswer: CreateEndpoint makes the endpoint, and the answer is
	// lost on the way back.
	lostAnswer error
	deleteErr  error
}

var _ ufpd = (*fakeUfpd)(nil)

func notFound(what string) error {
	return &api.Error{Message: what + ": not found", Status: http.StatusNotFound}
}

var errDown = errors.New("ufpd at /run/test.sock: connection refused")

func (f *fakeUfpd) Status(ctx context.Context) (*api.Status, error) {
	if f.down {
		return nil, errDown
	}
	return &api.Status{PID: 1}, nil
}

func (f *fakeUfpd) Network(ctx context.Context, name string) (*api.Network, error) {
	if f.down {
		return nil, errDown
	}
	for i := range f.networks {
		if f.networks[i].Name == name {
			return &f.networks[i], nil
		}
	}
	return nil, notFound("network " + name)
}

func (f *fakeUfpd) Endpoints(ctx context.Context) ([]api.Endpoint, error) {
	if f.down {
		return nil, errDown
	}
	return slices.Clone(f.endpoints), nil
}

func (f *fakeUfpd) CreateEndpoint(ctx context.Context, e *api.Endpoint) error {
	switch {
	case f.down:
		return errDown
	case f.createErr != nil:
		return f.createErr
	case slices.ContainsFunc(f.endpoints, func(o api.Endpoint) bool { return o.Name == e.Name }):
		return &api.Error{Message: "exists", Status: http.StatusConflict}
	}
	// As ufpd stores it: a JSON round trip.
	var c api.Endpoint
	b, _ := json.Marshal(e)
	json.Unmarshal(b, &c)
	f.endpoints = append(f.endpoints, c)
	return f.lostAnswer
}

func (f *fakeUfpd) DeleteEndpoint(ctx context.Context, name string) error {
	switch {
	case f.down:
		return errDown
	case f.deleteErr != nil:
		return f.deleteErr
	}
	i := slices.IndexFunc(f.endpoints, func(o api.Endpoint) bool { return o.Name == name })
	if i < 0 {
		return notFound("endpoint " + name)
	}
	f.endpoints = slices.Delete(f.endpoints, i, i+1)
	return nil
}

func (f *fakeUfpd) Endpoint(ctx context.Context, name string) (*api.Endpoint, error) {
	if f.down {
		return nil, errDown
	}
	for _, e := range f.endpoints {
		if e.Name == name {
			// As ufpd answers: a JSON round trip, with the status.
			e.Status = f.status[name]
			var c api.Endpoint
			b, _ := json.Marshal(e)
			return &c, json.Unmarshal(b, &c)
		}
	}
	return nil, notFound("endpoint " + name)
}

// fakeIPAM hands out one result and records the calls.
type fakeIPAM struct {
	result   *types100.Result
	addErr   error
	checkErr error
	calls    []string
	confs    [][]byte
}

func (f *fakeIPAM) record(op string, conf []byte) {
	f.calls = append(f.calls, op)
	f.confs = append(f.confs, conf)
}

func (f *fakeIPAM) Add(ctx context.Context, plugin string, conf []byte) (types.Result, error) {
	f.record("ADD", conf)
	if f.addErr != nil {
		return nil, f.addErr
	}
	return f.result, nil
}
func (f *fakeIPAM) Del(ctx context.Context, plugin string, conf []byte) error {
	f.record("DEL", conf)
	return nil
}
func (f *fakeIPAM) Check(ctx context.Context, plugin string, conf []byte) error {
	f.record("CHECK", conf)
	return f.checkErr
}
func (f *fakeIPAM) Status(ctx context.Context, plugin string, conf []byte) error {
	f.record("STATUS", conf)
	return nil
}
func (f *fakeIPAM) GC(ctx context.Context, plugin string, conf []byte) error {
	f.record("GC", conf)
	return nil
}

// testNetwork is an Overlay network as ufpd holds it: dual stack, with a
// provider address.
func testNetwork(name, typ string) api.Network {
	sub := func(prefix, gw, def string) hns.SubnetConfig {
		return hns.SubnetConfig{IpAddressPrefix: prefix, Routes: []hns.RouteConfig{{NextHop: gw, DestinationPrefix: def}}}
	}
	n := api.Network{Name: name, Type: typ, Ipams: []hns.IpamConfig{{Subnets: []hns.SubnetConfig{
		sub("10.244.1.0/24", "10.244.1.1", "0.0.0.0/0"),
		sub("fd00:244:1::/64", "fd00:244:1::1", "::/0"),
	}}}}
	if typ == hns.TypeOverlay {
		n.Policies = []hns.PolicyConfig{{Type: "ProviderAddress", Settings: json.RawMessage(`{"ProviderAddress":"192.168.50.1"}`)}}
	}
	return n
}

func ipamResult(addrs ...string) *types100.Result {
	r := &types100.Result{CNIVersion: "1.1.0"}
	for _, a := range addrs {
		ip, ipn, err := net.ParseCIDR(a)
		if err != nil {
			panic(err)
		}
		gw := slices.Clone(ipn.IP)
		gw[len(gw)-1] = 1
		r.IPs = append(r.IPs, &types100.IPConfig{Address: net.IPNet{IP: ip, Mask: ipn.Mask}, Gateway: gw})
	}
	return r
}

// testConf is a win-overlay-shaped conf for ufp-cni on network net1.
const testConf = `{
  "cniVersion": "1.1.0", "name": "k8s-pods", "type": "ufp-cni",
  "socket": "/run/test.sock", "network": "net1",
  "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.1.0/24"}], [{"subnet": "fd00:244:1::/64"}]]},
  "dns": {"nameservers": ["10.96.0.10"], "search": ["svc.cluster.local"]},
  "apiVersion": 2,
  "policies": [
    {"name": "EndpointPolicy", "value": {"Type": "OutBoundNAT", "ExceptionList": ["10.244.0.0/16", "10.96.0.0/12"]}},
    {"name": "EndpointPolicy", "value": {"Type": "ROUTE", "DestinationPrefix": "10.96.0.0/12", "NeedEncap": true}},
    {"name": "EndpointPolicy", "value": {"Type": "SDNRoute", "Settings": {"DestinationPrefix": "10.97.0.0/16", "NextHop": "192.168.50.2", "NeedEncap": true}}},
    {"name": "EndpointPolicy", "value": {"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.50.1"}}}
  ],
  "loopbackDSR": true
}`

// harness is a plugin on fakes.
type harness struct {
	p    *plugin
	u    *fakeUfpd
	ipam *fakeIPAM
	out  *bytes.Buffer
	ns   []string // what the namespace check reports
}

func newHarness(addrs ...string) *harness {
	if len(addrs) == 0 {
		addrs = []string{"10.244.1.5/24", "fd00:244:1::5/64"}
	}
	h := &harness{
		u:    &fakeUfpd{networks: []api.Network{testNetwork("net1", hns.TypeOverlay)}},
		ipam: &fakeIPAM{result: ipamResult(addrs...)},
		out:  &bytes.Buffer{},
	}
	h.p = &plugin{
		newClient: func(socket string) ufpd { return h.u },
		ipam:      h.ipam,
		checkNS:   func(path string, want nsWant) []string { return h.ns },
		stdout:    h.out,
		timeout:   10 * time.Second,
	}
	return h
}

func podArgs(conf string) *skel.CmdArgs {
	return &skel.CmdArgs{ContainerID: "c0ffee", Netns: "/var/run/netns/pod-a", IfName: "eth0", StdinData: []byte(conf)}
}

func TestAdd(t *testing.T) {
	h := newHarness()
	if err := h.p.add(podArgs(testConf)); err != nil {
		t.Fatal(err)
	}
	var res types100.Result
	if err := json.Unmarshal(h.out.Bytes(), &res); err != nil {
		t.Fatalf("result %s: %v", h.out, err)
	}
	if res.CNIVersion != "1.1.0" || len(res.Interfaces) != 1 || *res.Interfaces[0] != (types100.Interface{Name: "eth0", Mac: "0e:2a:0a:f4:01:05", Sandbox: "/var/run/netns/pod-a"}) {
		t.Errorf("result interfaces %s", h.out)
	}
	var ips, routes []string
	for _, ip := range res.IPs {
		ips = append(ips, fmt.Sprintf("%s gw %s if %d", ip.Address.String(), ip.Gateway, *ip.Interface))
	}
	for _, r := range res.Routes {
		routes = append(routes, r.Dst.String()+" via "+r.GW.String())
	}
	if want := []string{"10.244.1.5/24 gw 10.244.1.1 if 0", "fd00:244:1::5/64 gw fd00:244:1::1 if 0"}; !slices.Equal(ips, want) {
		t.Errorf("result ips %v, want %v", ips, want)
	}
	if want := []string{"0.0.0.0/0 via 10.244.1.1", "::/0 via fd00:244:1::1"}; !slices.Equal(routes, want) {
		t.Errorf("result routes %v, want %v", routes, want)
	}
	if !slices.Equal(res.DNS.Nameservers, []string{"10.96.0.10"}) || !slices.Equal(res.DNS.Search, []string{"svc.cluster.local"}) {
		t.Errorf("result dns %+v", res.DNS)
	}
	if len(h.u.endpoints) != 1 {
		t.Fatalf("ufpd has %d endpoints, want 1", len(h.u.endpoints))
	}
	ep := h.u.endpoints[0]
	if ep.Name != endpointName("k8s-pods", "c0ffee", "eth0") || ep.HostComputeNetwork != "net1" || ep.MacAddress != "0e:2a:0a:f4:01:05" {
		t.Errorf("endpoint %+v", ep.EndpointConfig)
	}
	if got := fmt.Sprint(ep.IpConfigurations); got != "[{10.244.1.5 24} {fd00:244:1::5 64}]" {
		t.Errorf("endpoint IpConfigurations %s", got)
	}
	if ep.Device == nil || *ep.Device != (api.Device{Type: "tap", NetNS: "/var/run/netns/pod-a", Name: "eth0"}) {
		t.Errorf("endpoint device %+v", ep.Device)
	}
	var pols []string
	for _, p := range ep.Policies {
		pols = append(pols, p.Type+string(p.Settings))
	}
	want := []string{
		`OutBoundNAT{"Exceptions":["10.244.0.0/16","10.96.0.0/12"]}`,
		`SDNRoute{"DestinationPrefix":"10.97.0.0/16","NextHop":"192.168.50.2","NeedEncap":true}`,
	}
	if !slices.Equal(pols, want) {
		t.Errorf("endpoint policies\n%q\nwant\n%q", pols, want)
	}
	if !slices.Equal(h.ipam.calls, []string{"ADD"}) || !bytes.Equal(h.ipam.confs[0], []byte(testConf)) {
		t.Errorf("ipam calls %v", h.ipam.calls)
	}
}

// TestAddOldVersion checks that a 0.3.1 conf gets a 0.3.1 result.
func TestAddOldVersion(t *testing.T) {
	h := newHarness("10.244.1.7/24")
	conf := strings.Replace(testConf, `"cniVersion": "1.1.0"`, `"cniVersion": "0.3.1"`, 1)
	if err := h.p.add(podArgs(conf)); err != nil {
		t.Fatal(err)
	}
	var r struct {
		CNIVersion string `json:"cniVersion"`
		IPs        []struct {
			Version string `json:"version"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(h.out.Bytes(), &r); err != nil || r.CNIVersion != "0.3.1" || len(r.IPs) != 1 || r.IPs[0].Version != "4" {
		t.Errorf("result %s (%v)", h.out, err)
	}
}

// TestAddFails checks ADD's refusals: each names what is wrong, and an
// address IPAM gave is released again.
func TestAddFails(t *testing.T) {
	for _, tc := range []struct {
		name      string
		conf      string
		setup     func(h *harness)
		want      string
		wantCalls []string
	}{
		{name: "no-network", setup: func(h *harness) { h.u.networks = nil },
			want: `network: ufpd at /run/test.sock has no network "net1"`},
		{name: "ufpd-down", setup: func(h *harness) { h.u.down = true },
			want: "connection refused"},
		{name: "network-type", conf: strings.Replace(testConf, `"type": "ufp-cni"`, `"type": "win-bridge"`, 1),
			want: `network "net1": ufpd's is Overlay, but the conf is win-bridge's, which attaches to L2Bridge networks`},
		{name: "provider-address", conf: strings.Replace(testConf, `"ProviderAddress": "192.168.50.1"`, `"ProviderAddress": "192.168.50.9"`, 1),
			want: `policies[3] (ProviderAddress): 192.168.50.9 is not a provider address of network "net1"`},
		{name: "exists", setup: func(h *harness) {
			h.u.endpoints = []api.Endpoint{{EndpointConfig: hns.EndpointConfig{Name: endpointName("k8s-pods", "c0ffee", "eth0")}}}
		}, want: "is in ufpd already: DEL the attachment first"},
		{name: "ipam-fails", setup: func(h *harness) { h.ipam.addErr = errors.New("no addresses left") },
			want: "ipam host-local: ADD: no addresses left", wantCalls: []string{"ADD"}},
		{name: "outside-subnet", setup: func(h *harness) { h.ipam.result = ipamResult("10.244.2.5/24") },
			want:      `ipam host-local: ips[0] 10.244.2.5/24: outside network "net1"'s subnets in ufpd (10.244.1.0/24, fd00:244:1::/64)`,
			wantCalls: []string{"ADD", "DEL"}},
		{name: "prefix-length", setup: func(h *harness) { h.ipam.result = ipamResult("10.244.1.5/16") },
			want: "ips[0] 10.244.1.5/16: the prefix length differs from ufpd's subnet 10.244.1.0/24", wantCalls: []string{"ADD", "DEL"}},
		{name: "gateway", setup: func(h *harness) { h.ipam.result.IPs[0].Gateway = net.ParseIP("10.244.1.254") },
			want: "gateway 10.244.1.254, but ufpd's subnet 10.244.1.0/24 has 10.244.1.1", wantCalls: []string{"ADD", "DEL"}},
		{name: "route", setup: func(h *harness) {
			_, dst, _ := net.ParseCIDR("10.0.0.0/8")
			h.ipam.result.Routes = []*types.Route{{Dst: *dst, GW: net.ParseIP("10.244.1.254")}}
		}, want: "ipam host-local: routes[0] 10.0.0.0/8 via 10.244.1.254", wantCalls: []string{"ADD", "DEL"}},
		{name: "no-address", setup: func(h *harness) { h.ipam.result = &types100.Result{CNIVersion: "1.1.0"} },
			want: "the result has no address", wantCalls: []string{"ADD", "DEL"}},
		{name: "ufpd-refuses", setup: func(h *harness) {
			h.u.createErr = &api.Error{Message: `endpoint x: Endpoints[0] "x".MacAddress: 0e:2a:0a:f4:01:05 is already used`, Status: http.StatusBadRequest}
		}, want: "creating endpoint", wantCalls: []string{"ADD", "DEL"}},
		{name: "answer-lost", setup: func(h *harness) { h.u.lostAnswer = context.DeadlineExceeded },
			want: "creating endpoint", wantCalls: []string{"ADD", "DEL"}},
		{name: "answer-lost-undo-fails", setup: func(h *harness) {
			h.u.lostAnswer, h.u.deleteErr = context.DeadlineExceeded, errors.New("connection reset")
		}, want: "(its address stays allocated): connection reset", wantCalls: []string{"ADD"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness()
			if tc.setup != nil {
				tc.setup(h)
			}
			conf := tc.conf
			if conf == "" {
				conf = testConf
			}
			err := h.p.add(podArgs(conf))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one with %q", err, tc.want)
			}
			if !slices.Equal(h.ipam.calls, tc.wantCalls) {
				t.Errorf("ipam calls %v, want %v", h.ipam.calls, tc.wantCalls)
			}
			if h.out.Len() > 0 {
				t.Errorf("a failed ADD wrote %s", h.out)
			}
			if len(h.u.endpoints) > 0 && tc.name != "exists" && tc.name != "answer-lost-undo-fails" {
				t.Errorf("a failed ADD left endpoints %v", h.u.endpoints)
			}
		})
	}
}

func TestDel(t *testing.T) {
	h := newHarness()
	args := podArgs(testConf)
	if err := h.p.add(args); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := h.p.del(args); err != nil {
			t.Fatalf("DEL #%d: %v", i+1, err)
		}
		if len(h.u.endpoints) != 0 {
			t.Fatalf("DEL #%d left %v", i+1, h.u.endpoints)
		}
	}
	if want := []string{"ADD", "DEL", "DEL"}; !slices.Equal(h.ipam.calls, want) {
		t.Errorf("ipam calls %v, want %v", h.ipam.calls, want)
	}
	// ufpd not answering: an error, and the address stays allocated.
	h.u.down = true
	if err := h.p.del(args); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("DEL with ufpd down: %v", err)
	}
	if len(h.ipam.calls) != 3 {
		t.Errorf("DEL with ufpd down released the address: %v", h.ipam.calls)
	}
}

// checkArgs returns the CHECK arguments after an ADD: the conf with its
// result as prevResult.
func checkArgs(t *testing.T, h *harness, conf string) *skel.CmdArgs {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(conf), &m); err != nil {
		t.Fatal(err)
	}
	m["prevResult"] = json.RawMessage(h.out.Bytes())
	b, _ := json.Marshal(m)
	return podArgs(string(b))
}

func TestCheck(t *testing.T) {
	name := endpointName("k8s-pods", "c0ffee", "eth0")
	for _, tc := range []struct {
		name   string
		tamper func(h *harness)
		want   string // "" passes
	}{
		{name: "ok"},
		{name: "ok-with-status", tamper: func(h *harness) {
			h.u.status = map[string]*api.EndpointStatus{name: {Port: &inspect.PortInfo{Name: name, Device: &inspect.DeviceInfo{Serving: true}}}}
		}},
		{name: "no-endpoint", tamper: func(h *harness) { h.u.endpoints = nil },
			want: "endpoint " + name + ": ufpd has no such endpoint"},
		{name: "policy", tamper: func(h *harness) { h.u.endpoints[0].Policies = h.u.endpoints[0].Policies[:1] },
			want: "endpoint " + name + ": Policies: ufpd has 1 [OutBoundNAT"},
		{name: "policy-setting", tamper: func(h *harness) {
			h.u.endpoints[0].Policies[0].Settings = json.RawMessage(`{"Exceptions":["10.244.0.0/16"]}`)
		}, want: `Policies: [0] is OutBoundNAT{"Exceptions":["10.244.0.0/16"]} in ufpd, the conf makes OutBoundNAT{"Exceptions":["10.244.0.0/16","10.96.0.0/12"]}`},
		{name: "address", tamper: func(h *harness) { h.u.endpoints[0].IpConfigurations[0].IpAddress = "10.244.1.6" },
			want: "IpConfigurations [10.244.1.6 fd00:244:1::5], the ADD result's addresses are [10.244.1.5 fd00:244:1::5]"},
		{name: "mac", tamper: func(h *harness) { h.u.endpoints[0].MacAddress = "0e:2a:0a:f4:01:06" },
			want: "MacAddress 0e:2a:0a:f4:01:06, the ADD result's is 0e:2a:0a:f4:01:05"},
		{name: "device", tamper: func(h *harness) { h.u.endpoints[0].Device = nil }, want: "it has no device"},
		{name: "device-error", tamper: func(h *harness) {
			h.u.status = map[string]*api.EndpointStatus{name: {DeviceError: "netns /var/run/netns/pod-a: no such file or directory"}}
		}, want: "its device is not serving: netns /var/run/netns/pod-a"},
		{name: "not-serving", tamper: func(h *harness) {
			h.u.status = map[string]*api.EndpointStatus{name: {Port: &inspect.PortInfo{Device: &inspect.DeviceInfo{}}}}
		}, want: "its device is not serving"},
		{name: "namespace", tamper: func(h *harness) {
			h.ns = []string{"interface eth0 in /var/run/netns/pod-a: address 10.244.1.5/24 is missing"}
		}, want: "address 10.244.1.5/24 is missing"},
		{name: "ipam", tamper: func(h *harness) { h.ipam.checkErr = errors.New("no address for c0ffee") },
			want: "ipam host-local: CHECK: no address for c0ffee"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness()
			if err := h.p.add(podArgs(testConf)); err != nil {
				t.Fatal(err)
			}
			if tc.tamper != nil {
				tc.tamper(h)
			}
			err := h.p.check(checkArgs(t, h, testConf))
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v\nwant one with %q", err, tc.want)
			}
			if tc.want != "" && !strings.Contains(err.Error(), "CHECK of container c0ffee interface eth0: ") {
				t.Errorf("error %q does not name the attachment", err)
			}
		})
	}
	t.Run("no-prev-result", func(t *testing.T) {
		h := newHarness()
		if err := h.p.check(podArgs(testConf)); err == nil || !strings.Contains(err.Error(), "prevResult: CHECK needs the result of ADD") {
			t.Errorf("error %v", err)
		}
	})
}

func TestStatus(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(h *harness)
		want  string
	}{
		{name: "ok"},
		{name: "down", setup: func(h *harness) { h.u.down = true }, want: "ufpd does not answer"},
		{name: "no-network", setup: func(h *harness) { h.u.networks[0].Name = "other" }, want: `has no network "net1"`},
		{name: "network-type", setup: func(h *harness) { h.u.networks[0] = testNetwork("net1", hns.TypeL2Bridge) },
			want: `policies[3] (ProviderAddress): 192.168.50.1 is not a provider address of network "net1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness()
			if tc.setup != nil {
				tc.setup(h)
			}
			err := h.p.status(podArgs(testConf))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(h.ipam.calls, []string{"STATUS"}) {
					t.Errorf("ipam calls %v", h.ipam.calls)
				}
				return
			}
			var e *types.Error
			if !errors.As(err, &e) || e.Code != errPluginNotAvailable || !strings.Contains(e.Msg, tc.want) {
				t.Errorf("error %#v, want code %d with %q", err, errPluginNotAvailable, tc.want)
			}
		})
	}
}

func TestGC(t *testing.T) {
	h := newHarness()
	ep := func(name, network string) api.Endpoint {
		return api.Endpoint{EndpointConfig: hns.EndpointConfig{Name: name, HostComputeNetwork: network}}
	}
	valid := endpointName("k8s-pods", "c1", "eth0")
	stale := endpointName("k8s-pods", "c2", "eth0")
	staleIf := endpointName("k8s-pods", "c1", "net1")
	otherConf := endpointName("other-pods", "c3", "eth0")
	otherNet := endpointName("k8s-pods", "c4", "eth0")
	h.u.endpoints = []api.Endpoint{ep(valid, "net1"), ep(stale, "net1"), ep(staleIf, "net1"), ep(otherConf, "net1"), ep("pod-a", "net1"), ep(otherNet, "net2")}
	conf := strings.Replace(testConf, `"loopbackDSR": true`, `"loopbackDSR": true, "cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "eth0"}]`, 1)
	if err := h.p.gc(podArgs(conf)); err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range h.u.endpoints {
		left = append(left, e.Name)
	}
	if want := []string{valid, otherConf, "pod-a", otherNet}; !slices.Equal(left, want) {
		t.Errorf("after GC ufpd has %v, want %v", left, want)
	}
	if !slices.Equal(h.ipam.calls, []string{"GC"}) || !bytes.Contains(h.ipam.confs[0], []byte("cni.dev/valid-attachments")) {
		t.Errorf("ipam calls %v (the conf must carry the valid attachments)", h.ipam.calls)
	}
	// Without a list (cnitool gc), every endpoint of the conf is stale.
	if err := h.p.gc(podArgs(testConf)); err != nil {
		t.Fatal(err)
	}
	left = left[:0]
	for _, e := range h.u.endpoints {
		left = append(left, e.Name)
	}
	if want := []string{otherConf, "pod-a", otherNet}; !slices.Equal(left, want) {
		t.Errorf("after GC without attachments ufpd has %v, want %v", left, want)
	}
}

// TestFlannelIPAM checks the configuration IPAM plugins get from a conf in
// flannel's shape: the top level as given, with the ipam made from the
// subnet file.
func TestFlannelIPAM(t *testing.T) {
	conf := `{"cniVersion":"1.1.0","name":"cbr0","type":"flannel","subnetFile":"testdata/subnet.env","runtimeConfig":{"ips":["10.244.1.9/24"]},"delegate":{"type":"win-bridge"}}`
	n, err := parseConf([]byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(n.ipamConf, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"cniVersion", "name", "runtimeConfig", "ipam"} {
		if _, ok := m[k]; !ok {
			t.Errorf("IPAM plugins' conf %s lacks %s", n.ipamConf, k)
		}
	}
}
