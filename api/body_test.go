package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/ufp-dev/ufp/hns"
)

func testBatches() map[string]*Batch {
	ep := func(i int) Endpoint {
		return Endpoint{EndpointConfig: hns.EndpointConfig{
			Name: fmt.Sprintf("remote.10.128.%d.%d", i/250, 1+i%250), HostComputeNetwork: "ovl", Flags: hns.EndpointFlagRemote,
			Owner: "ufp-agent/node-1", IpConfigurations: []hns.IpConfigConfig{{IpAddress: fmt.Sprintf("10.128.%d.%d", i/250, 1+i%250)}},
		}}
	}
	many := &Batch{Owner: "ufp-agent/node-1"}
	for i := range 3000 { // several chunks
		many.Endpoints = append(many.Endpoints, ep(i))
		if i%10 == 0 {
			many.LoadBalancers = append(many.LoadBalancers, LoadBalancer{
				Name: fmt.Sprintf("bench.svc-%d.tcp80.v4.cluster", i), Owner: many.Owner, SourceVIP: "10.64.0.250",
				FrontendVIPs: []string{"10.96.0.1"}, HostComputeEndpoints: []string{ep(i).Name, ep(i + 1).Name},
				PortMappings: []hns.LoadBalancerPortMappingConfig{{Protocol: 6, InternalPort: 8080, ExternalPort: 80}},
			})
		}
	}
	odd := ep(7)
	odd.Name = `a<b>&"c"` + "\u2028"
	odd.Policies = []hns.PolicyConfig{{Type: "OutBoundNAT", Settings: json.RawMessage(` { "Exceptions" : [ "10.0.0.0/8" ] } `)}}
	odd.Unhealthy = true
	odd.Device = &Device{}
	odd.Status = &EndpointStatus{}
	return map[string]*Batch{
		"owner only":   {Owner: "o"},
		"empty owner":  {},
		"empty lists":  {Owner: "o", Endpoints: []Endpoint{}, LoadBalancers: []LoadBalancer{}, DeleteEndpoints: []string{}},
		"deletes only": {Owner: "o", DeleteEndpoints: []string{"a", "b"}, DeleteLoadBalancers: []string{"c"}},
		"escapes":      {Owner: "<o&>", Endpoints: []Endpoint{odd}, DeleteLoadBalancers: []string{"\x01"}},
		"many":         many,
		"routes and ACL sets": {Owner: "o", Routes: []Route{{Name: "node/n2/10.244.2.0_24", HostComputeNetwork: "ovl",
			DestinationPrefix: "10.244.2.0/24", ProviderAddress: "192.168.1.2", DistributedRouterMacAddress: "02:00:00:00:02:01"}},
			ACLSets:      []ACLSet{{Name: "pod-a", Endpoint: "pod-a", ACLs: []hns.ACLSettings{{Action: "Allow", Direction: "In", Priority: 100}}}},
			DeleteRoutes: []string{"node/n3/10.244.3.0_24"}, DeleteACLSets: []string{"pod-b"}},
	}
}

// TestBatchEncodeJSON checks that a batch's streamed body is the bytes
// encoding/json writes for it.
func TestBatchEncodeJSON(t *testing.T) {
	for name, b := range testBatches() {
		t.Run(name, func(t *testing.T) {
			want, err := json.Marshal(b)
			if err != nil {
				t.Fatal(err)
			}
			body, err := encodeBody(b)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 { // a body reads again from its start
				got, err := io.ReadAll(body.reader())
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) || body.n != int64(len(want)) {
					t.Fatalf("streamed %d bytes (length %d), encoding/json %d:\n%.300s\n%.300s", len(got), body.n, len(want), got, want)
				}
			}
		})
	}
}

// TestBatchFieldsEncoded fails when Batch gains or renames a field that
// Batch.encodeJSON does not write.
func TestBatchFieldsEncoded(t *testing.T) {
	var tags []string
	bt := reflect.TypeFor[Batch]()
	for i := range bt.NumField() {
		tags = append(tags, bt.Field(i).Name+" "+bt.Field(i).Tag.Get("json"))
	}
	want := []string{"Owner owner", "Endpoints endpoints,omitempty", "LoadBalancers loadBalancers,omitempty",
		"DeleteEndpoints deleteEndpoints,omitempty", "DeleteLoadBalancers deleteLoadBalancers,omitempty",
		"Routes routes,omitempty", "ACLSets aclSets,omitempty", "DeleteRoutes deleteRoutes,omitempty", "DeleteACLSets deleteACLSets,omitempty"}
	if !reflect.DeepEqual(tags, want) {
		t.Errorf("Batch's fields are %q; Batch.encodeJSON writes %q: update it", tags, want)
	}
}

// FuzzBody checks that a body reads back what was written to it, in
// writes of any sizes across chunks, read with buffers of any size.
func FuzzBody(f *testing.F) {
	f.Add([]byte("hello"), uint16(3), uint16(1))
	f.Add(bytes.Repeat([]byte{7}, 3*chunkSize+5), uint16(chunkSize-1), uint16(4096))
	f.Fuzz(func(t *testing.T, data []byte, wsize, rsize uint16) {
		var b body
		for rest := data; len(rest) > 0; {
			n := min(len(rest), int(wsize)+1)
			if k, err := b.Write(rest[:n]); k != n || err != nil {
				t.Fatalf("Write = %d, %v", k, err)
			}
			rest = rest[n:]
		}
		if b.n != int64(len(data)) {
			t.Fatalf("length %d, wrote %d", b.n, len(data))
		}
		for range 2 {
			var got []byte
			buf := make([]byte, int(rsize)+1)
			r := b.reader()
			for {
				n, err := r.Read(buf)
				got = append(got, buf[:n]...)
				if err == io.EOF {
					break
				}
				if err != nil || n == 0 {
					t.Fatalf("Read = %d, %v", n, err)
				}
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("read %d bytes back, wrote %d", len(got), len(data))
			}
		}
	})
}

// TestApplySendsLength checks what ufpd receives of a batch through the
// client: a Content-Length that is the body's, and the batch.
func TestApplySendsLength(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "ufpd.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Batch, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, err := io.ReadAll(r.Body)
		var b Batch
		if err != nil || r.ContentLength != int64(len(raw)) || json.Unmarshal(raw, &b) != nil {
			http.Error(w, fmt.Sprintf(`{"message":"length %d, read %d: %v"}`, r.ContentLength, len(raw), err), http.StatusBadRequest)
			return
		}
		got <- &b
		w.Write([]byte(`{"revision":3}`))
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	want := testBatches()["many"]
	res, err := NewClient(sock).Apply(context.Background(), want)
	if err != nil || res.Revision != 3 {
		t.Fatalf("Apply = %+v, %v", res, err)
	}
	if b := <-got; !reflect.DeepEqual(b, want) {
		t.Errorf("ufpd received a different batch")
	}
}
