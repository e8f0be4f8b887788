package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// stateFile is what ufpd persists after every accepted change: the
// running policy and devices, and the revision they are.
type stateFile struct {
	Revision uint64          `json:"revision"`
	Policy   json.RawMessage `json:"policy"`
	Devices  []deviceConfig  `json:"devices"`
}

// marshalState returns c's policy and devices as a state file of
// revision rev.
func marshalState(c *config, rev uint64) ([]byte, error) {
	pol, err := json.Marshal(c.policy)
	if err != nil {
		return nil, err
	}
	devs := c.devices
	if devs == nil {
		devs = []deviceConfig{}
	}
	b, err := json.MarshalIndent(stateFile{Revision: rev, Policy: pol, Devices: devs}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// writeState persists c durably at path: it writes a temporary file in
// the same directory, syncs it, renames it over path and syncs the
// directory, so that a crash at any moment leaves either the old state or
// the new one, whole.
func writeState(path string, c *config, rev uint64) error {
	b, err := marshalState(c, rev)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// removeStaleTemps removes the temporary files a writeState cut short (a
// crash between creating and renaming) left beside the state at path.
func removeStaleTemps(path string) {
	old, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".*"))
	for _, f := range old {
		os.Remove(f)
	}
}

// readState reads the state file at path, validated as a configuration
// with base's daemon settings (log, API, metrics). A missing file is
// reported with fs.ErrNotExist.
func readState(path string, base *config) (*config, uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	var st stateFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return nil, 0, fmt.Errorf("%s: not a ufpd state file: %w", path, err)
	}
	fc := fileConfig{Policy: st.Policy, Devices: st.Devices, Log: base.log, API: base.api, State: base.state, Metrics: base.metrics, Holder: base.holder}
	fb, err := json.Marshal(fc)
	if err != nil {
		return nil, 0, err
	}
	c, err := parseConfig(fb)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	return c, st.Revision, nil
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
