package deploy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/internal/testenv"
)

// TestNodeScript runs ufp-node.sh as the DaemonSet's containers do, on a
// node made of a network namespace whose uplink (a veth) leads to a
// gateway in another namespace, with no route out of either:
// ufpd-config reads the uplink's facts and renders the ConfigMap's
// ufpd.json; run-ufpd moves the node's addresses onto ufpd's vNIC and
// runs ufpd, through which the node then reaches its gateway; SIGTERM
// stops ufpd and puts the addresses back on the uplink.
//
// The ConfigMap's ufpd.json names the host's /run/ufp and /var/lib/ufp;
// the test points them at a temporary directory, and changes nothing
// else of it.
func TestNodeScript(t *testing.T) {
	testenv.NeedRoot(t)
	testenv.NeedTUN(t)
	testenv.NeedTool(t, "ip", "ping")
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	for _, cmd := range []string{"ufpd", "ufpctl"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, cmd), "github.com/ufp-dev/ufp/cmd/"+cmd).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", cmd, err, out)
		}
	}
	tmpl, err := ConfigFile("ufpd.json")
	if err != nil {
		t.Fatal(err)
	}
	state, sock := filepath.Join(dir, "state"), filepath.Join(dir, "ufpd.sock")
	for _, r := range [][2]string{{"/run/ufp/ufpd.sock", sock}, {"/var/lib/ufp/ufpd.state", filepath.Join(state, "ufpd.state")}} {
		if !bytes.Contains(tmpl, []byte(r[0])) {
			t.Fatalf("ufpd.json does not name %s", r[0])
		}
		tmpl = bytes.ReplaceAll(tmpl, []byte(r[0]), []byte(r[1]))
	}
	cfgDir := filepath.Join(dir, "config")
	for _, d := range []string{cfgDir, state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "ufpd.json"), tmpl, 0o644); err != nil {
		t.Fatal(err)
	}

	node, gw := fmt.Sprintf("ufpdep-n%d", os.Getpid()), fmt.Sprintf("ufpdep-g%d", os.Getpid())
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	in := func(ns string, args ...string) string {
		t.Helper()
		return run(append([]string{"ip", "netns", "exec", ns}, args...)...)
	}
	for _, ns := range []string{node, gw} {
		run("ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	run("ip", "link", "add", "name", "up0", "netns", node, "type", "veth", "peer", "name", "gw0", "netns", gw)
	for _, c := range [][]string{
		{gw, "ip", "link", "set", "lo", "up"}, {gw, "ip", "link", "set", "gw0", "up"},
		{gw, "ip", "addr", "add", "192.168.77.1/24", "dev", "gw0"}, {gw, "ip", "addr", "add", "fd00:77::1/64", "dev", "gw0", "nodad"},
		{node, "ip", "link", "set", "lo", "up"}, {node, "ip", "link", "set", "up0", "up"},
		{node, "ip", "addr", "add", "192.168.77.10/24", "dev", "up0"}, {node, "ip", "addr", "add", "fd00:77::10/64", "dev", "up0", "nodad"},
		{node, "ip", "route", "add", "default", "via", "192.168.77.1"}, {node, "ip", "-6", "route", "add", "default", "via", "fd00:77::1"},
	} {
		in(c[0], c[1:]...)
	}
	gwMAC := strings.TrimSpace(in(gw, "cat", "/sys/class/net/gw0/address"))
	env := append(os.Environ(), "UFP_CONFIG_DIR="+cfgDir, "UFP_STATE_DIR="+state, "UFP_BIN_DIR="+bin, "UFP_SOCKET="+sock)
	script, err := filepath.Abs("ufp-node.sh")
	if err != nil {
		t.Fatal(err)
	}

	// ufpd-config: the facts, and ufpd.json rendered and checked.
	c := exec.Command("ip", "netns", "exec", node, "sh", script, "ufpd-config")
	c.Env = env
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("ufpd-config: %v\n%s", err, out)
	}
	facts, err := os.ReadFile(filepath.Join(state, "uplink.env"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"UPLINK=up0", "UPLINK_IPV4=192.168.77.10/24", "GATEWAY_IPV4=192.168.77.1", "GATEWAY_MAC_IPV4=" + gwMAC,
		"UPLINK_IPV6=fd00:77::10/64", "GATEWAY_IPV6=fd00:77::1", "GATEWAY_MAC_IPV6=" + gwMAC} {
		if !strings.Contains("\n"+string(facts), "\n"+want+"\n") {
			t.Errorf("uplink.env lacks %s:\n%s", want, facts)
		}
	}

	// run-ufpd: the addresses move to vEthernet, and the node reaches
	// its gateway through ufpd.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var log bytes.Buffer
	r := exec.CommandContext(ctx, "ip", "netns", "exec", node, "sh", script, "run-ufpd")
	r.Env, r.Stdout, r.Stderr = env, &log, &log
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			r.Process.Kill()
			<-done
		}
	}()
	up := false
	for i := 0; i < 100 && !up; i++ {
		up = exec.Command(filepath.Join(bin, "ufpctl"), "-s", sock, "status").Run() == nil
		if !up {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if !up {
		t.Fatalf("ufpd did not answer within 10 s:\n%s", log.String())
	}
	if a := in(node, "ip", "-o", "addr", "show", "dev", "up0", "scope", "global"); a != "" {
		t.Errorf("the uplink keeps %s", a)
	}
	if a := in(node, "ip", "-o", "-4", "addr", "show", "dev", "vEthernet"); !strings.Contains(a, "192.168.77.10/24") {
		t.Errorf("vEthernet has %q, want the node's 192.168.77.10/24", a)
	}
	pinged := false
	for i := 0; i < 10 && !pinged; i++ { // the first frames after a TAP comes up can be lost
		pinged = exec.Command("ip", "netns", "exec", node, "ping", "-c", "1", "-W", "1", "192.168.77.1").Run() == nil
	}
	if !pinged {
		t.Errorf("the node does not reach its gateway through ufpd:\n%s", log.String())
	}

	// SIGTERM: ufpd stops, vEthernet goes, the addresses come back.
	if err := r.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		stopped = true
		if err != nil {
			t.Errorf("run-ufpd after SIGTERM: %v\n%s", err, log.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("run-ufpd did not stop within 30 s of SIGTERM:\n%s", log.String())
	}
	if a := in(node, "ip", "-o", "-4", "addr", "show", "dev", "up0"); !strings.Contains(a, "192.168.77.10/24") {
		t.Errorf("the uplink has %q after the stop, want 192.168.77.10/24 back\n%s", a, log.String())
	}
	if rt := in(node, "ip", "-4", "route", "show", "default"); !strings.Contains(rt, "via 192.168.77.1 dev up0") {
		t.Errorf("default route %q after the stop, want via 192.168.77.1 dev up0", rt)
	}
	if exec.Command("ip", "netns", "exec", node, "ip", "link", "show", "vEthernet").Run() == nil {
		t.Errorf("vEthernet is still there after the stop")
	}
}
