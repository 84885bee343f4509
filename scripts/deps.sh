#!/usr/bin/env bash
# deps.sh — install what slotproxy's tests and make run need on
# a Debian-like machine: MariaDB server and client, Galera (galera-4, rsync)
# for the cluster tests, sysbench, openssl, curl, the
# build tooling (make, gcc for go test -race, git, CA certificates), the
# MySQL chroot, promtool and systemd-analyze (Debian's prometheus and
# systemd packages: the tests check deploy/ with them), the client
# libraries and ORMs of the test
# suite (scripts/deps-clients.sh), and check that Go is at least the version
# in go.mod.
#
#   scripts/deps.sh               everything make test needs
#   scripts/deps.sh --no-clients  without the client libraries, ORMs,
#                                 promtool and systemd-analyze (make run,
#                                 make demo)
#   scripts/deps.sh --no-mysql    without the MySQL chroot
#
# The MySQL chroot: the tests run against MySQL too (internal/testdb,
# SLOTPROXY_TEST_SERVER=mysql), which Debian 12 does not package and whose
# packages conflict with MariaDB's. So Oracle's mysqld runs from a Debian
# sid chroot with mysql-server-core and mysql-client-core, built here with
# debootstrap into ${SLOTPROXY_MYSQL_CHROOT:-/var/lib/slotproxy/mysql-sid}
# (outside the repository) from the Debian archive of /etc/apt's sources
# (debootstrap's own default when they name none). It is built in a
# temporary directory next to it and renamed into place once complete, so a
# broken build is never reused; a present chroot is reused as is.
# "--no-mysql" skips it (make demo needs only MariaDB).
#
# Idempotent: installs only what is missing, and says what it installs
# before and after each step (the chroot build: one line per phase). Never
# starts (or relies on) the system MariaDB service: tests and make run run
# their own throwaway servers.
#
# Runs as root; as another user it uses sudo for apt-get and debootstrap if
# available.
set -euo pipefail

with_mysql=1
with_clients=1
for arg in "$@"; do
	case $arg in
	--no-mysql) with_mysql=0 ;;
	--no-clients) with_clients=0 ;;
	*)
		printf 'usage: %s [--no-mysql] [--no-clients]\n' "$0" >&2
		exit 2
		;;
	esac
done

cd "$(dirname "$0")/.."

log() { printf 'deps: %s\n' "$*"; }
die() { printf 'deps: ERROR: %s\n' "$*" >&2; exit 1; }

# have CMD — CMD is in PATH or in an sbin directory (not always in a
# non-root user's PATH on Debian).
have() {
	command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/usr/local/sbin/$1" ]
}

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		SUDO=(sudo)
	fi
fi

apt_updated=0
apt_log=$(mktemp "${TMPDIR:-/tmp}/slotproxy-deps.XXXXXX")
policy_created=0
chroot_build=""
cleanup() {
	if [ "$policy_created" -eq 1 ]; then
		"${SUDO[@]}" rm -f /usr/sbin/policy-rc.d
	fi
	if [ -n "$chroot_build" ]; then
		"${SUDO[@]}" rm -rf --one-file-system "$chroot_build"
	fi
	rm -f "$apt_log"
}
trap cleanup EXIT

# apt_install PKG... — install packages quietly; on failure show apt's output.
apt_install() {
	command -v apt-get >/dev/null 2>&1 ||
		die "apt-get not found; install these packages yourself: $*"
	if [ "$(id -u)" -ne 0 ] && [ ${#SUDO[@]} -eq 0 ]; then
		die "need root (or sudo) to install: $*"
	fi
	# Keep Debian's maintainer scripts from starting services (the MariaDB
	# package would otherwise try to start a system server). Exit code 101
	# of policy-rc.d means "action forbidden" to invoke-rc.d.
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee /usr/sbin/policy-rc.d >/dev/null
		"${SUDO[@]}" chmod 755 /usr/sbin/policy-rc.d
		policy_created=1
	fi
	if [ "$apt_updated" -eq 0 ]; then
		log "apt-get update..."
		"${SUDO[@]}" apt-get update -qq >"$apt_log" 2>&1 ||
			{ cat "$apt_log" >&2; die "apt-get update failed"; }
		apt_updated=1
	fi
	log "installing $*..."
	if ! "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends "$@" >"$apt_log" 2>&1; then
		cat "$apt_log" >&2
		die "apt-get install $* failed"
	fi
	log "installed $*"
}

# need CMD PKG... — install PKG... unless CMD exists.
need() {
	local cmd=$1
	shift
	if ! have "$cmd"; then
		apt_install "$@"
		have "$cmd" || die "$cmd still missing after installing $*"
	fi
}

need mariadbd mariadb-server mariadb-client
need mariadb-install-db mariadb-server
need mariadb mariadb-client
need sysbench sysbench
need openssl openssl
# The cluster tests (TestCluster): a MariaDB Galera Cluster on loopback,
# whose joining nodes receive their data by rsync (wsrep_sst_rsync uses ss).
[ -e /usr/lib/galera/libgalera_smm.so ] || apt_install galera-4
need rsync rsync
need ss iproute2
# Build and test tooling: make for the Makefile, a C toolchain because
# "go test -race" needs cgo, git because go build stamps VCS info, CA
# certificates to download Go modules.
need make make
need gcc gcc libc6-dev
[ -e /usr/include/stdio.h ] || apt_install libc6-dev
need git git
[ -e /etc/ssl/certs/ca-certificates.crt ] || apt_install ca-certificates
need curl curl
if [ "$with_clients" -eq 1 ]; then
	# The production kit in deploy/, checked by the tests: the alert rules
	# with promtool, the systemd unit with systemd-analyze.
	need promtool prometheus
	need systemd-analyze systemd
fi

# debian_mirror — the Debian archive URL of /etc/apt's sources (deb822
# "URIs:" or one-line "deb URL SUITE"), not the security archive; nothing
# when there is none (debootstrap then uses its own default).
debian_mirror() {
	local f uri
	for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -r "$f" ] || continue
		uri=$(awk '
			/^[[:space:]]*#/ { next }
			$1 == "URIs:" { for (i = 2; i <= NF; i++) print $i }
			$1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/) { print $i; break } }
		' "$f" | grep -E '^https?://' | grep -v -E 'security|/debian-ports' | grep -E '/debian/?$' | head -n1 || true)
		if [ -n "$uri" ]; then
			echo "${uri%/}"
			return
		fi
	done
}

