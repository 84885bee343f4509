#!/usr/bin/env bash
# deps-clients.sh — install the real MySQL client libraries that the tests in
# internal/clients drive (scripts/deps.sh runs this script last):
#
#   PHP        php-cli, php-mysql (mysqli and PDO_MYSQL over mysqlnd)
#   Java       a JDK that runs single-file programs (java File.java) and
#              MariaDB Connector/J 2.x (libmariadb-java,
#              /usr/share/java/mariadb-java-client.jar)
#   Python     python3-pymysql and python3-mysqldb (mysqlclient over
#              libmariadb), for Debian's /usr/bin/python3
#   Node       nodejs and npm, then mysql2 and sequelize from the lock file
#              internal/clients/testdata/node/package-lock.json into
#              internal/clients/testdata/node/node_modules (git-ignored)
#   ORMs       (internal/clients/orm_test.go) Django (python3-django) and
#              SQLAlchemy (python3-sqlalchemy) over mysqlclient; Ruby with
#              ActiveRecord and mysql2 (ruby, ruby-activerecord,
#              ruby-mysql2); Laravel's query builder and Eloquent
#              (php-illuminate-database, autoloaded from
#              /usr/share/php/Illuminate/Database/autoload.php); Sequelize
#              from the node lock file above
#
# Idempotent: installs only what is missing and prints one line per
# install. Never starts services.
#
# Runs as root; as another user it uses sudo for apt-get if available.
set -euo pipefail

cd "$(dirname "$0")/.."

log() { printf 'deps-clients: %s\n' "$*"; }
die() { printf 'deps-clients: ERROR: %s\n' "$*" >&2; exit 1; }

SUDO=()
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
	SUDO=(sudo)
fi

apt_updated=0
tmp_log=$(mktemp "${TMPDIR:-/tmp}/slotproxy-deps-clients.XXXXXX")
policy_created=0
cleanup() {
	if [ "$policy_created" -eq 1 ]; then
		"${SUDO[@]}" rm -f /usr/sbin/policy-rc.d
	fi
	rm -f "$tmp_log"
}
trap cleanup EXIT

# installed PKG — the Debian package PKG is installed.
installed() {
	dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'ok installed'
}

# apt_install PKG... — install packages quietly; on failure show apt's output.
apt_install() {
	command -v apt-get >/dev/null 2>&1 ||
		die "apt-get not found; install these packages yourself: $*"
	if [ "$(id -u)" -ne 0 ] && [ ${#SUDO[@]} -eq 0 ]; then
		die "need root (or sudo) to install: $*"
	fi
	# Keep maintainer scripts from starting services (exit 101 of
	# policy-rc.d means "action forbidden" to invoke-rc.d).
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee /usr/sbin/policy-rc.d >/dev/null
		"${SUDO[@]}" chmod 755 /usr/sbin/policy-rc.d
		policy_created=1
	fi
	if [ "$apt_updated" -eq 0 ]; then
		log "apt-get update..."
		"${SUDO[@]}" apt-get update -qq >"$tmp_log" 2>&1 ||
			{ cat "$tmp_log" >&2; die "apt-get update failed"; }
		apt_updated=1
	fi
	log "installing $*..."
	if ! "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends "$@" >"$tmp_log" 2>&1; then
		cat "$tmp_log" >&2
		die "apt-get install $* failed"
	fi
	log "installed $*"
}

# need_pkg PKG... — install those of PKG... that are not installed.
need_pkg() {
	local p
	for p in "$@"; do
		installed "$p" || apt_install "$p"
	done
}

# PHP: the CLI, and mysqli + PDO_MYSQL (both on mysqlnd).
command -v php >/dev/null 2>&1 || apt_install php-cli
need_pkg php-mysql
php -r 'exit(extension_loaded("mysqli") && extension_loaded("pdo_mysql") ? 0 : 1);' ||
	die "php has no mysqli or pdo_mysql extension after installing php-mysql"

# Java: the source-file launcher (java File.java) needs a JDK's compiler.
if ! command -v java >/dev/null 2>&1 || ! java --list-modules 2>/dev/null | grep -q '^jdk.compiler@'; then
	apt_install default-jdk-headless
fi
need_pkg libmariadb-java
[ -e /usr/share/java/mariadb-java-client.jar ] ||
	die "libmariadb-java is installed but /usr/share/java/mariadb-java-client.jar is missing"

# Python: Debian's packages are for /usr/bin/python3 (not a pyenv shim).
need_pkg python3 python3-pymysql python3-mysqldb

# Node: mysql2 and sequelize from the committed lock file.
if ! command -v node >/dev/null 2>&1; then
	apt_install nodejs
fi
command -v npm >/dev/null 2>&1 || apt_install npm
NODE_DIR=internal/clients/testdata/node
node_ok() {
	(cd "$NODE_DIR" && node -e 'require("mysql2/promise"); require("sequelize")') >/dev/null 2>&1
}
if ! node_ok || [ "$NODE_DIR/package-lock.json" -nt "$NODE_DIR/node_modules/.package-lock.json" ]; then
	if [ -e "$NODE_DIR/package-lock.json" ]; then
		(cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error) >"$tmp_log" 2>&1 ||
			{ cat "$tmp_log" >&2; die "npm ci in $NODE_DIR failed"; }
		log "installed node packages in $NODE_DIR (npm ci)"
	else
		(cd "$NODE_DIR" && npm install --no-audit --no-fund --loglevel=error mysql2 sequelize) >"$tmp_log" 2>&1 ||
			{ cat "$tmp_log" >&2; die "npm install in $NODE_DIR failed"; }
		log "installed mysql2 and sequelize in $NODE_DIR (npm install; commit package.json and package-lock.json)"
	fi
	node_ok || die "node cannot load mysql2 and sequelize from $NODE_DIR after npm"
fi

# ORMs (internal/clients/orm_test.go).
need_pkg python3-django
need_pkg python3-sqlalchemy
command -v ruby >/dev/null 2>&1 || apt_install ruby
need_pkg ruby-activerecord
need_pkg ruby-mysql2
need_pkg php-illuminate-database
