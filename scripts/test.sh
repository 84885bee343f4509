#!/usr/bin/env bash
# test.sh — run the whole Go test suite (go test -race ./...) once per
# server, MariaDB and MySQL (SLOTPROXY_TEST_SERVER, see internal/testdb),
# both at once. Each line of output is prefixed with its server, and each
# run ends with its wall time; the script fails if either run fails.
#
#   scripts/test.sh                         both servers
#   SLOTPROXY_TEST_SERVERS=mysql scripts/test.sh   one of them
#   scripts/test.sh -run TestDifferential   extra go test arguments
#
# Used by "make test" (after scripts/deps.sh and go vet).
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
die() { printf 'test: %s\n' "$*" >&2; exit 1; }
. scripts/lib.sh

read -r -a servers <<<"${SLOTPROXY_TEST_SERVERS:-mariadb mysql}"
[ ${#servers[@]} -gt 0 ] || die "SLOTPROXY_TEST_SERVERS is empty"

logdir=$(mktemp -d "${TMPDIR:-/tmp}/slotproxy-test.XXXXXX")
pids=()
cleanup() {
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	rm -rf "$logdir"
}
trap cleanup EXIT

start=$SECONDS
for s in "${servers[@]}"; do
	(
		t0=$SECONDS
		set +e
		SLOTPROXY_TEST_SERVER=$s go test -race -count=1 -timeout 25m "$@" ./... 2>&1 | sed -u "s/^/[$s] /" | tee "$logdir/$s.out"
		rc=${PIPESTATUS[0]}
		echo "$rc $((SECONDS - t0))" >"$logdir/$s"
		exit "$rc"
	) &
	pids+=($!)
done

failed=0
for i in "${!servers[@]}"; do
	wait "${pids[$i]}" || failed=1
done
pids=()

echo
for s in "${servers[@]}"; do
	read -r rc secs <"$logdir/$s" || { rc=1; secs=?; }
	if [ "$rc" -eq 0 ]; then
		printf 'test: %-8s ok    %4ss\n' "$s" "$secs"
	else
		printf 'test: %-8s FAIL  %4ss\n' "$s" "$secs"
	fi
done
printf 'test: wall time %ss for %s\n' "$((SECONDS - start))" "${servers[*]}"
if [ "$failed" -ne 0 ]; then
	# The failures again, last, where a reader of the log's tail finds
	# them: each failing test's line and the few lines it logged after it,
	# and packages that failed without a failing test (a panic, a build
	# error, a timeout).
	echo
	echo "test: what failed:"
	for s in "${servers[@]}"; do
		awk '/--- FAIL/ { n = 0; print; next }
			/^\[[a-z]*\]     / && n < 12 && !/testdb.go|packets.go/ { n++; print; next }
			/^\[[a-z]*\] (panic:|FAIL\t)|build failed|test timed out/ { print }' "$logdir/$s.out" |
			cut -c1-400 | head -n 80
	done
fi
exit "$failed"
