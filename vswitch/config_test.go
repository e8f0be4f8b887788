package vswitch

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/vfp"
)

// basePolicy is a valid policy that uses most of the document's fields; the
// tests of malformed policies break one thing in it at a time.
const basePolicy = `{
  "switch": {
    "name": "sw-test",
    "gateway": {"mac": "02:00:00:00:00:01", "ips": ["10.0.0.1", "fd00::1"]},
    "flowTable": {
      "maxFlows": 1000, "shards": 4, "onFull": "evict-oldest",
      "timeouts": {"udp": "30s", "tcpEstablished": "2h", "icmp": "1500ms"}
    }
  },
  "ports": [
    {
      "name": "pod-a", "mac": "02:00:00:00:00:0a", "ips": ["10.0.0.10", "fd00::10"],
      "layers": [
        {
          "name": "acl",
          "default": {"out": "allow", "in": "block"},
          "groups": [
            {
              "name": "ingress",
              "match": {"ipVersion": 4},
              "rules": [
                {"name": "web", "priority": 100,
                 "match": {"direction": "in", "protocols": ["tcp"], "dstPorts": ["80", "8000-8080"], "srcIPs": ["10.0.0.0/24", "10.0.1.5"]},
                 "action": {"type": "allow"}, "stateful": true},
                {"name": "dnat", "priority": 200,
                 "match": {"direction": "in", "protocols": ["udp", "17"], "dstIPs": ["10.0.0.10"]},
                 "action": {"type": "allow", "modify": {"dstIP": "10.0.0.10", "dstPort": 5353}}},
                {"name": "encap", "priority": 300,
                 "match": {"direction": "out", "dstIPs": ["10.244.1.0/24"]},
                 "action": {"type": "allow", "push": {"vni": 4096, "srcMAC": "02:00:00:00:00:fe", "dstMAC": "02:00:00:00:01:fe",
                   "srcIP": "192.168.1.10", "dstIP": "192.168.1.20"}}, "terminating": true}
              ]
            }
          ]
        }
      ]
    },
    {"name": "pod-b", "mac": "02:00:00:00:00:0b", "ips": ["10.0.0.11"]},
    {
      "name": "uplink", "mac": "02:00:00:00:00:fe", "uplink": true,
      "layers": [
        {
          "name": "vnet",
          "groups": [
            {"name": "overlay", "rules": [
              {"name": "decap", "priority": 1, "match": {"vnis": [4096]}, "action": {"type": "allow", "outer": "pop"}}
            ]}
          ]
        }
      ]
    }
  ]
}`

// doc is a policy as generic JSON, for editing.
type doc = map[string]any

