# make targets are ordo's developer interface (see /work/shared/STYLE.md):
#   make dev     bin/ordo, then bin/ordo dev: everything on one machine,
#                Postgres included
#   make test    every package's tests against a throwaway Postgres, after
#                .ci/deps installed what they drive (Chromium, Prometheus)
#                (make test ARGS="-run TestX ./engine/..." narrows it;
#                a full make test, ARGS empty, then fuzzes every Fuzz
#                target for FUZZBRIEF each)
#   make bench   the benchmark      (make bench ARGS="--scenario hot"), cmd/ordo-bench
#   make chaos   the crash run      (make chaos ARGS="--duration 1m"), cmd/ordo-chaos
#                driving bin/ordo, which it builds first
#   make soak    the crash run for an hour at half the capacity, sampled
#                each minute (make soak ARGS="--duration 20m"), cmd/ordo-chaos
#   make chaos-ha  the crash run on a Patroni cluster with failovers
#                (make chaos ARGS="--ha …"; installs patroni and etcd-server
#                with apt-get when missing)
#   make chaos-upgrade  the crash run starting on the build before
#                (PREVIOUS=<git revision>), upgraded to this one under load
#   make n8n-e2e the n8n templates on a real n8n (installed once into a
#                cache outside the repo) against a fresh ordo dev
#   make fuzz    every Fuzz target for FUZZTIME each
#   make lint    gofmt, go vet, staticcheck and govulncheck (offline, on the
#                pinned vulnerability database; tools and database are
#                fetched through the module proxy once, into bin/tools)
#   make build   bin/ordo

# The Go release go.mod names; the machine's own go fetches it from the
# module proxy once (GOTOOLCHAIN) and every target builds with it.
export GOTOOLCHAIN := go1.27.3
GO       ?= go
ORDO     ?= $(GO) run ./cmd/ordo
ARGS     ?=
FUZZTIME ?= 2m
# FUZZBRIEF is each Fuzz target's share of a full make test: a count of
# inputs, not a time (a time-bound run can end in "context deadline
# exceeded" when its clock stops the fuzzer mid-input; a count cannot).
FUZZBRIEF ?= 3000x
# FUZZFLAGS go to each fuzzing go test: one worker, as the machine is shared.
FUZZFLAGS ?= -parallel=1

# TEST is the whole test command; ARGS adds flags and, when it names
# packages (./…), replaces the default ./... .
TEST ?= $(GO) test -race -count=1 -timeout 12m $(ARGS) $(if $(filter ./% ../% github.com/%,$(ARGS)),,./...)

# The linters and the vulnerability database, pinned: the same versions
# give the same answer on every machine. Each is fetched through the module
# proxy once, into bin/tools/<name>@<version>. The database is
# golang.org/x/vulndb as a module, turned into govulncheck's file layout by
# cmd/internal/vulndb; raise VULNDB_VERSION (go list -m -versions is no
# help for pseudo-versions: go mod download -json golang.org/x/vulndb@latest)
# to see newer reports.
STATICCHECK_VERSION ?= v0.8.2
GOVULNCHECK_VERSION ?= v1.9.0
VULNDB_VERSION      ?= v0.0.0-20261105234957-e22db6528018
TOOLS       := $(CURDIR)/bin/tools
STATICCHECK := $(TOOLS)/staticcheck@$(STATICCHECK_VERSION)/staticcheck
GOVULNCHECK := $(TOOLS)/govulncheck@$(GOVULNCHECK_VERSION)/govulncheck
VULNDB      := $(TOOLS)/vulndb@$(VULNDB_VERSION)

.PHONY: dev test bench chaos chaos-ha chaos-upgrade soak n8n-e2e fuzz lint build

# make dev builds bin/ordo first: the commands its banner and the README
# print (bin/ordo tenant create …) then run as printed, in any shell, with
# no Go toolchain setting.
dev: build
	bin/ordo dev $(ARGS)

test:
	@bash .ci/deps
	$(ORDO) testenv -- $(TEST)
ifeq ($(strip $(ARGS)),)
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZBRIEF)
endif

