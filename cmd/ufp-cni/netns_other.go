//go:build !linux

package main

// checkNamespace is Linux's: elsewhere it reports that it cannot look.
func checkNamespace(path string, want nsWant) []string {
	return []string{"interface " + want.ifName + " in " + path + ": namespaces are checked on Linux only"}
}
