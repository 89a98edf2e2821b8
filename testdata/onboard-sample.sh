#!/bin/sh
# docs/onboarding.md ("Onboarding a repository"), end to end on the sample
# project: (1) an audit run of its fetch step under an organisation policy
# in egress.mode "audit", signed; (2) airlock policy suggest turns the
# signed attestation into the repository's .github/airlock.cue, vetted
# against the organisation policy; (3) the suggestion is committed as a
# reviewer would; (4) the enforced run under it passes the fetch and
# still refuses everything else. Needs root; all traffic stays on
# loopback (the demo registry on 127.0.0.1:18080).
set -eu
cd "$(dirname "$0")/.."
export CGO_ENABLED=0
make -s build   # bin/airlock and its runsc sidecar, bin/airlock-runsc
. testdata/demo-registry/start.sh

tmp=$(mktemp -d /tmp/airlock-onboard.XXXXXX)
ws="$tmp/ws" keys="$tmp/keys" audit_org="$tmp/audit-org"
mkdir -p "$ws" "$keys" "$audit_org"
trap 'rm -rf "$tmp"' EXIT INT TERM
start_demo_registry onboard-sample "$keys"
trap 'kill $registry 2>/dev/null; rm -rf "$tmp"' EXIT INT TERM

git_() { git -C "$ws" -c safe.directory='*' -c user.name=sample -c user.email=sample@example.com "$@"; }
cp -R testdata/sample-pr/. "$ws"
rm -rf "$ws/.github"
git_ init -q -b main
git_ add -A
git_ commit -q -m "the sample project, no airlock policy yet"
chown -R 1000:1000 "$ws"
bin/airlock keys generate --out "$keys/ci" >/dev/null
cp testdata/onboard-org/org.cue "$audit_org/org.cue"
printf '\negress: mode: "audit"\n' >>"$audit_org/org.cue"

cat >"$tmp/fetch.yaml" <<'STEPS'
steps:
  - name: fetch
    run: curl -fsS http://registry.demo.test:18080/greeting.txt
STEPS
cat >"$tmp/fetch-and-more.yaml" <<'STEPS'
steps:
  - name: fetch
    run: curl -fsS http://registry.demo.test:18080/greeting.txt
  - name: anything else
    run: |
      curl -sS -o /dev/null -w "other.demo.test: HTTP %{http_code}\n" http://other.demo.test:18080/
STEPS

echo "== 1. audit run (egress.mode \"audit\" in the organisation policy)"
# Audit applies only to a pull request known not to be agent work: the
# sample's event is a human's.
bin/airlock run --workspace "$ws" --org "$audit_org" --base main --head main \
  --event testdata/events/pr-opened-by-human.json --steps "$tmp/fetch.yaml" \
  --attest-key "$keys/ci.key" --attest-dir "$tmp/audit"

echo "== 2. airlock policy suggest"
bin/airlock policy suggest --key "$keys/ci.pub" --repo "$ws" --base main --org testdata/onboard-org \
  -o "$tmp/airlock.cue" "$tmp"/audit/*.sigstore.json
cat "$tmp/airlock.cue"
bin/airlock policy vet --org testdata/onboard-org "$tmp/airlock.cue"

echo "== 3. reviewed and committed as .github/airlock.cue"
mkdir -p "$ws/.github"
cp "$tmp/airlock.cue" "$ws/.github/airlock.cue"
git_ add -A
git_ commit -q -m "airlock policy, from the audit run"
chown -R 1000:1000 "$ws"

echo "== 4. enforced run under the suggested policy"
bin/airlock run --workspace "$ws" --org testdata/onboard-org --base main --steps "$tmp/fetch-and-more.yaml" \
  --attest-key "$keys/ci.key" --attest-dir "$tmp/enforced"