func parseDoc(t *testing.T, s string) doc {
	t.Helper()
	var d doc
	if err := json.Unmarshal([]byte(s), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// jsonValue decodes a JSON value written in a test.
func jsonValue(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad JSON in the test: %v\n%s", err, s)
	}
	return v
}

// editJSON returns the JSON document base with edit applied.
func editJSON(t *testing.T, base string, edit func(d doc)) []byte {
	t.Helper()
	d := jsonValue(t, base).(doc)
	if edit != nil {
		edit(d)
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// at walks v (a document or part of one) along path (object keys and list
// indices) and returns the object there.
func at(v any, path ...any) doc {
	for _, p := range path {
		switch p := p.(type) {
		case string:
			v = v.(doc)[p]
		case int:
			v = v.([]any)[p]
		}
	}
	return v.(doc)
}

func rule0(d doc) doc { return at(d, "ports", 0, "layers", 0, "groups", 0, "rules", 0) }
func rule1(d doc) doc { return at(d, "ports", 0, "layers", 0, "groups", 0, "rules", 1) }
func rule2(d doc) doc { return at(d, "ports", 0, "layers", 0, "groups", 0, "rules", 2) }
func timeouts(d doc) doc {
	return at(d, "switch", "flowTable", "timeouts")
}

const rulePath = "ports[0].layers[0].groups[0].rules"

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		// Either raw is the whole document, or edit changes basePolicy.
		raw  string
		edit func(d doc)
		want string // a substring of the error: the field path and what is wrong
	}{
		// Structure.
		{name: "unknown field at depth", edit: func(d doc) { r := rule0(d); r["prio"] = r["priority"]; delete(r, "priority") },
			want: rulePath + `[0].prio: unknown field "prio"`},
		{name: "unknown field beside a known one", edit: func(d doc) { rule1(d)["prio"] = 5 },
			want: rulePath + `[1].prio: unknown field "prio"`},
		{name: "unknown top-level field", edit: func(d doc) { d["swtich"] = doc{} }, want: `swtich: unknown field "swtich"`},
		{name: "unknown field in a match", edit: func(d doc) { at(d, "ports", 0, "layers", 0, "groups", 0, "match")["vlan"] = 7 },
			want: `ports[0].layers[0].groups[0].match.vlan: unknown field "vlan"`},
		{name: "unknown field in timeouts", edit: func(d doc) { timeouts(d)["tcp"] = "5s" },
			want: `switch.flowTable.timeouts.tcp: unknown field "tcp"`},
		{name: "root is not an object", raw: `[]`, want: "policy: want an object, got a list"},
		{name: "ports is not a list", edit: func(d doc) { d["ports"] = doc{} }, want: "ports: want a list, got an object"},
		{name: "port is not an object", edit: func(d doc) { d["ports"].([]any)[1] = "pod-b" }, want: `ports[1]: want an object, got "pod-b"`},

		// Types.
		{name: "MAC given a number", edit: func(d doc) { at(d, "ports", 0)["mac"] = 5 }, want: "ports[0].mac: want a string, got the number 5"},
		{name: "IP given a number", edit: func(d doc) { at(d, "ports", 1)["ips"] = []any{10} }, want: "ports[1].ips[0]: want a string, got the number 10"},
		{name: "uplink given a string", edit: func(d doc) { at(d, "ports", 2)["uplink"] = "yes" }, want: `ports[2].uplink: want true or false, got "yes"`},
		{name: "priority given a string", edit: func(d doc) { rule0(d)["priority"] = "100" },
			want: rulePath + `[0].priority: want a number, got "100"`},
		{name: "negative priority", edit: func(d doc) { rule2(d)["priority"] = -1 },
			want: rulePath + "[2].priority: want an integer from 0 to 4294967295, got -1"},
		{name: "fractional priority", edit: func(d doc) { rule0(d)["priority"] = 1.5 },
			want: rulePath + "[0].priority: want an integer from 0 to 4294967295, got 1.5"},
		{name: "priority beyond 32 bits", edit: func(d doc) { rule0(d)["priority"] = 1 << 32 },
			want: rulePath + "[0].priority: want an integer from 0 to 4294967295, got 4294967296"},
		{name: "ipVersion beyond 8 bits", edit: func(d doc) { at(d, "ports", 0, "layers", 0, "groups", 0, "match")["ipVersion"] = 260 },
			want: "ports[0].layers[0].groups[0].match.ipVersion: want an integer from 0 to 255, got 260"},
		{name: "modify port beyond 16 bits", edit: func(d doc) { at(rule1(d), "action", "modify")["dstPort"] = 70000 },
			want: rulePath + "[1].action.modify.dstPort: want an integer from 0 to 65535, got 70000"},
		{name: "maxFlows given a string", edit: func(d doc) { at(d, "switch", "flowTable")["maxFlows"] = "many" },
			want: `switch.flowTable.maxFlows: want a number, got "many"`},
		{name: "protocols given a string", edit: func(d doc) { at(rule0(d), "match")["protocols"] = "tcp" },
			want: rulePath + `[0].match.protocols: want a list, got "tcp"`},

		// Rules.
		{name: "missing priority", edit: func(d doc) { delete(rule1(d), "priority") },
			want: rulePath + "[1].priority: every rule needs a priority"},
		{name: "null priority", edit: func(d doc) { rule1(d)["priority"] = nil },
			want: rulePath + "[1].priority: every rule needs a priority"},
		{name: "duplicate priority", edit: func(d doc) { rule2(d)["priority"] = 100 },
			want: rulePath + `[2].priority: 100 is also the priority of rule "web"`},
		{name: "duplicate rule name", edit: func(d doc) { rule2(d)["name"] = "web" },
			want: rulePath + `[2].name: "web" is also the name of rules[0]`},
		{name: "rule without a name", edit: func(d doc) { delete(rule1(d), "name") },
			want: rulePath + "[1].name: a rule needs a name"},
		{name: "duplicate layer name", edit: func(d doc) {
			p := at(d, "ports", 0)
			p["layers"] = append(p["layers"].([]any), doc{"name": "acl"})
		}, want: `ports[0].layers[1].name: "acl" is also the name of layers[0]`},
		{name: "bad layer default", edit: func(d doc) { at(d, "ports", 0, "layers", 0, "default")["in"] = "deny" },
			want: `ports[0].layers[0].default.in: unknown action "deny" (want allow or block)`},

		// Addresses.
		{name: "bad MAC", edit: func(d doc) { at(d, "ports", 1)["mac"] = "02:00:00:00:0b" },
			want: `ports[1].mac: "02:00:00:00:0b" is not a MAC address`},
		{name: "missing MAC", edit: func(d doc) { delete(at(d, "ports", 1), "mac") }, want: "ports[1].mac: a MAC address is required"},
		{name: "multicast MAC", edit: func(d doc) { at(d, "ports", 1)["mac"] = "01:00:5e:00:00:01" },
			want: "ports[1].mac: 01:00:5e:00:00:01 is not a unicast address"},
		{name: "bad MAC in a match", edit: func(d doc) { at(rule0(d), "match")["srcMACs"] = []any{"02:00:00:00:00:0a", "zz"} },
			want: rulePath + `[0].match.srcMACs[1]: "zz" is not a MAC address`},
		{name: "bad IP", edit: func(d doc) { at(d, "ports", 1)["ips"] = []any{"10.0.0.300"} },
			want: `ports[1].ips[0]: "10.0.0.300" is not an IP address`},
		{name: "IP with a zone", edit: func(d doc) { at(d, "ports", 1)["ips"] = []any{"10.0.0.11", "fe80::1%eth0"} },
			want: `ports[1].ips[1]: "fe80::1%eth0": zones are not allowed`},
		{name: "bad gateway IP", edit: func(d doc) { at(d, "switch", "gateway")["ips"] = []any{"10.0.0.1", "gateway"} },
			want: `switch.gateway.ips[1]: "gateway" is not an IP address`},
		{name: "bad gateway MAC", edit: func(d doc) { at(d, "switch", "gateway")["mac"] = "ff:ff:ff:ff:ff:ff" },
			want: "switch.gateway.mac: ff:ff:ff:ff:ff:ff is not a unicast address"},
		{name: "bad prefix", edit: func(d doc) { at(rule0(d), "match")["srcIPs"] = []any{"10.0.0.0/33"} },
			want: rulePath + `[0].match.srcIPs[0]: "10.0.0.0/33" is not an IP prefix or address`},
		{name: "prefix with host bits", edit: func(d doc) { at(rule1(d), "match")["dstIPs"] = []any{"10.0.0.1/24"} },
			want: rulePath + "[1].match.dstIPs[0]: 10.0.0.1/24 has host bits set (did you mean 10.0.0.0/24?)"},
		{name: "IPv4-mapped prefix", edit: func(d doc) { at(rule1(d), "match")["dstIPs"] = []any{"::ffff:10.0.0.0/120"} },
			want: rulePath + `[1].match.dstIPs[0]: "::ffff:10.0.0.0/120": write IPv4 prefixes in IPv4 form`},
		{name: "bad protocol", edit: func(d doc) { at(rule0(d), "match")["protocols"] = []any{"tcp", "tcpp"} },
			want: rulePath + `[0].match.protocols[1]: "tcpp" is not a protocol`},
		{name: "protocol number beyond 255", edit: func(d doc) { at(rule0(d), "match")["protocols"] = []any{"256"} },
			want: rulePath + `[0].match.protocols[0]: "256" is not a protocol`},
		{name: "bad port range", edit: func(d doc) { at(rule0(d), "match")["dstPorts"] = []any{"80", "80-70"} },
			want: rulePath + `[0].match.dstPorts[1]: range "80-70" is empty`},
		{name: "port beyond 16 bits", edit: func(d doc) { at(rule0(d), "match")["srcPorts"] = []any{"65536"} },
			want: rulePath + `[0].match.srcPorts[0]: "65536" is not a port or port range`},
		{name: "port range without an end", edit: func(d doc) { at(rule0(d), "match")["srcPorts"] = []any{"1000-"} },
			want: rulePath + `[0].match.srcPorts[0]: "1000-" is not a port or port range`},
		{name: "bad direction", edit: func(d doc) { at(rule0(d), "match")["direction"] = "egress" },
			want: rulePath + `[0].match.direction: unknown direction "egress"`},
		{name: "bad ipVersion", edit: func(d doc) { at(rule0(d), "match")["ipVersion"] = 5 },
			want: rulePath + "[0].match.ipVersion: 5 is not 4 or 6"},

		// Ports.
		{name: "port without a name", edit: func(d doc) { at(d, "ports", 1)["name"] = "" }, want: "ports[1].name: a port needs a name"},
		{name: "duplicate port names", edit: func(d doc) { at(d, "ports", 2)["name"] = "pod-a" },
			want: `ports[2].name: "pod-a" is also the name of another port`},
		{name: "duplicate port MACs", edit: func(d doc) { at(d, "ports", 1)["mac"] = "02:00:00:00:00:0a" },
			want: `ports[1].mac: 02:00:00:00:00:0a is already used by port "pod-a"`},
		{name: "port MAC is the gateway's", edit: func(d doc) { at(d, "ports", 1)["mac"] = "02:00:00:00:00:01" },
			want: "ports[1].mac: 02:00:00:00:00:01 is already used by the gateway"},
		{name: "duplicate port IPs", edit: func(d doc) { at(d, "ports", 1)["ips"] = []any{"fd00::10"} },
			want: `ports[1].ips[0]: fd00::10 is already used by port "pod-a"`},
		{name: "IPv4 address in IPv6 form", edit: func(d doc) { at(d, "ports", 1)["ips"] = []any{"::ffff:10.0.0.10"} },
			want: `ports[1].ips[0]: "::ffff:10.0.0.10": write IPv4 addresses in IPv4 form`},
		{name: "two uplinks", edit: func(d doc) { at(d, "ports", 1)["uplink"] = true },
			want: `ports[2].uplink: port "pod-b" is the uplink already`},
		{name: "gateway IP equal to a port IP", edit: func(d doc) { at(d, "switch", "gateway")["ips"] = []any{"10.0.0.11"} },
			want: "ports[1].ips[0]: 10.0.0.11 is the gateway's address"},
		{name: "empty ports list", edit: func(d doc) { d["ports"] = []any{} }, want: "ports: a switch needs at least one port"},
		{name: "no ports", edit: func(d doc) { delete(d, "ports") }, want: "ports: a switch needs at least one port"},

		// Flow table.
		{name: "bad onFull", edit: func(d doc) { at(d, "switch", "flowTable")["onFull"] = "drop-all" },
			want: `switch.flowTable.onFull: unknown policy "drop-all" (want refuse-new or evict-oldest)`},
		{name: "negative duration", edit: func(d doc) { timeouts(d)["udp"] = "-5s" },
			want: "switch.flowTable.timeouts.udp: duration -5s must be positive"},
		{name: "zero duration", edit: func(d doc) { timeouts(d)["tcpClosed"] = "0s" },
			want: "switch.flowTable.timeouts.tcpClosed: duration 0s must be positive"},
		{name: "garbage duration", edit: func(d doc) { timeouts(d)["icmp"] = "soon" },
			want: `switch.flowTable.timeouts.icmp: time: invalid duration "soon"`},
		{name: "duration given a number", edit: func(d doc) { timeouts(d)["other"] = 30 },
			want: "switch.flowTable.timeouts.other: want a duration string"},
		{name: "negative maxFlows", edit: func(d doc) { at(d, "switch", "flowTable")["maxFlows"] = -1 },
			want: "switch.flowTable.maxFlows: must be positive"},
		{name: "shards not a power of two", edit: func(d doc) { at(d, "switch", "flowTable")["shards"] = 3 },
			want: "switch.flowTable.shards: must be a power of two"},

		// Actions.
		{name: "unknown action type", edit: func(d doc) { at(rule0(d), "action")["type"] = "deny" },
			want: rulePath + `[0].action.type: unknown action "deny" (want allow or block)`},
		{name: "missing action type", edit: func(d doc) { delete(at(rule2(d), "action"), "type") },
			want: rulePath + "[2].action.type: every action needs a type"},
		{name: "missing action", edit: func(d doc) { delete(rule0(d), "action") },
			want: rulePath + "[0].action.type: every action needs a type"},
		{name: "block with modify", edit: func(d doc) { at(rule1(d), "action")["type"] = "block" },
			want: rulePath + "[1].action: a block action cannot modify, pop or push headers"},
		{name: "block with push", edit: func(d doc) { at(rule2(d), "action")["type"] = "block" },
			want: rulePath + "[2].action: a block action cannot modify, pop or push headers"},
		{name: "block with pop", edit: func(d doc) {
			at(d, "ports", 2, "layers", 0, "groups", 0, "rules", 0, "action")["type"] = "block"
		}, want: "ports[2].layers[0].groups[0].rules[0].action: a block action cannot modify, pop or push headers"},
		{name: "block requiring no outer header", edit: func(d doc) { rule0(d)["action"] = doc{"type": "block", "outer": "not-present"} },
			want: rulePath + "[0].action: a block action cannot modify, pop or push headers"},
		{name: "unknown outer operation", edit: func(d doc) { at(rule0(d), "action")["outer"] = "push" },
			want: rulePath + `[0].action.outer: unknown operation "push" (want pop or not-present)`},
		{name: "modify naming nothing", edit: func(d doc) { at(rule1(d), "action")["modify"] = doc{} },
			want: rulePath + "[1].action.modify: names no field to modify"},
		{name: "modify with a bad MAC", edit: func(d doc) { at(rule1(d), "action", "modify")["srcMAC"] = "x" },
			want: rulePath + `[1].action.modify.srcMAC: "x" is not a MAC address`},
		{name: "modify with a bad IP", edit: func(d doc) { at(rule1(d), "action", "modify")["dstIP"] = "10.0.0" },
			want: rulePath + `[1].action.modify.dstIP: "10.0.0" is not an IP address`},
		{name: "push with mixed address families", edit: func(d doc) { at(rule2(d), "action", "push")["dstIP"] = "fd00::20" },
			want: rulePath + "[2].action.push: outer: src 192.168.1.10 and dst fd00::20 are not of one family"},
		{name: "push without addresses", edit: func(d doc) { delete(at(rule2(d), "action", "push"), "srcIP") },
			want: rulePath + "[2].action.push.srcIP: an IP address is required"},
		{name: "push without a MAC", edit: func(d doc) { delete(at(rule2(d), "action", "push"), "dstMAC") },
			want: rulePath + "[2].action.push.dstMAC: a MAC address is required"},
		{name: "push VNI beyond 24 bits", edit: func(d doc) { at(rule2(d), "action", "push")["vni"] = 1 << 24 },
			want: rulePath + "[2].action.push: outer: vni 16777216 does not fit in 24 bits"},
		{name: "match VNI beyond 24 bits", edit: func(d doc) {
			at(d, "ports", 2, "layers", 0, "groups", 0, "rules", 0, "match")["vnis"] = []any{4096, 1 << 24}
		}, want: "ports[2].layers[0].groups[0].rules[0].match.vnis[1]: 16777216 does not fit in 24 bits"},
		{name: "match VNI beyond 32 bits", edit: func(d doc) {
			at(d, "ports", 2, "layers", 0, "groups", 0, "rules", 0, "match")["vnis"] = []any{1 << 32}
		}, want: "ports[2].layers[0].groups[0].rules[0].match.vnis[0]: want an integer from 0 to 4294967295"},

		// JSON.
		{name: "invalid JSON syntax", raw: "{\n  \"switch\": {},\n  \"ports\": [,]\n}", want: "policy: invalid JSON at line 3"},
		{name: "truncated JSON", raw: "{\n  \"switch\": {},\n  \"ports\": [\n", want: "policy: invalid JSON at line 3: the document ends too early"},
		{name: "empty document", raw: "", want: "policy: empty document"},
		{name: "trailing data after the document", raw: basePolicy + "\n{}", want: "policy: unexpected data after the JSON document"},
		{name: "trailing garbage after the document", raw: basePolicy + " x", want: "policy: unexpected data after the JSON document"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := []byte(tt.raw)
			if tt.edit != nil {
				d := parseDoc(t, basePolicy)
				tt.edit(d)
				var err error
				if raw, err = json.MarshalIndent(d, "", "  "); err != nil {
					t.Fatal(err)
				}
			}
			c, err := ParseConfig(raw)
			if err == nil {
				t.Fatalf("ParseConfig succeeded, want an error containing %q", tt.want)
			}
			if c != nil {
				t.Errorf("ParseConfig returned a config with its error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error:\n\t%v\nwant it to contain:\n\t%s", err, tt.want)
			}
		})
	}
}

