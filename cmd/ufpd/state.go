package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vswitch"
)

// stateFile is what ufpd persists after every accepted change: the
// running policy and devices, and the revision they are.
type stateFile struct {
	Revision uint64          `json:"revision"`
	Policy   json.RawMessage `json:"policy"`
	Devices  []deviceConfig  `json:"devices"`
}

// marshalState returns c's policy and devices as a state file of
// revision rev, the policy encoded by enc (nil: a new one).
func marshalState(c *config, rev uint64, enc *stateEncoder) ([]byte, error) {
	if enc == nil {
		enc = &stateEncoder{}
	}
	pol, err := enc.policy(c.policy)
	if err != nil {
		return nil, err
	}
	devs := c.devices
	if devs == nil {
		devs = []deviceConfig{}
	}
	db, err := json.MarshalIndent(devs, "  ", "  ")
	if err != nil {
		return nil, err
	}
	// The stateFile's fields, written out: the policy, megabytes for a
	// node with thousands of Services, is not indented.
	var b bytes.Buffer
	b.Grow(len(pol) + len(db) + 64)
	fmt.Fprintf(&b, "{\n  \"revision\": %d,\n  \"policy\": ", rev)
	b.Write(pol)
	b.WriteString(",\n  \"devices\": ")
	b.Write(db)
	b.WriteString("\n}\n")
	return b.Bytes(), nil
}

// writeStateTo writes c's policy and devices to w as a state file of
// revision rev, the bytes marshalState makes, an object at a time: a
// compaction streams the state to its file rather than holding the
// encoding of a node's whole document (tens of megabytes at 10,000
// Services) in memory beside the configuration it encodes.
func writeStateTo(w io.Writer, c *config, rev uint64) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	p := c.policy
	head, err := json.Marshal(&vswitch.Config{Switch: p.Switch, Ports: p.Ports, Uplink: p.Uplink, Networks: p.Networks})
	if err != nil {
		return err
	}
	fmt.Fprintf(bw, "{\n  \"revision\": %d,\n  \"policy\": ", rev)
	// Endpoints, LoadBalancers and Routes are Config's last fields.
	bw.Write(head[:len(head)-1])
	if err := writeList(bw, "Endpoints", p.Endpoints); err != nil {
		return err
	}
	if err := writeList(bw, "LoadBalancers", p.LoadBalancers); err != nil {
		return err
	}
	if err := writeList(bw, "Routes", p.Routes); err != nil {
		return err
	}
	devs := c.devices
	if devs == nil {
		devs = []deviceConfig{}
	}
	db, err := json.MarshalIndent(devs, "  ", "  ")
	if err != nil {
		return err
	}
	bw.WriteString("},\n  \"devices\": ")
	bw.Write(db)
	bw.WriteString("\n}\n")
	return bw.Flush()
}

// writeList writes field name with list's elements encoded one by one,
// as appendList appends them.
func writeList[T any](w *bufio.Writer, name string, list []T) error {
	if len(list) == 0 {
		return nil
	}
	w.WriteString(`,"` + name + `":[`)
	for i := range list {
		if i > 0 {
			w.WriteByte(',')
		}
		b, err := json.Marshal(&list[i])
		if err != nil {
			return err
		}
		w.Write(b)
	}
	return w.WriteByte(']')
}

// stateEncoder encodes policies for the state file. It keeps the
// encoding of the last policy's endpoints and load balancers (most of a
// node's document), and encodes again only those that changed since.
// Not safe for concurrent use.
type stateEncoder struct {
	eps []hns.EndpointConfig
	epb [][]byte
	lbs []hns.LoadBalancerConfig
	lbb [][]byte
}

// policy returns c as JSON, as json.Marshal does.
func (e *stateEncoder) policy(c *vswitch.Config) ([]byte, error) {
	head, err := json.Marshal(&vswitch.Config{Switch: c.Switch, Ports: c.Ports, Uplink: c.Uplink, Networks: c.Networks})
	if err != nil {
		return nil, err
	}
	epb, err := encodeList(e.eps, e.epb, c.Endpoints, hns.SameEndpoint)
	if err != nil {
		return nil, err
	}
	lbb, err := encodeList(e.lbs, e.lbb, c.LoadBalancers, hns.SameLoadBalancer)
	if err != nil {
		return nil, err
	}
	rb, err := encodeList(nil, nil, c.Routes, sameRoute) // a few, encoded each time
	if err != nil {
		return nil, err
	}
	e.eps, e.epb, e.lbs, e.lbb = c.Endpoints, epb, c.LoadBalancers, lbb
	// Endpoints, LoadBalancers and Routes are Config's last fields.
	b := head[:len(head)-1]
	b = appendList(b, "Endpoints", epb)
	b = appendList(b, "LoadBalancers", lbb)
	b = appendList(b, "Routes", rb)
	return append(b, '}'), nil
}

