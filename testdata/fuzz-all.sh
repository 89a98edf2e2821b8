#!/bin/sh
# Runs every Go fuzz target of the module for FUZZTIME each (default 3s):
# the corpus in each package's testdata/fuzz and the seeds are checked,
# and a little new input is tried. `go test -fuzz` takes one target of
# one package at a time, so they are listed from the sources. A target's
# failure stops the run with go's report (the crasher is written to the
# package's testdata/fuzz/<target>/ directory: commit it with its fix).
# gVisor's own packages are compiled without the fuzzer's
# instrumentation (testdata/fuzz-toolexec.sh): with it, its //go:nosplit
# functions overflow the linker's stack limit, and no package whose
# tests link gVisor would build for fuzzing. (-tags airlock_fuzz also
# leaves out the test files marked //go:build !airlock_fuzz.)
#
#   FUZZTIME=5m testdata/fuzz-all.sh              # a longer local run
#   testdata/fuzz-all.sh ./runner/egress/...      # some packages only
set -eu
: "${FUZZTIME:=3s}"
export CGO_ENABLED=0
cd "$(dirname "$0")/.."
toolexec="$PWD/testdata/fuzz-toolexec.sh"
pkgs=${*:-./...}
start=$(date +%s)
n=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for dir in $(go list -f '{{.Dir}}' $pkgs); do
  targets=$(grep -h -o '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u)
  [ -n "$targets" ] || continue
  for target in $targets; do
    echo "== $target in ${dir#"$PWD"/} for $FUZZTIME"
    # -parallel 1: two cores, and a fuzz worker per core would starve
    # the coordinator on these machines.
    corpus="$dir/testdata/fuzz/$target"
    before=$(ls "$corpus" 2>/dev/null | wc -l)
    for try in 1 2; do
      if go test -tags airlock_fuzz -toolexec="$toolexec" -run '^$' -fuzz "^$target\$" -fuzztime "$FUZZTIME" -parallel 1 "$dir" > "$log" 2>&1; then
        break
      fi
      # Go's fuzzing coordinator (before Go 1.27, golang/go#75804) can
      # report its own -fuzztime deadline as a failure when a worker is
      # mid-call at the end, on a loaded machine: "context deadline
      # exceeded", and no failing input written. That, once, is run
      # again; a crasher, or the same twice, fails.
      if [ "$try" = 1 ] && [ "$(ls "$corpus" 2>/dev/null | wc -l)" = "$before" ] &&
        grep -q '^    context deadline exceeded$' "$log" && ! grep -q 'Failing input written' "$log"; then
        echo "   go's fuzzing deadline race (golang/go#75804), no input written: once more"
        continue
      fi
      cat "$log"
      echo "FAIL: $target in ${dir#"$PWD"/}" >&2
      exit 1
    done
    grep -E '^fuzz: elapsed' "$log" | tail -n 1
    n=$((n + 1))
  done
done
echo "fuzzed $n targets in $(( $(date +%s) - start ))s"
