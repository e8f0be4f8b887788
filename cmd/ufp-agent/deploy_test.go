package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/ufp-dev/ufp/deploy"
)

// TestDeployConfig runs the agent's configuration loader as the
// DaemonSet runs the agent (deploy/daemonset.yaml's command, with
// NODE_NAME given and the ConfigMap mounted): the ConfigMap's agent.yaml
// must parse and validate, and the node's name must come from the flag.
func TestDeployConfig(t *testing.T) {
	args := daemonSetAgentArgs(t)
	cfg, err := deploy.ConfigFile("agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "agent.yaml"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, a := range args {
		a = strings.ReplaceAll(a, "$(NODE_NAME)", "Worker-2")
		args[i] = strings.ReplaceAll(a, "/etc/ufp-config/", dir+"/")
	}
	fl := flag.NewFlagSet("ufp-agent", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	o, given, err := parse(args, fl)
	if err != nil {
		t.Fatalf("ufp-agent %q: %v", args, err)
	}
	c, err := check(o, given, func() (string, error) { return "", errors.New("the pod's host name is not the node's") })
	if err != nil {
		t.Fatalf("ufp-agent %q: %v", args, err)
	}
	if c.nodeName != "worker-2" || o.Network == "" || o.UfpdSocket != "/run/ufp/ufpd.sock" {
		t.Errorf("node %q, network %q, socket %q; want worker-2 from --hostname-override, a network, ufpd's socket", c.nodeName, o.Network, o.UfpdSocket)
	}

	// The same file broken is refused naming the field: the test reads
	// what the loader reads.
	if err := os.WriteFile(filepath.Join(dir, "agent.yaml"), append(cfg, "syncPeriod: 0s\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	fl = flag.NewFlagSet("ufp-agent", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	if _, _, err := parse(args, fl); err == nil || !strings.Contains(err.Error(), "syncPeriod") {
		t.Errorf("a ConfigMap with syncPeriod twice: %v, want an error naming syncPeriod", err)
	}
}

// daemonSetAgentArgs returns the agent container's arguments in
// deploy/daemonset.yaml.
func daemonSetAgentArgs(t *testing.T) []string {
	t.Helper()
	docs, err := deploy.Manifests()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		var ds appsv1.DaemonSet
		if err := yaml.Unmarshal(d.YAML, &ds); err != nil || ds.Kind != "DaemonSet" {
			continue
		}
		for _, c := range ds.Spec.Template.Spec.Containers {
			if c.Name == "agent" && len(c.Command) > 0 && filepath.Base(c.Command[0]) == "ufp-agent" {
				return append(c.Command[1:len(c.Command):len(c.Command)], c.Args...)
			}
		}
	}
	t.Fatal("deploy/daemonset.yaml has no agent container running ufp-agent")
	return nil
}
