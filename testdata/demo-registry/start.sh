# Sourced by the sample scripts (testdata/run-sample.sh,
# testdata/onboard-sample.sh): start_demo_registry NAME DIR starts the demo
# registry on 127.0.0.1:18080 (HTTP) and 18443 (HTTPS), writing its CA to
# DIR/registry-ca.pem and its token to DIR/registry-token, and the
# attestation store's OCI registry on 127.0.0.1:18500, writing its
# credentials to DIR/store-auth.json; it waits until they serve; its pid
# is in $registry. NAME prefixes the messages.
start_demo_registry() {
  go build -o bin/demo-registry ./testdata/demo-registry
  if command -v curl >/dev/null && { curl -s -o /dev/null --max-time 1 http://127.0.0.1:18080/ || curl -sk -o /dev/null --max-time 1 https://127.0.0.1:18443/ || curl -s -o /dev/null --max-time 1 http://127.0.0.1:18500/v2/; }; then
    echo "$1: 127.0.0.1:18080, 18443 or 18500 is already in use; stop what listens there (the sample policies name those ports)" >&2
    exit 69
  fi
  bin/demo-registry -listen 127.0.0.1:18080 -tls-listen 127.0.0.1:18443 -ca-out "$2/registry-ca.pem" -token-out "$2/registry-token" \
    -oci-listen 127.0.0.1:18500 -auth-out "$2/store-auth.json" &
  registry=$!
  i=0
  until [ -s "$2/registry-token" ]; do
    i=$((i + 1)); [ $i -lt 100 ] || { echo "$1: the demo registry did not start" >&2; kill $registry 2>/dev/null; exit 69; }
    sleep 0.1
  done
}
