// Package capture reads and writes pcapng (through gopacket's pcapgo):
// the files ufp-replay replays and writes, one interface per switch port,
// and the live captures of a switch port, with each frame's direction and
// the capture's drop count. It keeps gopacket out of the engine.
//
// It imports gopacket and the standard library.
package capture
