package dataplane

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestMACText checks a MAC's JSON text: written as String writes it, read
// as ParseMAC reads it, empty read as the zero MAC, anything else refused
// with the text quoted.
func TestMACText(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    MAC
		wantErr string
	}{
		{in: `"02:00:00:00:00:0a"`, want: macA},
		{in: `"02-00-00-00-00-0A"`, want: macA},
		{in: `""`, want: MAC{}},
		{in: `"00:00:00:00:00:00"`, want: MAC{}},
		{in: `"02:00:00:00:00"`, wantErr: `"02:00:00:00:00" is not a MAC address (want 02:00:00:00:00:01)`},
		{in: `"zz"`, wantErr: `"zz" is not a MAC address`},
	} {
		var got MAC
		err := json.Unmarshal([]byte(tc.in), &got)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: %v, %v; want an error containing %q", tc.in, got, err, tc.wantErr)
			}
		case err != nil || got != tc.want:
			t.Errorf("%s: %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	b, err := json.Marshal([]MAC{macA, {}})
	if want := `["02:00:00:00:00:0a","00:00:00:00:00:00"]`; err != nil || string(b) != want {
		t.Errorf("Marshal = %s, %v; want %s", b, err, want)
	}
}

// TestDropReasonText checks a drop reason's JSON text: its name both
// ways, NotDropped empty both ways, an unknown name and "not-dropped"
// refused.
func TestDropReasonText(t *testing.T) {
	for r := DropReason(1); r < numDropReasons; r++ {
		b, err := json.Marshal(r)
		var back DropReason
		if err == nil {
			err = json.Unmarshal(b, &back)
		}
		if err != nil || back != r || string(b) != `"`+r.String()+`"` {
			t.Errorf("%v: marshalled %s, read back %v, %v", r, b, back, err)
		}
	}
	var r DropReason = DropBlocked
	if err := r.UnmarshalText(nil); err != nil || r != NotDropped {
		t.Errorf("empty text: %v, %v; want not-dropped", r, err)
	}
	if b, err := NotDropped.MarshalText(); err != nil || len(b) != 0 {
		t.Errorf("NotDropped writes %q, %v; want nothing", b, err)
	}
	for _, s := range []string{"not-dropped", "no-such-reason", "Blocked-By-Policy"} {
		if err := r.UnmarshalText([]byte(s)); err == nil || err.Error() != `"`+s+`" is not a drop reason` {
			t.Errorf("%q: %v", s, err)
		}
	}
}

// FuzzMACText checks that every text a MAC reads is written back in
// canonical form, which reads the same MAC.
func FuzzMACText(f *testing.F) {
	for _, s := range []string{"02:00:00:00:00:0a", "02-00-00-00-00-0A", "", "zz", "02:00:00:00:00:0a:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var m MAC
		if err := m.UnmarshalText([]byte(s)); err != nil {
			if _, ok := ParseMAC(s); ok || s == "" {
				t.Fatalf("%q: refused (%v), ParseMAC reads it", s, err)
			}
			return
		}
		b, err := m.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back MAC
		if err := back.UnmarshalText(b); err != nil || back != m {
			t.Fatalf("%q read %v, written %q, read back %v, %v", s, m, b, back, err)
		}
		if s != "" && !strings.EqualFold(strings.ReplaceAll(s, "-", ":"), string(b)) {
			t.Fatalf("%q written as %q", s, b)
		}
	})
}
