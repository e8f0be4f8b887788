package deploy

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"slices"

	"sigs.k8s.io/yaml"
)

//go:embed *.yaml
var manifests embed.FS

// Manifest is one object of a manifest file, as written.
type Manifest struct {
	File string // the file's name, e.g. "daemonset.yaml"
	Doc  int    // the object's index among the file's documents
	YAML []byte
}

// Manifests returns every object of the manifest files, in the order
// they apply (Namespace and ServiceAccount, RBAC, ConfigMap, DaemonSet).
func Manifests() ([]Manifest, error) {
	names, err := fs.Glob(manifests, "*.yaml")
	if err != nil {
		return nil, err
	}
	order := []string{"namespace.yaml", "rbac.yaml", "configmap.yaml", "daemonset.yaml"}
	slices.SortFunc(names, func(a, b string) int {
		ia, ib := slices.Index(order, a), slices.Index(order, b)
		if ia < 0 {
			ia = len(order)
		}
		if ib < 0 {
			ib = len(order)
		}
		return ia - ib
	})
	var out []Manifest
	for _, name := range names {
		b, err := manifests.ReadFile(name)
		if err != nil {
			return nil, err
		}
		for i, doc := range splitDocs(b) {
			out = append(out, Manifest{File: name, Doc: i, YAML: doc})
		}
	}
	return out, nil
}

// splitDocs splits a YAML stream at its "---" lines, leaving out
// documents of comments alone.
func splitDocs(b []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(append([]byte("\n"), b...), []byte("\n---\n")) {
		if hasContent(d) {
			docs = append(docs, bytes.TrimLeft(d, "\n"))
		}
	}
	return docs
}

func hasContent(d []byte) bool {
	for _, l := range bytes.Split(d, []byte("\n")) {
		l = bytes.TrimSpace(l)
		if len(l) > 0 && l[0] != '#' {
			return true
		}
	}
	return false
}

// ConfigFile returns the file key of the ConfigMap ufp-config
// (configmap.yaml): "agent.yaml", "ufpd.json" (a template of the node's
// uplink facts, which ufp-node.sh renders) or "10-ufp.conflist".
func ConfigFile(key string) ([]byte, error) {
	b, err := manifests.ReadFile("configmap.yaml")
	if err != nil {
		return nil, err
	}
	var cm struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(b, &cm); err != nil {
		return nil, fmt.Errorf("configmap.yaml: %w", err)
	}
	if cm.Kind != "ConfigMap" || cm.Metadata.Name != "ufp-config" {
		return nil, fmt.Errorf("configmap.yaml: a %s %q, not the ConfigMap ufp-config", cm.Kind, cm.Metadata.Name)
	}
	v, ok := cm.Data[key]
	if !ok {
		return nil, fmt.Errorf("configmap.yaml: ConfigMap ufp-config has no %q", key)
	}
	return []byte(v), nil
}
