package main

import (
	"fmt"
	"strings"

	"github.com/ufp-dev/ufp/api"
)

// batch applies a batch (api.Batch) from a JSON file as one change.
func (c *cli) batch(args []string) error {
	var file string
	if _, err := c.parse(args, func(fl *flagSet) {
		fl.StringVar(&file, "f", "", "the batch's JSON `file` (- for standard input)")
	}, 0, 0); err != nil {
		return err
	}
	if file == "" {
		return c.usageErr("-f FILE is required")
	}
	var b api.Batch
	if err := c.readObject(file, &b); err != nil {
		return err
	}
	res, err := c.client.Apply(c.ctx, &b)
	if err != nil {
		return err
	}
	if c.json() {
		return printJSON(c.stdout, res)
	}
	var did []string
	for _, n := range []struct {
		n    int
		what string
	}{{res.Created, "created"}, {res.Replaced, "replaced"}, {res.Deleted, "deleted"}, {res.Unchanged, "unchanged"}, {res.Absent, "absent"}} {
		if n.n > 0 {
			did = append(did, fmt.Sprintf("%d %s", n.n, n.what))
		}
	}
	if len(did) == 0 {
		did = []string{"nothing"}
	}
	fmt.Fprintf(c.stdout, "batch of %s: %s; revision %d\n", b.Owner, strings.Join(did, ", "), res.Revision)
	return nil
}
