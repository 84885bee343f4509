#!/usr/bin/env bash
# sysbench.sh — sysbench directly against MariaDB, through a plain TCP relay
# and through slotproxy.
#
#   scripts/sysbench.sh
#   THREADS=16 TIME=20 ROUNDS=5 scripts/sysbench.sh
#
# Starts a throwaway MariaDB (a fresh data directory in a temporary
# directory, on 127.0.0.1), builds slotproxy and runs
# "slotproxy serve --listen 127.0.0.1:PORT --backend 127.0.0.1:PORT" in front
# of it (no rules: every statement is relayed, which is the path all
# non-counter traffic takes), and slotbench's plain TCP relay
# ("slotbench --relay-listen": two io.Copy goroutines per connection), the
# cost of any extra hop. It prepares the sysbench tables directly, then
# runs each test ROUNDS times, alternating the targets (direct, relay,
# proxy, direct, ...) so that machine noise hits all, and prints tps, qps
# and p95 latency per run, the means, and the ratios proxy/direct and
# proxy/relay (throughput: higher is better; p95: lower is better).
# Everything it started is stopped and its directory removed on exit.
#
# sysbench uses server-side prepared statements (--db-ps-mode=auto) and
# ignores the deadlocks oltp_read_write causes by itself (sysbench's default
# --mysql-ignore-errors=1213,1020,1205; they are counted as "ignored errors").
#
# Needs: mariadbd, mariadb-install-db, mariadb (client), sysbench, go; run
# scripts/deps.sh to install them.
#
# Environment (defaults in brackets):
#   TESTS       sysbench tests to run ["oltp_point_select oltp_read_write"]
#   THREADS     client threads [8]
#   TIME        seconds per run [10]
#   WARMUP      seconds of unmeasured run per test and target first [5]
#   ROUNDS      direct/proxy pairs per test [3]
#   TABLES      sysbench tables [4]
#   TABLE_SIZE  rows per table [10000]
#   MARIADB_PORT, PROXY_PORT, RELAY_PORT  first ports tried [13306, 13307, 13308]
#   KEEP=1      keep the temporary directory (logs, data) on exit
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

TESTS=${TESTS:-"oltp_point_select oltp_read_write"}
THREADS=${THREADS:-8}
TIME=${TIME:-10}
WARMUP=${WARMUP:-5}
ROUNDS=${ROUNDS:-3}
TABLES=${TABLES:-4}
TABLE_SIZE=${TABLE_SIZE:-10000}

log() { printf 'sysbench.sh: %s\n' "$*" >&2; }
die() { printf 'sysbench.sh: ERROR: %s\n' "$*" >&2; exit 1; }

# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"
MARIADBD=$(find_bin mariadbd)
INSTALL_DB=$(find_bin mariadb-install-db)
MARIADB=$(find_bin mariadb)
SYSBENCH=$(find_bin sysbench)
find_bin go >/dev/null

WORK=$(mktemp -d "${TMPDIR:-/tmp}/slotproxy-sysbench-XXXXXX")
SOCKET="$WORK/mysqld.sock"
OS_USER=$(id -un)
MARIADB_PID=""
PROXY_PID=""
RELAY_PID=""

cleanup() {
	local status=$?
	local pid
	for pid in "$PROXY_PID" "$RELAY_PID"; do
		if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
			kill -TERM "$pid" 2>/dev/null || true
			wait "$pid" 2>/dev/null || true
		fi
	done
	if [ -n "$MARIADB_PID" ] && kill -0 "$MARIADB_PID" 2>/dev/null; then
		kill -TERM "$MARIADB_PID" 2>/dev/null || true
		for _ in $(seq 1 300); do
			kill -0 "$MARIADB_PID" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$MARIADB_PID" 2>/dev/null || true
		wait "$MARIADB_PID" 2>/dev/null || true
	fi
	if [ "${KEEP:-0}" = 1 ]; then
		log "kept $WORK"
	else
		rm -rf "$WORK"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
	local p=$1
	while port_in_use "$p"; do
		p=$((p + 1))
	done
	echo "$p"
}

USER_ARGS=()
if [ "$(id -u)" -eq 0 ]; then
	USER_ARGS=(--user=root) # mariadbd refuses to run as root otherwise
fi

