package main

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"time"
)

// update is one timed EndpointSlice update: when the harness called
// the API server, when the call returned, when it saw ufpd's load
// balancer changed; and the agent's trace of the sync that served it
// (traced false: none found).
type update struct {
	start, written, seen time.Time
	traced               bool
	sync                 syncLine
}

// total is the update's latency, as the issue measures it.
func (u update) total() time.Duration { return u.seen.Sub(u.start) }

// syncLine is one "sync applied" line of the agent's debug log: the
// handler's time of the oldest change it served and its stages
// (agent.syncTrace).
type syncLine struct {
	queued                                time.Time
	wait, list, translate, diff, applyUfp time.Duration
}

// traceTime is the agent's format of the handler's time (agent/trace.go).
const traceTime = "2006-01-02T15:04:05.000000Z07:00"

// parseTrace reads the agent's log (log/slog text) and returns its
// "sync applied" lines that served a change, in order. Other lines are
// skipped; a trace line it cannot read is an error.
func parseTrace(r io.Reader) ([]syncLine, error) {
	var out []syncLine
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		kv := fields(sc.Text())
		if kv["msg"] != "sync applied" || kv["queued"] == "" {
			continue
		}
		var l syncLine
		var err error
		if l.queued, err = time.Parse(traceTime, kv["queued"]); err != nil {
			return out, fmt.Errorf("agent log line %d: queued: %w", n, err)
		}
		for _, f := range []struct {
			key string
			dst *time.Duration
		}{{"wait", &l.wait}, {"list", &l.list}, {"translate", &l.translate}, {"diff", &l.diff}, {"apply", &l.applyUfp}} {
			if *f.dst, err = time.ParseDuration(kv[f.key]); err != nil {
				return out, fmt.Errorf("agent log line %d: %s: %w", n, f.key, err)
			}
		}
		out = append(out, l)
	}
	return out, sc.Err()
}

// fields splits a log/slog text line into its keys and values (a
// quoted value unquoted).
func fields(line string) map[string]string {
	kv := map[string]string{}
	for line != "" {
		line = strings.TrimLeft(line, " ")
		k, rest, ok := strings.Cut(line, "=")
		if !ok || strings.Contains(k, " ") {
			return kv
		}
		var v string
		if strings.HasPrefix(rest, `"`) {
			end := 1
			for end < len(rest) && rest[end] != '"' {
				if rest[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(rest) {
				return kv
			}
			v = strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(rest[1:end])
			rest = rest[end+1:]
		} else {
			v, rest, _ = strings.Cut(rest, " ")
		}
		kv[k] = v
		line = rest
	}
	return kv
}

// match gives each update the first sync line whose change was queued
// while the update was under way (from the call to ufpd showing it).
func match(ups []update, lines []syncLine) {
	i := 0
	for k := range ups {
		u := &ups[k]
		for i < len(lines) && lines[i].queued.Before(u.start) {
			i++
		}
		if i < len(lines) && !lines[i].queued.After(u.seen) {
			u.traced, u.sync = true, lines[i]
			i++
		}
	}
}

// stage is one part of the updates' latency, per update.
type stage struct {
	name string
	of   func(u update) time.Duration
}

// stages split a traced update from the harness's call to its sight of
// ufpd's change. "seen" is the rest: from the agent's having ufpd's
// answer to the harness's poll finding the change (it can be below
// zero: ufpd applies before the agent reads the answer).
var stages = []stage{
	{"API server write (the update call)", func(u update) time.Duration { return u.written.Sub(u.start) }},
	{"to the agent's handler (call to watch event)", func(u update) time.Duration { return u.sync.queued.Sub(u.start) }},
	{"agent: wait for the sync (min-sync-period)", func(u update) time.Duration { return u.sync.wait }},
	{"agent: list ufpd + translate + diff", func(u update) time.Duration { return u.sync.list + u.sync.translate + u.sync.diff }},
	{"agent: batch sent to ufpd's answer", func(u update) time.Duration { return u.sync.applyUfp }},
	{"ufpd's answer to the harness's sight", func(u update) time.Duration {
		end := u.sync.queued.Add(u.sync.wait + u.sync.list + u.sync.translate + u.sync.diff + u.sync.applyUfp)
		return u.seen.Sub(end)
	}},
}
