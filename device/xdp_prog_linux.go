//go:build linux

package device

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// This file holds the XDP program of the AF_XDP uplink: written with
// cilium/ebpf's asm package (no C toolchain, no generated object), loaded
// with an XSKMAP of the device's sockets, and attached to the interface
// through a BPF link, which the kernel detaches when its last file
// descriptor is closed: a ufpd that dies leaves no program behind.

// XDPAttach chooses how the XDP program is attached.
type XDPAttach uint8

const (
	// XDPAttachAuto tries the driver's own (native) XDP first and falls
	// back to generic (SKB) XDP where the driver has none.
	XDPAttachAuto XDPAttach = iota
	// XDPAttachNative attaches in the driver (veth, most 10G+ NICs).
	XDPAttachNative
	// XDPAttachGeneric attaches in the kernel's generic receive path,
	// which every interface has: slower (an skb is built first), and
	// always copy mode.
	XDPAttachGeneric
)

// String returns "auto", "native" or "generic".
func (a XDPAttach) String() string {
	switch a {
	case XDPAttachNative:
		return "native"
	case XDPAttachGeneric:
		return "generic"
	}
	return "auto"
}

// xdpMdRxQueueIndex is the offset of rx_queue_index, the receive
// queue's index, in the program's context (struct xdp_md).
const xdpMdRxQueueIndex = 16

// xdpPass is the XDP_PASS action, the fallback of bpf_redirect_map.
const xdpPass = 2

// xdpProg is the loaded program, its XSKMAP and the link attaching it.
type xdpProg struct {
	xsks *ebpf.Map
	prog *ebpf.Program
	lnk  link.Link
	mode XDPAttach // native or generic, once attached
}

// redirectInstructions is the program: every frame goes to the socket
// of its receive queue in the XSKMAP; a queue without a socket passes the
// frame to the kernel's stack (the flags of bpf_redirect_map carry the
// action taken when the lookup fails).
//
//	r2 = ctx->rx_queue_index
//	r1 = &xsks
//	r3 = XDP_PASS
//	r0 = bpf_redirect_map(r1, r2, r3)
//	return r0
func redirectInstructions(xsks *ebpf.Map) (asm.Instructions, error) {
	mapPtr := asm.LoadMapPtr(asm.R1, 0)
	if err := mapPtr.AssociateMap(xsks); err != nil {
		return nil, err
	}
	return asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, xdpMdRxQueueIndex, asm.Word),
		mapPtr,
		asm.Mov.Imm(asm.R3, xdpPass),
		asm.FnRedirectMap.Call(),
		asm.Return(),
	}, nil
}

// loadXDP creates the XSKMAP of queues entries and loads the program.
func loadXDP(queues int) (*xdpProg, error) {
	xsks, err := ebpf.NewMap(&ebpf.MapSpec{
		Name: "ufp_xsks", Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: uint32(queues),
	})
	if err != nil {
		return nil, fmt.Errorf("XSKMAP: %w", err)
	}
	insns, err := redirectInstructions(xsks)
	if err != nil {
		xsks.Close()
		return nil, fmt.Errorf("XDP program: %w", err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "ufp_xsk_redir", Type: ebpf.XDP, License: "Apache-2.0", Instructions: insns,
	})
	if err != nil {
		xsks.Close()
		return nil, fmt.Errorf("XDP program: %w", err)
	}
	return &xdpProg{xsks: xsks, prog: prog}, nil
}

// setSocket puts the socket fd in the map at queue.
func (p *xdpProg) setSocket(queue, fd int) error {
	if err := p.xsks.Put(uint32(queue), uint32(fd)); err != nil {
		return fmt.Errorf("XSKMAP[%d]: %w", queue, err)
	}
	return nil
}

// attach attaches the program to the interface ifindex of the caller's
// namespace (the caller runs on a thread in the interface's): natively
// or generically as want says, native first for XDPAttachAuto.
func (p *xdpProg) attach(ifindex int, want XDPAttach) error {
	try := func(mode XDPAttach) error {
		flags := link.XDPDriverMode
		if mode == XDPAttachGeneric {
			flags = link.XDPGenericMode
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: p.prog, Interface: ifindex, Flags: flags})
		if err != nil {
			return fmt.Errorf("attach %s XDP: %w", mode, err)
		}
		p.lnk, p.mode = l, mode
		return nil
	}
	if want != XDPAttachAuto {
		return try(want)
	}
	errNative := try(XDPAttachNative)
	if errNative == nil {
		return nil
	}
	if errGeneric := try(XDPAttachGeneric); errGeneric != nil {
		return errors.Join(errNative, errGeneric)
	}
	return nil
}

// close detaches the program (closing the link) and frees it and the map.
func (p *xdpProg) close() error {
	var errs []error
	if p.lnk != nil {
		errs = append(errs, p.lnk.Close())
		p.lnk = nil
	}
	if p.prog != nil {
		errs = append(errs, p.prog.Close())
		p.prog = nil
	}
	if p.xsks != nil {
		errs = append(errs, p.xsks.Close())
		p.xsks = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("detach XDP: %w", err)
	}
	return nil
}
