package main

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/vswitch"
)

// Connections beside the state file: so that a ufpd that died (SIGKILL,
// a crash) is succeeded by one that carries on its NATed and port-mapped
// connections, ufpd writes its stateful connections (vswitch.SaveConns)
// to the connections file every connsEvery while they change, and a
// start from the state file reads them back before serving.

// connsEvery is how often the connections file is rewritten while
// connections change: what a crash may lose is the connections opened in
// the last connsEvery (plus a write's time).
const connsEvery = 250 * time.Millisecond

// connsPath returns the connections file of the state file at state.
func connsPath(state string) string { return state + ".conns" }

// restoreConns puts back the connections the file at path holds, before
// the switch serves. A file that is missing restores nothing; one that
// cannot be read, or is of another format, is logged and ignored.
func (d *daemon) restoreConns(path string) *api.ConnsRestored {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		d.log.Error("connections not restored", "file", path, "err", err)
		return nil
	}
	defer f.Close()
	return d.restoreConnsFrom(f, path)
}

// restoreConnsFrom puts back the connections r holds (from names it in
// the log).
func (d *daemon) restoreConnsFrom(r io.Reader, from string) *api.ConnsRestored {
	start := time.Now()
	st, err := d.sw.RestoreConns(r)
	if err != nil {
		d.log.Error("connections not restored", "file", from, "err", err)
	}
	cr := &api.ConnsRestored{Restored: st.Conns, Gone: st.Gone, Corrupt: st.Corrupt, Truncated: st.Truncated}
	lvl := d.log.Info
	if st.Corrupt > 0 || st.Truncated {
		lvl = d.log.Warn
	}
	lvl("connections restored", "file", from, "restored", st.Conns, "gone", st.Gone,
		"corrupt", st.Corrupt, "truncated", st.Truncated, "took", time.Since(start).Round(time.Microsecond))
	return cr
}

// saveConns rewrites the connections file at path every connsEvery
// while the connections may have changed (the slow path ran or the flow
// table's size moved), until ctx ends.
func (d *daemon) saveConns(ctx context.Context, path string) {
	t := time.NewTicker(connsEvery)
	defer t.Stop()
	var lastSlow uint64
	lastLen, failing := -1, false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		slow, n := d.sw.Pipeline().Stats().Slow, d.sw.Pipeline().FlowTable().Len()
		if slow == lastSlow && n == lastLen {
			continue
		}
		if _, err := writeConns(d.sw, path); err != nil {
			if !failing {
				d.log.Error("connections file not written", "file", path, "err", err)
			}
			failing = true
			continue
		}
		failing, lastSlow, lastLen = false, slow, n
	}
}

// writeConns writes sw's connections to a temporary file beside path and
// renames it over path, so that a crash leaves the old file or the new
// one, whole. It does not sync: the file is for a ufpd that succeeds this
// one on the same running kernel, not for a reboot (after which no
// connection is left to carry on).
func writeConns(sw *vswitch.Switch, path string) (vswitch.ConnsStats, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return vswitch.ConnsStats{}, err
	}
	tmp := f.Name()
	st, err := sw.SaveConns(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return st, err
}