log "installing a MariaDB data directory in $WORK/data"
mkdir -p "$WORK/tmp"
"$INSTALL_DB" --no-defaults --datadir="$WORK/data" --skip-test-db \
	--auth-root-authentication-method=socket --auth-root-socket-user="$OS_USER" \
	--innodb-buffer-pool-size=128M --innodb-log-file-size=64M \
	"${USER_ARGS[@]}" >"$WORK/install.log" 2>&1 ||
	{ tail -n 30 "$WORK/install.log" >&2; die "mariadb-install-db failed"; }

MPORT=$(free_port "${MARIADB_PORT:-13306}")
log "starting mariadbd on 127.0.0.1:$MPORT"
"$MARIADBD" --no-defaults --datadir="$WORK/data" --port="$MPORT" \
	--bind-address=127.0.0.1 --socket="$SOCKET" --pid-file="$WORK/mariadbd.pid" \
	--log-error="$WORK/mariadbd.log" --tmpdir="$WORK/tmp" "${USER_ARGS[@]}" \
	--skip-name-resolve --skip-log-bin --max-connections=2000 \
	--innodb-buffer-pool-size=128M --innodb-log-file-size=64M \
	--innodb-flush-log-at-trx-commit=2 2>>"$WORK/mariadbd.log" &
MARIADB_PID=$!

sql() { "$MARIADB" --no-defaults --socket="$SOCKET" -u"$OS_USER" "$@"; }
for i in $(seq 1 600); do
	sql -e 'SELECT 1' >/dev/null 2>&1 && break
	kill -0 "$MARIADB_PID" 2>/dev/null || { tail -n 30 "$WORK/mariadbd.log" >&2; die "mariadbd exited"; }
	[ "$i" -eq 600 ] && die "mariadbd not ready after 60s"
	sleep 0.1
done
sql -e "CREATE DATABASE sbtest;
	CREATE USER 'sb'@'%' IDENTIFIED VIA mysql_native_password USING PASSWORD('sb-pass');
	GRANT ALL PRIVILEGES ON sbtest.* TO 'sb'@'%';"
VERSION=$(sql -N -e 'SELECT VERSION()')

log "building slotproxy"
go build -o "$WORK/slotproxy" ./cmd/slotproxy
PPORT=$(free_port "${PROXY_PORT:-13307}")
[ "$PPORT" -eq "$MPORT" ] && PPORT=$(free_port $((MPORT + 1)))
log "starting slotproxy on 127.0.0.1:$PPORT"
"$WORK/slotproxy" serve --listen "127.0.0.1:$PPORT" --backend "127.0.0.1:$MPORT" 2>"$WORK/slotproxy.log" &
PROXY_PID=$!
# wait_listening NAME PORT PID LOG: wait until PID listens on PORT.
wait_listening() {
	local i
	for i in $(seq 1 100); do
		port_in_use "$2" && return
		kill -0 "$3" 2>/dev/null || { cat "$4" >&2; die "$1 exited"; }
		sleep 0.1
	done
	die "$1 not listening after 10s"
}
wait_listening slotproxy "$PPORT" "$PROXY_PID" "$WORK/slotproxy.log"

log "building slotbench (for its plain relay)"
go build -o "$WORK/slotbench" ./cmd/slotbench
RPORT=$(free_port "${RELAY_PORT:-13308}")
while [ "$RPORT" -eq "$MPORT" ] || [ "$RPORT" -eq "$PPORT" ]; do RPORT=$(free_port $((RPORT + 1))); done
log "starting the plain relay on 127.0.0.1:$RPORT"
"$WORK/slotbench" --relay-listen "127.0.0.1:$RPORT" --backend "127.0.0.1:$MPORT" 2>"$WORK/relay.log" &
RELAY_PID=$!
wait_listening relay "$RPORT" "$RELAY_PID" "$WORK/relay.log"

sb() { # sb PORT ARGS...
	local port=$1
	shift
	"$SYSBENCH" --db-driver=mysql --mysql-host=127.0.0.1 --mysql-port="$port" \
		--mysql-user=sb --mysql-password=sb-pass --mysql-db=sbtest \
		--db-ps-mode=auto --tables="$TABLES" --table-size="$TABLE_SIZE" "$@"
}

