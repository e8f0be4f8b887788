package main

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/ufp-dev/ufp/capture"
	"github.com/ufp-dev/ufp/vswitch"
)

// DiffLines returns a line diff of want and got ("- want", "+ got", with
// two lines of context around each change), or "" if they are equal.
func DiffLines(want, got string) string {
	if want == got {
		return ""
	}
	a, b := strings.Split(want, "\n"), strings.Split(got, "\n")
	// Trim the common prefix and suffix; diff what remains by LCS.
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	const maxCells = 4 << 20
	var ops []string
	if (len(ma)+1)*(len(mb)+1) > maxCells {
		for _, l := range ma {
			ops = append(ops, "- "+l)
		}
		for _, l := range mb {
			ops = append(ops, "+ "+l)
		}
	} else {
		ops = lcsDiff(ma, mb)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "@@ line %d @@\n", pre+1)
	for i := max(0, pre-2); i < pre; i++ {
		fmt.Fprintf(&out, "  %s\n", a[i])
	}
	for _, o := range ops {
		out.WriteString(o + "\n")
	}
	for i := len(a) - suf; i < len(a) && i < len(a)-suf+2; i++ {
		fmt.Fprintf(&out, "  %s\n", a[i])
	}
	return out.String()
}

func lcsDiff(a, b []string) []string {
	n, m := len(a), len(b)
	l := make([][]int32, n+1)
	for i := range l {
		l[i] = make([]int32, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				l[i][j] = l[i+1][j+1] + 1
			} else {
				l[i][j] = max(l[i+1][j], l[i][j+1])
			}
		}
	}
	var ops []string
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			ops = append(ops, "  "+a[i])
			i++
			j++
		case i < n && (j == m || l[i+1][j] >= l[i][j+1]):
			// On a tie, removals go first, as in a unified diff.
			ops = append(ops, "- "+a[i])
			i++
		default:
			ops = append(ops, "+ "+b[j])
			j++
		}
	}
	return ops
}

// DiffFrames compares two frame lists frame by frame and describes the
// differences, or returns "" if they are equal. vxlanPort is the policy's
// VXLAN port, for describing frames (0 for 4789).
func DiffFrames(want, got []capture.Frame, vxlanPort uint16) string {
	var out strings.Builder
	shown := 0
	for i := 0; i < max(len(want), len(got)) && shown < 5; i++ {
		switch {
		case i >= len(want):
			fmt.Fprintf(&out, "  frame %d: unexpected: out %s %dB %s\n", i+1, got[i].Port, len(got[i].Data), vswitch.Describe(got[i].Data, vxlanPort))
		case i >= len(got):
			fmt.Fprintf(&out, "  frame %d: missing: out %s %dB %s\n", i+1, want[i].Port, len(want[i].Data), vswitch.Describe(want[i].Data, vxlanPort))
		default:
			w, g := want[i], got[i]
			if w.Port == g.Port && bytes.Equal(w.Data, g.Data) && w.Time.Equal(g.Time) {
				continue
			}
			fmt.Fprintf(&out, "  frame %d:\n    want out %s %dB %s at %s\n    got  out %s %dB %s at %s\n", i+1,
				w.Port, len(w.Data), vswitch.Describe(w.Data, vxlanPort), w.Time.Format("15:04:05.000000"),
				g.Port, len(g.Data), vswitch.Describe(g.Data, vxlanPort), g.Time.Format("15:04:05.000000"))
			if k := firstDiff(w.Data, g.Data); k >= 0 {
				fmt.Fprintf(&out, "    first differing byte at offset %d: want %s, got %s\n", k, hexAround(w.Data, k), hexAround(g.Data, k))
			}
		}
		shown++
	}
	if shown == 0 {
		return ""
	}
	if len(want) != len(got) {
		fmt.Fprintf(&out, "  want %d frames, got %d\n", len(want), len(got))
	}
	return out.String()
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

func hexAround(b []byte, k int) string {
	if k >= len(b) {
		return "(end of frame)"
	}
	return fmt.Sprintf("% x", b[k:min(len(b), k+8)])
}
