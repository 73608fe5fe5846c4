# dispatcher — run `make help` for the targets.
.DEFAULT_GOAL := help
SHELL := /usr/bin/env bash

GO        ?= go
BUF       := $(GO) tool -modfile=tools/buf/go.mod buf
TEST_FLAGS ?= -count=1 -timeout 45m
FUZZTIME  ?= 10s

.PHONY: help
help: ## Show this help.
	@grep -hE '^[a-zA-Z0-9/_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-18s %s\n", $$1, $$2}'

.PHONY: run
run: ## Run the dispatcher locally (DATABASE_URL, else database dispatcher_dev on local Postgres or a private cluster).
	@scripts/run-dev.sh

.PHONY: stop
stop: ## Stop what make run started (its dispatcher, its private Postgres cluster) and the dispatcher listen receivers run with its .data/dev.env.
	@scripts/stop-dev.sh

.PHONY: clean
clean: ## make stop, then remove .data/ (dev database cluster, tokens) and bin/.
	@scripts/stop-dev.sh --clean

# What `dispatcher --version` prints; without git, the binary falls back to
# the commit Go records in it.
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null)
LDFLAGS   := $(if $(VERSION),-X main.version=$(VERSION))

.PHONY: build
build: ## Build bin/dispatcher and bin/dispatcher-bench.
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/dispatcher ./cmd/dispatcher
	$(GO) build -o bin/dispatcher-bench ./cmd/dispatcher-bench

# The tests share one Postgres server with whatever else uses it: test
# binaries run one at a time, two tests at a time each (-parallel 2, whatever
# the core count), and each test's pool is small (internal/dbtest), so
# `make test` holds at most about 20 connections. One at a time: with flock(1),
# scripts/one-test-binary.sh holds a lock around each binary while go compiles
# and links the next ones beside it (the package times go test prints then
# include the wait for the lock); without it, -p 1, which serialises the
# compiling too. On a server of your own, TEST_EXEC= TEST_P=8 runs them side
# by side.
ifneq ($(shell command -v flock 2>/dev/null),)
TEST_EXEC     ?= $(CURDIR)/scripts/one-test-binary.sh
# Binaries waiting for the lock hold go's action slots: at least 4.
TEST_P        ?= $(shell n=$$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2); echo $$((n < 4 ? 4 : n)))
else
TEST_EXEC     ?=
TEST_P        ?= 1
endif
TEST_PARALLEL ?= 2

# The container image: the static binary on an empty base, built by
# tools/image (go-containerregistry) into an image tarball, with no Docker
# daemon and no registry. `docker load -i bin/dispatcher-image.tar` takes it.
IMAGE_TAR  ?= bin/dispatcher-image.tar
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)
REVISION   ?= $(shell git rev-parse HEAD 2>/dev/null)

.PHONY: image
image: ## Build the container image tarball bin/dispatcher-image.tar (no Docker needed; IMAGE_ARCH=arm64).
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' \
		-o bin/linux-$(IMAGE_ARCH)/dispatcher ./cmd/dispatcher
	$(GO) -C tools/image run . build -binary $(CURDIR)/bin/linux-$(IMAGE_ARCH)/dispatcher -arch $(IMAGE_ARCH) \
		-version '$(VERSION)' -revision '$(REVISION)' -o $(CURDIR)/$(IMAGE_TAR)

.PHONY: check/image
check/image: image ## Build the image, then check it runs as non-root and its entrypoint prints its version.
	$(GO) -C tools/image test -count=1 ./...
	$(GO) -C tools/image run . check -image $(CURDIR)/$(IMAGE_TAR) -version '$(VERSION)'

# A release: binaries for linux/amd64 and linux/arm64, the multi-arch image
# (OCI layout and archive), the Helm chart, the TypeScript client's npm
# tarball, the Python client's source archive, checksums and the CHANGELOG
# section, all at the one VERSION, in dist/<VERSION>/ (scripts/release.sh). make push sends the image to a
# registry with go-containerregistry (no daemon; credentials from the Docker
# config, as docker login or a credential helper leaves them).
DIST      ?= dist
CHANGELOG ?= CHANGELOG.md

.PHONY: release
release: ## Build a release into dist/VERSION/ (make release VERSION=v0.1.0; no Docker, no registry).
	@DIST='$(DIST)' GO='$(GO)' CHANGELOG='$(CHANGELOG)' scripts/release.sh '$(VERSION)'

