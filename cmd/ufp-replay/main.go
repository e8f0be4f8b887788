package main

import (
	"embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/ufp-dev/ufp/capture"
	"github.com/ufp-dev/ufp/vswitch"
)

//go:embed quickstart
var quickstart embed.FS

type changeFlags []string

func (c *changeFlags) String() string     { return strings.Join(*c, ",") }
func (c *changeFlags) Set(v string) error { *c = append(*c, v); return nil }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("ufp-replay", flag.ContinueOnError)
	fl.SetOutput(stderr)
	policy := fl.String("policy", "", "policy file (JSON)")
	in := fl.String("in", "", "input pcapng; interface names are port names")
	out := fl.String("out", "", "write emitted frames to this pcapng")
	trace := fl.String("trace", "", "write the per-packet trace to this file (- for standard output)")
	check := fl.String("check", "", "compare output and trace with the golden files in this scenario directory")
	update := fl.Bool("update", false, "with -check: rewrite the golden files instead of comparing")
	lower := fl.Bool("lower", false, "print the VFP-level policy (ports, layers, rules) that -policy compiles to, and exit")
	var then changeFlags
	fl.Var(&then, "then", "N=FILE: apply policy FILE before packet N (repeatable)")
	fl.Usage = func() {
		fmt.Fprintf(stderr, "usage: ufp-replay [-policy P.json -in in.pcapng] [-out out.pcapng] [-trace trace.txt] [-then N=P2.json] [-check DIR [-update]]\n"+
			"       ufp-replay -lower -policy P.json\n"+
			"With no flags, runs the embedded quickstart scenario and prints its trace.\n\n")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "ufp-replay: unexpected arguments %q\n", fl.Args())
		return 2
	}
	if *lower {
		if *policy == "" || *in != "" || *check != "" {
			fmt.Fprintln(stderr, "ufp-replay: -lower goes with -policy alone")
			return 2
		}
		return printLowered(*policy, stdout, stderr)
	}
	if len(then) > 0 && *policy == "" {
		fmt.Fprintln(stderr, "ufp-replay: -then goes with -policy and -in (a scenario directory has policy@N.json files instead)")
		return 2
	}
	if *update && *check == "" {
		fmt.Fprintln(stderr, "ufp-replay: -update goes with -check DIR")
		return 2
	}
	var sc *Scenario
	var err error
	switch {
	case *policy != "" || *in != "":
		if *policy == "" || *in == "" {
			fmt.Fprintln(stderr, "ufp-replay: -policy and -in go together")
			return 2
		}
		sc, err = loadFiles(*policy, *in, then)
	case *check != "":
		sc, err = LoadScenario(os.DirFS(*check), *check)
	default:
		sub, _ := fs.Sub(quickstart, "quickstart")
		sc, err = LoadScenario(sub, "quickstart")
		if *trace == "" && *out == "" {
			*trace = "-"
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "ufp-replay: %v\n", err)
		return 1
	}
	res, err := Run(sc)
	if err != nil {
		fmt.Fprintf(stderr, "ufp-replay: %v\n", err)
		return 1
	}
	if *trace == "-" {
		io.WriteString(stdout, res.Trace)
	} else if *trace != "" {
		if err := os.WriteFile(*trace, []byte(res.Trace), 0o644); err != nil {
			fmt.Fprintf(stderr, "ufp-replay: %v\n", err)
			return 1
		}
	}
	ports := portNames(sc.Policy)
	if *out != "" {
		if err := writePcap(*out, ports, res.Out); err != nil {
			fmt.Fprintf(stderr, "ufp-replay: %v\n", err)
			return 1
		}
	}
	if *check == "" {
		return 0
	}
	if *update {
		if err := writePcap(filepath.Join(*check, "want.pcapng"), ports, res.Out); err != nil {
			fmt.Fprintf(stderr, "ufp-replay: %v\n", err)
			return 1
		}
		if err := os.WriteFile(filepath.Join(*check, "want-trace.txt"), []byte(res.Trace), 0o644); err != nil {
			fmt.Fprintf(stderr, "ufp-replay: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "updated %s\n", *check)
		return 0
	}
	diff, err := Check(os.DirFS(*check), ports, vxlanPort(sc.Policy), res)
	if err != nil {
		fmt.Fprintf(stderr, "ufp-replay: %s: %v\n", *check, err)
		return 1
	}
	if diff != "" {
		fmt.Fprintf(stdout, "ufp-replay: %s: output differs from the golden files:\n%s", *check, diff)
		return 1
	}
	fmt.Fprintf(stdout, "ok %s\n", *check)
	return 0
}

// printLowered prints the VFP-level form of the policy file at path.
func printLowered(path string, stdout, stderr io.Writer) int {
	c, err := vswitch.LoadConfig(path)
	if err == nil {
		c, err = c.Lower()
	}
	if err != nil {
		fmt.Fprintf(stderr, "ufp-replay: %v\n", err)
		return 1
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		fmt.Fprintf(stderr, "ufp-replay: %v\n", err)
		return 1
	}
	stdout.Write(append(b, '\n'))
	return 0
}

// vxlanPort returns the UDP port policy c decodes VXLAN on (0: 4789).
func vxlanPort(c *vswitch.Config) uint16 {
	if low, err := c.Lower(); err == nil {
		return low.Switch.VXLANPort
	}
	return c.Switch.VXLANPort
}

func portNames(c *vswitch.Config) []string {
	var ps []string
	low, err := c.Lower()
	if err != nil {
		return nil // c was validated when it was parsed
	}
	for _, p := range low.Ports {
		ps = append(ps, p.Name)
	}
	return ps
}

func writePcap(path string, ports []string, frames []capture.Frame) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := capture.WriteFrames(f, "ufp-replay", ports, frames); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

func loadFiles(policy, in string, then []string) (*Scenario, error) {
	pol, err := vswitch.LoadConfig(policy)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(in)
	if err != nil {
		return nil, err
	}
	sc := &Scenario{Policy: pol, In: b}
	for _, t := range then {
		ns, file, ok := strings.Cut(t, "=")
		n, err := strconv.Atoi(ns)
		if !ok || err != nil || n < 1 {
			return nil, fmt.Errorf("-then %q: want N=FILE with N a packet number from 1", t)
		}
		raw, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		sc.Changes = append(sc.Changes, Change{Before: n, Name: filepath.Base(file), Raw: raw})
	}
	return sc, nil
}

var changeFile = regexp.MustCompile(`^policy@([0-9]+)\.json$`)

// LoadScenario reads a scenario directory: policy.json, in.pcapng and any
// policy@N.json.
func LoadScenario(dir fs.FS, name string) (*Scenario, error) {
	b, err := fs.ReadFile(dir, "policy.json")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	pol, err := vswitch.ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("%s/policy.json: %w", name, err)
	}
	in, err := fs.ReadFile(dir, "in.pcapng")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	sc := &Scenario{Policy: pol, In: in}
	ents, err := fs.ReadDir(dir, ".")
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		m := changeFile.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		b, err := fs.ReadFile(dir, e.Name())
		if err != nil {
			return nil, err
		}
		sc.Changes = append(sc.Changes, Change{Before: n, Name: e.Name(), Raw: b})
	}
	slices.SortFunc(sc.Changes, func(a, b Change) int { return a.Before - b.Before })
	return sc, nil
}

// Check compares res with the golden want.pcapng and want-trace.txt in dir
// and returns a readable diff, or "" if they match.
func Check(dir fs.FS, ports []string, vxlanPort uint16, res *Result) (string, error) {
	var d strings.Builder
	wantTrace, err := fs.ReadFile(dir, "want-trace.txt")
	if err != nil {
		return "", err
	}
	if t := DiffLines(string(wantTrace), res.Trace); t != "" {
		fmt.Fprintf(&d, "trace (- want, + got):\n%s", t)
	}
	wantPcap, err := fs.ReadFile(dir, "want.pcapng")
	if err != nil {
		return "", err
	}
	want, err := capture.ReadFrames(wantPcap)
	if err != nil {
		return "", fmt.Errorf("want.pcapng: %w", err)
	}
	if p := DiffFrames(want, res.Out, vxlanPort); p != "" {
		fmt.Fprintf(&d, "frames:\n%s", p)
	}
	return d.String(), nil
}
