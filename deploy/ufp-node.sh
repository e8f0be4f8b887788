#!/bin/sh
# ufp-node.sh: what the containers of ufp's DaemonSet run on a node
# (deploy/daemonset.yaml, deploy/README.md). POSIX sh and iproute2.
#
#   ufp-node.sh install-cni   ufp-cni and host-local into $UFP_HOST_CNI_BIN,
#                             then the conflist into $UFP_HOST_CNI_NET
#   ufp-node.sh ufpd-config   the uplink's facts (once, into
#                             $UFP_STATE_DIR/uplink.env), then ufpd.json
#                             rendered from the ConfigMap's template
#   ufp-node.sh run-ufpd      the node's addresses off the uplink, ufpd in
#                             the foreground; put back on a clean stop
#   ufp-node.sh render        the template on standard input with the
#                             facts in the environment, to standard output
set -eu

CONFIG_DIR=${UFP_CONFIG_DIR:-/etc/ufp-config}
STATE_DIR=${UFP_STATE_DIR:-/var/lib/ufp}
HOST_CNI_BIN=${UFP_HOST_CNI_BIN:-/host/opt/cni/bin}
HOST_CNI_NET=${UFP_HOST_CNI_NET:-/host/etc/cni/net.d}
BIN_DIR=${UFP_BIN_DIR:-/usr/local/bin}
SOCKET=${UFP_SOCKET:-/run/ufp/ufpd.sock}
# The vNIC ufpd makes for the node (the template's HostPort device).
VNIC=vEthernet

# The facts the template may name: every node has the first six; the
# IPv6 ones are empty on an IPv4-only node.
REQUIRED="UPLINK UPLINK_MAC UPLINK_MTU UPLINK_IPV4 GATEWAY_IPV4 GATEWAY_MAC_IPV4"
FACTS="$REQUIRED UPLINK_IPV6 GATEWAY_IPV6 GATEWAY_MAC_IPV6"

die() {
	echo "ufp-node: $*" >&2
	exit 1
}

# install FILE DIR NAME: copies FILE to DIR/NAME through a temporary name,
# so that the runtime never reads half a file.
install_file() {
	cp "$1" "$2/.$3.ufp-tmp"
	chmod "$4" "$2/.$3.ufp-tmp"
	mv -f "$2/.$3.ufp-tmp" "$2/$3"
}

install_cni() {
	for b in ufp-cni host-local; do
		install_file "$BIN_DIR/$b" "$HOST_CNI_BIN" "$b" 0755
	done
	# The binaries first: a conflist the runtime finds must work.
	install_file "$CONFIG_DIR/10-ufp.conflist" "$HOST_CNI_NET" 10-ufp.conflist 0644
	echo "ufp-node: ufp-cni and host-local in $HOST_CNI_BIN, 10-ufp.conflist in $HOST_CNI_NET"
}

# field N: prints the word after the word $1 on standard input's first
# line that has it.
after() {
	awk -v w="$1" '{for (i = 1; i < NF; i++) if ($i == w) {print $(i + 1); exit}}'
}

# neighbour_mac ADDR: the MAC of ADDR on the uplink, asking for it with a
# ping if the neighbour table does not have it.
neighbour_mac() {
	mac=$(ip neigh show "$1" dev "$UPLINK" | after lladdr)
	if [ -z "$mac" ]; then
		ping -c 1 -W 2 -I "$UPLINK" "$1" >/dev/null 2>&1 || true
		mac=$(ip neigh show "$1" dev "$UPLINK" | after lladdr)
	fi
	echo "$mac"
}

# gather writes the uplink's facts to uplink.env, read while the node's
# addresses are still on it.
gather() {
	UPLINK=${UFP_UPLINK:-$(ip -4 route show default | after dev)}
	[ -n "$UPLINK" ] || die "no uplink: the node has no IPv4 default route; set UFP_UPLINK"
	[ -e "/sys/class/net/$UPLINK" ] || die "uplink $UPLINK: no such interface"
	UPLINK_MAC=$(cat "/sys/class/net/$UPLINK/address")
	UPLINK_MTU=$(cat "/sys/class/net/$UPLINK/mtu")
	UPLINK_IPV4=$(ip -4 -o addr show dev "$UPLINK" scope global | after inet)
	UPLINK_IPV6=$(ip -6 -o addr show dev "$UPLINK" scope global | after inet6)
	GATEWAY_IPV4=$(ip -4 route show default dev "$UPLINK" | after via)
	GATEWAY_IPV6=$(ip -6 route show default dev "$UPLINK" | after via)
	[ -n "$UPLINK_IPV4" ] || die "uplink $UPLINK has no global IPv4 address"
	[ -n "$GATEWAY_IPV4" ] || die "uplink $UPLINK has no IPv4 default gateway"
	GATEWAY_MAC_IPV4=$(neighbour_mac "$GATEWAY_IPV4")
	[ -n "$GATEWAY_MAC_IPV4" ] || die "gateway $GATEWAY_IPV4: no MAC in the neighbour table of $UPLINK, and it did not answer a ping"
	GATEWAY_MAC_IPV6=
	if [ -n "$GATEWAY_IPV6" ] && [ -n "$UPLINK_IPV6" ]; then
		GATEWAY_MAC_IPV6=$(neighbour_mac "$GATEWAY_IPV6")
	fi
	if [ -z "$GATEWAY_MAC_IPV6" ] || [ -z "$UPLINK_IPV6" ]; then
		# IPv4 only: an IPv6 fact without the others is left out.
		UPLINK_IPV6= GATEWAY_IPV6= GATEWAY_MAC_IPV6=
	fi
	tmp="$STATE_DIR/.uplink.env.ufp-tmp"
	: >"$tmp"
	for f in $FACTS; do
		eval "v=\${$f}"
		echo "$f=$v" >>"$tmp"
	done
	mv -f "$tmp" "$STATE_DIR/uplink.env"
}

