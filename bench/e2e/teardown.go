package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
)

// teardown is the undo list of a run: each namespace, process and
// directory the harness makes is pushed right after it is made, and run
// removes them in reverse order, after success, failure or a signal. The
// zero value is empty; it is not safe for concurrent use.
type teardown struct {
	steps []undoStep
}

type undoStep struct {
	what string
	undo func() error
}

// push registers undo, described by what, to be run by run.
func (t *teardown) push(what string, undo func() error) {
	t.steps = append(t.steps, undoStep{what, undo})
}

// run undoes every step, last first, and returns their errors joined.
func (t *teardown) run() error {
	var errs []error
	for i := len(t.steps) - 1; i >= 0; i-- {
		s := t.steps[i]
		if err := s.undo(); err != nil {
			errs = append(errs, fmt.Errorf("teardown: %s: %w", s.what, err))
		}
	}
	t.steps = nil
	return errors.Join(errs...)
}

// namePrefix starts the name of every namespace the harness makes.
const namePrefix = "ufpb-"

// newRunID returns 6 random hex digits that make this run's names unique.
func newRunID() string {
	var b [3]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// nsName returns the name of this run's namespace for role.
func nsName(id, role string) string { return namePrefix + id + "-" + role }

// addNetns creates the network namespace name, registers its removal by
// that exact name, and sets its loopback up. A namespace that exists
// already is an error and is left alone.
func addNetns(ctx context.Context, r *runner, td *teardown, name string) error {
	if _, err := os.Stat("/var/run/netns/" + name); err == nil {
		return fmt.Errorf("namespace %s exists already", name)
	}
	if err := r.ip(ctx, "netns", "add", name); err != nil {
		return err
	}
	td.push("namespace "+name, func() error { return deleteNetns(r, name) })
	return r.ip(ctx, "-n", name, "link", "set", "lo", "up")
}

// deleteNetns removes the namespace name (and with it every interface in
// it). It is bounded in time and runs even after the run was cancelled.
func deleteNetns(r *runner, name string) error {
	return r.ip(context.Background(), "netns", "del", name)
}
