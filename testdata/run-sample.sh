#!/bin/sh
# README command 1: build airlock, start the demo registry on loopback and
# run the sample agent pull request's CI job in the sandbox, under the
# sample organisation policy (testdata/sample-org).
#
# The pull request is built as a real git repository in a temporary
# directory: testdata/sample-pr with testdata/sample-base's .github is the
# base commit, testdata/sample-pr the agent's commit (its workflow change
# and its instructions for the next agent). The job reaches the demo
# registry by name and is refused everything else; the agent's workflow
# change and the hook its job tries to plant are both reported. Needs root.
set -eu
cd "$(dirname "$0")/.."
export CGO_ENABLED=0
make -s build   # bin/airlock and its runsc sidecar, bin/airlock-runsc
. testdata/demo-registry/start.sh

ws=$(mktemp -d /tmp/airlock-sample.XXXXXX)
keys=$(mktemp -d /tmp/airlock-sample-keys.XXXXXX)
out=bin/sample
rm -rf "$out" && mkdir -p "$out"
trap 'rm -rf "$ws" "$keys"' EXIT INT TERM
start_demo_registry run-sample "$keys"
trap 'kill $registry 2>/dev/null; rm -rf "$ws" "$keys"' EXIT INT TERM

git_() { git -C "$ws" -c safe.directory='*' -c user.name=sample -c user.email=sample@example.com "$@"; }
cp -R testdata/sample-pr/. "$ws"
rm -rf "$ws/.github"
cp -R testdata/sample-base/.github "$ws"
git_ init -q -b main
git_ add -A
git_ commit -q -m "base"
cp -R testdata/sample-pr/. "$ws"
git_ add -A
git_ commit -q -m "agent: speed up CI"
chown -R 1000:1000 "$ws"

# A throwaway signing key for the demo (outside the workspace: the job
# never sees it). Real runners keep theirs in a KMS or a protected file.
bin/airlock keys generate --out "$keys/demo" >/dev/null
cp "$keys/demo.pub" "$out/demo.pub"

# The registry's token, as a workflow secret would reach the job; airlock
# trusts the registry's demo CA upstream (SSL_CERT_FILE, Go's standard).
status=0
DEMO_REGISTRY_TOKEN=$(cat "$keys/registry-token") SSL_CERT_FILE="$keys/registry-ca.pem" \
bin/airlock run --workspace "$ws" --org testdata/sample-org --base main~1 --head main \
  --steps "$ws/ci.yaml" --env DEMO_REGISTRY_TOKEN --attest-key "$keys/demo.key" --attest-dir "$out" \
  --attest-store-auth "$keys/store-auth.json" "$@" || status=$?

# The signed attestation, checked offline as a reviewer would.
bundle=$(ls "$out"/*.sigstore.json)
echo "== airlock verify $bundle"
bin/airlock verify --key "$out/demo.pub" --commit "$(git_ rev-parse main)" --html "$out/report.html" "$bundle"
echo "HTML report: $out/report.html"

# Where the organisation policy's attest.store kept it, as a reviewer
# finds and checks it months later: every job of the commit.
store=oci://127.0.0.1:18500/airlock/attestations
echo "== airlock attestations ls --store $store --commit $(git_ rev-parse --short main)"
bin/airlock attestations ls --store "$store" --store-auth "$keys/store-auth.json" --commit "$(git_ rev-parse main)"
echo "== airlock verify --store $store --commit ..."
bin/airlock verify --key "$out/demo.pub" --store "$store" --store-auth "$keys/store-auth.json" --commit "$(git_ rev-parse main)"
exit $status
