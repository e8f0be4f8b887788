package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/agent"
)

func hostname() (string, error) { return "Host-A", nil }

// TestConfig parses flags and configuration files: the flags given
// override the file, and every error names the flag or the field.
func TestConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	jsonFile := write("c.json", `{"network": "overlay", "sourceVIP": ["10.244.0.250"], "syncPeriod": "45s"}`)
	unknown := write("unknown.yaml", "network: overlay\nnodeIp: [10.0.0.1]\n")
	badDur := write("baddur.yaml", "network: overlay\nsyncPeriod: 10\n")
	badType := write("badtype.yaml", "network: overlay\nenableDSR: \"yes\"\n")
	dup := write("dup.yaml", "network: overlay\nnetwork: other\n")
	badAddr := write("badaddr.yaml", "network: overlay\nnodeIP: [10.0.0.300]\n")
	linuxFlannel := write("flannel.yaml", "network: pods\npodNetwork: true\nnetworkType: L2Bridge\nvni: 1\nvxlanPort: 8472\n"+
		"vtepMAC: 02:00:00:00:01:01\nmanageNetwork: false\nsubnetFile: /tmp/subnet.env\nflannelAnnotations: false\nmtu: 1400\nipMasq: false\n")
	badVNI := write("badvni.yaml", "network: pods\npodNetwork: true\nvni: \"4096\"\n")
	tests := []struct {
		name    string
		args    []string
		want    func(o *options, c *checked) // nil: an error is wanted
		wantErr string
	}{
		{
			name: "defaults",
			args: []string{"--network", "overlay"},
			want: func(o *options, c *checked) {
				if o.UfpdSocket != "/run/ufp/ufpd.sock" || time.Duration(o.MinSyncPeriod) != 10*time.Millisecond ||
					time.Duration(o.SyncPeriod) != 30*time.Second || o.MetricsBindAddress != "127.0.0.1:10249" ||
					o.HealthzBindAddress != "127.0.0.1:10256" || c.nodeName != "host-a" {
					t.Errorf("defaults %+v %+v", o, c)
				}
			},
		},
		{
			name: "YAML file",
			args: []string{"--config", filepath.Join("testdata", "config.yaml")},
			want: func(o *options, c *checked) {
				want := &checked{
					nodeName:     "node-1",
					nodeIPs:      []netip.Addr{netip.MustParseAddr("192.168.1.10"), netip.MustParseAddr("fd00::10")},
					clusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
					sourceVIPs:   []netip.Addr{netip.MustParseAddr("10.244.0.250")},
					logLevel:     -4,
				}
				if !reflect.DeepEqual(c, want) {
					t.Errorf("checked %+v, want %+v", c, want)
				}
				if !o.EnableDSR || time.Duration(o.SyncPeriod) != time.Minute || time.Duration(o.MinSyncPeriod) != 20*time.Millisecond ||
					o.Kubeconfig != "/etc/ufp/kubeconfig" || o.MetricsBindAddress != "0.0.0.0:10249" {
					t.Errorf("options %+v", o)
				}
			},
		},
		{
			name: "flags override the file",
			args: []string{"--config", jsonFile, "--source-vip", "10.244.0.251,fd00:244::250", "--sync-period", "2m", "--enable-dsr"},
			want: func(o *options, c *checked) {
				if o.Network != "overlay" || time.Duration(o.SyncPeriod) != 2*time.Minute || !o.EnableDSR ||
					!reflect.DeepEqual(c.sourceVIPs, []netip.Addr{netip.MustParseAddr("10.244.0.251"), netip.MustParseAddr("fd00:244::250")}) {
					t.Errorf("options %+v %+v", o, c)
				}
			},
		},
		{name: "network required", args: nil, wantErr: "config field network: required"},
		{name: "unknown field", args: []string{"--config", unknown}, wantErr: `unknown field "nodeIp"`},
		{name: "duration field", args: []string{"--config", badDur}, wantErr: "field syncPeriod: want a duration"},
		{name: "type of a field", args: []string{"--config", badType}, wantErr: "field enableDSR: a string is not a bool"},
		{name: "duplicate field", args: []string{"--config", dup}, wantErr: `key "network" already set`},
		{name: "address field", args: []string{"--config", badAddr}, wantErr: `config field nodeIP: item 1: "10.0.0.300" is not an IP address`},
		{name: "address flag", args: []string{"--network", "x", "--node-ip", "10.0.0.1,bogus"}, wantErr: `--node-ip: item 2: "bogus" is not an IP address`},
		{name: "two of a family", args: []string{"--network", "x", "--source-vip", "10.0.0.1,10.0.0.2"}, wantErr: "--source-vip: at most one address per family"},
		{name: "cidr", args: []string{"--network", "x", "--cluster-cidr", "10.244.0.0"}, wantErr: `--cluster-cidr: item 1: "10.244.0.0" is not a prefix`},
		{name: "periods", args: []string{"--network", "x", "--min-sync-period", "1s", "--sync-period", "100ms"}, wantErr: "--sync-period: 100ms is shorter than the min sync period 1s"},
		{name: "duration flag", args: []string{"--network", "x", "--sync-period", "soon"}, wantErr: `invalid value "soon" for flag -sync-period`},
		{name: "bind address", args: []string{"--network", "x", "--metrics-bind-address", "localhost"}, wantErr: `--metrics-bind-address: "localhost" is not an address and port`},
		{name: "log level", args: []string{"--network", "x", "--log-level", "loud"}, wantErr: `--log-level: "loud" is not debug`},
		{name: "profiling without metrics", args: []string{"--network", "x", "--profiling", "--metrics-bind-address", ""}, wantErr: "--profiling: the profiles are served on the metrics address, which is empty"},
		{name: "profiling", args: []string{"--network", "x", "--profiling"}, want: func(o *options, _ *checked) {
			if !o.EnableProfiling || o.MetricsBindAddress != "127.0.0.1:10249" {
				t.Errorf("options %+v", o)
			}
		}},
		{name: "pod network defaults", args: []string{"--network", "pods", "--pod-network"}, want: func(o *options, c *checked) {
			want := &agent.PodNetwork{Type: "Overlay", VNI: 4096, VXLANPort: 4789, Manage: true, SubnetFile: "/run/flannel/subnet.env", Publish: true, IPMasq: true}
			if !reflect.DeepEqual(c.podNetwork, want) {
				t.Errorf("pod network %+v, want %+v", c.podNetwork, want)
			}
		}},
		{name: "no pod network by default", args: []string{"--network", "pods", "--vni", "1"}, want: func(o *options, c *checked) {
			if c.podNetwork != nil {
				t.Errorf("pod network %+v", c.podNetwork)
			}
		}},
		{name: "pod network file, flags override", args: []string{"--config", linuxFlannel, "--vni", "2"}, want: func(o *options, c *checked) {
			mac, _ := net.ParseMAC("02:00:00:00:01:01")
			want := &agent.PodNetwork{Type: "L2Bridge", VNI: 2, VXLANPort: 8472, VtepMAC: mac, SubnetFile: "/tmp/subnet.env", MTU: 1400}
			if !reflect.DeepEqual(c.podNetwork, want) {
				t.Errorf("pod network %+v, want %+v", c.podNetwork, want)
			}
		}},
		{name: "network type", args: []string{"--network", "x", "--pod-network", "--network-type", "Transparent"}, wantErr: `--network-type: "Transparent" is neither Overlay nor L2Bridge`},
		{name: "vni", args: []string{"--network", "x", "--pod-network", "--vni", "0"}, wantErr: "--vni: 0 is not a VNI (1 to 16777215)"},
		{name: "vni field", args: []string{"--config", badVNI}, wantErr: "field vni: a string is not a int"},
		{name: "vxlan port", args: []string{"--network", "x", "--pod-network", "--vxlan-port", "65536"}, wantErr: "--vxlan-port: 65536 is not a UDP port (1 to 65535)"},
		{name: "vtep mac", args: []string{"--network", "x", "--pod-network", "--vtep-mac", "01:00:5e:00:00:01"}, wantErr: `--vtep-mac: "01:00:5e:00:00:01" is not a unicast Ethernet MAC`},
		{name: "mtu", args: []string{"--network", "x", "--pod-network", "--mtu", "100"}, wantErr: "--mtu: 100 is not 576 to 65535"},
		{name: "subnet file", args: []string{"--network", "x", "--pod-network", "--subnet-file", "subnet.env"}, wantErr: `--subnet-file: "subnet.env" is not an absolute path`},
		{name: "missing file", args: []string{"--config", filepath.Join(dir, "nope")}, wantErr: "--config: open"},
		{name: "argument", args: []string{"--network", "x", "extra"}, wantErr: `unexpected argument "extra"`},
		{name: "unknown flag", args: []string{"--nodeip", "1.2.3.4"}, wantErr: "flag provided but not defined: -nodeip"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fl := flag.NewFlagSet("ufp-agent", flag.ContinueOnError)
			fl.SetOutput(io.Discard)
			o, given, err := parse(tt.args, fl)
			var c *checked
			if err == nil {
				c, err = check(o, given, hostname)
			}
			if tt.want == nil {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tt.wantErr)
				}
				var ue usageError
				if !errors.As(err, &ue) {
					t.Fatalf("%v is not a usage error (exit 2)", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.want(o, c)
		})
	}
}

// TestRunExit: invalid flags exit 2 with a message naming the flag.
func TestRunExit(t *testing.T) {
	var errb bytes.Buffer
	code := run(context.Background(), []string{"--network", "x", "--node-ip", "nope"}, &errb, func(string) string { return "" })
	if code != 2 || !strings.Contains(errb.String(), "--node-ip") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	code = run(context.Background(), []string{"--network", "x", "--hostname-override", "n"}, &errb, func(string) string { return "" })
	if code != 2 || !strings.Contains(errb.String(), "$KUBECONFIG is not set") {
		t.Fatalf("exit %d without a kubeconfig, stderr %q", code, errb.String())
	}
}
