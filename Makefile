# Everything is built static: runsc re-executes this binary inside its own
# chroot, where no ELF interpreter exists. Tests too (they start sandboxes).
export CGO_ENABLED := 0

GIT_COMMIT := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
VERSION    ?= dev
LDFLAGS    := -X main.version=$(VERSION) -X main.commit=$(GIT_COMMIT)

.PHONY: build sample onboard-sample test vm-test vet bench clean

build:
	go build -ldflags "$(LDFLAGS)" -o bin/airlock ./cmd/airlock

# The main job on the included sample pull request (needs root).
sample:
	sh testdata/run-sample.sh

# Onboarding a repository (README): audit run, policy suggest, enforced run.
onboard-sample:
	sh testdata/onboard-sample.sh

# The whole test suite (needs root: the tests start real sandboxes). One
# package at a time: each starts many sandboxes, and on 2 cores the limit
# tests (fork and memory bombs) are steadier without a neighbour.
test:
	go test -p 1 -count=1 -timeout 30m $(GOTESTFLAGS) ./...

# The cgroup v2 host test: a disposable VM (qemu, TCG) on Debian 12's
# kernel with cgroup v1 off runs jobs in every layout users' hosts have
# (testdata/cgroupv2-vm). Needs root and a static bin/airlock.
vm-test: build
	sh testdata/cgroupv2-vm/run.sh

# gofmt, go vet, and the static builds for both architectures runners
# have (amd64, and arm64 for Graviton and Ampere hosts).
vet:
	gofmt -l . | (! grep .)
	go vet ./...
	GOARCH=arm64 go build -o /dev/null ./cmd/airlock

# See BENCHMARKS.md.
bench:
	go test -timeout 30m -run XXX -bench WholeProcess -benchtime 7x ./cmd/airlock/
	go test -run XXX -bench 'ColdStart|IdleMemory|ContainerStep' -benchtime 20x ./gvisor/
	go test -run XXX -bench ExecShim -benchtime 60x ./gvisor/
	go test -run XXX -bench PlatformChoice -benchtime 2000x ./gvisor/
	go test -run XXX -bench FirstProbe -benchtime 10x ./gvisor/
	go test -run XXX -bench Workload -benchtime 1x ./gvisor/
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

clean:
	rm -rf bin
