package dataplane

import "fmt"

// Trace collects the readable account of one packet's way through the slow
// path: layers visited, rules matched, transpositions, the decision. A nil
// *Trace records nothing, so the slow path can call it unconditionally; the
// fast path never does. Not safe for concurrent use.
type Trace struct {
	lines []string
}

// On reports whether t records.
func (t *Trace) On() bool { return t != nil }

// Addf records one line.
func (t *Trace) Addf(format string, args ...any) {
	if t == nil {
		return
	}
	t.lines = append(t.lines, fmt.Sprintf(format, args...))
}

// Lines returns the lines recorded since the last Reset.
func (t *Trace) Lines() []string {
	if t == nil {
		return nil
	}
	return t.lines
}

// Reset empties t for the next packet.
func (t *Trace) Reset() {
	if t != nil {
		t.lines = t.lines[:0]
	}
}