.PHONY: push
push: ## Push dist/VERSION's image: make push IMAGE=ghcr.io/you/webhook-dispatcher VERSION=v0.1.0 (tag: 0.1.0 unless IMAGE has one).
	@test -n '$(IMAGE)' || { echo "make push: IMAGE=<registry>/<repository>[:tag] is required" >&2; exit 2; }
	$(GO) -C tools/image run . push -layout '$(abspath $(DIST))/$(VERSION)/oci' -image '$(IMAGE)'

.PHONY: check/release
check/release: ## Build a release of a CI version, push it to a registry started here, pull it back and check it.
	@scripts/check-release.sh

# pkg/ is a module of its own (what applications import, without this
# module's dependencies): every target that covers ./... covers ./pkg too.
PKG_MOD := pkg

# The TypeScript client (clients/typescript) and the OpenAPI tooling
# (@redocly/cli, openapi-typescript), from npm at the versions its
# package-lock.json pins; installed again only when that changes. Node.js
# 20.19 or later and npm are needed: make test runs the client's test
# against the real binary (e2e TestTypeScriptClient).
TS_CLIENT := clients/typescript

$(TS_CLIENT)/node_modules/.installed: $(TS_CLIENT)/package.json $(TS_CLIENT)/package-lock.json
	@command -v npm >/dev/null && command -v node >/dev/null || { echo "Node.js 20.19 or later with npm is needed: the TypeScript client and the OpenAPI checks use them" >&2; exit 1; }
	@node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=19)?0:1)' || { echo "Node.js 20.19 or later is needed, found $$(node --version)" >&2; exit 1; }
	npm ci --prefix $(TS_CLIENT) --no-audit --no-fund
	@touch $@

.PHONY: deps/ts
deps/ts: $(TS_CLIENT)/node_modules/.installed ## Install the TypeScript client's packages and the OpenAPI tooling (npm ci in clients/typescript).

.PHONY: ts/pack
ts/pack: deps/ts ## Build the TypeScript client's npm tarball into dist/ (standmeet-dispatcher-client-X.Y.Z.tgz; VERSION=v0.1.0 sets its version).
	scripts/ts-pack.sh '$(DIST)' '$(filter v%,$(VERSION))'

.PHONY: py/sdist
py/sdist: ## Build the Python client's source archive into dist/ (dispatcher_client-X.Y.Z.tar.gz, standard library only): make py/sdist VERSION=v0.1.0.
	@test -n '$(filter v%,$(VERSION))' || { echo "make py/sdist: VERSION=vX.Y.Z is required" >&2; exit 2; }
	python3 scripts/py-sdist.py '$(DIST)' '$(VERSION)'

.PHONY: check/openapi
check/openapi: deps/ts ## docs/openapi/openapi.json lints with 0 errors (redocly), openapi-typescript generates the client's types from it unchanged, and the client compiles.
	npm --prefix $(TS_CLIENT) run --silent lint:openapi
	npm --prefix $(TS_CLIENT) run --silent generate
	@git diff --exit-code -- $(TS_CLIENT)/src/schema.ts || (echo "clients/typescript/src/schema.ts is out of date: run make generate and commit" && exit 1)
	npm --prefix $(TS_CLIENT) run --silent build

.PHONY: test
test: deps/ts ## Run every test, of pkg/'s module too (needs Postgres with 45 free connections: DATABASE_URL or 127.0.0.1:5432, and Node.js with npm).
	@mkdir -p bin
	$(GO) -C $(PKG_MOD) test $(TEST_FLAGS) -parallel $(TEST_PARALLEL) ./...
	TEST_LOCK=$(CURDIR)/bin/.test.lock $(GO) test $(TEST_FLAGS) -p $(TEST_P) $(if $(TEST_EXEC),-exec $(TEST_EXEC)) -parallel $(TEST_PARALLEL) ./...

.PHONY: test/chaos
test/chaos: ## The long reliability run: 10,000 events through 3 dispatchers killed with SIGKILL; the churn run (one of 3 killed every 5-10 s for 2 min while publishing, against the same run without kills); the outage tests (needs Postgres).
	CHAOS_EVENTS=$${CHAOS_EVENTS:-10000} CHAOS_KILLS=$${CHAOS_KILLS:-6} CHAOS_DB_MAX_CONNS=$${CHAOS_DB_MAX_CONNS:-8} \
	CHAOS_CHURN=$${CHAOS_CHURN:-120s} CHAOS_CHURN_RATE=$${CHAOS_CHURN_RATE:-75} \
	$(GO) test $(TEST_FLAGS) -v -run '^(TestChaos|TestOutage)' ./e2e

