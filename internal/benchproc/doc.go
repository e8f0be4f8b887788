// Package benchproc is the process plumbing the benchmark programs under
// bench/ share: building ufpd and the agent from the tree, starting them
// with their output in a log file, waiting for ufpd to answer on its
// socket, stopping them by their PID, and the machine's load average for
// a report's heading.
//
// It is for the benchmark programs only; it imports api (ufpd's client)
// and the standard library.
package benchproc