// TestParseConfigDeterministic checks that a document with several faults
// reports the same one every time.
func TestParseConfigDeterministic(t *testing.T) {
	d := parseDoc(t, basePolicy)
	r := rule0(d)
	r["zeta"], r["alpha"], r["mid"] = 1, 2, 3
	at(r, "match")["srcIPs"] = []any{"10.0.0.1/8"}
	at(r, "match")["dstIPs"] = []any{"10.0.0.1/16"}
	raw, _ := json.Marshal(d)
	for range 20 {
		_, err := ParseConfig(raw)
		if err == nil || !strings.Contains(err.Error(), rulePath+`[0].alpha: unknown field "alpha"`) {
			t.Fatalf("error %v, want the first unknown field in sorted order", err)
		}
	}
	delete(r, "zeta")
	delete(r, "alpha")
	delete(r, "mid")
	raw, _ = json.Marshal(d)
	for range 20 {
		_, err := ParseConfig(raw)
		if err == nil || !strings.Contains(err.Error(), rulePath+"[0].match.srcIPs[0]: 10.0.0.1/8 has host bits set") {
			t.Fatalf("error %v, want the srcIPs error", err)
		}
	}
}

func TestParseConfigRoundTrip(t *testing.T) {
	c, err := ParseConfig([]byte(basePolicy))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := c.compile(vfp.NewEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(pol.ports) != 3 || pol.uplink == nil || pol.uplink.Name != "uplink" || len(pol.gwIPs) != 2 {
		t.Fatalf("compiled policy: %d ports, uplink %v, gateway %v", len(pol.ports), pol.uplink, pol.gwIPs)
	}
	if pol.ftable.MaxFlows != 1000 || pol.ftable.Shards != 4 || pol.ftable.OnFull != dataplane.EvictOldest ||
		pol.ftable.Timeouts.UDP.String() != "30s" || pol.ftable.Timeouts.ICMP.String() != "1.5s" {
		t.Errorf("flow table config %+v", pol.ftable)
	}
	if web := pol.byName["pod-a"].Layers[0].Groups[0].Rules[0]; web.Match.String() != "dir=in src=10.0.0.0/24,10.0.1.5/32 proto=tcp dport=80,8000-8080" {
		t.Errorf("rule web compiled to %s", web.Match.String())
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := ParseConfig(b)
	if err != nil {
		t.Fatalf("re-parsing the marshalled policy: %v\n%s", err, b)
	}
	if !reflect.DeepEqual(c, c2) {
		t.Errorf("round trip changed the policy:\nbefore %+v\nafter  %+v", c, c2)
	}
	b2, _ := json.Marshal(c2)
	if string(b) != string(b2) {
		t.Errorf("marshalling is not stable:\n%s\n%s", b, b2)
	}
}

// TestScenarioPolicies parses every policy under testdata/scenarios: all are
// valid except the one the revalidation scenario uses to show a rejection,
// and the valid ones round-trip.
func TestScenarioPolicies(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "scenarios", "*", "policy*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario policies: %v", err)
	}
	for _, f := range files {
		c, err := LoadConfig(f)
		if strings.HasSuffix(f, filepath.Join("revalidation", "policy@11.json")) {
			if err == nil || !strings.Contains(err.Error(), f+": ports[1].layers[0].groups[0].rules[1].priority") {
				t.Errorf("%s: error %v, want the duplicate priority named with the file", f, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		b, _ := json.Marshal(c)
		if c2, err := ParseConfig(b); err != nil || !reflect.DeepEqual(c, c2) {
			t.Errorf("%s: round trip: %v", f, err)
		}
	}
	if _, err := LoadConfig(filepath.Join(t.TempDir(), "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadConfig of a missing file: %v", err)
	}
}

func mustParse(t *testing.T, s string) *Config {
	t.Helper()
	c, err := ParseConfig([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestApplyInvalidKeepsPolicy(t *testing.T) {
	sw, err := New(mustParse(t, basePolicy))
	if err != nil {
		t.Fatal(err)
	}
	cfg, gen := sw.Config(), sw.Generation()
	bad := &Config{Switch: cfg.Switch, Ports: append([]vfp.PortConfig{}, cfg.Ports...)}
	bad.Ports[1].Name = "pod-a"
	err = sw.Apply(bad)
	if err == nil || !strings.Contains(err.Error(), `ports[1].name: "pod-a" is also the name of another port`) {
		t.Fatalf("Apply(duplicate names) = %v", err)
	}
	if errors.Is(err, ErrRestartNeeded) {
		t.Errorf("a validation error wraps ErrRestartNeeded")
	}
	if sw.Config() != cfg || sw.Generation() != gen {
		t.Errorf("after a rejected Apply: config changed %v, generation %d -> %d", sw.Config() != cfg, gen, sw.Generation())
	}
	if p := sw.Port("pod-b"); p == nil || p.ID != 1 {
		t.Errorf("pod-b after a rejected Apply: %+v", p)
	}
	if err := sw.Apply(mustParse(t, basePolicy)); err != nil {
		t.Fatal(err)
	}
	if sw.Generation() != gen+1 {
		t.Errorf("generation %d after a good Apply, want %d", sw.Generation(), gen+1)
	}
}

func TestApplyRestartNeeded(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(d doc)
		wantErr string // "" if the change applies
	}{
		{name: "maxFlows", edit: func(d doc) { at(d, "switch", "flowTable")["maxFlows"] = 2000 }, wantErr: "switch.flowTable:"},
		{name: "onFull", edit: func(d doc) { delete(at(d, "switch", "flowTable"), "onFull") }, wantErr: "switch.flowTable:"},
		{name: "timeout", edit: func(d doc) { timeouts(d)["udp"] = "31s" }, wantErr: "switch.flowTable:"},
		{name: "vxlanPort", edit: func(d doc) { at(d, "switch")["vxlanPort"] = 8472 }, wantErr: "switch.vxlanPort:"},
		{name: "vxlanZeroUDPChecksum6", edit: func(d doc) { at(d, "switch")["vxlanZeroUDPChecksum6"] = true }, wantErr: "switch.vxlanZeroUDPChecksum6:"},
		{name: "default timeout spelled out", edit: func(d doc) { timeouts(d)["tcpTimeWait"] = dataplane.DefaultTimeouts().TCPTimeWait.String() }},
		{name: "rules and ports may change", edit: func(d doc) {
			rule0(d)["priority"] = 5
			d["ports"] = append(d["ports"].([]any), doc{"name": "pod-c", "mac": "02:00:00:00:00:0c"})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sw, err := New(mustParse(t, basePolicy))
			if err != nil {
				t.Fatal(err)
			}
			gen := sw.Generation()
			d := parseDoc(t, basePolicy)
			tt.edit(d)
			b, _ := json.Marshal(d)
			err = sw.Apply(mustParse(t, string(b)))
			if tt.wantErr == "" {
				if err != nil || sw.Generation() != gen+1 {
					t.Fatalf("Apply = %v, generation %d", err, sw.Generation())
				}
				return
			}
			if !errors.Is(err, ErrRestartNeeded) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Apply = %v, want an error naming %s wrapping ErrRestartNeeded", err, tt.wantErr)
			}
			if sw.Generation() != gen {
				t.Errorf("generation changed to %d", sw.Generation())
			}
		})
	}
}

// portsPolicy is a policy of plain ports with the given names; port n has
// MAC 02:00:00:00:01:n and IP 10.0.1.n, so a port keeps its addresses
// across policies. Every port allows everything, statefully.
func portsPolicy(t *testing.T, names ...string) *Config {
	t.Helper()
	c := &Config{}
	for _, n := range names {
		var k byte
		for _, ch := range n {
			k = k*31 + byte(ch)
		}
		prio := uint32(1)
		c.Ports = append(c.Ports, vfp.PortConfig{
			Name: n, MAC: dataplane.MAC{2, 0, 0, 0, 1, k}, IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 0, 1, k})},
			Layers: []vfp.LayerConfig{{Name: "acl", Groups: []vfp.GroupConfig{{Name: "g", Rules: []vfp.RuleConfig{{
				Name: "all", Priority: &prio, Action: vfp.ActionConfig{Type: "allow"}, Stateful: true,
			}}}}}},
		})
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return mustParse(t, string(b))
}

func portIDs(sw *Switch) map[string]dataplane.PortID {
	ids := map[string]dataplane.PortID{}
	for _, p := range sw.Ports() {
		ids[p.Name] = p.ID
		if sw.PortByID(p.ID) != p || sw.Port(p.Name) != p {
			panic("port lookups disagree")
		}
	}
	return ids
}

func TestApplyPortIDs(t *testing.T) {
	sw, err := New(portsPolicy(t, "a", "b", "c"))
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		ports []string
		want  map[string]dataplane.PortID
	}{
		{[]string{"a", "b", "c"}, map[string]dataplane.PortID{"a": 0, "b": 1, "c": 2}},
		// Reordered and b removed: a and c keep their IDs.
		{[]string{"c", "a"}, map[string]dataplane.PortID{"c": 2, "a": 0}},
		// d takes b's freed ID.
		{[]string{"c", "a", "d"}, map[string]dataplane.PortID{"c": 2, "a": 0, "d": 1}},
		// No ID is free: e gets a new one.
		{[]string{"e", "c", "a", "d"}, map[string]dataplane.PortID{"e": 3, "c": 2, "a": 0, "d": 1}},
		// e and c removed while b returns: b does not take an ID freed by
		// this very change (their flows are purged only after it), nor its
		// old one, which d holds.
		{[]string{"a", "b", "d"}, map[string]dataplane.PortID{"a": 0, "b": 4, "d": 1}},
	}
	for i, st := range steps {
		if i > 0 {
			if err := sw.Apply(portsPolicy(t, st.ports...)); err != nil {
				t.Fatal(err)
			}
		}
		if got := portIDs(sw); !reflect.DeepEqual(got, st.want) {
			t.Errorf("step %d %v: IDs %v, want %v", i, st.ports, got, st.want)
		}
		for _, p := range sw.Ports() {
			if sw.Decapsulates(p.ID) {
				t.Errorf("step %d: port %s decapsulates", i, p.Name)
			}
		}
	}
	// f and g take the IDs e and c freed, 2 and 3.
	if err := sw.Apply(portsPolicy(t, "a", "b", "d", "f", "g")); err != nil {
		t.Fatal(err)
	}
	ids := portIDs(sw)
	if f, g := ids["f"], ids["g"]; min(f, g) != 2 || max(f, g) != 3 || ids["a"] != 0 || ids["b"] != 4 || ids["d"] != 1 {
		t.Errorf("IDs %v, want f and g on 2 and 3", ids)
	}
	if sw.PortByID(5) != nil {
		t.Errorf("port ID 5 is in use")
	}
	if sw.PortByID(dataplane.NoPort) != nil || sw.Port("nope") != nil {
		t.Errorf("lookups of absent ports are not nil")
	}
}

func TestApplyPurgesFlowsOfRemovedPorts(t *testing.T) {
	sw, err := New(portsPolicy(t, "a", "b", "c"))
	if err != nil {
		t.Fatal(err)
	}
	w := sw.Pipeline().NewWorker()
	ft := sw.Pipeline().FlowTable()
	send := func(from, to string, sport uint16) *dataplane.Packet {
		t.Helper()
		src, dst := sw.Port(from), sw.Port(to)
		p := packet(t, src.ID, udpFrame(src.MAC, dst.MAC, src.IPs[0], sport, dst.IPs[0], 53, "q"))
		w.Process([]*dataplane.Packet{p}, 1)
		if p.Drop != dataplane.NotDropped || p.OutPort != dst.ID {
			t.Fatalf("%s -> %s: drop %s out %d", from, to, p.Drop, p.OutPort)
		}
		return p
	}
	send("a", "b", 1000) // a->b and its reverse b->a
	send("b", "c", 1001) // b->c and c->b
	send("a", "c", 1002) // a->c and c->a
	if n := ft.Len(); n != 6 {
		t.Fatalf("%d flows, want 6", n)
	}
	idB := sw.Port("b").ID
	if err := sw.Apply(portsPolicy(t, "a", "c")); err != nil {
		t.Fatal(err)
	}
	var left []string
	ft.Range(func(f *dataplane.Flow) bool {
		k := f.Key()
		if k.InPort == idB || f.Action().Out == idB {
			t.Errorf("flow %s of the removed port is still in the table", k)
		}
		left = append(left, k.String())
		return true
	})
	if len(left) != 2 || ft.Len() != 2 {
		t.Errorf("flows left: %v (Len %d), want a->c and its reverse", left, ft.Len())
	}
	// A port that takes b's ID finds no flow of b's.
	if err := sw.Apply(portsPolicy(t, "a", "c", "d")); err != nil {
		t.Fatal(err)
	}
	if sw.Port("d").ID != idB {
		t.Fatalf("d has ID %d, want b's %d", sw.Port("d").ID, idB)
	}
	p := send("d", "a", 1000)
	if p.Path != dataplane.PathSlow {
		t.Errorf("d's first packet took path %s", p.Path)
	}
}
