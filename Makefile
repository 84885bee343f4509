# slotproxy — common tasks.
#
#   make demo    the one-minute demo: a contended counter, direct and through
#                slotproxy, on a throwaway MariaDB
#   make build   build ./slotproxy
#   make run     run the proxy locally in front of a throwaway MariaDB
#   make test    install missing dependencies, vet, run all tests (race)
#                against MariaDB and against MySQL, both at once
#   make bench-orm  the hot counter through Django and Sequelize, directly
#                and through slotproxy (tx/s and speed-up)

SHELL := /bin/bash

# Go is expected at /usr/local/go; use it when go is not in PATH.
ifeq ($(shell command -v go 2>/dev/null),)
export PATH := /usr/local/go/bin:$(PATH)
endif

.PHONY: build run test fuzz demo bench-orm history fuzz-diff

# Fuzz targets: package and name. "make test" runs each for FUZZTIME;
# "make fuzz FUZZTIME=10m" for a long run.
FUZZ_TARGETS := \
	./proxy:FuzzParseGreeting ./proxy:FuzzParseHandshakeResponse ./executor:FuzzParseExecute \
	./internal/wire:FuzzOKPacket ./executor:FuzzBinaryInt ./internal/wire:FuzzResponseRelay ./rewrite:FuzzRewrite
FUZZTIME ?= 3s

build:
	go build -o slotproxy ./cmd/slotproxy

# make run [SERVER=mysql] [CONFIG=FILE] [RULES=DIR]: a server of its own and
# slotproxy in front of it, on free ports (see docs/tutorial.md).
SERVER ?= mariadb
run:
	@if [ "$(SERVER)" = mysql ]; then scripts/deps.sh >/dev/null; else scripts/deps.sh --no-mysql >/dev/null; fi
	@go build -o .local/bin/slotproxy ./cmd/slotproxy
	@go build -o .local/bin/runlocal ./cmd/runlocal
	@.local/bin/runlocal --server "$(SERVER)" --config "$(CONFIG)" --rules "$(RULES)"

demo:
	@scripts/deps.sh --no-mysql >/dev/null
	@echo "building slotbench..."
	@go build -o .local/bin/slotbench ./cmd/slotbench
	@.local/bin/slotbench --demo

# The Go suite runs once per server (SLOTPROXY_TEST_SERVER=mariadb and
# =mysql), in parallel; see scripts/test.sh. SLOTPROXY_TEST_SERVERS=mysql
# make test runs one of them.
test:
	scripts/deps.sh && go vet ./... && scripts/test.sh
	$(MAKE) --no-print-directory fuzz

fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$name ($$pkg) for $(FUZZTIME)"; \
		go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg > /tmp/slotproxy-fuzz.log 2>&1 || { cat /tmp/slotproxy-fuzz.log; exit 1; }; \
		tail -n 1 /tmp/slotproxy-fuzz.log; \
	done

# The hot-counter workload (16 workers; increment + 2 ms of work per
# transaction) through real ORMs, directly and through slotproxy, on the
# server SLOTPROXY_TEST_SERVER names (MariaDB by default). ORM_BENCH_TX
# transactions per measurement; each is one run of the ORM's program
# (-benchtime 1x), timed by the program.
ORM_BENCH_TX ?= 2000
bench-orm:
	@scripts/deps.sh $(if $(filter mysql,$(SLOTPROXY_TEST_SERVER)),,--no-mysql) >/dev/null
	SLOTPROXY_ORM_BENCH_TX=$(ORM_BENCH_TX) go test -run '^$$' -bench BenchmarkORMHotCounter -benchtime 1x ./internal/clients/

# make history: the long history check (internal/history) through two
# proxies with roll-up running, against SERVER (mariadb or mysql).
# HISTORY_DURATION (default 30m), HISTORY_SEED (default: the time),
# HISTORY_WORKERS (default 8). Without the race detector, for more operations
# per minute; the short run in make test has it.
HISTORY_DURATION ?= 30m
history:
	@if [ "$(SERVER)" = mysql ]; then scripts/deps.sh >/dev/null; else scripts/deps.sh --no-mysql >/dev/null; fi
	SLOTPROXY_TEST_SERVER=$(SERVER) HISTORY_DURATION=$(HISTORY_DURATION) HISTORY_SEED=$(HISTORY_SEED) HISTORY_WORKERS=$(HISTORY_WORKERS) \
		go test -count=1 -timeout 0 -run TestHistoryLong -v ./internal/history

# make fuzz-diff: the differential fuzzer (internal/difffuzz): generated
# statements directly and through the proxy, every answer compared, against
# SERVER (mariadb or mysql) for DIFFFUZZ_DURATION (default 30m); it goes on
# after a difference and prints a shrunk reproducer for each distinct one.
# DIFFFUZZ_SEED (default: the time), DIFFFUZZ_ALL=1 (also the classes with
# known differences).
DIFFFUZZ_DURATION ?= 30m
fuzz-diff:
	@if [ "$(SERVER)" = mysql ]; then scripts/deps.sh >/dev/null; else scripts/deps.sh --no-mysql >/dev/null; fi
	SLOTPROXY_TEST_SERVER=$(SERVER) DIFFFUZZ_DURATION=$(DIFFFUZZ_DURATION) go test -count=1 -timeout 0 -run TestDiffFuzz -v ./internal/difffuzz
