#!/usr/bin/env bash
# Start or stop a throwaway ZooKeeper (standalone) for leafmq's tests.
#
#   scripts/zookeeper.sh start DIR   install ZooKeeper if needed, start a server
#                                    on a free 127.0.0.1 port with its data under
#                                    DIR, write DIR/env and print it
#   scripts/zookeeper.sh stop DIR    stop the server started in DIR
#
# DIR/env is meant to be sourced:
#
#   export LEAF_TEST_ZK_ADDR=127.0.0.1:PORT
#   export LEAF_TEST_ZK_PID=PID
#
# "start" on a DIR whose server still answers only prints DIR/env again. The
# server never touches 2181 or /etc/zookeeper: everything lives under DIR,
# and it is stopped by the pid it wrote, never by name.
set -euo pipefail

PATH="$PATH:/usr/sbin:/sbin"
export LC_ALL=C

readonly JAR=/usr/share/java/zookeeper.jar
readonly START_TIMEOUT=60 # seconds to wait for the server to answer
readonly STOP_TIMEOUT=30  # seconds to wait for it to exit before SIGKILL
readonly BIND_ATTEMPTS=5  # ports to try if the one picked is taken meanwhile

SCRIPT=zookeeper.sh
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

usage() {
	echo "usage: $0 start|stop DIR" >&2
	exit 2
}

# install puts the Debian zookeeper package on the machine if its jar or
# java is missing (see apt_install in lib.sh).
install() {
	[ -r "$JAR" ] && command -v java >/dev/null 2>&1 && return 0
	apt_install zookeeper
	[ -r "$JAR" ] || die "zookeeper installed but $JAR not found"
	command -v java >/dev/null 2>&1 || die "zookeeper installed but java not found"
}

# alive reports whether pid $1 is a running ZooKeeper server (a java whose
# command line names ZooKeeperServerMain).
alive() {
	running "${1:-}" &&
		tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q ZooKeeperServerMain
}

# ready reports whether the server on port $1 says "Mode: standalone" to
# srvr (ruok answers before the server serves clients).
ready() {
	timeout 2 bash -c '
		exec 3<>/dev/tcp/127.0.0.1/'"$1"' || exit 1
		printf srvr >&3
		grep -q "^Mode: standalone" <&3' 2>/dev/null
}

env_port() { # prints the port recorded in DIR/env, if any
	[ -r "$DIR/env" ] || return 0
	sed -n 's/^export LEAF_TEST_ZK_ADDR=127\.0\.0\.1:\([0-9]*\)$/\1/p' "$DIR/env"
}

server_pid() { # prints the pid of DIR's server, if it has one
	local pid=
	[ -r "$DIR/zookeeper.pid" ] && pid=$(tr -dc 0-9 <"$DIR/zookeeper.pid")
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
		if [ -n "$port" ] && ready "$port"; then
			echo "zookeeper.sh: already running (pid $pid)" >&2
			cat "$DIR/env"
			return 0
		fi
		die "a ZooKeeper (pid $pid) runs in $DIR but does not answer; run: $0 stop $DIR"
	fi

	install
	mkdir -p "$DIR/data"

	local attempt deadline
	for attempt in $(seq "$BIND_ATTEMPTS"); do
		port=$(free_port)
		cat >"$DIR/zoo.cfg" <<CFG
tickTime=2000
dataDir=$DIR/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr
CFG
		: >"$DIR/zookeeper.log"
		# setsid: the server must outlive the shell (and its Ctrl-C) that started it.
		setsid java -Xmx256m -Dzookeeper.log.dir="$DIR" \
			-cp "$DIR:$JAR" org.apache.zookeeper.server.ZooKeeperServerMain "$DIR/zoo.cfg" \
			</dev/null >>"$DIR/zookeeper.log" 2>&1 &
		pid=$!
		echo "$pid" >"$DIR/zookeeper.pid"
		deadline=$((SECONDS + START_TIMEOUT))
		while ! ready "$port"; do
			running "$pid" || break # it exited
			if [ "$SECONDS" -ge "$deadline" ]; then
				tail -n 50 "$DIR/zookeeper.log" >&2
				kill -KILL "$pid" 2>/dev/null || true
				die "ZooKeeper did not answer on 127.0.0.1:$port within ${START_TIMEOUT}s"
			fi
			sleep 0.2
		done
		if running "$pid" && ready "$port"; then
			break
		fi
		wait "$pid" 2>/dev/null || true
		if grep -qiE "address already in use|BindException" "$DIR/zookeeper.log" &&
			[ "$attempt" -lt "$BIND_ATTEMPTS" ]; then
			echo "zookeeper.sh: port $port was taken meanwhile, trying another" >&2
			continue
		fi
		tail -n 50 "$DIR/zookeeper.log" >&2
		die "ZooKeeper exited during start-up"
	done

	cat >"$DIR/env.tmp" <<ENV
export LEAF_TEST_ZK_ADDR=127.0.0.1:$port
export LEAF_TEST_ZK_PID=$pid
ENV
	mv "$DIR/env.tmp" "$DIR/env"
	echo "zookeeper.sh: ZooKeeper (pid $pid) ready on 127.0.0.1:$port, data in $DIR/data" >&2
	cat "$DIR/env"
}

stop() {
	[ -d "$DIR" ] || {
		echo "zookeeper.sh: $DIR does not exist; nothing to stop" >&2
		return 0
	}
	local pid
	pid=$(server_pid)
	if ! alive "$pid"; then
		echo "zookeeper.sh: no server running in $DIR" >&2
		rm -f "$DIR/env" "$DIR/zookeeper.pid"
		return 0
	fi
	kill -CONT "$pid" 2>/dev/null || true # a test may have left it SIGSTOPped
	kill -TERM "$pid" 2>/dev/null || true
	local deadline=$((SECONDS + STOP_TIMEOUT))
	while alive "$pid"; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "zookeeper.sh: pid $pid did not exit within ${STOP_TIMEOUT}s; killing it" >&2
			kill -KILL "$pid" 2>/dev/null || true
			sleep 0.5
			break
		fi
		sleep 0.1
	done
	rm -f "$DIR/env" "$DIR/zookeeper.pid"
	echo "zookeeper.sh: stopped ZooKeeper (pid $pid)" >&2
}

[ $# -eq 2 ] || usage
DIR=$2
case "$1" in
start) start ;;
stop) stop ;;
*) usage ;;
esac
