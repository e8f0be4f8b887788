package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/ufp-dev/ufp/api"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs ufpctl with args and returns its exit status.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := &cli{ctx: ctx, stdin: os.Stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv}
	return c.main(args)
}

// cli is one run of ufpctl: its streams, its global options and its
// client. Not safe for concurrent use.
type cli struct {
	ctx            context.Context
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string

	socket string // -s
	output string // -o: table or json
	client *api.Client
	// cmd is the command being run.
	cmd *command
	// cmdUsage prints the usage of the command being run, once its
	// arguments are parsed.
	cmdUsage func()
}

// command is one of ufpctl's commands.
type command struct {
	name string
	// synopsis is the command's usage line after "ufpctl NAME".
	synopsis string
	help     string
	run      func(c *cli, args []string) error
}

// flagSet is flag.FlagSet, the type commands define their flags on.
type flagSet = flag.FlagSet

// commands are ufpctl's commands, in the order the usage lists them.
var commands = []command{
	{"status", "", "the daemon's status", (*cli).status},
	{"networks", "", "list the networks", (*cli).networks},
	{"network", "NAME", "show a network", (*cli).network},
	{"endpoints", "[-owner NAME] [-remote true|false]", "list the endpoints with their devices and port states", (*cli).endpoints},
	{"endpoint", "NAME", "show an endpoint", (*cli).endpoint},
	{"lbs", "[-owner NAME]", "list the load balancers", (*cli).lbs},
	{"lb", "NAME", "show a load balancer", (*cli).lb},
	{"routes", "[-owner NAME]", "list the routes to other nodes' pod subnets", (*cli).routes},
	{"route", "NAME", "show a route", (*cli).route},
	{"create", "network|endpoint|lb -f FILE", "create an object from JSON in FILE (- for standard input)", (*cli).create},
	{"update", "network|endpoint|lb [NAME] -f FILE", "replace an object with JSON in FILE (- for standard input)", (*cli).update},
	{"delete", "network|endpoint|lb NAME", "delete an object", (*cli).delete},
	{"batch", "-f FILE", "create, replace and delete endpoints and load balancers of one owner at once (JSON in FILE, - for standard input)", (*cli).batch},
	{"ports", "", "list the switch's ports and their devices", (*cli).ports},
	{"layers", "PORT", "show a port's layers, groups and rules with their counters", (*cli).layers},
	{"rules", "[PORT]", "list the rules with their counters (of one port, or of all)", (*cli).rules},
	{"flows", "[flush] [-port P] [-proto P] [-src A|PFX] [-dst A|PFX] [-sport N] [-dport N] [-limit N]", "list (or flush) the cached flows", (*cli).flows},
	{"counters", "", "show the switch's counters", (*cli).counters},
	{"trace", "PORT PROTO SRC[:PORT] DST[:PORT] [flags]", "tell what the switch would do with a packet", (*cli).trace},
	{"restart", "", "restart ufpd gracefully: a new ufpd takes over the devices, listeners and connections, losing no packet", (*cli).restart},
	{"upgrade", "-binary PATH", "restart ufpd gracefully onto another executable", (*cli).upgrade},
	{"capture", "PORT -w FILE [-c COUNT] [-snaplen N] [-direction in|out] [-t DURATION]", "capture a port's frames as pcapng", (*cli).capture},
}

func findCommand(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// usageError is an error in the command line: it is printed with the
// usage text and exits with status 2.
type usageError struct {
	msg   string
	usage func() // prints the usage text of the command at fault
}

func (e *usageError) Error() string { return e.msg }

// errHelp is returned when the user asked for the usage text.
var errHelp = errors.New("help requested")

func (c *cli) main(args []string) int {
	fl := flag.NewFlagSet("ufpctl", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	c.globalFlags(fl)
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.usage(c.stdout)
			return 0
		}
		fmt.Fprintf(c.stderr, "ufpctl: %v\n", err)
		c.usage(c.stderr)
		return 2
	}
	args = fl.Args()
	if len(args) == 0 {
		c.usage(c.stderr)
		return 2
	}
	if args[0] == "help" {
		if len(args) > 1 {
			if cmd := findCommand(args[1]); cmd != nil {
				c.cmd = cmd
				cmd.run(c, []string{"-h"})
				return 0
			}
		}
		c.usage(c.stdout)
		return 0
	}
	cmd := findCommand(args[0])
	if cmd == nil {
		fmt.Fprintf(c.stderr, "ufpctl: unknown command %q\n", args[0])
		c.usage(c.stderr)
		return 2
	}
	c.cmd = cmd
	err := cmd.run(c, args[1:])
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(c.stderr, "ufpctl %s: %s\n", cmd.name, ue.msg)
		if ue.usage != nil {
			ue.usage()
		}
		return 2
	}
	fmt.Fprintf(c.stderr, "ufpctl: %s\n", c.describeError(err))
	return 1
}

