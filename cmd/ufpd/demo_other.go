//go:build !linux

package main

import (
	"fmt"
	"io"
	"runtime"
)

func demo(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintf(stderr, "ufpd demo: needs Linux network namespaces (this is %s)\n", runtime.GOOS)
	return 2
}