# build_mysql_chroot DIR — debootstrap Debian sid with MySQL into DIR.
build_mysql_chroot() {
	local dir=$1 parent base mirror log lock start
	parent=$(dirname "$dir")
	base=$(basename "$dir")
	lock="$parent/.$base.lock"
	"${SUDO[@]}" mkdir -p "$parent"
	"${SUDO[@]}" touch "$lock"
	# One build at a time (two checkouts running make test at once).
	exec 9<"$lock"
	flock 9
	if [ -x "$dir/usr/sbin/mysqld" ]; then
		exec 9<&-
		return # built by the run we waited for
	fi
	# Leftovers of interrupted builds (ours are removed by cleanup).
	"${SUDO[@]}" rm -rf --one-file-system "$parent/.$base.build."*
	need debootstrap debootstrap
	mirror=$(debian_mirror)
	chroot_build=$("${SUDO[@]}" mktemp -d "$parent/.$base.build.XXXXXX")
	log "building the MySQL chroot $dir: debootstrap sid (mysql-server-core, mysql-client-core) from ${mirror:-the default archive of debootstrap}; a few minutes on the first run"
	log=$(mktemp "${TMPDIR:-/tmp}/slotproxy-debootstrap.XXXXXX")
	start=$SECONDS
	# debootstrap prints "I: <Verb> <what>" per step and package: show the
	# first line of each phase, so that a first run is not silent.
	if ! "${SUDO[@]}" debootstrap --variant=minbase --include=mysql-server-core,mysql-client-core \
		sid "$chroot_build" ${mirror:+"$mirror"} 2>&1 | tee "$log" |
		awk '/^I: / && !seen[$2]++ { sub(/^I: /, ""); print "deps: mysql chroot: " $0; fflush() }'; then
		tail -n 30 "$log" >&2
		rm -f "$log"
		die "debootstrap of the MySQL chroot failed (see above)"
	fi
	rm -f "$log"
	if ! "${SUDO[@]}" chroot "$chroot_build" /usr/sbin/mysqld --no-defaults --version >/dev/null 2>&1; then
		die "the MySQL chroot was built but its mysqld does not run"
	fi
	"${SUDO[@]}" chmod 755 "$chroot_build" # mktemp made it 0700
	"${SUDO[@]}" mv -T "$chroot_build" "$dir"
	chroot_build=""
	exec 9<&-
	log "MySQL chroot ready in $((SECONDS - start))s: $("${SUDO[@]}" chroot "$dir" /usr/sbin/mysqld --no-defaults --version 2>/dev/null)"
}

if [ "$with_mysql" -eq 1 ]; then
	mysql_chroot=${SLOTPROXY_MYSQL_CHROOT:-/var/lib/slotproxy/mysql-sid}
	if [ ! -x "$mysql_chroot/usr/sbin/mysqld" ]; then
		if [ -e "$mysql_chroot" ] && [ -n "$(ls -A "$mysql_chroot" 2>/dev/null)" ]; then
			die "$mysql_chroot exists but has no usr/sbin/mysqld: not a complete MySQL chroot; remove it and run $0 again"
		fi
		if [ "$(id -u)" -ne 0 ] && [ ${#SUDO[@]} -eq 0 ]; then
			die "need root (or sudo) to build the MySQL chroot $mysql_chroot"
		fi
		[ -d "$mysql_chroot" ] && "${SUDO[@]}" rmdir "$mysql_chroot"
		build_mysql_chroot "$mysql_chroot"
	fi
fi

# Go: not installed by this script (Debian's is too old); expected at
# /usr/local/go from https://go.dev/dl/.
want_go=$(awk '$1 == "go" { print $2; exit }' go.mod)
if ! command -v go >/dev/null 2>&1; then
	if [ -x /usr/local/go/bin/go ]; then
		log "go is not in PATH; using /usr/local/go/bin/go (add /usr/local/go/bin to your PATH)"
		export PATH="/usr/local/go/bin:$PATH"
	else
		die "Go >= $want_go is required: install it from https://go.dev/dl/ into /usr/local/go and add /usr/local/go/bin to PATH"
	fi
fi
# Ignore GOTOOLCHAIN so that we report the installed toolchain, not one Go
# would download.
have_go=$(GOTOOLCHAIN=local go env GOVERSION 2>/dev/null || true)
have_go=${have_go#go}
have_go=${have_go%%[!0-9.]*} # drop rc/beta suffixes and build info
if [ -z "$have_go" ]; then
	die "cannot determine the Go version ($(command -v go)); Go >= $want_go is required"
fi
if [ "$(printf '%s\n%s\n' "$want_go" "$have_go" | sort -V | head -n1)" != "$want_go" ]; then
	die "Go $have_go at $(command -v go) is too old; go.mod needs >= $want_go (install from https://go.dev/dl/ into /usr/local/go)"
fi
if [ "$with_clients" -eq 1 ]; then
	scripts/deps-clients.sh # real client libraries for internal/clients (cwd is the repository root)
fi
