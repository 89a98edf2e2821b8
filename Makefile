# Everything is built static: runsc re-executes this binary inside its own
# chroot, where no ELF interpreter exists. Tests too (they start sandboxes).
export CGO_ENABLED := 0

GIT_COMMIT := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
VERSION    ?= dev
LDFLAGS    := -X main.version=$(VERSION) -X main.commit=$(GIT_COMMIT)

# The real Actions client packages some tests drive (testdata/clients).
CLIENTS := testdata/clients/node_modules/.package-lock.json
NPM_CI  := npm ci --prefix testdata/clients --ignore-scripts --no-audit --no-fund --loglevel=error

.PHONY: build sample onboard-sample test fuzz vm-test arc-test vet bench clean

# BIN/airlock-runsc is the runsc sidecar (cmd/airlock-runsc): a job's
# gofer and sandbox start from it, without airlock's own packages to
# initialise, when it sits beside BIN/airlock and has the Go build ID that
# airlock's link recorded (gvisor.FindRunsc). Install both together;
# airlock alone still works (it holds the same runsc), a little slower.
# BIN is bin unless given (tests build into their own directory).
BIN ?= bin
build:
	go build -o $(BIN)/airlock-runsc ./cmd/airlock-runsc
	go build -ldflags "$(LDFLAGS) -X main.runscBuildID=$$(go tool buildid $(BIN)/airlock-runsc)" -o $(BIN)/airlock ./cmd/airlock

# The main job on the included sample pull request (needs root).
sample:
	sh testdata/run-sample.sh

# Onboarding a repository (docs/onboarding.md): audit run, policy suggest,
# enforced run.
onboard-sample:
	sh testdata/onboard-sample.sh

# The whole test suite (needs root: the tests start real sandboxes). One
# package at a time: each starts many sandboxes, and on 2 cores the limit
# tests (fork and memory bombs) are steadier without a neighbour.
# GOTESTFLAGS (say -v) may come from the environment. A test whose tool
# is missing skips and says how to install it (internal/testtool).
test: $(CLIENTS)
	go test -p 1 -count=1 -timeout 30m $(GOTESTFLAGS) ./...

# Every Go fuzz target, FUZZTIME each (3s: what CI runs, so the corpus
# keeps being checked; FUZZTIME=5m for a real search). docs/fuzzing.md
# lists the targets and what each asserts.
fuzz:
	sh testdata/fuzz-all.sh

# The client packages, from npm at the lockfile's versions and integrity
# hashes, without their install scripts; installed again whenever the
# lockfile is newer than the install (npm ci writes
# node_modules/.package-lock.json, touched after it so that its time is
# the install's). Without npm, the tests that drive them skip (or fail
# under AIRLOCK_REQUIRE_CLIENTS): a note, not an error.
$(CLIENTS): testdata/clients/package-lock.json testdata/clients/package.json
	@if command -v npm >/dev/null 2>&1; then \
		echo "$(NPM_CI)"; \
		$(NPM_CI) && touch $@ || { rm -f $@; exit 1; }; \
	else \
		echo "npm is not installed: the tests that drive the Actions client packages (testdata/clients) will skip; to run them: apt-get install npm, then make test"; \
	fi

# The cgroup v2 host test: a disposable VM (qemu, TCG) on Debian 12's
# kernel with cgroup v1 off runs jobs in every layout users' hosts have
# (testdata/cgroupv2-vm). Needs root and a static bin/airlock.
vm-test: build
	sh testdata/cgroupv2-vm/run.sh

# The runner pod of deploy/arc/values.yaml on containerd's CRI, driven by
# crictl as a kubelet drives a node (deploy/arc): needs root, containerd,
# runc and the CNI plugins (apt-get install containerd runc
# containernetworking-plugins busybox-static nodejs git) and crictl (go install
# sigs.k8s.io/cri-tools/cmd/crictl@v1.37.0). make test runs it too.
arc-test: build
	AIRLOCK_REQUIRE_CRI=1 AIRLOCK_TEST_BINARY=$(CURDIR)/bin/airlock go test -count=1 -v ./deploy/arc

# gofmt, go vet, and the static builds for both architectures runners
# have (amd64, and arm64 for Graviton and Ampere hosts).
vet:
	gofmt -l . | (! grep .)
	go vet ./...
	GOARCH=arm64 go build -o /dev/null ./cmd/airlock
	GOARCH=arm64 go build -o /dev/null ./cmd/airlock-runsc

# See BENCHMARKS.md.
bench:
	go test -timeout 30m -run XXX -bench WholeProcess -benchtime 7x ./cmd/airlock/
	go test -timeout 30m -run XXX -bench ColdPath -benchtime 21x ./cmd/airlock/
	go test -run XXX -bench 'ColdStart|IdleMemory|ContainerStep' -benchtime 20x ./gvisor/
	go test -run XXX -bench ExecShim -benchtime 60x ./gvisor/
	go test -run XXX -bench PlatformChoice -benchtime 2000x ./gvisor/
	go test -run XXX -bench FirstProbe -benchtime 10x ./gvisor/
	go test -run XXX -bench FirstJobBesideAHangingProbe -benchtime 10x ./gvisor/
	go test -run XXX -bench Workload -benchtime 1x ./gvisor/
	go test -run XXX -bench PodToFirstStep -benchtime 5x ./deploy/arc/
	go test -timeout 30m -run XXX -bench WorkspaceLimit -benchtime 3x ./gvisor/
	go test -run XXX -bench ConnectionSetup -benchtime 2000x ./runner/egress/gateway/
	go test -run XXX -bench BulkTransfer -benchtime 3x ./runner/egress/gateway/
	go test -run XXX -bench Answers -benchtime 20x ./runner/egress/dns/
	go test -run XXX -bench SignVerify -benchtime 10x ./attest/
	go test -run XXX -bench HookStep -benchtime 20x ./runner/hook/
	go test -run XXX -bench CredentialInjection -benchtime 300x ./runner/egress/
	go test -run XXX -bench VaultRequest ./runner/credentials/
	go test -run XXX -bench ArtifactUpload -benchtime 5x ./runner/egress/gateway/
	go test -timeout 30m -run XXX -bench ArtifactUploadInSandbox -benchtime 5x ./runner/egress/
	go test -run XXX -bench 'FirstPull|SharedBase' -benchtime 5x ./runner/images/
	go test -run XXX -bench CachedImageStart -benchtime 20x ./runner/
	go test -run XXX -bench Keep -benchtime 21x ./attest/store/
	go test -timeout 20m -run XXX -bench List -benchtime 2x ./attest/store/
	go test -run XXX -bench VerifyPullRequest -benchtime 5x ./attest/review/
	go test -timeout 30m -run XXX -bench StorePush -benchtime 11x ./cmd/airlock/

clean:
	rm -rf bin
