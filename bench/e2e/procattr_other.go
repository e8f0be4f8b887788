//go:build !linux

package main

import (
	"errors"
	"os"
	"syscall"
)

// ownProcessGroup: the harness runs on Linux only (run checks); elsewhere
// it only builds.
func ownProcessGroup() *syscall.SysProcAttr { return nil }

// errLinuxOnly is what the process controls return off Linux.
var errLinuxOnly = errors.New("the harness runs on Linux only")

func stopProcess(*os.Process) error     { return errLinuxOnly }
func continueProcess(*os.Process) error { return errLinuxOnly }
