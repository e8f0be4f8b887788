package benchproc

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The test binary is also the child the tests start: with
// BENCHPROC_CHILD set it does what the variable says and exits.
func TestMain(m *testing.M) {
	switch os.Getenv("BENCHPROC_CHILD") {
	case "":
		os.Exit(m.Run())
	case "print":
		// Two writes, one to each stream, then exit 3.
		fmt.Fprintln(os.Stdout, "out line")
		fmt.Fprintln(os.Stderr, "err line")
		os.Exit(3)
	case "serve":
		// Say so, then wait for SIGTERM and exit 0.
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM)
		fmt.Println("ready")
		<-c
		os.Exit(0)
	}
	os.Exit(2)
}

func child(t *testing.T, what string) {
	t.Helper()
	t.Setenv("BENCHPROC_CHILD", what)
}

func TestExitedChild(t *testing.T) {
	child(t, "print")
	var pass bytes.Buffer
	p, err := Start(t.TempDir(), "printer", &pass, os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	<-p.exited
	if got, want := filepath.Base(p.Log), "printer.log"; got != want {
		t.Errorf("log file %q, want %q", got, want)
	}
	if got, want := p.LogTail(), "out line\nerr line"; got != want {
		t.Errorf("LogTail() = %q, want %q", got, want)
	}
	if got, want := pass.String(), "out line\nerr line\n"; got != want {
		t.Errorf("passed through %q, want %q", got, want)
	}
	err = p.Alive()
	if err == nil || !strings.Contains(err.Error(), "printer exited (exit status 3): out line\nerr line") {
		t.Errorf("Alive() = %v, want printer's exit and log", err)
	}
	if err := p.Stop(); err != nil {
		t.Errorf("Stop() of an exited child = %v", err)
	}
}

func TestStop(t *testing.T) {
	child(t, "serve")
	p, err := Start(t.TempDir(), "server", nil, os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Alive(); err != nil {
		t.Fatalf("Alive() = %v", err)
	}
	if p.PID() <= 0 || p.Started.IsZero() {
		t.Errorf("PID() %d, Started %v", p.PID(), p.Started)
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("Stop() = %v", err)
	}
	if p.Alive() == nil {
		t.Error("Alive() = nil after Stop")
	}
}

func TestStartError(t *testing.T) {
	dir := t.TempDir()
	_, err := Start(dir, "missing", nil, filepath.Join(dir, "no-such-program"))
	if err == nil || !strings.HasPrefix(err.Error(), "starting missing: ") {
		t.Errorf("Start of a missing program = %v", err)
	}
	if _, err := Start(filepath.Join(dir, "no-such-dir"), "x", nil, os.Args[0]); err == nil {
		t.Error("Start with a log in a missing directory: no error")
	}
}

func TestLogTailKeepsTheEnd(t *testing.T) {
	dir := t.TempDir()
	p := &Proc{Log: filepath.Join(dir, "x.log")}
	body := strings.Repeat("a", 5000) + strings.Repeat("b", 2999) + "c\n"
	if err := os.WriteFile(p.Log, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := p.LogTail(), strings.Repeat("b", 2998)+"c"; got != want {
		t.Errorf("LogTail() has %d bytes ending %q, want %d ending %q", len(got), got[len(got)-5:], len(want), want[len(want)-5:])
	}
}

func TestPrefixWriter(t *testing.T) {
	for _, tc := range []struct {
		writes []string
		want   string
	}{
		{nil, ""},
		{[]string{"one\n"}, "ufpd: one\n"},
		{[]string{"one\n", "two\n"}, "ufpd: one\nufpd: two\n"},
	} {
		var b bytes.Buffer
		w := PrefixWriter{Prefix: "ufpd: ", W: &b}
		for _, s := range tc.writes {
			if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
				t.Errorf("Write(%q) = %d, %v", s, n, err)
			}
		}
		if b.String() != tc.want {
			t.Errorf("%q: wrote %q, want %q", tc.writes, b.String(), tc.want)
		}
	}
}

func TestWaitUFPD(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")

	child(t, "print")
	p, err := Start(t.TempDir(), "ufpd", nil, os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	<-p.exited
	if err := WaitUFPD(context.Background(), p, sock); err == nil || !strings.Contains(err.Error(), "ufpd exited") {
		t.Errorf("WaitUFPD of an exited ufpd = %v", err)
	}

	child(t, "serve")
	p, err = Start(t.TempDir(), "ufpd", nil, os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = WaitUFPD(ctx, p, sock)
	if err == nil || !strings.Contains(err.Error(), "ufpd did not answer on "+sock) {
		t.Errorf("WaitUFPD with its context done = %v", err)
	}
	if p.Alive() == nil {
		t.Error("WaitUFPD with its context done left ufpd running")
	}
}

func TestLoadAverage(t *testing.T) {
	if _, err := os.Stat("/proc/loadavg"); err != nil {
		if got := LoadAverage(); got != "unknown" {
			t.Errorf("LoadAverage() without /proc/loadavg = %q", got)
		}
		return
	}
	if got := strings.Fields(LoadAverage()); len(got) != 3 {
		t.Errorf("LoadAverage() = %q, want three figures", got)
	}
}