log "preparing $TABLES tables of $TABLE_SIZE rows (directly)"
sb "$MPORT" oltp_read_write prepare >"$WORK/prepare.log" 2>&1 ||
	{ tail -n 30 "$WORK/prepare.log" >&2; die "sysbench prepare failed"; }

# parse FILE: prints "tps qps p95ms ignored_errors" of a sysbench run report.
parse() {
	awk '
		/^ *transactions:/    { tps = substr($3, 2) }
		/^ *queries:/         { qps = substr($3, 2) }
		/^ *ignored errors:/  { err = $3 }
		/95th percentile:/    { p95 = $3 }
		END { if (tps == "" || qps == "" || p95 == "") exit 1; print tps, qps, p95, err + 0 }
	' "$1"
}

RESULTS="$WORK/results.txt"
: >"$RESULTS"
printf '\nsysbench %s, MariaDB %s, %s threads, %ss per run, %s rounds (after %ss of warm-up per test and target), %s tables × %s rows\n' \
	"$("$SYSBENCH" --version | awk '{print $2}')" "$VERSION" "$THREADS" "$TIME" "$ROUNDS" "$WARMUP" "$TABLES" "$TABLE_SIZE"
printf '%-18s %5s %-7s %10s %10s %9s %7s\n' test round target tps qps p95_ms errors
for test in $TESTS; do
	if [ "$WARMUP" -gt 0 ]; then
		for port in "$MPORT" "$RPORT" "$PPORT"; do
			sb "$port" --threads="$THREADS" --time="$WARMUP" "$test" run >"$WORK/$test-warmup.log" 2>&1 ||
				{ tail -n 30 "$WORK/$test-warmup.log" >&2; die "sysbench $test warm-up failed"; }
		done
	fi
	for round in $(seq 1 "$ROUNDS"); do
		for target in direct relay proxy; do
			case $target in
			direct) port=$MPORT ;;
			relay) port=$RPORT ;;
			proxy) port=$PPORT ;;
			esac
			out="$WORK/$test-$round-$target.log"
			if ! sb "$port" --threads="$THREADS" --time="$TIME" --percentile=95 "$test" run >"$out" 2>&1; then
				tail -n 30 "$out" >&2
				die "sysbench $test run ($target, round $round) failed"
			fi
			read -r tps qps p95 errs < <(parse "$out") || die "cannot parse $out"
			printf '%-18s %5s %-7s %10s %10s %9s %7s\n' "$test" "$round" "$target" "$tps" "$qps" "$p95" "$errs"
			echo "$test $target $tps $qps $p95 $errs" >>"$RESULTS"
		done
	done
done

printf '\n%-18s %-7s %10s %10s %9s %7s\n' test target "mean tps" "mean qps" "p95_ms" errors
awk '
	{ k = $1 " " $2; n[k]++; tps[k] += $3; qps[k] += $4; p95[k] += $5; err[k] += $6; tests[$1] = 1 }
	END {
		for (t in tests) {
			d = t " direct"; r = t " relay"; p = t " proxy"
			printf "%-18s %-7s %10.1f %10.1f %9.2f %7d\n", t, "direct", tps[d]/n[d], qps[d]/n[d], p95[d]/n[d], err[d]
			printf "%-18s %-7s %10.1f %10.1f %9.2f %7d\n", t, "relay", tps[r]/n[r], qps[r]/n[r], p95[r]/n[r], err[r]
			printf "%-18s %-7s %10.1f %10.1f %9.2f %7d\n", t, "proxy", tps[p]/n[p], qps[p]/n[p], p95[p]/n[p], err[p]
			printf "%-18s %-7s %9.3fx %9.3fx %8.3fx\n", t, "p/direct", (tps[p]/n[p])/(tps[d]/n[d]), (qps[p]/n[p])/(qps[d]/n[d]), (p95[p]/n[p])/(p95[d]/n[d])
			printf "%-18s %-7s %9.3fx %9.3fx %8.3fx\n", t, "p/relay", (tps[p]/n[p])/(tps[r]/n[r]), (qps[p]/n[p])/(qps[r]/n[r]), (p95[p]/n[p])/(p95[r]/n[r])
		}
	}
' "$RESULTS"
printf '(p/direct = proxy / direct, p/relay = proxy / relay; p95 is the mean of the runs'"'"' 95th percentiles)\n'
