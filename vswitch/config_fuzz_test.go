package vswitch

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/vfp"
)

// FuzzParseConfig feeds policy documents, at both levels, to the parser.
// It must never panic; an HNS-level document that lowers must compile
// (lowersCompiles); an accepted document must build a switch, lower to a
// VFP-level document that is accepted too, and read back equal after
// marshalling. A rejection says why.
func FuzzParseConfig(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "scenarios", "*", "policy*.json"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"Uplink": {"MacAddress": "02:00:00:00:00:fe"}, "Networks": []}`))
	f.Add([]byte(`{"Networks": [{"Name": "n", "Type": "Overlay", "Policies": [{"Type": "VxlanPort", "Settings": {"Port": 8472}}]}]}`))
	// The host's vNIC with Services (its routes, redirects, services
	// gateway), at both levels.
	f.Add([]byte(hostLBDoc(f)))
	// An endpoint with the services gateway's MAC (refused).
	f.Add([]byte(strings.Replace(hostLBDoc(f), `"02:00:00:00:01:0a"`, `"02:75:66:70:00:01"`, 1)))
	f.Add([]byte(`{"switch": {}, "ports": [{"name": "uplink", "mac": "02:00:00:00:00:fe", "ips": ["192.168.50.1"], "uplink": true},
	  {"name": "host", "mac": "02:00:00:00:00:fe", "ips": ["192.168.50.1"], "host": true,
	   "link": {"routes": [{"destination": "10.96.0.10/32", "nextHop": "169.254.0.1", "onLink": true}],
	    "redirects": [{"protocol": "tcp", "from": "192.168.50.1", "port": 30080, "to": "169.254.0.1"}]}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		lowersCompiles(t, b)
		c, err := ParseConfig(b)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("rejected without a reason")
			}
			return
		}
		sw, err := New(c)
		if err != nil {
			t.Fatalf("accepted, but New fails: %v", err)
		}
		if len(sw.Ports()) == 0 {
			t.Fatal("accepted a switch without ports")
		}
		low, err := c.Lower()
		if err != nil {
			t.Fatalf("accepted, but Lower fails: %v", err)
		}
		lb, err := json.Marshal(low)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseConfig(lb); err != nil {
			t.Fatalf("the lowered document is rejected: %v\n%s", err, lb)
		}
		again, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := ParseConfig(again)
		if err != nil {
			t.Fatalf("the document does not read back: %v\n%s", err, again)
		}
		if b2, _ := json.Marshal(c2); string(b2) != string(again) {
			t.Fatalf("the document changes when read back:\n%s\n%s", again, b2)
		}
	})
}

// lowersCompiles checks the invariant of lowering: an HNS-level document
// that lowers without error compiles without error, for package hns
// refuses an invalid HNS document itself, naming the HNS field. b is
// decoded without validation, as a caller holding a Config value would
// pass it; what does not decode at all is not checked.
func lowersCompiles(t *testing.T, b []byte) {
	t.Helper()
	var c Config
	if json.Unmarshal(b, &c) != nil || !c.IsHNS() {
		return
	}
	low, err := c.Lower()
	if err != nil {
		return
	}
	if _, err := low.compileVFP(vfp.NewEnv(nil)); err != nil {
		lb, _ := json.MarshalIndent(low, "", "  ")
		t.Fatalf("the document lowers, but its lowered form does not compile: %v\n%s\nlowered:\n%s", err, b, lb)
	}
}
