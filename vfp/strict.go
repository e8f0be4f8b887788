package vfp

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

func JSONError(b []byte, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		line := 1 + bytes.Count(b[:min(int(se.Offset), len(b))], []byte("\n"))
		return fmt.Errorf("policy: invalid JSON at line %d: %v", line, se)
	case errors.As(err, &te):
		return fmt.Errorf("%s: want %s, got JSON %s", te.Field, te.Type, te.Value)
	case err == io.EOF:
		return fmt.Errorf("policy: empty document")
	case err == io.ErrUnexpectedEOF:
		return fmt.Errorf("policy: invalid JSON at line %d: the document ends too early", 1+bytes.Count(bytes.TrimRight(b, " \t\r\n"), []byte("\n")))
	}
	return fmt.Errorf("policy: %w", err)
}

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// textParsers check the text of the types whose own UnmarshalText words
// its errors otherwise than a policy does, or accepts what a policy
// refuses (zones, IPv4-mapped IPv6 forms). Each accepts only text the
// type's UnmarshalText reads too, so that encoding/json decodes whatever
// CheckFields passed.
var textParsers = map[reflect.Type]func(string) error{
	reflect.TypeFor[netip.Addr]():   func(s string) error { _, err := parseDocAddr(s); return err },
	reflect.TypeFor[netip.Prefix](): func(s string) error { _, err := parseDocPrefix(s); return err },
}

// CheckFields walks the generic JSON value v (decoded with UseNumber)
// against type t and reports the first object key that names no field, or
// the first value of the wrong type or out of range, with its path. A
// value written as text (an encoding.TextUnmarshaler: addresses, MACs,
// prefixes, protocols, port ranges, the enums) must be a string its type
// reads; the error is "<path>: <why>". Keys are visited in sorted order so
// that the error is deterministic. A null leaves a field at its zero
// value, as encoding/json does.
func CheckFields(v any, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v == nil {
		return nil
	}
	if parse, ok := textParsers[t]; ok {
		return checkText(v, path, parse)
	}
	if reflect.PointerTo(t).Implements(textUnmarshalerType) && !reflect.PointerTo(t).Implements(unmarshalerType) {
		return checkText(v, path, func(s string) error {
			return reflect.New(t).Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s))
		})
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		// Run the field's own decoder here, where the path is known:
		// encoding/json returns its errors without one.
		b, err := json.Marshal(v)
		if err == nil {
			err = reflect.New(t).Interface().(json.Unmarshaler).UnmarshalJSON(b)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", orRoot(path), err)
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return wantError(path, "an object", v)
		}
		fields := map[string]reflect.StructField{}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name != "" && name != "-" {
				fields[name] = f
			}
		}
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			f, ok := fields[k]
			if !ok {
				return fmt.Errorf("%s: unknown field %q", joinPath(path, k), k)
			}
			if err := CheckFields(obj[k], f.Type, joinPath(path, k)); err != nil {
				return err
			}
		}
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			return wantError(path, "a list", v)
		}
		for i, e := range arr {
			if err := CheckFields(e, t.Elem(), path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			return wantError(path, "a string", v)
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return wantError(path, "true or false", v)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := v.(json.Number)
		if !ok {
			return wantError(path, "a number", v)
		}
		if _, err := strconv.ParseUint(n.String(), 10, t.Bits()); err != nil {
			return fmt.Errorf("%s: want an integer from 0 to %d, got %s", orRoot(path), uint64(1)<<t.Bits()-1, n)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := v.(json.Number)
		if !ok {
			return wantError(path, "a number", v)
		}
		if _, err := strconv.ParseInt(n.String(), 10, t.Bits()); err != nil {
			return fmt.Errorf("%s: want an integer of %d bits, got %s", orRoot(path), t.Bits(), n)
		}
	}
	return nil
}

// checkText checks that the JSON value v at path is a string that parse
// reads.
func checkText(v any, path string, parse func(string) error) error {
	s, ok := v.(string)
	if !ok {
		return wantError(path, "a string", v)
	}
	if err := parse(s); err != nil {
		return fmt.Errorf("%s: %w", orRoot(path), err)
	}
	return nil
}

// wantError says that the JSON value v at path is not what the field takes.
func wantError(path, want string, v any) error {
	got := "a value"
	switch v := v.(type) {
	case string:
		got = strconv.Quote(v)
	case json.Number:
		got = "the number " + v.String()
	case bool:
		got = strconv.FormatBool(v)
	case []any:
		got = "a list"
	case map[string]any:
		got = "an object"
	}
	return fmt.Errorf("%s: want %s, got %s", orRoot(path), want, got)
}

func joinPath(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func orRoot(path string) string {
	if path == "" {
		return "policy"
	}
	return path
}
