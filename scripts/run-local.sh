#!/usr/bin/env bash
# run-local.sh — run slotproxy locally in front of a throwaway MariaDB.
#
#   scripts/run-local.sh        (or: make run)
#
# Installs missing dependencies (scripts/deps.sh), creates a MariaDB data
# directory in .local/mariadb (git-ignored; delete it to start over),
# starts mariadbd on 127.0.0.1:3306 or the next free port, creates the demo
# account app/app-pass with ALL on database app, builds .local/bin/slotproxy
# and runs the proxy on 127.0.0.1:3307 in the foreground. Ctrl-C stops the
# proxy and MariaDB.
#
# Environment: MARIADB_PORT (first port to try, default 3306), PROXY_PORT
# (default 3307). Extra arguments are passed to "slotproxy serve".
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

log() { printf 'run-local: %s\n' "$*"; }
die() { printf 'run-local: ERROR: %s\n' "$*" >&2; exit 1; }

"$ROOT/scripts/deps.sh" --no-mysql # MariaDB only: no MySQL chroot needed
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"
MARIADBD=$(find_bin mariadbd)
INSTALL_DB=$(find_bin mariadb-install-db)
MARIADB=$(find_bin mariadb)

STATE="$ROOT/.local/mariadb"
DATADIR="$STATE/data"
PIDFILE="$STATE/mariadbd.pid"
PORTFILE="$STATE/port"
ERRLOG="$STATE/mariadbd.log"
SOCKET="$STATE/mysqld.sock"
if [ ${#SOCKET} -gt 100 ]; then # unix socket paths are limited to ~107 bytes
	SOCKET="${TMPDIR:-/tmp}/slotproxy-local-$(printf '%s' "$ROOT" | cksum | cut -d' ' -f1).sock"
fi
PROXY_PORT=${PROXY_PORT:-3307}
OS_USER=$(id -un)

USER_ARGS=()
if [ "$(id -u)" -eq 0 ]; then
	USER_ARGS=(--user=root) # mariadbd refuses to run as root otherwise
fi

# Root logs in over the unix socket as the OS user running this script
# (unix_socket authentication); there is no password-less TCP root.
sql() { "$MARIADB" --no-defaults --socket="$SOCKET" -u"$OS_USER" "$@"; }

mariadb_running() {
	[ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

mkdir -p "$STATE" "$ROOT/.local/bin" "$STATE/tmp"

log "building .local/bin/slotproxy"
go build -o "$ROOT/.local/bin/slotproxy" ./cmd/slotproxy

if [ ! -d "$DATADIR/mysql" ]; then
	log "creating MariaDB data directory $DATADIR"
	rm -rf "$DATADIR"
	if ! "$INSTALL_DB" --no-defaults --datadir="$DATADIR" --skip-test-db \
		--auth-root-authentication-method=socket --auth-root-socket-user="$OS_USER" \
		--innodb-buffer-pool-size=64M --innodb-log-file-size=16M \
		"${USER_ARGS[@]}" >"$STATE/install.log" 2>&1; then
		tail -n 30 "$STATE/install.log" >&2
		rm -rf "$DATADIR"
		die "mariadb-install-db failed (log: $STATE/install.log)"
	fi
fi

stop_mariadb() {
	if mariadb_running; then
		local pid
		pid=$(cat "$PIDFILE")
		log "stopping MariaDB (pid $pid)"
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 300); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			log "MariaDB did not stop within 30s; killing it"
			kill -KILL "$pid" 2>/dev/null || true
		fi
	fi
}

if mariadb_running && [ -f "$PORTFILE" ] && sql -e 'SELECT 1' >/dev/null 2>&1; then
	PORT=$(cat "$PORTFILE")
	log "reusing MariaDB already running on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"))"
else
	stop_mariadb # a stale server that does not answer
	PORT=${MARIADB_PORT:-3306}
	while [ "$PORT" -eq "$PROXY_PORT" ] || port_in_use "$PORT"; do
		PORT=$((PORT + 1))
	done
	log "starting MariaDB on 127.0.0.1:$PORT (log: $ERRLOG)"
	"$MARIADBD" --no-defaults --datadir="$DATADIR" --port="$PORT" \
		--bind-address=127.0.0.1 --socket="$SOCKET" --pid-file="$PIDFILE" \
		--log-error="$ERRLOG" --tmpdir="$STATE/tmp" "${USER_ARGS[@]}" \
		--skip-name-resolve --innodb-buffer-pool-size=64M --innodb-log-file-size=16M \
		--skip-log-bin --innodb-flush-log-at-trx-commit=2 --max-connections=2000 \
		--local-infile=1 --max-allowed-packet=256M --plugin-load-add=auth_ed25519 \
		</dev/null >/dev/null 2>&1 &
	mariadbd_pid=$!
	echo "$PORT" >"$PORTFILE"
	for _ in $(seq 1 600); do
		if ! kill -0 "$mariadbd_pid" 2>/dev/null; then
			tail -n 30 "$ERRLOG" >&2
			die "mariadbd exited during startup (log: $ERRLOG)"
		fi
		if sql -e 'SELECT 1' >/dev/null 2>&1; then
			break
		fi
		sleep 0.1
	done
	sql -e 'SELECT 1' >/dev/null 2>&1 || {
		tail -n 30 "$ERRLOG" >&2
		kill -KILL "$mariadbd_pid" 2>/dev/null || true
		die "MariaDB did not become ready within 60s (log: $ERRLOG)"
	}
fi
trap stop_mariadb EXIT
# Turn these signals into a normal exit so that the EXIT trap runs. Bash
# defers them until the foreground proxy has exited.
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

sql -e "
CREATE DATABASE IF NOT EXISTS app;
CREATE OR REPLACE USER 'app'@'%' IDENTIFIED BY 'app-pass';
GRANT ALL PRIVILEGES ON app.* TO 'app'@'%';"

cat <<EOF

  MariaDB:   127.0.0.1:$PORT  (data in .local/mariadb; admin: mariadb -S $SOCKET -u$OS_USER)
  slotproxy: 127.0.0.1:$PROXY_PORT -> 127.0.0.1:$PORT

  Connect through the proxy:
    DSN (go-sql-driver): app:app-pass@tcp(127.0.0.1:$PROXY_PORT)/app
    CLI:                 mariadb -h127.0.0.1 -P$PROXY_PORT -uapp -papp-pass app

  Ctrl-C stops the proxy and MariaDB.

EOF

# Not exec: the EXIT trap must stop MariaDB after the proxy exits.
"$ROOT/.local/bin/slotproxy" serve --listen "127.0.0.1:$PROXY_PORT" --backend "127.0.0.1:$PORT" "$@"