# render substitutes ${FACT} in standard input with the environment's
# values; a line naming an IPv6 fact that is empty or unset is left out.
render() {
	for f in $REQUIRED; do
		eval "v=\${$f:-}"
		[ -n "$v" ] || die "$f: required, and not given"
	done
	script=
	for f in $FACTS; do
		eval "v=\${$f:-}"
		case $v in
		*'|'* | *'&'* | *'\'*) die "$f: $v is not a plain value" ;;
		esac
		if [ -z "$v" ]; then
			script="$script/\\\${$f}/d;"
		else
			script="${script}s|\\\${$f}|$v|g;"
		fi
	done
	out=$(sed -e "$script")
	case $out in
	*'${'*) die "the template names a fact ufp-node.sh does not know: $(printf '%s\n' "$out" | grep -o '\${[^}]*}' | head -n 1)" ;;
	esac
	printf '%s\n' "$out"
}

# load reads uplink.env into the environment.
load() {
	[ -r "$STATE_DIR/uplink.env" ] || die "$STATE_DIR/uplink.env is missing: run ufp-node.sh ufpd-config first"
	while IFS='=' read -r k v; do
		case " $FACTS " in
		*" $k "*) eval "$k=\$v" && export "$k" ;;
		esac
	done <"$STATE_DIR/uplink.env"
}

ufpd_config() {
	# The facts are read once: after the first start the node's
	# addresses live on ufpd's vNIC, not on the uplink.
	if [ ! -e "$STATE_DIR/uplink.env" ]; then
		gather
	fi
	load
	render <"$CONFIG_DIR/ufpd.json" >"$STATE_DIR/.ufpd.json.ufp-tmp"
	"$BIN_DIR/ufpd" -check -config "$STATE_DIR/.ufpd.json.ufp-tmp" >/dev/null ||
		die "the rendered configuration is not valid (above); uplink facts in $STATE_DIR/uplink.env"
	mv -f "$STATE_DIR/.ufpd.json.ufp-tmp" "$STATE_DIR/ufpd.json"
	echo "ufp-node: $STATE_DIR/ufpd.json for uplink $UPLINK ($UPLINK_IPV4${UPLINK_IPV6:+ $UPLINK_IPV6})"
}

# give_back puts the node's addresses and default routes back on the
# uplink, unless ufpd's vNIC is still there (a crash: the next ufpd takes
# it over with the addresses on it).
give_back() {
	if ip link show "$VNIC" >/dev/null 2>&1; then
		echo "ufp-node: $VNIC is still there; the node's addresses stay on it" >&2
		return
	fi
	ip addr replace "$UPLINK_IPV4" dev "$UPLINK" || true
	ip route replace default via "$GATEWAY_IPV4" dev "$UPLINK" || true
	if [ -n "$UPLINK_IPV6" ]; then
		ip -6 addr replace "$UPLINK_IPV6" dev "$UPLINK" nodad || true
		ip -6 route replace default via "$GATEWAY_IPV6" dev "$UPLINK" || true
	fi
	echo "ufp-node: the node's addresses are back on $UPLINK" >&2
}

# ufpd_pid prints the PID ufpd's API reports (a graceful restart's
# successor), or nothing.
ufpd_pid() {
	"$BIN_DIR/ufpctl" -s "$SOCKET" -o json status 2>/dev/null | sed -n 's/^ *"pid": *\([0-9]*\),*$/\1/p'
}

run_ufpd() {
	load
	[ -r "$STATE_DIR/ufpd.json" ] || die "$STATE_DIR/ufpd.json is missing: run ufp-node.sh ufpd-config first"
	# ufpd's vNIC carries the node's addresses; two interfaces with them
	# would split the node's traffic around the switch.
	ip addr flush dev "$UPLINK" scope global
	# An IPv6 default route outlives the address; ufpd sets the node's on
	# vEthernet.
	while ip -4 route del default dev "$UPLINK" 2>/dev/null; do :; done
	while ip -6 route del default dev "$UPLINK" 2>/dev/null; do :; done
	"$BIN_DIR/ufpd" -config "$STATE_DIR/ufpd.json" &
	pid=$!
	child=$pid
	trap 'kill -TERM $pid 2>/dev/null' TERM INT
	trap 'kill -HUP $pid 2>/dev/null' HUP
	status=0
	while :; do
		while kill -0 "$pid" 2>/dev/null; do
			# A trapped signal ends the wait early; a process that is
			# not our child (a successor) cannot be waited for: poll.
			wait "$pid" 2>/dev/null && status=0 || status=$?
			kill -0 "$pid" 2>/dev/null && sleep 1
		done
		if [ "$pid" = "$child" ]; then
			# Not reaped yet if a signal ended the last wait; 127 if
			# it was, and status has its exit status.
			wait "$child" 2>/dev/null && st=0 || st=$?
			[ "$st" = 127 ] || status=$st
		fi
		# A graceful restart (ufpctl restart) leaves a successor
		# serving the socket: follow it.
		next=$(ufpd_pid)
		if [ -n "$next" ] && [ "$next" != "$pid" ]; then
			echo "ufp-node: ufpd $pid handed over to $next" >&2
			pid=$next
			continue
		fi
		break
	done
	give_back
	exit "$status"
}

case ${1:-} in
install-cni) install_cni ;;
ufpd-config) ufpd_config ;;
run-ufpd) run_ufpd ;;
render) render ;;
*)
	echo "usage: ufp-node.sh install-cni|ufpd-config|run-ufpd|render" >&2
	exit 2
	;;
esac
