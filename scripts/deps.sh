#!/usr/bin/env bash
# deps.sh — install what slotproxy's tests and scripts/run-local.sh need on
# a Debian-like machine: MariaDB server and client, sysbench, openssl, the
# build tooling (make, gcc for go test -race, git, CA certificates), and
# check that Go is at least the version in go.mod.
#
# Idempotent: installs only what is missing and prints one line per package
# installed. Never starts (or relies on) the system MariaDB service: tests
# and run-local.sh run their own throwaway servers.
#
# Runs as root; as another user it uses sudo for apt-get if available.
set -euo pipefail

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
cleanup() {
	if [ "$policy_created" -eq 1 ]; then
		"${SUDO[@]}" rm -f /usr/sbin/policy-rc.d
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
		"${SUDO[@]}" apt-get update -qq >"$apt_log" 2>&1 ||
			{ cat "$apt_log" >&2; die "apt-get update failed"; }
		apt_updated=1
	fi
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
# Build and test tooling: make for the Makefile, a C toolchain because
# "go test -race" needs cgo, git because go build stamps VCS info, CA
# certificates to download Go modules.
need make make
need gcc gcc libc6-dev
[ -e /usr/include/stdio.h ] || apt_install libc6-dev
need git git
[ -e /etc/ssl/certs/ca-certificates.crt ] || apt_install ca-certificates

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
scripts/deps-clients.sh # real client libraries for internal/clients (cwd is the repository root)
