package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"text/tabwriter"
)

// json reports whether the output is JSON (-o json).
func (c *cli) json() bool { return c.output == "json" }

// printJSON writes v to w as indented JSON, with <, > and & as they are.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes aligned columns: cells separated by tabs, one row per
// line. Flush writes them out.
type table struct {
	tw     *tabwriter.Writer
	prefix string // indents every row
}

func newTable(w io.Writer, header ...string) *table {
	return newIndentedTable(w, "", header...)
}

func newIndentedTable(w io.Writer, prefix string, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 8, 2, ' ', 0), prefix: prefix}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

// row writes one row; an empty cell is written as "-".
func (t *table) row(cells ...string) {
	for i, s := range cells {
		if s == "" {
			cells[i] = "-"
		}
	}
	fmt.Fprintln(t.tw, t.prefix+strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// kv writes "key  value" lines, the values aligned.
type kv struct{ t *table }

func newKV(w io.Writer) kv { return kv{newTable(w)} }

func (k kv) add(key string, format string, args ...any) {
	fmt.Fprintf(k.t.tw, "%s\t%s\n", key, fmt.Sprintf(format, args...))
}

// list adds key with values on lines of their own; none is written as
// "-".
func (k kv) list(key string, values []string) {
	if len(values) == 0 {
		k.add(key, "-")
		return
	}
	for i, v := range values {
		if i > 0 {
			key = ""
		}
		k.add(key, "%s", v)
	}
}

func (k kv) flush() error { return k.t.flush() }

// joinAddrs joins addresses with commas.
func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// compactJSON is raw JSON on one line ("" if empty).
func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// plural is "n thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, thing)
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// flagList joins the names of the flags that are set.
func flagList(flags ...any) string {
	var s []string
	for i := 0; i+1 < len(flags); i += 2 {
		if flags[i].(bool) {
			s = append(s, flags[i+1].(string))
		}
	}
	return strings.Join(s, ",")
}
