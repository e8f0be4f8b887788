package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/internal/scaledoc"
	"github.com/ufp-dev/ufp/vswitch"
)

// journalDaemon is a daemon running a small node's Services (scaledoc)
// with a state file, and the shape of its document.
func journalDaemon(t testing.TB) (*daemon, scaledoc.Shape) {
	t.Helper()
	s := scaledoc.Shape{Services: 20, Backends: 3, Locals: 4, Nodes: 3}
	d := s.Document()
	c := &config{policy: &vswitch.Config{Switch: d.Switch, Uplink: d.Uplink, Networks: d.Networks, Endpoints: d.Endpoints, LoadBalancers: d.LoadBalancers},
		state: filepath.Join(t.TempDir(), "state.json")}
	dm, err := newDaemon(c, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	dm.mu.Lock()
	err = dm.jr.persist(c, 0) // seeded, as at a first start
	dm.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	return dm, s
}

// randomChange makes a change of a node agent's kinds to dr: a Service's
// backends moved to new remote endpoints (the old ones deleted), a
// Service deleted or added again, or a Service's backends trimmed.
func randomChange(rng *rand.Rand, s scaledoc.Shape, dr *draft, fresh *int) {
	doc := dr.doc
	switch k := rng.IntN(4); {
	case k == 0 && len(doc.LoadBalancers) > 0: // backends moved
		lb := &doc.LoadBalancers[rng.IntN(len(doc.LoadBalancers))]
		old := lb.HostComputeEndpoints
		lb.HostComputeEndpoints = nil
		for range 1 + rng.IntN(3) {
			ep := s.Remote(*fresh)
			*fresh++
			doc.Endpoints = append(doc.Endpoints, ep)
			lb.HostComputeEndpoints = append(lb.HostComputeEndpoints, ep.Name)
		}
		doc.Endpoints = slices.DeleteFunc(doc.Endpoints, func(e hns.EndpointConfig) bool { return slices.Contains(old, e.Name) })
	case k == 1 && len(doc.LoadBalancers) > 1: // a Service deleted
		i := rng.IntN(len(doc.LoadBalancers))
		doc.LoadBalancers = slices.Delete(doc.LoadBalancers, i, i+1)
	case k == 2: // a Service added, without backends
		lb := s.Service(s.Services+*fresh, 0)
		*fresh++
		lb.HostComputeEndpoints = nil
		doc.LoadBalancers = append(doc.LoadBalancers, lb)
	default: // backends trimmed
		if len(doc.LoadBalancers) > 0 {
			lb := &doc.LoadBalancers[rng.IntN(len(doc.LoadBalancers))]
			if len(lb.HostComputeEndpoints) > 0 {
				lb.HostComputeEndpoints = lb.HostComputeEndpoints[1:]
			}
		}
	}
}

// sameConfig reports, as a test failure, where the state read back
// differs from the running configuration.
func sameConfig(t *testing.T, what string, got, want *config) {
	t.Helper()
	g, _ := json.Marshal(got.policy)
	w, _ := json.Marshal(want.policy)
	if !bytes.Equal(g, w) {
		t.Fatalf("%s: the policy read back differs from the running one:\n%s\nwant\n%s", what, g, w)
	}
	if !slices.Equal(got.devices, want.devices) && len(got.devices)+len(want.devices) > 0 {
		t.Fatalf("%s: devices %v, want %v", what, got.devices, want.devices)
	}
}

// TestJournalReplay makes random changes and reads the state back after
// each: base and journal give the running configuration at its revision,
// the journal is compacted when it outgrows its limit, and a stop
// compacts it.
func TestJournalReplay(t *testing.T) {
	dm, s := journalDaemon(t)
	dm.jr.limit = 4 << 10
	rng := rand.New(rand.NewPCG(3, 4))
	fresh := s.Services * s.Backends
	compactions := 0
	for step := range 120 {
		base := dm.jr.base.Revision
		rev, err := dm.change("test", "", func(dr *draft) error {
			randomChange(rng, s, dr, &fresh)
			return nil
		})
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if dm.jr.base.Revision != base {
			compactions++
		}
		got, err := loadState(dm.cfg.state, dm.cfg)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if got.resume.rev != rev || got.resume.scan.why != "" {
			t.Fatalf("step %d: read back revision %d (dropped %d: %s), want %d", step, got.resume.rev, got.resume.scan.dropped, got.resume.scan.why, rev)
		}
		sameConfig(t, fmt.Sprintf("step %d", step), got, dm.cfg)
	}
	if compactions == 0 || compactions > 60 {
		t.Errorf("%d compactions in 120 changes with a 4 KiB journal", compactions)
	}
	// A change of most objects is not a record but a new base.
	dm.jr.limit = 1 << 30
	for range 2 { // the first may compact to make room
		rev, err := dm.change("test", "", func(dr *draft) error {
			randomChange(rng, s, dr, &fresh)
			return nil
		})
		if err != nil || dm.jr.base.Revision == rev {
			t.Fatalf("a small change: revision %d, base revision %d, %v", rev, dm.jr.base.Revision, err)
		}
	}
	rev, err := dm.change("test", "", func(dr *draft) error {
		dr.doc.LoadBalancers = nil
		dr.doc.Endpoints = slices.DeleteFunc(dr.doc.Endpoints, func(e hns.EndpointConfig) bool { return e.Flags == hns.EndpointFlagRemote })
		return nil
	})
	if err != nil || dm.jr.base.Revision != rev {
		t.Fatalf("every Service and remote endpoint deleted: revision %d, base revision %d, %v", rev, dm.jr.base.Revision, err)
	}
	// A clean stop leaves the state whole, with an empty journal.
	if _, err := dm.change("test", "", func(dr *draft) error {
		randomChange(rng, s, dr, &fresh)
		return nil
	}); err != nil || dm.jr.base.Revision == dm.rev {
		t.Fatalf("a change after: base revision %d, revision %d, %v", dm.jr.base.Revision, dm.rev, err)
	}
	dm.compactOnStop()
	got, err := loadState(dm.cfg.state, dm.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got.resume.rev != dm.rev || got.resume.base.Revision != dm.rev {
		t.Errorf("after the stop: base revision %d, read revision %d, want both %d", got.resume.base.Revision, got.resume.rev, dm.rev)
	}
	sameConfig(t, "after the stop", got, dm.cfg)
}

// TestJournalCrash damages the journal as a crash, a disk or an operator
// can, and checks what a start reads: the changes before the damage,
// whole, never part of one, never a failure; and that a daemon started
// from it writes on after them.
func TestJournalCrash(t *testing.T) {
	// A state of base revision 1 and a journal of three records (2-4):
	// the configurations at each revision, and where each record starts.
	dm, s := journalDaemon(t)
	rng := rand.New(rand.NewPCG(5, 6))
	fresh := s.Services * s.Backends
	var at []*config // at[r] is revision r
	change := func() {
		t.Helper()
		if _, err := dm.change("test", "", func(dr *draft) error {
			randomChange(rng, s, dr, &fresh)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	at = append(at, dm.cfg)
	change()
	dm.mu.Lock()
	if err := dm.jr.compact(dm.cfg, dm.rev); err != nil {
		t.Fatal(err)
	}
	dm.mu.Unlock()
	at = append(at, dm.cfg)
	var starts []int64
	for range 3 {
		starts = append(starts, dm.jr.end)
		change()
		at = append(at, dm.cfg)
	}
	state := dm.cfg.state
	jpath := journalPath(state)
	good, err := os.ReadFile(jpath)
	if err != nil {
		t.Fatal(err)
	}
	baseB, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	last := starts[2]

	type tc struct {
		name    string
		journal []byte // nil: none
		base    []byte // nil: the base as written
		rev     uint64 // read back
		why     string // in the reason for what was dropped
	}
	var cases []tc
	for n := last; n < int64(len(good)); n++ {
		why := "cut short"
		if n == last {
			why = ""
		}
		cases = append(cases, tc{name: fmt.Sprintf("cut at byte %d of the last record", n-last), journal: good[:n], rev: 3, why: why})
	}
	flipBits := func(i int64, m byte) []byte {
		b := slices.Clone(good)
		b[i] ^= m
		return b
	}
	flip := func(i int64) []byte { return flipBits(i, 0x20) }
	wrongRev := slices.Clone(good[:last])
	p, _ := json.Marshal(journalRecord{Revision: 3})
	wrongRev = appendFrame(wrongRev, p)
	cases = append(cases,
		tc{name: "whole", journal: good, rev: 4},
		tc{name: "bad checksum in the last record", journal: flip(int64(len(good)) - 3), rev: 3, why: "bad checksum"},
		tc{name: "bad checksum in the second record", journal: flip(starts[1] + 12), rev: 2, why: "bad checksum"},
		tc{name: "a length past the end", journal: flip(last + 3), rev: 3, why: "cut short"},
		tc{name: "a length too long", journal: flipBits(last+3, 0x80), rev: 3, why: "length"},
		tc{name: "a revision again", journal: wrongRev, rev: 3, why: "revision 3, not the next (4)"},
		tc{name: "bad header", journal: flip(10), rev: 1, why: "header"},
		tc{name: "not a journal", journal: []byte("{}\n"), rev: 1, why: "not a ufpd journal"},
		tc{name: "no journal", rev: 1},
		tc{name: "empty journal", journal: []byte{}, rev: 1},
	)
	// The base newer than the journal: a compaction cut between writing
	// the new base and the new journal.
	newer, err := marshalState(at[4], 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	cases = append(cases, tc{name: "base newer than the journal", journal: good, base: newer, rev: 4, why: "follows another base (revision 1"})

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			st := filepath.Join(dir, "state.json")
			b := baseB
			if c.base != nil {
				b = c.base
			}
			if err := os.WriteFile(st, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if c.journal != nil {
				if err := os.WriteFile(journalPath(st), c.journal, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cfg := &config{state: st}
			got, err := loadState(st, cfg)
			if err != nil {
				t.Fatalf("loadState: %v", err)
			}
			rs := got.resume
			if rs.rev != c.rev || !strings.Contains(rs.scan.why, c.why) || (c.why == "") != (rs.scan.why == "") {
				t.Fatalf("read revision %d, dropped %d bytes (%q); want revision %d, dropped for %q", rs.rev, rs.scan.dropped, rs.scan.why, c.rev, c.why)
			}
			if rs.scan.end+rs.scan.dropped != int64(len(c.journal)) {
				t.Errorf("end %d + dropped %d is not the journal's %d bytes", rs.scan.end, rs.scan.dropped, len(c.journal))
			}
			sameConfig(t, "read back", got, at[c.rev])
			// A daemon started from it writes its next change after
			// what it read, and the state reads back at that.
			r, err := restoreDaemon(got, rs.rev, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if rep := r.restored.Journal; c.why != "" && (rep == nil || rep.Dropped != rs.scan.dropped || rep.Why != rs.scan.why) {
				t.Errorf("restore report: %+v", rep)
			}
			rev, err := r.change("test", "", func(dr *draft) error {
				dr.doc.LoadBalancers = dr.doc.LoadBalancers[1:]
				return nil
			})
			if err != nil || rev != c.rev+1 {
				t.Fatalf("the next change: revision %d, %v", rev, err)
			}
			again, err := loadState(st, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if again.resume.rev != rev || again.resume.scan.why != "" {
				t.Errorf("after the next change: read revision %d (%q), want %d", again.resume.rev, again.resume.scan.why, rev)
			}
			sameConfig(t, "after the next change", again, r.cfg)
		})
	}
}

// TestJournalRefused checks that a change the journal cannot take is
// refused and undone: the revision and the state stay, and the next
// change is written.
func TestJournalRefused(t *testing.T) {
	dm, _ := journalDaemon(t)
	drop := func(dr *draft) error {
		dr.doc.LoadBalancers = dr.doc.LoadBalancers[1:]
		return nil
	}
	if _, err := dm.change("test", "", drop); err != nil {
		t.Fatal(err)
	}
	before := dm.cfg
	// A journal that takes no writes.
	ro, err := os.Open(journalPath(dm.cfg.state))
	if err != nil {
		t.Fatal(err)
	}
	dm.jr.f.Close()
	dm.jr.f = ro
	if rev, err := dm.change("test", "", drop); err == nil || !strings.Contains(err.Error(), "journal") {
		t.Fatalf("a change the journal refuses: revision %d, %v", rev, err)
	}
	if dm.rev != 1 || dm.cfg != before {
		t.Errorf("after a refused change: revision %d, configuration changed %v", dm.rev, dm.cfg != before)
	}
	got, err := loadState(dm.cfg.state, dm.cfg)
	if err != nil || got.resume.rev != 1 {
		t.Fatalf("the state after a refused change: %v", err)
	}
	sameConfig(t, "after a refused change", got, before)
	if rev, err := dm.change("test", "", drop); err != nil || rev != 2 {
		t.Fatalf("the next change: revision %d, %v", rev, err)
	}
	got, err = loadState(dm.cfg.state, dm.cfg)
	if err != nil || got.resume.rev != 2 {
		t.Fatalf("the state after the next change: %v", err)
	}
	sameConfig(t, "after the next change", got, dm.cfg)
}

// TestJournalDiff checks diffList against replay on random lists: what
// it writes and deletes, replayed onto the old list, is the new one; and
// an unchanged list, or one changed as a batch changes it, gives a small
// record.
func TestJournalDiff(t *testing.T) {
	type obj struct{ Name, V string }
	name := func(o *obj) string { return o.Name }
	same := func(a, b *obj) bool { return *a == *b }
	rng := rand.New(rand.NewPCG(7, 8))
	fresh := 0
	mk := func() obj { fresh++; return obj{Name: fmt.Sprint("o", fresh), V: "a"} }
	var prev []obj
	for range 30 {
		prev = append(prev, mk())
	}
	for step := range 2000 {
		cur := slices.Clone(prev)
		batch := true // changes as a batch makes them: in place, deleted, appended
		for range 1 + rng.IntN(4) {
			switch rng.IntN(6) {
			case 0:
				if len(cur) > 0 {
					i := rng.IntN(len(cur))
					cur = slices.Delete(cur, i, min(len(cur), i+1+rng.IntN(12)))
				}
			case 1:
				cur = append(cur, mk())
			case 2:
				if len(cur) > 0 {
					cur[rng.IntN(len(cur))].V += "x"
				}
			case 3: // moved
				if len(cur) > 1 {
					i, j := rng.IntN(len(cur)), rng.IntN(len(cur))
					o := cur[i]
					cur = slices.Insert(slices.Delete(cur, i, i+1), min(j, len(cur)-1), o)
					batch = false
				}
			case 4: // inserted in the middle
				cur = slices.Insert(cur, rng.IntN(len(cur)+1), mk())
				batch = false
			case 5:
				if rng.IntN(20) == 0 {
					cur = nil
				}
			}
		}
		w, del := diffList(prev, cur, name, same)
		got := replay(slices.Clone(prev), w, del, name)
		if !slices.Equal(got, cur) && len(got)+len(cur) > 0 {
			t.Fatalf("step %d: replayed\n%v\nwant\n%v\n(from %v: writes %v, deletes %v)", step, got, cur, prev, w, del)
		}
		if batch {
			changed := 0
			for i := range cur {
				j := slices.IndexFunc(prev, func(o obj) bool { return o.Name == cur[i].Name })
				if j < 0 || prev[j] != cur[i] {
					changed++
				}
			}
			if len(w) != changed {
				t.Fatalf("step %d: %d objects written for %d created or changed in place (%v -> %v)", step, len(w), changed, prev, cur)
			}
		}
		if len(cur) < 5 {
			for range 30 {
				cur = append(cur, mk())
			}
		}
		prev = cur
	}
	if w, del := diffList(prev, slices.Clone(prev), name, same); len(w)+len(del) != 0 {
		t.Errorf("an unchanged list: writes %v, deletes %v", w, del)
	}
}

// FuzzJournal reads arbitrary journals after a base: it never fails or
// panics, reads only whole records of consecutive revisions, says why it
// stopped where it did, reads the same again from what it kept, and what
// it reads replays onto a policy.
func FuzzJournal(f *testing.F) {
	base := baseInfo{Revision: 7, Length: 100, CRC: 0xdeadbeef}
	hp, _ := json.Marshal(journalHeader{Base: base})
	j := appendFrame([]byte(journalMagic), hp)
	f.Add(slices.Clone(j))
	s := scaledoc.Shape{Services: 2, Backends: 2, Locals: 1}
	for i, r := range []journalRecord{
		{Revision: 8, LoadBalancers: []hns.LoadBalancerConfig{s.Service(0, 1)}, DeleteEndpoints: []string{"remote.x"}},
		{Revision: 9, Endpoints: []hns.EndpointConfig{s.Remote(9)}, DeleteLoadBalancers: []string{"lb"}, Devices: &[]deviceConfig{{Port: "p", Type: "tap", Name: "t"}}},
		{Revision: 10, Head: &vswitch.Config{Networks: s.Document().Networks}},
	} {
		p, _ := json.Marshal(r)
		j = appendFrame(j, p)
		f.Add(slices.Clone(j))
		if i == 1 {
			f.Add(slices.Clone(j[:len(j)-5]))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sc := scanJournal(b, base)
		if sc.end < 0 || sc.end > int64(len(b)) || sc.end+sc.dropped != int64(len(b)) {
			t.Fatalf("end %d, dropped %d of %d bytes", sc.end, sc.dropped, len(b))
		}
		if (sc.dropped > 0) != (sc.why != "") {
			t.Fatalf("dropped %d bytes, why %q", sc.dropped, sc.why)
		}
		for i, r := range sc.records {
			if r.Revision != base.Revision+1+uint64(i) {
				t.Fatalf("record %d: revision %d", i, r.Revision)
			}
		}
		if sc.end > 0 {
			again := scanJournal(b[:sc.end], base)
			if again.end != sc.end || again.why != "" || len(again.records) != len(sc.records) {
				t.Fatalf("read again from the %d bytes kept: end %d, %d records (%q), want %d records", sc.end, again.end, len(again.records), again.why, len(sc.records))
			}
		}
		doc := vswitch.Config{Endpoints: []hns.EndpointConfig{s.Remote(0), s.Remote(1)}, LoadBalancers: []hns.LoadBalancerConfig{s.Service(0, 0)}}
		var devs []deviceConfig
		for i := range sc.records {
			sc.records[i].apply(&doc, &devs)
		}
	})
}

// TestChangeLeavesRunningAlone checks that changes made in a draft (which
// shares its objects' lists with the running configuration) leave the
// configuration they replace as it was: it may still be read.
func TestChangeLeavesRunningAlone(t *testing.T) {
	d, c := testDaemon(t)
	ctx := t.Context()
	for _, step := range []struct {
		name string
		do   func() error
	}{
		{"delete a policy", func() error { return c.DeletePolicy(ctx, "pod-b", 0) }},
		{"add a policy", func() error {
			return c.AddPolicy(ctx, "pod-a", &api.Policy{Type: "ACL", Settings: json.RawMessage(
				`{ "Id": "web", "Action": "Allow", "Direction": "In", "Protocols": "6", "LocalPorts": "80", "Priority": 200 }`)})
		}},
		{"delete a policy refused", func() error { return c.DeletePolicy(ctx, "pod-a", 7) }},
		{"drain a backend", func() error {
			lb, err := c.LoadBalancer(ctx, "web")
			if err != nil {
				return err
			}
			lb.HostComputeEndpoints, lb.DrainingEndpoints = []string{"pod-a"}, []string{"pod-b"}
			return c.UpdateLoadBalancer(ctx, lb)
		}},
		{"delete a draining backend's endpoint", func() error { return c.DeleteEndpoint(ctx, "pod-b") }},
	} {
		old := d.cfg
		before, err := json.Marshal(old.policy)
		if err != nil {
			t.Fatal(err)
		}
		err = step.do()
		if strings.HasSuffix(step.name, "refused") != (err != nil) {
			t.Fatalf("%s: %v", step.name, err)
		}
		after, _ := json.Marshal(old.policy)
		if !bytes.Equal(before, after) {
			t.Errorf("%s: the configuration it replaced changed:\n%s\nwas\n%s", step.name, after, before)
		}
	}
	// The deleted endpoint left the load balancer it drained from.
	lb, err := c.LoadBalancer(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(lb.HostComputeEndpoints, []string{"pod-a"}) || len(lb.DrainingEndpoints) != 0 {
		t.Errorf("web after pod-b's deletion: backends %q, draining %q; want [pod-a] and none", lb.HostComputeEndpoints, lb.DrainingEndpoints)
	}
}

// TestShowState checks ufpd -show-state: it prints the state a start
// restores (base and journal), byte for byte what a compaction of that
// configuration writes, says what it dropped of a torn journal, and
// changes neither file.
func TestShowState(t *testing.T) {
	dm, s := journalDaemon(t)
	rng := rand.New(rand.NewPCG(7, 8))
	fresh := s.Services * s.Backends
	at := map[uint64]*config{dm.rev: dm.cfg}
	var ends []int64 // where each record ends
	for range 4 {
		if _, err := dm.change("test", "", func(dr *draft) error {
			randomChange(rng, s, dr, &fresh)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		at[dm.rev] = dm.cfg
		ends = append(ends, dm.jr.end)
	}
	state, jpath := dm.cfg.state, journalPath(dm.cfg.state)
	if dm.jr.base.Revision != dm.rev-4 {
		t.Fatalf("base revision %d, revision %d: want 4 records in the journal", dm.jr.base.Revision, dm.rev)
	}
	show := func(t *testing.T, args ...string) (code int, stdout, stderr string) {
		t.Helper()
		var o, e bytes.Buffer
		code = run(args, &o, &e)
		return code, o.String(), e.String()
	}
	unchanged := func(t *testing.T) func() {
		t.Helper()
		var before [][]byte
		var infos []os.FileInfo
		for _, p := range []string{state, jpath} {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			fi, _ := os.Stat(p)
			before, infos = append(before, b), append(infos, fi)
		}
		return func() {
			t.Helper()
			for i, p := range []string{state, jpath} {
				b, err := os.ReadFile(p)
				fi, _ := os.Stat(p)
				if err != nil || !bytes.Equal(b, before[i]) || !fi.ModTime().Equal(infos[i].ModTime()) {
					t.Errorf("%s changed by -show-state (%v)", p, err)
				}
			}
		}
	}
	for _, tc := range []struct {
		name    string
		cut     int64  // the journal's length (0: whole)
		rev     uint64 // the revision shown
		dropped int64
		why     string
	}{
		{name: "records", rev: dm.rev},
		{name: "torn tail", cut: ends[3] - 5, rev: dm.rev - 1, dropped: ends[3] - 5 - ends[2], why: "cut short"},
		{name: "torn header", cut: int64(len(journalMagic)) + 3, rev: dm.rev - 4, dropped: int64(len(journalMagic)) + 3, why: "header: cut short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cut > 0 {
				if err := os.Truncate(jpath, tc.cut); err != nil {
					t.Fatal(err)
				}
			}
			check := unchanged(t)
			code, out, errOut := show(t, "-show-state", state)
			check()
			if code != 0 {
				t.Fatalf("exit status %d: %s", code, errOut)
			}
			want, err := marshalState(at[tc.rev], tc.rev, nil)
			if err != nil {
				t.Fatal(err)
			}
			if out != string(want) {
				t.Errorf("printed (%d bytes) is not the state of revision %d as a compaction writes it (%d bytes)", len(out), tc.rev, len(want))
			}
			// What is printed is a state file a start reads as is.
			copyPath := filepath.Join(t.TempDir(), "copy.state")
			if err := os.WriteFile(copyPath, []byte(out), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := loadState(copyPath, &config{})
			if err != nil {
				t.Fatalf("the printed state read back: %v", err)
			}
			if got.resume.rev != tc.rev {
				t.Errorf("the printed state is revision %d, want %d", got.resume.rev, tc.rev)
			}
			sameConfig(t, tc.name, got, at[tc.rev])
			head := fmt.Sprintf("%s: revision %d: the base's revision %d and %d journal records", state, tc.rev, dm.rev-4, tc.rev-(dm.rev-4))
			if !strings.HasPrefix(errOut, head) {
				t.Errorf("stderr %q, want it to start %q", errOut, head)
			}
			if tc.why == "" {
				if strings.Contains(errOut, "dropped") {
					t.Errorf("stderr %q: nothing was dropped", errOut)
				}
			} else if d := fmt.Sprintf("; %d bytes of the journal dropped: ", tc.dropped); !strings.Contains(errOut, d) || !strings.HasSuffix(errOut, tc.why+"\n") {
				t.Errorf("stderr %q, want %q and the reason %q", errOut, d, tc.why)
			}
		})
	}
	t.Run("errors", func(t *testing.T) {
		if code, _, errOut := show(t, "-show-state", filepath.Join(t.TempDir(), "none")); code != 1 || !strings.Contains(errOut, "no such file") {
			t.Errorf("a missing state file: exit status %d, %q", code, errOut)
		}
		if err := os.WriteFile(state+".bad", []byte(`{"revision": 1, "policy": {}, "extra": 1}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if code, out, errOut := show(t, "-show-state", state+".bad"); code != 1 || out != "" || !strings.Contains(errOut, "not a ufpd state file") {
			t.Errorf("not a state file: exit status %d, %q, %q", code, out, errOut)
		}
		if code, out, _ := show(t, "-show-state", state, "-config", "x.json"); code != 2 || out != "" {
			t.Errorf("-show-state with -config: exit status %d, %q; want 2 (usage)", code, out)
		}
	})
}
