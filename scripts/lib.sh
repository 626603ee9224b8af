# Shell functions shared by scripts/mariadb.sh and scripts/zookeeper.sh.
# Source it after setting SCRIPT (the name used in messages).

die() {
	echo "$SCRIPT: $*" >&2
	exit 1
}

# apt_install PKG installs a Debian package as root. The package lists are
# refreshed only when the first attempt fails, so a warm machine stays fast.
# Services are kept from starting during the install (no server on the
# package's default port from its postinst), unless a policy already exists.
apt_install() {
	[ "$(id -u)" -eq 0 ] || die "$1 is missing and installing it needs root"
	command -v apt-get >/dev/null 2>&1 || die "$1 is missing and there is no apt-get"
	local policy=/usr/sbin/policy-rc.d made_policy=
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod 755 "$policy"
		made_policy=1
	fi
	echo "$SCRIPT: installing $1" >&2
	local rc=0
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y --no-install-recommends "$1" >&2 || {
		echo "$SCRIPT: install failed; refreshing package lists once" >&2
		apt-get update >&2 &&
			apt-get install -y --no-install-recommends "$1" >&2
	} || rc=$?
	[ -n "$made_policy" ] && rm -f "$policy"
	[ "$rc" -eq 0 ] || die "apt-get install $1 failed ($rc)"
}

# port_free reports whether nothing accepts connections on 127.0.0.1:$1.
port_free() {
	! timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}

# free_port prints a TCP port that is free on 127.0.0.1 right now: one the
# kernel hands out when python3 is there, else a probed one below the
# ephemeral range (so outgoing connections do not take it meanwhile). The
# caller still retries if its server then fails to bind it.
free_port() {
	local p
	if command -v python3 >/dev/null 2>&1 &&
		p=$(python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])' 2>/dev/null) && [ -n "$p" ]; then
		echo "$p"
		return 0
	fi
	for _ in $(seq 200); do
		p=$((20000 + RANDOM % 12000))
		if port_free "$p"; then
			echo "$p"
			return 0
		fi
	done
	die "no free TCP port found on 127.0.0.1"
}

# running reports whether pid $1 exists and is not a zombie.
running() {
	local stat
	[ -n "${1:-}" ] && stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[ "${stat%% *}" != Z ]
}
