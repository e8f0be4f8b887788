//go:build !linux

package main

import "syscall"

// ownProcessGroup: the harness runs on Linux only (checkPrerequisites);
// elsewhere it only builds.
func ownProcessGroup() *syscall.SysProcAttr { return nil }
