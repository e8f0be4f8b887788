package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/inspect"
	"github.com/ufp-dev/ufp/vswitch"
)

// testDaemon runs a daemon on the demo's policy without devices (no root
// needed), its API on a socket in a temporary directory, and persisting
// to a state file there. It returns the daemon and a client.
func testDaemon(t testing.TB) (*daemon, *api.Client) {
	t.Helper()
	var fc fileConfig
	if err := json.Unmarshal(demoConfig, &fc); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fc.Devices = nil
	fc.State = filepath.Join(dir, "state.json")
	fc.API.Socket = filepath.Join(dir, "ufpd.sock")
	b, err := json.Marshal(fc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := parseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	d, err := newDaemon(c, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	l, err := listenAPI(c.api.Socket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.serveAPI(ctx, l)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if _, err := os.Stat(c.api.Socket); !os.IsNotExist(err) {
			t.Errorf("socket %s left behind: %v", c.api.Socket, err)
		}
	})
	fi, err := os.Stat(c.api.Socket)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want 0600", fi.Mode().Perm())
	}
	return d, api.NewClient(c.api.Socket)
}

// raw sends a request with a raw body and returns the status and body.
func raw(t *testing.T, c *api.Client, method, path, body string) (int, string) {
	t.Helper()
	var in any
	if body != "" {
		in = json.RawMessage(body)
	}
	var out json.RawMessage
	err := c.Do(context.Background(), method, path, in, &out)
	if e, ok := err.(*api.Error); ok {
		return e.Status, e.Message
	}
	if err != nil && !strings.Contains(err.Error(), "EOF") {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return 200, string(out)
}

func endpointJSON(name, mac, ip string) string {
	return fmt.Sprintf(`{"Name": %q, "HostComputeNetwork": "flannel.4096", "MacAddress": %q,
		"IpConfigurations": [{"IpAddress": %q}]}`, name, mac, ip)
}

// TestAPIObjects creates, reads, updates and deletes every kind of
// object, and checks that each accepted change is running and persisted.
func TestAPIObjects(t *testing.T) {
	d, c := testDaemon(t)
	ctx := context.Background()

	nets, err := c.Networks(ctx)
	if err != nil || len(nets) != 1 || nets[0].Name != "flannel.4096" {
		t.Fatalf("networks: %v %v", nets, err)
	}
	// A second network, then an endpoint on it.
	n2 := nets[0]
	n2.Name = "cbr1"
	n2.Ipams = []hns.IpamConfig{{Subnets: []hns.SubnetConfig{{IpAddressPrefix: "10.245.1.0/24",
		Routes:   []hns.RouteConfig{{NextHop: "10.245.1.1", DestinationPrefix: "0.0.0.0/0"}},
		Policies: []hns.PolicyConfig{{Type: "VSID", Settings: json.RawMessage(`{"IsolationId": 4097}`)}}}}}}
	if err := c.CreateNetwork(ctx, &n2); err != nil {
		t.Fatal(err)
	}
	var ep api.Endpoint
	if err := json.Unmarshal([]byte(endpointJSON("pod-c", "02:00:00:00:02:0c", "10.245.1.12")), &ep); err != nil {
		t.Fatal(err)
	}
	ep.HostComputeNetwork = "cbr1"
	if err := c.CreateEndpoint(ctx, &ep); err != nil {
		t.Fatal(err)
	}
	if d.sw.Port("pod-c") == nil {
		t.Fatal("pod-c is not a port of the running switch")
	}
	got, err := c.Endpoint(ctx, "pod-c")
	if err != nil || got.MacAddress != "02:00:00:00:02:0c" || got.Device != nil {
		t.Fatalf("endpoint: %+v %v", got, err)
	}
	// Policies of the endpoint.
	nat := api.Policy{Type: "OutBoundNAT", Settings: json.RawMessage(`{"Exceptions":["10.244.0.0/16"]}`)}
	if err := c.AddPolicy(ctx, "pod-c", &nat); err != nil {
		t.Fatal(err)
	}
	ps, err := c.Policies(ctx, "pod-c")
	if err != nil || len(ps) != 1 || ps[0].Type != "OutBoundNAT" {
		t.Fatalf("policies: %+v %v", ps, err)
	}
	if err := c.SetPolicies(ctx, "pod-c", []api.Policy{nat, {Type: "ACL", Settings: json.RawMessage(`{"Action":"Block","Direction":"In","Protocols":"6","LocalPorts":"22","Priority":100}`)}}); err != nil {
		t.Fatal(err)
	}
	if err := c.DeletePolicy(ctx, "pod-c", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.DeletePolicy(ctx, "pod-c", 5); !api.IsNotFound(err) {
		t.Errorf("deleting policy 5: %v, want not found", err)
	}
	ps, _ = c.Policies(ctx, "pod-c")
	if len(ps) != 1 {
		t.Errorf("policies after delete: %+v", ps)
	}
	// A load balancer on it, updated, then the endpoint deleted: it
	// leaves the backends.
	lbs, err := c.LoadBalancers(ctx)
	if err != nil || len(lbs) != 1 {
		t.Fatalf("load balancers: %v %v", lbs, err)
	}
	lb := lbs[0]
	lb.Name, lb.FrontendVIPs = "web2", []string{"10.96.0.11"}
	lb.HostComputeEndpoints = []string{"pod-a", "pod-c"}
	if err := c.CreateLoadBalancer(ctx, &lb); err != nil {
		t.Fatal(err)
	}
	lb.HostComputeEndpoints = []string{"pod-c"}
	if err := c.UpdateLoadBalancer(ctx, &lb); err != nil {
		t.Fatal(err)
	}
	if got, err := c.LoadBalancer(ctx, "web2"); err != nil || len(got.HostComputeEndpoints) != 1 {
		t.Fatalf("updated load balancer: %+v %v", got, err)
	}
	// Deleting a network that endpoints are on is a conflict.
	if err := c.DeleteNetwork(ctx, "cbr1"); !api.IsConflict(err) || !strings.Contains(err.Error(), "pod-c") {
		t.Errorf("deleting a network in use: %v", err)
	}
	ep.MacAddress = "02:00:00:00:02:0d"
	if err := c.UpdateEndpoint(ctx, &ep); err != nil {
		t.Fatal(err)
	}
	if p := d.sw.Port("pod-c"); p == nil || p.MAC.String() != "02:00:00:00:02:0d" {
		t.Errorf("updated endpoint's port: %+v", p)
	}
	if err := c.DeleteEndpoint(ctx, "pod-c"); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.LoadBalancer(ctx, "web2"); len(got.HostComputeEndpoints) != 0 {
		t.Errorf("the deleted endpoint is still a backend: %v", got.HostComputeEndpoints)
	}
	if err := c.DeleteEndpoint(ctx, "pod-c"); !api.IsNotFound(err) {
		t.Errorf("deleting again: %v, want not found", err)
	}
	if err := c.DeleteLoadBalancer(ctx, "web2"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteNetwork(ctx, "cbr1"); err != nil {
		t.Fatal(err)
	}
	if d.sw.Port("pod-c") != nil {
		t.Error("pod-c is still a port")
	}

	// Every accepted change was persisted: the state file is the running
	// configuration, at the running revision.
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Revision != 11 {
		t.Errorf("revision %d after 11 changes", st.Revision)
	}
	sc, rev, err := readState(d.cfg.state, d.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rev != st.Revision || len(sc.policy.Endpoints) != 2 || len(sc.policy.Networks) != 1 || len(sc.policy.LoadBalancers) != 1 {
		t.Errorf("state file: revision %d, %d endpoints, %d networks, %d load balancers", rev,
			len(sc.policy.Endpoints), len(sc.policy.Networks), len(sc.policy.LoadBalancers))
	}
	// The whole configuration reads back and writes back unchanged.
	cfg, err := c.Config(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetConfig(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Status(ctx); err != nil || st.Replaced != 1 || st.Revision != 12 {
		t.Errorf("after the configuration was replaced: %+v, %v; want replaced 1, revision 12", st, err)
	}
}

// TestAPIErrors checks that every bad request is refused with a status
// and a message naming the object and the field, and changes nothing.
func TestAPIErrors(t *testing.T) {
	d, c := testDaemon(t)
	gen := d.sw.Generation()
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		want                     string
	}{
		{"malformed JSON", "POST", "/v1/endpoints", `{"Name": "x",`, 400, "endpoint: malformed JSON"},
		{"not an object", "POST", "/v1/networks", `[1, 2]`, 400, "network: body: json: cannot unmarshal array"},
		{"no body", "POST", "/v1/loadbalancers", ``, 400, "load balancer: the request needs a JSON body"},
		{"trailing data", "POST", "/v1/networks", `{"Name": "n"} {}`, 400, "network: unexpected data after the JSON document"},
		{"unknown field", "POST", "/v1/endpoints", `{"Name": "pod-x", "MacAdress": "02:00:00:00:00:01"}`, 400, `endpoint: json: unknown field "MacAdress"`},
		{"unknown field in settings", "POST", "/v1/endpoints/pod-a/policies", `{"Type": "OutBoundNAT", "Settings": {"Exceptionz": []}}`, 400, `endpoint pod-a: policy: Endpoints[0] "pod-a".Policies[1].Settings.Exceptionz: unknown field`},
		{"wrong type", "POST", "/v1/loadbalancers", `{"Name": "x", "Flags": "dsr"}`, 400, "load balancer: Flags: json: cannot unmarshal string"},
		{"no name", "POST", "/v1/endpoints", endpointJSON("", "02:00:00:00:01:0c", "10.244.1.12"), 400, "endpoint: Name: an endpoint needs a name"},
		{"bad field", "POST", "/v1/endpoints", endpointJSON("pod-x", "zz", "10.244.1.12"), 400, `endpoint pod-x: policy: Endpoints[2] "pod-x".MacAddress: "zz" is not a MAC address`},
		{"outside the subnet", "POST", "/v1/endpoints", endpointJSON("pod-x", "02:00:00:00:01:0c", "10.9.9.9"), 400, `endpoint pod-x: policy: Endpoints[2] "pod-x".IpConfigurations[0].IpAddress`},
		{"unknown network", "POST", "/v1/endpoints", `{"Name": "pod-x", "HostComputeNetwork": "nope", "MacAddress": "02:00:00:00:01:0c", "IpConfigurations": [{"IpAddress": "10.244.1.12"}]}`, 400, `HostComputeNetwork: no network is named "nope"`},
		{"duplicate endpoint", "POST", "/v1/endpoints", endpointJSON("pod-a", "02:00:00:00:01:0c", "10.244.1.12"), 409, "endpoint pod-a: Name: an endpoint of that name exists"},
		{"duplicate address", "POST", "/v1/endpoints", endpointJSON("pod-x", "02:00:00:00:01:0c", "10.244.1.10"), 400, "10.244.1.10"},
		{"duplicate network", "POST", "/v1/networks", `{"Name": "flannel.4096", "Type": "Overlay", "Ipams": []}`, 409, "network flannel.4096: Name: a network of that name exists"},
		{"duplicate load balancer", "POST", "/v1/loadbalancers", `{"Name": "web", "HostComputeEndpoints": [], "PortMappings": []}`, 409, "load balancer web: Name: a load balancer of that name exists"},
		{"backend unknown", "POST", "/v1/loadbalancers", `{"Name": "svc", "HostComputeEndpoints": ["pod-z"], "FrontendVIPs": ["10.96.0.20"], "PortMappings": [{"Protocol": 6, "InternalPort": 80, "ExternalPort": 80}]}`, 400, `load balancer svc: policy: LoadBalancers[1] "svc".HostComputeEndpoints[0]`},
		{"rename", "PUT", "/v1/endpoints/pod-a", endpointJSON("pod-q", "02:00:00:00:01:0a", "10.244.1.10"), 400, `endpoint pod-a: Name: "pod-q" differs from the URL's "pod-a"`},
		{"update missing", "PUT", "/v1/networks/nope", `{"Type": "Overlay", "Ipams": []}`, 404, "network nope: no such network"},
		{"get missing", "GET", "/v1/endpoints/nope", ``, 404, "endpoint nope: no such endpoint"},
		{"delete missing", "DELETE", "/v1/loadbalancers/nope", ``, 404, "load balancer nope: no such load balancer"},
		{"network in use", "DELETE", "/v1/networks/flannel.4096", ``, 409, "network flannel.4096: endpoints are on it: [pod-a pod-b]"},
		{"policy index", "DELETE", "/v1/endpoints/pod-a/policies/x", ``, 400, `endpoint pod-a: Policies[x]: not a policy index`},
		{"device of another port", "POST", "/v1/endpoints", `{"Name": "pod-x", "HostComputeNetwork": "flannel.4096", "MacAddress": "02:00:00:00:01:0c", "IpConfigurations": [{"IpAddress": "10.244.1.12"}], "Device": {"port": "pod-a", "type": "tap"}}`, 400, `endpoint pod-x: Device.port: "pod-a" is not the endpoint's name`},
		{"device type", "POST", "/v1/endpoints", `{"Name": "pod-x", "HostComputeNetwork": "flannel.4096", "MacAddress": "02:00:00:00:01:0c", "IpConfigurations": [{"IpAddress": "10.244.1.12"}], "Device": {"type": "veth"}}`, 400, `devices[0].type: "veth" is not tap, tun or afpacket`},
		{"namespace missing", "POST", "/v1/endpoints", `{"Name": "pod-x", "HostComputeNetwork": "flannel.4096", "MacAddress": "02:00:00:00:01:0c", "IpConfigurations": [{"IpAddress": "10.244.1.12"}], "Device": {"type": "tap", "netns": "/nonexistent/ns"}}`, 400, "endpoint pod-x: rejected; the running policy stays: port pod-x: netns /nonexistent/ns"},
		{"stale revision", "DELETE", "/v1/loadbalancers/web", ``, 412, "load balancer web: changed meanwhile"},
		{"no such call", "GET", "/v1/nothing", ``, 404, "GET /v1/nothing: no such API call"},
		{"interface twice", "PUT", "/v1/config", `{"policy": {"switch": {}, "ports": [{"name": "a", "mac": "02:00:00:00:00:0a"}, {"name": "b", "mac": "02:00:00:00:00:0b"}]}, "devices": [{"port": "a", "type": "tap", "name": "x0"}, {"port": "b", "type": "tap", "name": "x0"}]}`, 400, `config: devices[1].name: interface "x0" in that namespace is devices[0]'s too`},
		{"bad config", "PUT", "/v1/config", `{"policy": {"switch": {}, "ports": [{"name": "a", "mac": "zz"}]}}`, 400, "config: policy: ports[0].mac"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, "http://ufpd"+tc.path, strings.NewReader(tc.body))
			if tc.name == "stale revision" {
				req.Header.Set("If-Match", `"7"`)
			}
			rec := httptest.NewRecorder()
			d.handler().ServeHTTP(rec, req)
			var e api.Error
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
				t.Fatalf("status %d, body %q is not a JSON error: %v", rec.Code, rec.Body.String(), err)
			}
			if rec.Code != tc.status || !strings.Contains(e.Message, tc.want) {
				t.Errorf("status %d, error %q\nwant %d and an error containing %q", rec.Code, e.Message, tc.status, tc.want)
			}
		})
	}
	if g := d.sw.Generation(); g != gen {
		t.Errorf("generation %d -> %d: a refused request changed the policy", gen, g)
	}
	st, _ := c.Status(context.Background())
	if st.Revision != 0 {
		t.Errorf("revision %d after refused requests only", st.Revision)
	}
	// A VFP-level policy has no HNS objects to edit.
	vfp := `{"policy": {"switch": {}, "ports": [{"name": "a", "mac": "02:00:00:00:00:0a", "ips": ["10.0.0.10"]}]}}`
	if status, msg := raw(t, c, "PUT", "/v1/config", vfp); status != 200 {
		t.Fatalf("PUT a VFP-level config: %d %s", status, msg)
	}
	if status, msg := raw(t, c, "POST", "/v1/networks", `{"Name": "n", "Type": "Overlay", "Ipams": []}`); status != 409 || !strings.Contains(msg, "VFP level") {
		t.Errorf("a network on a VFP-level policy: %d %s", status, msg)
	}
}

// TestAPIConcurrent changes the configuration from many clients at once:
// every change lands exactly once, creating one name twice conflicts, and
// the state file holds the result.
func TestAPIConcurrent(t *testing.T) {
	d, c := testDaemon(t)
	ctx := context.Background()
	const n = 24
	var wg sync.WaitGroup
	errs := make([]error, 2*n)
	for i := range n {
		wg.Go(func() {
			var ep api.Endpoint
			json.Unmarshal([]byte(endpointJSON(fmt.Sprintf("pod-%02d", i), fmt.Sprintf("02:00:00:00:03:%02x", i), fmt.Sprintf("10.244.1.%d", 100+i))), &ep)
			errs[i] = c.CreateEndpoint(ctx, &ep)
		})
		wg.Go(func() { // the same name from another client: one of each pair wins
			var ep api.Endpoint
			json.Unmarshal([]byte(endpointJSON(fmt.Sprintf("pod-%02d", i), fmt.Sprintf("02:00:00:00:04:%02x", i), fmt.Sprintf("10.244.1.%d", 150+i))), &ep)
			errs[n+i] = c.CreateEndpoint(ctx, &ep)
		})
	}
	wg.Wait()
	for i := range n {
		a, b := errs[i], errs[n+i]
		if (a == nil) == (b == nil) {
			t.Errorf("pod-%02d: created %v and %v: want exactly one", i, a, b)
		}
		for _, err := range []error{a, b} {
			if err != nil && !api.IsConflict(err) {
				t.Errorf("pod-%02d: %v, want a conflict", i, err)
			}
		}
	}
	eps, err := c.Endpoints(ctx)
	if err != nil || len(eps) != 2+n {
		t.Fatalf("%d endpoints (%v), want %d", len(eps), err, 2+n)
	}
	st, _ := c.Status(ctx)
	if st.Revision != n {
		t.Errorf("revision %d after %d accepted changes", st.Revision, n)
	}
	sc, rev, err := readState(d.cfg.state, d.cfg)
	if err != nil || rev != n || len(sc.policy.Endpoints) != 2+n {
		t.Errorf("state file: revision %d, %d endpoints, %v", rev, len(sc.policy.Endpoints), err)
	}
	// Writes naming the revision they were made against: one wins.
	var won, lost int
	var mu sync.Mutex
	for i := range 8 {
		wg.Go(func() {
			req := fmt.Sprintf(`{"Name": "lb-%d", "HostComputeEndpoints": ["pod-a"], "FrontendVIPs": ["10.96.1.%d"], "PortMappings": [{"Protocol": 6, "InternalPort": 80, "ExternalPort": 80}]}`, i, i+1)
			r, _ := http.NewRequest("POST", "http://ufpd/v1/loadbalancers", strings.NewReader(req))
			r.Header.Set("If-Match", fmt.Sprintf(`"%d"`, n))
			rec := httptest.NewRecorder()
			d.handler().ServeHTTP(rec, r)
			mu.Lock()
			defer mu.Unlock()
			switch rec.Code {
			case 201:
				won++
			case 412:
				lost++
			default:
				t.Errorf("status %d: %s", rec.Code, rec.Body.String())
			}
		})
	}
	wg.Wait()
	if won != 1 || lost != 7 {
		t.Errorf("%d won, %d lost; want 1 and 7", won, lost)
	}
}

// udpFrame builds an Ethernet/IPv4/UDP frame with valid checksums.
func udpFrame(t *testing.T, srcMAC, dstMAC, src, dst string, sport, dport uint16) []byte {
	t.Helper()
	mac := func(s string) net.HardwareAddr { m, _ := net.ParseMAC(s); return m }
	eth := &layers.Ethernet{SrcMAC: mac(srcMAC), DstMAC: mac(dstMAC), EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.ParseIP(src), DstIP: net.ParseIP(dst)}
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	udp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, udp, gopacket.Payload("hello")); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestAPIInspect reads the running switch through the API while frames
// cross it: ports, layers and rules with counters, flows (listed,
// filtered, flushed), counters, a trace and a live capture.
func TestAPIInspect(t *testing.T) {
	d, c := testDaemon(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	podA, podB := vswitch.NewMemDevice("pod-a", 64), vswitch.NewMemDevice("pod-b", 64)
	for port, dev := range map[string]vswitch.Device{"pod-a": podA, "pod-b": podB} {
		if err := d.sw.Attach(port, dev); err != nil {
			t.Fatal(err)
		}
	}
	served := make(chan error, 1)
	go func() { served <- d.sw.Serve(ctx) }()
	defer func() {
		cancel()
		<-served
	}()

	// A live capture of pod-b: two frames, then it ends.
	var pcap lockedBuffer
	captured := make(chan error, 1)
	go func() { captured <- c.Capture(ctx, "pod-b", &pcap, api.CaptureOptions{Count: 2}) }()
	// Frames until the capture has two: those sent before it started
	// are not in it.
	deadline := time.After(10 * time.Second)
	for sport, done := uint16(40000), false; !done; sport++ {
		podA.Inject(udpFrame(t, "02:00:00:00:01:0a", "02:00:00:00:01:0b", "10.244.1.10", "10.244.1.11", sport, 53))
		if _, ok := podB.Receive(5 * time.Second); !ok {
			t.Fatal("nothing reached pod-b")
		}
		select {
		case err := <-captured:
			if err != nil {
				t.Fatal(err)
			}
			done = true
		case <-deadline:
			t.Fatal("the capture of 2 frames did not end")
		case <-time.After(20 * time.Millisecond):
		}
	}
	r, err := pcapgo.NewNgReader(bytes.NewReader(pcap.Bytes()), pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		if p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default); p.Layer(layers.LayerTypeUDP) == nil {
			t.Errorf("captured frame %d is not UDP: %v", n, p)
		}
		n++
	}
	if n != 2 {
		t.Errorf("captured %d frames, want 2", n)
	}
	if ifc, err := r.Interface(0); err != nil || ifc.Name != "pod-b" {
		t.Errorf("capture interface %q, %v", ifc.Name, err)
	}

	ports, err := c.Ports(ctx)
	if err != nil || len(ports) != 4 {
		t.Fatalf("ports: %d %v", len(ports), err)
	}
	for _, p := range ports {
		if p.Name == "pod-b" && (p.Device == nil || !p.Device.Serving || p.Device.TxFrames == 0) {
			t.Errorf("pod-b's device: %+v", p.Device)
		}
	}
	ls, err := c.Layers(ctx, "pod-b")
	if err != nil || len(ls) == 0 {
		t.Fatalf("layers: %v %v", ls, err)
	}
	if _, err := c.Layers(ctx, "pod-z"); !api.IsNotFound(err) || !strings.Contains(err.Error(), "pod-z") {
		t.Errorf("layers of pod-z: %v", err)
	}
	rules, err := c.Rules(ctx)
	if err != nil || len(rules) == 0 {
		t.Fatalf("rules: %v %v", rules, err)
	}

	fl, err := c.Flows(ctx, api.FlowFilter{Port: "pod-a", Proto: "udp"})
	if err != nil || fl.Matched < 2 || len(fl.Flows) != fl.Matched {
		t.Fatalf("flows: %+v %v", fl, err)
	}
	fl, err = c.Flows(ctx, api.FlowFilter{SrcPort: 40001, Limit: 1})
	if err != nil || fl.Matched != 1 || fl.Flows[0].DstPort != 53 {
		t.Fatalf("flows from port 40001: %+v %v", fl, err)
	}
	if _, err := c.Flows(ctx, api.FlowFilter{Port: "pod-z"}); !api.IsNotFound(err) {
		t.Errorf("flows of pod-z: %v", err)
	}
	if status, msg := raw(t, c, "GET", "/v1/flows?sport=x", ""); status != 400 || !strings.Contains(msg, `sport: "x" is not a port`) {
		t.Errorf("a bad filter: %d %s", status, msg)
	}
	removed, err := c.FlushFlows(ctx, api.FlowFilter{SrcPort: 40001})
	if err != nil || removed == 0 {
		t.Fatalf("flush: %d %v", removed, err)
	}
	if fl, _ := c.Flows(ctx, api.FlowFilter{SrcPort: 40001}); fl.Matched != 0 {
		t.Errorf("%d flows from port 40001 after the flush", fl.Matched)
	}

	st, err := c.Counters(ctx)
	if err != nil || st.SlowPath == 0 || st.FlowTable.Flows == 0 {
		t.Fatalf("counters: %+v %v", st, err)
	}

	before, _ := c.Counters(ctx)
	tr, err := c.Trace(ctx, &inspect.TraceRequest{Port: "pod-a", Proto: "tcp",
		Src: netip.MustParseAddr("10.244.1.10"), SrcPort: 40000, Dst: netip.MustParseAddr("10.244.1.11"), DstPort: 22})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Verdict != "drop" || tr.Drop != "blocked-by-policy" || !slices.ContainsFunc(tr.Steps, func(s inspect.TraceStep) bool { return s.Rule == "deny-ssh" }) {
		t.Errorf("trace: %+v", tr)
	}
	after, _ := c.Counters(ctx)
	if before.SlowPath != after.SlowPath || before.FlowTable.Flows != after.FlowTable.Flows {
		t.Errorf("the trace changed the switch: %+v -> %+v", before, after)
	}
	for _, tc := range []struct {
		body   string
		status int
		want   string
	}{
		{`{"port": "pod-z", "proto": "tcp", "src": "10.244.1.10", "dst": "10.244.1.11"}`, 404, "pod-z"},
		{`{"port": "pod-a", "proto": "tcp", "src": "10.244.1.300", "dst": "10.244.1.11"}`, 400, "src"},
		{`{"port": "pod-a", "proto": "tcp", "src": "10.244.1.10", "dst": "10.244.1.11", "flags": "S"}`, 400, `flags: unknown field`},
	} {
		if status, msg := raw(t, c, "POST", "/v1/trace", tc.body); status != tc.status || !strings.Contains(msg, tc.want) {
			t.Errorf("trace %s: %d %s, want %d and %q", tc.body, status, msg, tc.status, tc.want)
		}
	}
	// A capture of a port with no device, and of one that is not there.
	if err := c.Capture(ctx, "uplink", io.Discard, api.CaptureOptions{Count: 1}); !api.IsConflict(err) || !strings.Contains(err.Error(), "no device") {
		t.Errorf("capture of a port without a device: %v", err)
	}
	if err := c.Capture(ctx, "pod-z", io.Discard, api.CaptureOptions{Count: 1}); !api.IsNotFound(err) {
		t.Errorf("capture of pod-z: %v", err)
	}
	if status, msg := raw(t, c, "GET", "/v1/ports/pod-b/capture?direction=up", ""); status != 400 || !strings.Contains(msg, `direction: "up"`) {
		t.Errorf("a capture in direction up: %d %s", status, msg)
	}
}

// lockedBuffer is a bytes.Buffer written and read by different
// goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

func (l *lockedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.b.Bytes())
}

// TestMetricsEndpoint scrapes the metrics ufpd serves when the
// configuration gives them an address.
func TestMetricsEndpoint(t *testing.T) {
	d, _ := testDaemon(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.serveMetrics(ctx, l) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	resp, err := http.Get("http://" + l.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{`ufp_port_rx_packets_total{port="pod-a"} 0`, "ufp_flow_table_flows 0", "ufp_policy_generation 1", "go_goroutines"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the metrics lack %q", want)
		}
	}
}

// TestStateRestore starts a daemon from the state file another left:
// every object comes back, at the same revision, and no temporary file
// is left beside the state.
func TestStateRestore(t *testing.T) {
	d, c := testDaemon(t)
	ctx := context.Background()
	var ep api.Endpoint
	json.Unmarshal([]byte(endpointJSON("pod-c", "02:00:00:00:01:0c", "10.244.1.12")), &ep)
	if err := c.CreateEndpoint(ctx, &ep); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteLoadBalancer(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(d.cfg.state)
	if ents, _ := os.ReadDir(dir); len(ents) != 3 { // the state, its journal and the socket
		t.Errorf("%d files in the state's directory: %v", len(ents), ents)
	}
	// A configuration file naming the state: the file's own policy only
	// seeds it.
	cfgPath := filepath.Join(t.TempDir(), "ufpd.json")
	var fc fileConfig
	json.Unmarshal(demoConfig, &fc)
	fc.Devices, fc.State = nil, d.cfg.state
	b, _ := json.Marshal(fc)
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	rc, rev, fromState, err := loadRunning(cfgPath)
	if err != nil || !fromState || rev != 2 {
		t.Fatalf("loadRunning: revision %d, from state %v, %v", rev, fromState, err)
	}
	r, err := restoreDaemon(rc, rev, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if r.sw.Port("pod-c") == nil || len(r.cfg.policy.LoadBalancers) != 0 || r.rev != 2 {
		t.Errorf("restored: pod-c %v, %d load balancers, revision %d", r.sw.Port("pod-c") != nil, len(r.cfg.policy.LoadBalancers), r.rev)
	}
	if rep := r.restored; rep == nil || rep.Endpoints != 3 || rep.Networks != 1 || rep.Revision != 2 {
		t.Errorf("restore report: %+v", rep)
	}
	// A torn or foreign state file is refused, naming it.
	if err := os.WriteFile(d.cfg.state, []byte(`{"revision": 3, "policy": {`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := loadRunning(cfgPath); err == nil || !strings.Contains(err.Error(), d.cfg.state) {
		t.Errorf("a torn state file: %v", err)
	}
}

// TestRemoveStaleTemps checks that the temporary files a crash inside
// writeState leaves are removed at start, and nothing else.
func TestRemoveStaleTemps(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state.json")
	keep := []string{state, filepath.Join(dir, "other.json"), filepath.Join(dir, ".other.json.1")}
	stale := []string{filepath.Join(dir, ".state.json.123"), filepath.Join(dir, ".state.json.456")}
	for _, f := range append(slices.Clone(keep), stale...) {
		if err := os.WriteFile(f, []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removeStaleTemps(state)
	for _, f := range keep {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s: %v, want it kept", f, err)
		}
	}
	for _, f := range stale {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s is still there (%v)", f, err)
		}
	}
}

// TestStateWithStrings reads a state file an earlier ufpd wrote, when the
// policy document held its values as strings (the lowered policy of
// testdata/scenarios/acl-nat-lb, host prefixes written "/32"): it reads,
// compiles to the switch the scenario's own policy compiles to, and reads
// the same again once written.
func TestStateWithStrings(t *testing.T) {
	base := &config{}
	c, rev, err := readState(filepath.Join("testdata", "state-strings.json"), base)
	if err != nil || rev != 7 {
		t.Fatalf("readState: revision %d, %v", rev, err)
	}
	want, err := vswitch.LoadConfig(filepath.Join("..", "..", "testdata", "scenarios", "acl-nat-lb", "policy.json"))
	if err != nil {
		t.Fatal(err)
	}
	dump := func(c *vswitch.Config) string {
		t.Helper()
		sw, err := vswitch.New(c)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, p := range sw.PortInfos() {
			ls, err := sw.Layers(p.Name)
			if err != nil {
				t.Fatal(err)
			}
			// The state was written before load-balancers groups were
			// shared: it holds each port's copy, which compiles to the
			// same rules.
			for i := range ls {
				for j := range ls[i].Groups {
					ls[i].Groups[j].Shared = ""
				}
			}
			j, _ := json.Marshal(struct {
				Port   inspect.PortInfo
				Layers []inspect.LayerInfo
			}{p, ls})
			b.Write(append(j, '\n'))
		}
		return b.String()
	}
	got := dump(c.policy)
	if w := dump(want); got != w {
		t.Errorf("the state's policy compiles to\n%s\nthe scenario's to\n%s", got, w)
	}
	path := filepath.Join(t.TempDir(), "state.json")
	if err := writeState(path, c, rev, nil); err != nil {
		t.Fatal(err)
	}
	again, _, err := readState(path, base)
	if err != nil {
		t.Fatal(err)
	}
	if d := dump(again.policy); d != got {
		t.Errorf("written and read again, the policy compiles to\n%s\nwant\n%s", d, got)
	}
}
