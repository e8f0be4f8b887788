package main

import (
	"flag"
	"path/filepath"
	"time"
)

// restart asks ufpd for a graceful restart onto its own executable.
func (c *cli) restart(args []string) error {
	if _, err := c.parse(args, nil, 0, 0); err != nil {
		return err
	}
	return c.restartOnto("")
}

// upgrade asks ufpd for a graceful restart onto another executable.
func (c *cli) upgrade(args []string) error {
	var binary string
	if _, err := c.parse(args, func(fl *flag.FlagSet) {
		fl.StringVar(&binary, "binary", "", "the new ufpd executable")
	}, 0, 0); err != nil {
		return err
	}
	if binary == "" {
		return &usageError{msg: "upgrade needs -binary PATH", usage: c.cmdUsage}
	}
	abs, err := filepath.Abs(binary)
	if err != nil {
		return err
	}
	return c.restartOnto(abs)
}

func (c *cli) restartOnto(binary string) error {
	r, err := c.client.Restart(c.ctx, binary)
	if err != nil {
		return err // says why; the old ufpd serves on
	}
	if c.json() {
		return printJSON(c.stdout, r)
	}
	k := newKV(c.stdout)
	k.add("pid", "%d", r.Pid)
	k.add("binary", "%s", r.Binary)
	k.add("paused", "%v", time.Duration(r.PausedMicros)*time.Microsecond)
	return k.flush()
}