// encodeList encodes the elements of cur, taking the encoding of those
// equal to an element of prev (encoded as prevB) near the same place.
func encodeList[T any](prev []T, prevB [][]byte, cur []T, same func(a, b *T) bool) ([][]byte, error) {
	const window = 8 // elements inserted or removed in a row that are followed
	out := make([][]byte, len(cur))
	j := 0
	for i := range cur {
		k := -1
		for d := 0; d < window && j+d < len(prev); d++ {
			if same(&cur[i], &prev[j+d]) {
				k = j + d
				break
			}
		}
		if k >= 0 {
			out[i], j = prevB[k], k+1
			continue
		}
		b, err := json.Marshal(&cur[i])
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

// appendList appends field name with the encoded elements, if any (the
// fields are omitempty).
func appendList(b []byte, name string, elems [][]byte) []byte {
	if len(elems) == 0 {
		return b
	}
	b = append(b, `,"`+name+`":[`...)
	for i, e := range elems {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e...)
	}
	return append(b, ']')
}

// writeState writes c at revision rev as the state file at path, whole
// (a base without a journal after it): it writes a temporary file in the
// same directory, syncs it, renames it over path and syncs the
// directory, so that a crash at any moment leaves either the old state
// or the new one, whole. enc (nil: a new one) encodes the policy.
func writeState(path string, c *config, rev uint64, enc *stateEncoder) error {
	b, err := marshalState(c, rev, enc)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, b)
}

// removeStaleTemps removes the temporary files a writeState cut short (a
// crash between creating and renaming) left beside the state at path.
func removeStaleTemps(path string) {
	old, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".*"))
	for _, f := range old {
		os.Remove(f)
	}
}

// readState reads the state at path (the state file, and its journal
// replayed onto it), validated as a configuration with base's daemon
// settings (log, API, metrics). A missing state file is reported with
// fs.ErrNotExist.
func readState(path string, base *config) (*config, uint64, error) {
	c, err := loadState(path, base)
	if err != nil {
		return nil, 0, err
	}
	return c, c.resume.rev, nil
}

// resumed is what a configuration read back from the state file was
// read from: the state file (base) and what of its journal was read.
type resumed struct {
	rev  uint64 // the revision read: the base's, or the last record's
	base baseInfo
	scan journalScan // records cleared once applied
}

// loadState is readState, the configuration's resume saying what it was
// read from. A journal that cannot be read whole (damaged, cut short)
// gives what it holds before the damage; one that cannot be read at all
// (permissions) is an error, as the state file is.
func loadState(path string, base *config) (*config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var st stateFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return nil, fmt.Errorf("%s: not a ufpd state file: %w", path, err)
	}
	jb, err := os.ReadFile(journalPath(path))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	rs := &resumed{rev: st.Revision, base: baseOf(b, st.Revision)}
	rs.scan = scanJournal(jb, rs.base)
	if n := len(rs.scan.records); n > 0 {
		var doc vswitch.Config
		if err := json.Unmarshal(st.Policy, &doc); err != nil {
			return nil, fmt.Errorf("%s: not a ufpd state file: %w", path, err)
		}
		for i := range rs.scan.records {
			rs.scan.records[i].apply(&doc, &st.Devices)
		}
		rs.rev = rs.scan.records[n-1].Revision
		if st.Policy, err = json.Marshal(&doc); err != nil {
			return nil, err
		}
	}
	fc := fileConfig{Policy: st.Policy, Devices: st.Devices, Log: base.log, API: base.api, State: base.state, Metrics: base.metrics, Holder: base.holder}
	fb, err := json.Marshal(fc)
	if err != nil {
		return nil, err
	}
	c, err := parseConfig(fb)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	rs.scan.records = nil
	c.resume = rs
	return c, nil
}

// loadRunning reads the configuration file at path and, if it names a
// state file that exists, the state in it: what ufpd starts from, and
// what SIGHUP reloads. fromState reports that the state file was read.
func loadRunning(path string) (c *config, rev uint64, fromState bool, err error) {
	c, err = loadConfig(path)
	if err != nil || c.state == "" {
		return c, 0, false, err
	}
	sc, rev, err := readState(c.state, c)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return c, 0, false, nil
	case err != nil:
		return nil, 0, false, err
	}
	return sc, rev, true, nil
}

// showState prints the state a start would restore from the state file
// at path: the file with its journal replayed (as readState does it),
// written to stdout as a state file (as a compaction would write it),
// and to stderr what the journal added and what of it was dropped, and
// why. It changes neither file. It returns the exit status: 1 if the
// state cannot be read.
func showState(path string, stdout, stderr io.Writer) int {
	c, err := loadState(path, &config{})
	if err != nil {
		fmt.Fprintf(stderr, "ufpd: %v\n", err)
		return 1
	}
	rs := c.resume
	b, err := marshalState(c, rs.rev, nil)
	if err != nil {
		fmt.Fprintf(stderr, "ufpd: %s: %v\n", path, err)
		return 1
	}
	if _, err := stdout.Write(b); err != nil {
		fmt.Fprintf(stderr, "ufpd: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "%s: revision %d: the base's revision %d and %d journal records", path, rs.rev, rs.base.Revision, rs.rev-rs.base.Revision)
	if rs.scan.dropped > 0 || rs.scan.why != "" {
		fmt.Fprintf(stderr, "; %d bytes of the journal dropped: %s", rs.scan.dropped, rs.scan.why)
	}
	fmt.Fprintln(stderr)
	return 0
}
