#!/usr/bin/env bash
# Start or stop a throwaway MariaDB server for leafmq's tests.
#
#   scripts/mariadb.sh start DIR   install MariaDB if needed, start a server on a
#                                  free 127.0.0.1 port with its data under DIR,
#                                  write DIR/env and print it
#   scripts/mariadb.sh stop DIR    stop the server started in DIR
#
# DIR/env is meant to be sourced:
#
#   export LEAF_TEST_MYSQL_DSN='root@tcp(127.0.0.1:PORT)/'
#   export LEAF_TEST_MYSQL_PID=PID
#
# "start" on a DIR whose server still answers only prints DIR/env again; a DIR
# left by a stopped server keeps its data directory and gets a new port.
# The server never touches 3306, /etc/mysql or the system socket: everything
# lives under DIR, and it is stopped by the pid it wrote, never by name.
set -euo pipefail

PATH="$PATH:/usr/sbin:/sbin"
export LC_ALL=C

readonly START_TIMEOUT=60 # seconds to wait for the server to answer
readonly STOP_TIMEOUT=30  # seconds to wait for it to exit before SIGKILL
readonly BIND_ATTEMPTS=5  # ports to try if the one picked is taken meanwhile

SCRIPT=mariadb.sh
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

usage() {
	echo "usage: $0 start|stop DIR" >&2
	exit 2
}

# install puts mariadb-server on the machine if mariadbd is missing (see
# apt_install in lib.sh).
install() {
	command -v mariadbd >/dev/null 2>&1 && return 0
	apt_install mariadb-server
	command -v mariadbd >/dev/null 2>&1 || die "mariadb-server installed but mariadbd not found"
}

# alive reports whether pid $1 is a running (or SIGSTOPped) mariadbd.
alive() {
	running "${1:-}" &&
		case "$(cat "/proc/$1/comm" 2>/dev/null)" in mariadbd | mysqld) true ;; *) false ;; esac
}

ping_server() { # port
	mariadb-admin --no-defaults --protocol=tcp -h127.0.0.1 -P"$1" -uroot \
		--connect-timeout=2 ping >/dev/null 2>&1
}

env_port() { # prints the port recorded in DIR/env, if any
	[ -r "$DIR/env" ] || return 0
	sed -n "s/^export LEAF_TEST_MYSQL_DSN='root@tcp(127\.0\.0\.1:\([0-9]*\))\/'$/\1/p" "$DIR/env" 2>/dev/null
}

server_pid() { # prints the pid of DIR's server, if it has one
	local pid=
	[ -r "$DIR/mariadb.pid" ] && pid=$(tr -dc 0-9 <"$DIR/mariadb.pid")
	if [ -z "$pid" ] && [ -r "$DIR/env" ]; then
		pid=$(sed -n 's/^export LEAF_TEST_MYSQL_PID=\([0-9]*\)$/\1/p' "$DIR/env")
	fi
	echo "$pid"
}

start() {
	mkdir -p "$DIR"
	DIR=$(cd "$DIR" && pwd)

	local pid port
	pid=$(server_pid)
	port=$(env_port)
	if alive "$pid"; then
		kill -CONT "$pid" 2>/dev/null || true # a test may have left it stopped
		if [ -n "$port" ] && ping_server "$port"; then
			echo "mariadb.sh: already running (pid $pid)" >&2
			cat "$DIR/env"
			return 0
		fi
		die "a mariadbd (pid $pid) runs in $DIR but does not answer; run: $0 stop $DIR"
	fi
	rm -f "$DIR/env" "$DIR/mariadb.pid" "$DIR/mysql.sock"

	install

	if [ ! -d "$DIR/data/mysql" ]; then
		rm -rf "$DIR/data"
		mariadb-install-db --no-defaults --user=root --datadir="$DIR/data" \
			--auth-root-authentication-method=normal --skip-test-db \
			>"$DIR/install.log" 2>&1 || {
			cat "$DIR/install.log" >&2
			die "mariadb-install-db failed"
		}
	fi

	local attempt bg deadline
	for attempt in $(seq "$BIND_ATTEMPTS"); do
		port=$(free_port)
		: >"$DIR/error.log"
		# setsid: the server must outlive the shell (and its Ctrl-C) that started it.
		setsid mariadbd --no-defaults --user=root --datadir="$DIR/data" \
			--socket="$DIR/mysql.sock" --port="$port" --bind-address=127.0.0.1 \
			--pid-file="$DIR/mariadb.pid" --log-error="$DIR/error.log" \
			--skip-name-resolve --max-connections=1000 \
			</dev/null >>"$DIR/mariadbd.out" 2>&1 &
		bg=$!
		deadline=$((SECONDS + START_TIMEOUT))
		while ! ping_server "$port"; do
			if ! running "$bg" && ! alive "$(server_pid)"; then
				break # it exited
			fi
			if [ "$SECONDS" -ge "$deadline" ]; then
				cat "$DIR/error.log" >&2
				kill -KILL "$bg" 2>/dev/null || true
				die "mariadbd did not answer on 127.0.0.1:$port within ${START_TIMEOUT}s"
			fi
			sleep 0.1
		done
		pid=$(server_pid)
		if ping_server "$port" && alive "$pid"; then
			break
		fi
		wait "$bg" 2>/dev/null || true
		if grep -qiE "bind on tcp/ip port|address already in use" "$DIR/error.log" &&
			[ "$attempt" -lt "$BIND_ATTEMPTS" ]; then
			echo "mariadb.sh: port $port was taken meanwhile, trying another" >&2
			continue
		fi
		cat "$DIR/error.log" >&2
		die "mariadbd exited during start-up"
	done

	cat >"$DIR/env.tmp" <<EOF
export LEAF_TEST_MYSQL_DSN='root@tcp(127.0.0.1:$port)/'
export LEAF_TEST_MYSQL_PID=$pid
EOF
	mv "$DIR/env.tmp" "$DIR/env"
	echo "mariadb.sh: mariadbd (pid $pid) ready on 127.0.0.1:$port, data in $DIR/data" >&2
	cat "$DIR/env"
}

stop() {
	[ -d "$DIR" ] || {
		echo "mariadb.sh: $DIR does not exist; nothing to stop" >&2
		return 0
	}
	local pid
	pid=$(server_pid)
	if ! alive "$pid"; then
		echo "mariadb.sh: no server running in $DIR" >&2
		rm -f "$DIR/env" "$DIR/mariadb.pid"
		return 0
	fi
	kill -CONT "$pid" 2>/dev/null || true # a test may have left it SIGSTOPped
	kill -TERM "$pid" 2>/dev/null || true
	local deadline=$((SECONDS + STOP_TIMEOUT))
	while alive "$pid"; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "mariadb.sh: pid $pid did not exit within ${STOP_TIMEOUT}s; killing it" >&2
			kill -KILL "$pid" 2>/dev/null || true
			sleep 0.5
			break
		fi
		sleep 0.1
	done
	rm -f "$DIR/env" "$DIR/mariadb.pid"
	echo "mariadb.sh: stopped mariadbd (pid $pid)" >&2
}

[ $# -eq 2 ] || usage
DIR=$2
case "$1" in
start) start ;;
stop) stop ;;
*) usage ;;
esac
