# slotproxy — common tasks.
#
#   make build   build ./slotproxy
#   make run     run the proxy locally in front of a throwaway MariaDB
#   make test    install missing dependencies, vet, run all tests (race)

SHELL := /bin/bash

# Go is expected at /usr/local/go; use it when go is not in PATH.
ifeq ($(shell command -v go 2>/dev/null),)
export PATH := /usr/local/go/bin:$(PATH)
endif

.PHONY: build run test

build:
	go build -o slotproxy ./cmd/slotproxy

run:
	scripts/run-local.sh

test:
	scripts/deps.sh && go vet ./... && go test -race -count=1 -timeout 20m ./...