# The harnesses are binaries of their own: the product links none of them.
bench:
	$(GO) run ./cmd/ordo-bench $(ARGS)

# The crash run starts the product binary as an operator would.
chaos: build
	$(GO) run ./cmd/ordo-chaos --ordo bin/ordo $(ARGS)

# The soak: the crash run for an hour at half the capacity, a fault every
# few minutes, sampled each minute; report and plot in SOAKDIR
# (make soak ARGS="--duration 20m --capacity 60").
SOAKDIR ?= cmd/ordo-chaos/soak
soak: build
	$(GO) run ./cmd/ordo-chaos --ordo bin/ordo --soak $(SOAKDIR) --duration 1h $(ARGS)

# The n8n end-to-end run: a test behind its own build tag, driving bin/ordo
# (ordo dev, the operator commands) and n8n as processes.
n8n-e2e: build
	ORDO_BIN=$(CURDIR)/bin/ordo $(GO) test -tags n8ne2e -count=1 -v -timeout 60m ./cmd/internal/n8ne2e/ $(ARGS)

# The same run with the database as a Patroni cluster, failing over. No
# hostile flood unless ARGS asks for one (--hostile 20s): its latency bound
# is the API's, judged by make chaos; here it would judge the failovers'.
chaos-ha: build
	$(GO) run ./cmd/ordo-chaos --ordo bin/ordo --ha --hostile 0 $(ARGS)

# The crash run as an upgrade: it starts on the build before, PREVIOUS (a
# git revision; by default the parent of the commit that added the newest
# migration), built from git into bin/ordo-previous, and upgrades to
# bin/ordo once under load, migrate first (make chaos-upgrade PREVIOUS=abc123).
PREVIOUS ?= $(shell git log -1 --format=%H --diff-filter=A -- sql/migrations)^
chaos-upgrade: build
	@rm -rf bin/previous-src && mkdir -p bin/previous-src
	git archive $(PREVIOUS) | tar -x -C bin/previous-src
	cd bin/previous-src && $(GO) build -o $(CURDIR)/bin/ordo-previous ./cmd/ordo
	@rm -rf bin/previous-src
	$(GO) run ./cmd/ordo-chaos --ordo bin/ordo --previous bin/ordo-previous $(ARGS)

# Fuzz targets are found by name in the *_test.go files, as dir:Name; each
# runs for FUZZTIME, all against one throwaway Postgres (a target may use
# sqltest). Their seed corpora are the f.Add calls and testdata/fuzz/<Name>.
FUZZ_TARGETS = $(shell grep -rEo --include='*_test.go' --exclude-dir='.?*' --exclude-dir=bin --exclude-dir=testdata \
	'^func Fuzz[A-Za-z0-9_]*' . | sed -E 's|^(.*)/[^/]*:func (Fuzz[A-Za-z0-9_]*)$$|\1:\2|' | sort -u)

fuzz:
	$(ORDO) testenv -- sh -c 'for t in $(FUZZ_TARGETS); do \
		echo "== $${t%%:*} $${t##*:} ($(FUZZTIME))"; \
		$(GO) test -run "^$$" -fuzz "^$${t##*:}$$" -fuzztime $(FUZZTIME) $(FUZZFLAGS) "$${t%%:*}" || exit 1; \
	done'

lint: $(STATICCHECK) $(GOVULNCHECK) $(VULNDB)/index/db.json
	@unformatted=$$(find . \( -path './.*' -o -path ./bin \) -prune -o -name '*.go' -print0 | xargs -0r gofmt -l); \
	if [ -n "$$unformatted" ]; then echo "gofmt -l: not formatted:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	$(GOVULNCHECK) -db file://$(VULNDB) ./...

$(STATICCHECK):
	GOBIN=$(dir $@) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

$(GOVULNCHECK):
	GOBIN=$(dir $@) $(GO) install golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION)

$(VULNDB)/index/db.json:
	$(GO) run ./cmd/internal/vulndb -module golang.org/x/vulndb@$(VULNDB_VERSION) -out $(VULNDB)

build:
	$(GO) build -o bin/ordo ./cmd/ordo
