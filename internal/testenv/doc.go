// Package testenv says whether the machine a test runs on has what the
// test needs: root, /dev/net/tun, and the programs that some tests run as
// peers or references (ping, iperf3, curl, tshark, nft, ...). When
// something is missing, the test is skipped with a message that names it
// and the Debian package that provides it. When the environment has
// CI=true, the test fails instead: CI runs as root with every peer
// installed (.ci/install-test-peers), so it never passes by skipping.
//
// It is for tests only, and imports only the standard library.
package testenv
