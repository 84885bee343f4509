# slotproxy — common tasks.
#
#   make demo    the one-minute demo: a contended counter, direct and through
#                slotproxy, on a throwaway MariaDB
#   make build   build ./slotproxy (BIN=PATH elsewhere), stamped with the
#                checkout's version and commit ("slotproxy version")
#   make run     run the proxy locally in front of a throwaway MariaDB
#   make test    install missing dependencies, vet, run all tests (race)
#                against MariaDB and against MySQL, both at once
#
# make demo and make run install only what they need (MariaDB, and for
# SERVER=mysql the MySQL chroot), showing each step; the client libraries
# and ORMs of the test suite, and promtool, only make test installs.
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

# The version "slotproxy version" prints: "git describe" of the checkout and
# its commit (empty outside a git checkout: the binary then says dev).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
BIN ?= slotproxy

build:
	go build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/slotproxy

# make run [SERVER=mysql] [CONFIG=FILE] [RULES=DIR]: a server of its own and
# slotproxy in front of it, on free ports (see docs/tutorial.md).
SERVER ?= mariadb
# scripts/deps.sh's flag for SERVER: the MySQL chroot only for mysql.
NO_MYSQL = $(if $(filter mysql,$(SERVER)),,--no-mysql)
run:
	@scripts/deps.sh $(NO_MYSQL) --no-clients
	@echo "building slotproxy and runlocal..."
	@go build -ldflags "$(LDFLAGS)" -o .local/bin/slotproxy ./cmd/slotproxy
	@go build -o .local/bin/runlocal ./cmd/runlocal
	@.local/bin/runlocal --server "$(SERVER)" --config "$(CONFIG)" --rules "$(RULES)"

demo:
	@scripts/deps.sh --no-mysql --no-clients
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
	@log=$$(mktemp "$${TMPDIR:-/tmp}/slotproxy-fuzz.XXXXXX"); trap 'rm -f "$$log"' EXIT; \
	for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$name ($$pkg) for $(FUZZTIME)"; \
		go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg > "$$log" 2>&1 || \
		{ grep -q 'context deadline exceeded' "$$log" && ! grep -q 'Failing input' "$$log" && \
		  echo "fuzz $$name: the fuzzing engine stopped late (context deadline exceeded, no failing input): once more" && \
		  go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg > "$$log" 2>&1; } || { cat "$$log"; exit 1; }; \
		tail -n 1 "$$log"; \
	done

# The hot-counter workload (16 workers; increment + 2 ms of work per
# transaction) through real ORMs, directly and through slotproxy, on the
# server SLOTPROXY_TEST_SERVER names (MariaDB by default). ORM_BENCH_TX
# transactions per measurement; each is one run of the ORM's program
# (-benchtime 1x), timed by the program.
ORM_BENCH_TX ?= 2000
bench-orm:
	@scripts/deps.sh $(if $(filter mysql,$(SLOTPROXY_TEST_SERVER)),,--no-mysql)
	SLOTPROXY_ORM_BENCH_TX=$(ORM_BENCH_TX) go test -run '^$$' -bench BenchmarkORMHotCounter -benchtime 1x ./internal/clients/

# make history: the long history check (internal/history) through two
# proxies with roll-up running, against SERVER (mariadb or mysql).
# HISTORY_DURATION (default 30m), HISTORY_SEED (default: the time),
# HISTORY_WORKERS (default 8). Without the race detector, for more operations
# per minute; the short run in make test has it.
HISTORY_DURATION ?= 30m
history:
	@scripts/deps.sh $(NO_MYSQL) --no-clients
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
	@scripts/deps.sh $(NO_MYSQL) --no-clients
	SLOTPROXY_TEST_SERVER=$(SERVER) DIFFFUZZ_DURATION=$(DIFFFUZZ_DURATION) go test -count=1 -timeout 0 -run TestDiffFuzz -v ./internal/difffuzz
