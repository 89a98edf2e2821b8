#!/bin/sh
# README command 1: build airlock, start the demo registry on loopback and
# run the sample pull request's CI job in the sandbox, under the sample
# organisation policy (testdata/sample-org): the job reaches the demo
# registry by name and is refused everything else. Needs root.
set -eu
cd "$(dirname "$0")/.."
export CGO_ENABLED=0
go build -o bin/airlock ./cmd/airlock
go build -o bin/demo-registry ./testdata/demo-registry
if command -v curl >/dev/null && curl -s -o /dev/null --max-time 1 http://127.0.0.1:18080/; then
  echo "run-sample: 127.0.0.1:18080 is already in use; stop what listens there (the sample policy allows that port)" >&2
  exit 69
fi
bin/demo-registry -listen 127.0.0.1:18080 &
registry=$!
trap 'kill $registry 2>/dev/null' EXIT INT TERM
bin/airlock run --workspace testdata/sample-pr --org testdata/sample-org --steps testdata/sample-pr/ci.yaml "$@"
