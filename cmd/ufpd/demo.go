package main

import _ "embed"

// demoConfig is the demo's configuration (demo.json): run on Linux by
// `ufpd demo`, and parsed by tests on every system.
//
//go:embed demo.json
var demoConfig []byte
