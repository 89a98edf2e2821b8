package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/testtool"
)

// Real clients in the sandbox, refused by the gateway on a host they may
// reach but not at that path: each stops at the first refusal (one
// denied decision in the job) and says airlock's words in its own
// output, because the refusal speaks its protocol (runner/egress/refusal).
func TestClientsSeeRefusalsInTheirProtocol(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	port := upstream(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "should not be reached") })
	org := orgPolicy(t, fmt.Sprintf(`egress: {
	allow: [{host: "registry.test", ports: [%d], pathPrefixes: ["/ok/"]}]
	resolve: "registry.test": "127.0.0.1"
	allowCIDRs: ["127.0.0.1/32"]
}
`, port))
	base := fmt.Sprintf("http://registry.test:%d", port)
	// needs is the client each case runs in the sandbox (which sees the
	// host's root), when a minimal Debian with git and Go lacks it.
	for _, tc := range []struct {
		name   string
		needs  *testtool.Tool
		script string
		want   []string
	}{
		{"curl, a registry path", &testtool.Curl, "curl -sS --fail-with-body " + base + "/v2/acme/app/manifests/latest",
			[]string{`"code":"DENIED"`, `"message":"airlock: denied GET registry.test`}},
		// go-containerregistry's transport.CheckError reads the OCI
		// error body ("DENIED: <message>"), from the ping of /v2/. With
		// --insecure, crane pings over https and http at once (and
		// retries the https one): those CONNECTs are refused too, for
		// being TLS to a host whose rule has paths; the one HTTP
		// request is refused once.
		{"crane manifest", &testtool.Crane, "crane manifest --insecure registry.test:" + fmt.Sprint(port) + "/acme/app:latest",
			[]string{"DENIED: airlock: denied GET registry.test"}},
		// remote-curl.c's show_http_message: each line of a text/plain
		// error body as "remote: ...".
		{"git clone", nil, "git clone -q " + base + "/acme/app.git /tmp/app",
			[]string{"remote: airlock: denied GET registry.test", "/acme/app.git/info/refs", "remote: to allow it:"}},
		// cmd/go's module fetcher prints a text/plain body as "server
		// response: ...".
		{"go mod download", nil, "export HOME=/tmp GOPROXY=" + base + "/ GOSUMDB=off GOCACHE=/tmp/gocache GOMODCACHE=/tmp/gomod GOTOOLCHAIN=local; /usr/local/go/bin/go mod download example.com/x@v1.0.0",
			[]string{"403 Forbidden", "server response:", "airlock: denied GET registry.test"}},
		// pip shows requests' "403 Client Error: <the status line's
		// reason> for url: ...", for an index page at -vv only (its
		// _handle_get_simple_fail logs at debug).
		{"pip download", &testtool.Pip, "python3 -m pip download -vv --no-cache-dir --retries 0 --trusted-host registry.test --index-url " + base + "/simple/ -d /tmp/p requests",
			[]string{"403 Client Error: airlock: denied GET registry.test", "/simple/requests/"}},
		// npm-registry-fetch's HttpErrorGeneral adds the body's "error".
		{"npm view", &testtool.NPM, "npm view left-pad --registry " + base + "/ --cache /tmp/npm-cache --fetch-retries 0 --update-notifier=false",
			[]string{"403 Forbidden - GET " + base + "/left-pad - airlock: denied GET registry.test"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needs != nil {
				testtool.InSandbox(t, *tc.needs, gvisor.DefaultPath, "the case runs this client in the sandbox to see airlock's refusal in its protocol")
			}
			var out, errb bytes.Buffer
			code := execute([]string{"run", "-w", workspace(t), "--state-dir", stateDir(t), "--org", org, "--json", "--", "sh", "-c", tc.script}, &out, &errb)
			if code == 0 {
				t.Fatalf("the refused client succeeded: %s", errb.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("the client's output lacks %q:\n%s", w, errb.String())
				}
			}
			var res struct {
				Egress struct {
					Decisions []struct{ Decision, Protocol string }
				} `json:"egress"`
			}
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatal(err)
			}
			requests := 0
			for _, d := range res.Egress.Decisions {
				if d.Decision == "denied" && d.Protocol != "proxy-connect" {
					requests++
				}
			}
			if requests != 1 {
				t.Errorf("%d requests refused: the client did not stop at the first", requests)
			}
		})
	}
}

// The sandbox resolves its own host name and localhost from its own
// /etc/hosts, as Docker's containers do: git and other tools look the
// host name up, and no lookup of it reaches the gateway's DNS. A
// single-label name that is not there is refused without a policy line
// that could never be right.
func TestSandboxResolvesItsOwnName(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	var out, errb bytes.Buffer
	code := execute([]string{"run", "-w", workspace(t), "--state-dir", stateDir(t), "--org", egressOrg(t, 443), "--json", "--", "sh", "-c",
		"getent hosts airlock localhost; getent ahosts $(hostname) | head -1; getent hosts db || echo db-unknown"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	stderr := errb.String()
	for _, want := range []string{" airlock\n", " localhost ", "STREAM airlock", "db-unknown"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("output lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, `{host: "db"}`) || strings.Contains(stderr, `{host: "airlock"}`) {
		t.Errorf("a single-label name suggested as an egress rule:\n%s", stderr)
	}
	var res struct {
		Egress struct {
			Decisions []struct{ Name, Decision string }
		} `json:"egress"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	for _, d := range res.Egress.Decisions {
		if d.Name == "airlock" || d.Name == "localhost" {
			t.Errorf("the sandbox asked the gateway for its own name: %+v", d)
		}
	}
}