// globalFlags defines -s and -o on fl; commands define them too, so that
// they may follow the command.
func (c *cli) globalFlags(fl *flag.FlagSet) {
	if c.socket == "" {
		c.socket = c.getenv("UFPCTL_SOCKET")
		if c.socket == "" {
			c.socket = api.DefaultSocket
		}
	}
	if c.output == "" {
		c.output = "table"
	}
	fl.StringVar(&c.socket, "s", c.socket, "ufpd's API `socket` (the default is $UFPCTL_SOCKET if set)")
	fl.StringVar(&c.output, "o", c.output, "output `format`: table or json")
}

func (c *cli) usage(w io.Writer) {
	fmt.Fprintf(w, "usage: ufpctl [-s SOCKET] [-o table|json] COMMAND [ARGS]\n\ncommands:\n")
	for _, cmd := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", cmd.name, cmd.help)
	}
	fmt.Fprintf(w, "\nglobal flags (before or after the command):\n"+
		"  -s SOCKET  ufpd's API socket (default $UFPCTL_SOCKET, else %s)\n"+
		"  -o FORMAT  output: table (default) or json\n\n"+
		"ufpctl help COMMAND (or ufpctl COMMAND -h) describes a command.\n", api.DefaultSocket)
}

// commandUsage prints cmd's usage: its synopsis and the flags of fl.
func (c *cli) commandUsage(w io.Writer, cmd *command, fl *flag.FlagSet) {
	fmt.Fprintf(w, "usage: ufpctl %s %s\n\n%s.\n", cmd.name, cmd.synopsis, upperFirst(cmd.help))
	if extra := commandNotes[cmd.name]; extra != "" {
		fmt.Fprintf(w, "\n%s", extra)
	}
	fmt.Fprintln(w)
	fl.SetOutput(w)
	fl.PrintDefaults()
	fl.SetOutput(io.Discard)
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// commandNotes are further paragraphs of some commands' usage.
var commandNotes = map[string]string{
	"trace": "PROTO is tcp, udp, icmp, icmpv6 or a number. SRC and DST are addresses, with a\n" +
		"port for tcp and udp (an icmp echo's identifier for SRC): 10.0.0.1:80, [fd00::1]:80.\n" +
		"Nothing is sent: the switch tells the layers the packet would cross, the rule that\n" +
		"decided each, the header changes and the verdict.\n",
	"capture": "Streams pcapng to FILE (- for standard output: ufpctl capture pod-a -w - | tshark -r -)\n" +
		"until interrupted, COUNT frames or DURATION; then prints what was written to standard error.\n",
	"create": "The JSON is the object as the API takes it (see ufpctl network|endpoint|lb NAME -o json).\n",
	"update": "NAME, if given, must be the object's Name (it fills it in if the JSON has none).\n",
	"flows":  "Addresses match the flow key's (tenant) addresses; -limit 0 is ufpd's default (1000).\n",
}

// parse parses the arguments of the command being run with the flags
// define adds (nil: none), allowing flags after the positional arguments,
// and checks that there are between least and most positional arguments
// (most -1: any).
func (c *cli) parse(args []string, define func(fl *flag.FlagSet), least, most int) ([]string, error) {
	cmd := c.cmd
	fl := flag.NewFlagSet("ufpctl "+cmd.name, flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	if define != nil {
		define(fl)
	}
	c.globalFlags(fl)
	usage := func() { c.commandUsage(c.stderr, cmd, fl) }
	c.cmdUsage = usage
	var pos []string
	for len(args) > 0 {
		a := args[0]
		switch {
		case a == "--":
			pos = append(pos, args[1:]...)
			args = nil
		case len(a) > 1 && a[0] == '-':
			if err := fl.Parse(args); err != nil {
				if errors.Is(err, flag.ErrHelp) {
					c.commandUsage(c.stdout, cmd, fl)
					return nil, errHelp
				}
				return nil, &usageError{err.Error(), usage}
			}
			args = fl.Args()
		default:
			pos = append(pos, a)
			args = args[1:]
		}
	}
	switch c.output {
	case "table", "json":
	default:
		return nil, &usageError{fmt.Sprintf("-o %q: want table or json", c.output), usage}
	}
	switch {
	case len(pos) < least:
		return nil, &usageError{fmt.Sprintf("missing arguments (want %s)", cmd.synopsis), usage}
	case most >= 0 && len(pos) > most:
		return nil, &usageError{fmt.Sprintf("unexpected arguments %q", pos[most:]), usage}
	}
	c.client = api.NewClient(c.socket)
	return pos, nil
}

// usageErr returns a usage error of the command being run.
func (c *cli) usageErr(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...), c.cmdUsage}
}

// describeError is err as ufpctl prints it: ufpd's message as it is, a
// failure to reach ufpd naming the socket, with a hint.
func (c *cli) describeError(err error) string {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.Message
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return fmt.Sprintf("cannot reach ufpd at %s: %v (is ufpd running? the socket is -s or $UFPCTL_SOCKET)", c.socket, op.Err)
	}
	return err.Error()
}