.PHONY: test/race
test/race: deps/ts ## Run every test with the race detector.
	@mkdir -p bin
	$(GO) -C $(PKG_MOD) test -race $(TEST_FLAGS) -parallel $(TEST_PARALLEL) ./...
	TEST_LOCK=$(CURDIR)/bin/.test.lock $(GO) test -race $(TEST_FLAGS) -p $(TEST_P) $(if $(TEST_EXEC),-exec $(TEST_EXEC)) -parallel $(TEST_PARALLEL) ./...

.PHONY: generate
generate: ## Regenerate pkg/api (gRPC and the HTTP/JSON gateway) and docs/openapi/openapi.json (OpenAPI 3.1) from proto/ with buf, the TypeScript client's types from it, docs/events.md from the event schemas, pkg/client's event builders from the catalog, docs/design.md's import arrows from go list, and docs/configuration.md from the commands' flags.
	$(BUF) generate
	@if [ -f $(TS_CLIENT)/node_modules/.installed ]; then npm --prefix $(TS_CLIENT) run --silent generate; \
	else echo "generate: clients/typescript/src/schema.ts not regenerated: make deps/ts first (make check/openapi checks it)"; fi
	$(GO) run ./internal/event/eventsdoc -o docs/events.md
	$(GO) run ./internal/clientgen -o pkg/client/events.go
	$(GO) run ./internal/importsdoc -o docs/design.md
	$(GO) run ./cmd/dispatcher config-reference -o docs/configuration.md

.PHONY: lint
lint: lint/buf lint/go ## buf lint, go vet, gofmt.

.PHONY: lint/buf
lint/buf:
	$(BUF) lint

.PHONY: lint/go
lint/go:
	$(GO) vet ./...
	$(GO) -C $(PKG_MOD) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

.PHONY: lint/golangci
lint/golangci: ## golangci-lint (built from the module proxy).
	$(GO) tool -modfile=tools/lint/go.mod golangci-lint run --allow-serial-runners ./...
	cd $(PKG_MOD) && $(GO) tool -modfile=../tools/lint/go.mod golangci-lint run --allow-serial-runners --config ../.golangci.yaml ./...

.PHONY: check/generated
GENERATED := pkg/api docs/openapi docs/events.md pkg/client docs/design.md docs/configuration.md clients/typescript/src/schema.ts

check/generated: generate ## Fail if regenerating changes any committed file (pkg/api, docs/openapi, docs/events.md, pkg/client, docs/design.md's import arrows, docs/configuration.md, the TypeScript client's types).
	@git diff --exit-code -- $(GENERATED) || (echo "generated code is out of date: run make generate and commit" && exit 1)
	@test -z "$$(git status --porcelain -- $(GENERATED))" || (git status --porcelain -- $(GENERATED); echo "generated code is out of date" && exit 1)

.PHONY: check/vuln
check/vuln: ## govulncheck over the module where its database (vuln.go.dev) is reachable; prints SKIPPED where it is not.
	@scripts/vulncheck.sh

.PHONY: check/tidy
check/tidy: ## Fail if go.mod/go.sum of the module, of pkg/ or of a tools/ module is not tidy.
	@fail=0; for d in . $(PKG_MOD)/ tools/*/; do \
		if ! (cd "$$d" && $(GO) mod tidy -diff >/dev/null); then echo "go.mod in $$d is not tidy: run go mod tidy there"; fail=1; fi; \
	done; exit $$fail

.PHONY: fuzz
fuzz: ## Run every fuzzer briefly (FUZZTIME=10s).
	@scripts/fuzz.sh $(FUZZTIME)

.PHONY: bench
bench: ## Run the load scenarios and print the figures (see docs/benchmarks.md).
	$(GO) run ./cmd/dispatcher-bench $(BENCH_ARGS)

.PHONY: check/deploy
check/deploy: ## Validate deploy/: helm lint/template (3 value sets), kustomize build, kubeconform, deploycheck (rules, dashboard, overlays = chart).
	@scripts/check-deploy.sh
