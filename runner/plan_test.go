package runner

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/input"
	"github.com/airlock-ci/airlock/policies"
)

// abs is p made absolute, as the plan hides the files a door names.
func abs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// effective evaluates real policy text: the organisation's files, then the
// repository's.
func effective(t *testing.T, org, repo string) *policies.Effective {
	t.Helper()
	srcs := []policies.Source{{Kind: policies.KindOrg, Path: "org.cue", Data: []byte("package airlock\n" + org)}}
	if repo != "" {
		srcs = append(srcs, policies.Source{Kind: policies.KindRepo, Path: policies.RepoPolicyPath, Commit: "base", Data: []byte(repo)})
	}
	eff, err := policies.Load(context.Background(), srcs)
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	return eff
}

// One plan serves every door: airlock run (with or without a policy,
// with flags that may only tighten it) and the runner hook (its fixed
// paths, image, services and checkout). Each case is a door's inputs and
// what the job must then be.
func TestNewPlan(t *testing.T) {
	image := t.TempDir()
	os.MkdirAll(filepath.Join(image, "rootfs"), 0o755)
	cfg, _ := json.Marshal(map[string]any{"ociVersion": "1.0.2", "process": map[string]any{"args": []string{"node"}, "env": []string{"NODE_VERSION=20", "PATH=/usr/local/bin:/usr/bin"}, "cwd": "/"}})
	os.WriteFile(filepath.Join(image, "config.json"), cfg, 0o644)

	const orgPolicy = `
sandbox: masks: {"/etc/org-secret": true}
sandbox: capabilities: ["CAP_NET_BIND_SERVICE"]
sandbox: limits: {pids: <=2048, memory: "2G"}
sandbox: mounts: [{source: "/opt/cache", destination: "/cache", readOnly: true}]
egress: allow: [{host: "proxy.golang.org"}]
egress: secrets: [{host: "api.example.com", header: "Authorization", fromEnv: "AIRLOCK_SECRET_API"}]
attest: key: "/etc/airlock/signing.key"
attest: subjects: ["dist/*.tar.gz"]
steps: build: [{name: "vet", run: "go vet ./..."}]
`
	secrets := func(k string) (string, bool) {
		return map[string]string{"AIRLOCK_SECRET_API": "s3cret"}[k], k == "AIRLOCK_SECRET_API"
	}
	agentPR := &policies.PullRequest{Number: 7, Author: "Copilot", BaseSHA: "b", HeadSHA: "h"}
	set := func(names ...input.Name) map[input.Name]bool {
		m := map[input.Name]bool{}
		for _, f := range names {
			m[f] = true
		}
		return m
	}
	tighter := gvisor.DefaultLimits()
	tighter.Pids = 100
	looser := gvisor.DefaultLimits()
	looser.Memory = 8 << 30

	for _, tc := range []struct {
		name      string
		org, repo string // no org: no policy at all
		pr        PullRequest
		in        Inputs
		wantErr   string // and its kind
		input     bool
		check     func(t *testing.T, p Plan)
	}{
		{
			name: "airlock run without a policy: the sandbox as asked, loopback only",
			in: Inputs{Workspace: "/ws", StateRoot: "/state", Masks: []string{"/srv/x"}, AttestKey: "k.pem", Requests: Requests{
				RootFS: "/img", WorkspaceMount: "/src", Capabilities: []string{"CAP_CHOWN"}, User: &gvisor.User{UID: 5, GID: 6}, Limits: tighter,
			}},
			check: func(t *testing.T, p Plan) {
				c := p.Job.Sandbox
				if c.RootFS != "/img" || c.WorkspaceMount != "/src" || c.Workspace != "/ws" || c.StateRoot != "/state" || !slices.Equal(c.Capabilities, []string{"CAP_CHOWN"}) ||
					c.User.UID != 5 || c.Limits != tighter || !slices.Equal(c.ExtraMasks, []string{"/srv/x", abs(t, "k.pem")}) {
					t.Errorf("sandbox %+v", c)
				}
				if p.Job.Egress != nil || p.Job.Trust != nil || p.Job.Policy != nil || p.Attest.Key != "k.pem" {
					t.Errorf("egress %v, trust %v, policy %v, key %q", p.Job.Egress, p.Job.Trust, p.Job.Policy, p.Attest.Key)
				}
			},
		},
		{
			name: "airlock run under a policy, nothing asked: the policy's sandbox, egress, trust and attestation",
			org:  orgPolicy, repo: "sandbox: limits: pids: 300\n",
			pr: PullRequest{Event: agentPR, Base: "b"},
			in: Inputs{Workspace: "/ws", StateRoot: "/state", Masks: []string{"/srv/x"}, PolicyJob: "build", LookupEnv: secrets, Requests: Requests{Set: set()}},
			check: func(t *testing.T, p Plan) {
				c := p.Job.Sandbox
				if c.Limits.Pids != 300 || c.Limits.Memory != 2<<30 || c.WorkspaceMount != "/workspace" || !slices.Equal(c.ExtraMasks, []string{"/etc/org-secret", "/srv/x", "/etc/airlock", abs(t, ".")}) ||
					!slices.Equal(c.Capabilities, []string{"CAP_NET_BIND_SERVICE"}) || len(c.Mounts) != 1 || c.Mounts[0].Destination != "/cache" {
					t.Errorf("sandbox %+v", c)
				}
				if e := p.Job.Egress; e == nil || !e.Policy.NameAllowed("proxy.golang.org") || e.Policy.NameAllowed("example.com") || len(e.Policy.Secrets) != 1 {
					t.Errorf("egress %+v", e)
				}
				tr := p.Job.Trust
				if tr == nil || tr.Base != "b" || tr.Head != "HEAD" || tr.Deferred || tr.NoHooks || tr.Set.AuthoredAction("git-hooks") != "warn" {
					t.Errorf("trust %+v", tr)
				}
				if p.Job.Policy.Agent == nil || !p.Job.Policy.Agent.Agent || len(p.Job.Policy.Sources) != 2 {
					t.Errorf("policy info %+v", p.Job.Policy)
				}
				if p.Job.Name != "build" || len(p.Job.Steps) != 1 || p.Job.Steps[0].Run != "go vet ./..." {
					t.Errorf("job %q steps %+v", p.Job.Name, p.Job.Steps)
				}
				if a := p.Attest; a.Key != "/etc/airlock/signing.key" || !slices.Equal(a.Outputs, []string{"dist/*.tar.gz"}) || a.Meta.PullRequest != 7 || a.Meta.Author != "Copilot" || a.Meta.BaseSHA != "b" {
					t.Errorf("attestation %+v", a)
				}
			},
		},
		{
			name: "a flag that tightens the policy applies",
			org:  orgPolicy,
			in:   Inputs{Requests: Requests{Limits: tighter, Capabilities: []string{}, Set: set(input.Pids, input.Capabilities)}},
			check: func(t *testing.T, p Plan) {
				if p.Job.Sandbox.Limits.Pids != 100 || len(p.Job.Sandbox.Capabilities) != 0 {
					t.Errorf("limits %+v caps %v", p.Job.Sandbox.Limits, p.Job.Sandbox.Capabilities)
				}
			},
		},
		{
			name: "audit in the organisation policy: what the rules deny passes, recorded",
			org:  orgPolicy + "egress: mode: \"audit\"\n",
			pr:   PullRequest{Event: &policies.PullRequest{Number: 8, Author: "alice", BaseSHA: "b", HeadSHA: "h"}},
			in:   Inputs{LookupEnv: secrets},
			check: func(t *testing.T, p Plan) {
				if e := p.Job.Egress; !e.Policy.Audit || e.ModeNote != "" || !e.Policy.NameWouldDeny("example.com") {
					t.Errorf("egress audit %v, note %q", e.Policy.Audit, e.ModeNote)
				}
			},
		},
		{
			name: "audit never applies to agent work: enforced, and the job says why",
			org:  orgPolicy + "egress: mode: \"audit\"\n",
			pr:   PullRequest{Event: agentPR},
			in:   Inputs{LookupEnv: secrets},
			check: func(t *testing.T, p Plan) {
				if e := p.Job.Egress; e.Policy.Audit || e.Policy.NameAllowed("example.com") || !strings.Contains(e.ModeNote, "agent work") {
					t.Errorf("egress audit %v, note %q", e.Policy.Audit, e.ModeNote)
				}
			},
		},
		{
			name: "audit with no pull request event (a push): enforced",
			org:  orgPolicy + "egress: mode: \"audit\"\n",
			in:   Inputs{LookupEnv: secrets},
			check: func(t *testing.T, p Plan) {
				if e := p.Job.Egress; e.Policy.Audit || !strings.Contains(e.ModeNote, "no pull request event") {
					t.Errorf("egress audit %v, note %q", e.Policy.Audit, e.ModeNote)
				}
			},
		},
		{
			name: "a repository policy that clears the agent lists: still agent work, still enforced",
			org:  orgPolicy + "egress: mode: \"audit\"\n",
			repo: "agents: {logins: [], botSuffix: false, labels: [], headBranchPrefixes: []}\n",
			pr:   PullRequest{Event: agentPR},
			in:   Inputs{LookupEnv: secrets},
			check: func(t *testing.T, p Plan) {
				if a := p.Job.Policy.Agent; a == nil || !a.Agent || !strings.Contains(a.Reason, "organisation") {
					t.Errorf("agent decision %+v", a)
				}
				if e := p.Job.Egress; e.Policy.Audit {
					t.Errorf("audited: %q", e.ModeNote)
				}
			},
		},
		{name: "a request that loosens a limit", org: orgPolicy, in: Inputs{Requests: Requests{Limits: looser, Set: set(input.Memory)}}, wantErr: "the memory limit: more than the policy's sandbox.limits allow", input: true},
		{name: "another root filesystem", org: orgPolicy, in: Inputs{Requests: Requests{RootFS: "/img", Set: set(input.RootFS)}}, wantErr: "the root filesystem: the policy sets it", input: true},
		{name: "a capability the policy does not grant", org: orgPolicy, in: Inputs{Requests: Requests{Capabilities: []string{"CAP_SYS_ADMIN"}, Set: set(input.Capabilities)}}, wantErr: "the capabilities: CAP_SYS_ADMIN: the policy does not grant it", input: true},
		{name: "another identity", org: orgPolicy + "sandbox: user: {uid: 1000, gid: 1000}\n", in: Inputs{Requests: Requests{User: &gvisor.User{UID: 0}}}, wantErr: "the user: the policy sets it", input: true},
		{name: "a job the policy does not have", org: orgPolicy, in: Inputs{PolicyJob: "deploy"}, wantErr: `no job "deploy"`, input: true},
		{
			name: "the runner hook: its paths, the mapped image, services, the checkout in the job",
			org:  orgPolicy + "sandbox: services: true\nsandbox: images: {\"node:20\": \"" + image + "\", \"redis:7\": \"" + image + "\"}\n",
			pr:   PullRequest{Event: agentPR, Base: "b", Head: "h", Repository: "https://github.com/acme/app"},
			in: Inputs{
				Name: "job", Workspace: "/runner/_work", WorkspaceMount: "/__w", Image: "node:20", Env: []string{"NODE_VERSION=22"},
				Mounts: []gvisor.Mount{{Source: "/runner/externals", Destination: "/__e", ReadOnly: true}}, Masks: []string{"/run/airlock/hooks/x"},
				Services: []Service{{Name: "db", Image: "docker.io/library/redis:7"}}, TrustDir: "app/app", CheckoutInJob: true, AttestKey: "/host/key",
				LookupEnv: secrets,
			},
			check: func(t *testing.T, p Plan) {
				c := p.Job.Sandbox
				if c.WorkspaceMount != "/__w" || c.RootFS != filepath.Join(image, "rootfs") || len(c.Mounts) != 2 || c.Mounts[0].Destination != "/__e" || c.Mounts[1].Destination != "/cache" {
					t.Errorf("sandbox %+v", c)
				}
				// The image's environment first: the job's own wins.
				if !slices.Equal(p.Job.Env, []string{"NODE_VERSION=20", "PATH=/usr/local/bin:/usr/bin", "NODE_VERSION=22"}) {
					t.Errorf("env %q", p.Job.Env)
				}
				if len(p.Hosts) != 1 || !strings.Contains(string(p.Hosts[0].Data), "127.0.0.1\tdb\n") || !slices.ContainsFunc(c.Files, func(f gvisor.File) bool { return f.Path == "/etc/hosts" }) || !slices.Equal(p.Job.Egress.LocalNames, []string{"db"}) {
					t.Errorf("services: hosts %v, files %v, local names %v", p.Hosts, c.Files, p.Job.Egress.LocalNames)
				}
				if tr := p.Job.Trust; !tr.Deferred || !tr.NoHooks || tr.Base != "" || tr.Dir != "app/app" {
					t.Errorf("trust %+v", tr)
				}
				if a := p.Attest; a.Key != "/host/key" || a.Meta.ContainerImage != "node:20" || a.Meta.Repository != "https://github.com/acme/app" || a.Meta.HeadSHA != "h" {
					t.Errorf("attestation %+v", a)
				}
				if _, ok := p.Images.Mapped("redis:7"); !ok {
					t.Errorf("the organisation's image map is not the job's")
				}
			},
		},
		{
			name: "an image the organisation does not map is pulled when the job opens",
			org:  orgPolicy,
			in:   Inputs{Image: "node:18"},
			check: func(t *testing.T, p Plan) {
				if p.Job.Sandbox.RootFS != "" || p.Job.PullImage != "node:18" || p.Job.Images != p.Images || len(p.Notes) != 0 {
					t.Errorf("rootfs %q, pull %q, notes %q", p.Job.Sandbox.RootFS, p.Job.PullImage, p.Notes)
				}
			},
		},
		{name: "a secret airlock was not given", org: orgPolicy, in: Inputs{LookupEnv: func(string) (string, bool) { return "", false }}, wantErr: "AIRLOCK_SECRET_API is not set in airlock's environment"},
		{name: "services the policy does not allow", org: orgPolicy, in: Inputs{Services: []Service{{Name: "db", Image: "redis:7"}}}, wantErr: "the policy does not allow services", input: true},
		{
			name: "a repository key where the organisation has none",
			org:  "", repo: "attest: key: \"/tmp/mine.key\"\n",
			check: func(t *testing.T, p Plan) {
				if p.Attest.Key != "" || len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "ignoring attest.key from the repository policy") {
					t.Errorf("key %q notes %q", p.Attest.Key, p.Notes)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var eff *policies.Effective
			if tc.org != "" || tc.repo != "" {
				eff = effective(t, tc.org, tc.repo)
			}
			if tc.in.LookupEnv == nil {
				tc.in.LookupEnv = secrets
			}
			p, err := NewPlan(eff, tc.pr, tc.in)
			if tc.wantErr != "" {
				var in InputError
				var pe PolicyError
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || errors.As(err, &in) != tc.input || errors.As(err, &pe) == tc.input {
					t.Fatalf("err = %v (%T), want %q", err, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, p)
		})
	}
}

// A policy that passed the schema but cannot be turned into a sandbox is
// a PolicyError, never a job with a limit dropped.
func TestNewPlanPolicyError(t *testing.T) {
	eff := effective(t, "", "")
	eff.Policy.Sandbox.Limits.Memory = "lots"
	if _, err := NewPlan(eff, PullRequest{}, Inputs{}); !errors.As(err, new(PolicyError)) || !strings.Contains(err.Error(), "sandbox.limits.memory") {
		t.Errorf("err = %v", err)
	}
	eff = effective(t, "", "")
	eff.Policy.Egress.Network.Pool = "not a range"
	if _, err := NewPlan(eff, PullRequest{}, Inputs{}); !errors.As(err, new(PolicyError)) || !strings.Contains(err.Error(), "egress.network.pool") {
		t.Errorf("err = %v", err)
	}
}

func TestCheckServices(t *testing.T) {
	img := t.TempDir()
	allowed := policies.Sandbox{Services: true, Images: map[string]string{"redis:7": img}}
	for _, tc := range []struct {
		name     string
		policy   policies.Sandbox
		services []Service
		wantErr  []string
	}{
		{"none", policies.Sandbox{}, nil, nil},
		{"allowed and mapped", allowed, []Service{{Name: "redis", Image: "docker.io/library/redis:7"}}, nil},
		{"not allowed", policies.Sandbox{Images: allowed.Images}, []Service{{Name: "redis", Image: "redis:7"}, {Name: "pg", Image: "postgres"}},
			[]string{"redis (redis:7): the policy does not allow services", "pg (postgres)"}},
		{"not mapped, pulled", allowed, []Service{{Name: "pg", Image: "postgres:16"}}, nil},
		{"not mapped, refused by the images section", allowed, []Service{{Name: "pg", Image: "postgres:16"}, {Name: "cache", Image: "redis:7"}}, []string{"service pg: image refused by the policy: postgres:16: no rule allows docker.io/library/postgres"}},
		{"hosts injection", allowed, []Service{{Name: "db\n10.0.0.1 github.com", Image: "redis:7"}}, []string{"not a valid host name"}},
		{"odd name", allowed, []Service{{Name: "../x", Image: "redis:7"}}, []string{"not a valid host name"}},
		{"too many", allowed, slices.Repeat([]Service{{Name: "db", Image: "redis:7"}}, maxServices+1), []string{"at most 8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var org *policies.Policy
			if strings.Contains(tc.name, "images section") {
				org = &policies.Policy{Images: &policies.Images{Pull: true}} // deny by default
			}
			src, err := NewImageSource(tc.policy.Images, nil, org, false)
			if err != nil {
				t.Fatal(err)
			}
			err = checkServices(tc.policy, tc.services, src)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			for _, w := range tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v, want %q", err, w)
				}
			}
		})
	}
}

// The organisation pins what the job's credentials may do, for the job
// at hand (agent work has the stricter defaults); a repository policy may
// narrow it, never loosen it.
func TestCredentialsNarrowOnly(t *testing.T) {
	agentPR := PullRequest{Event: &policies.PullRequest{Number: 7, Author: "Copilot", BaseSHA: "b", HeadSHA: "h"}, Base: "b", Head: "h"}
	humanPR := PullRequest{Event: &policies.PullRequest{Number: 8, Author: "octocat", BaseSHA: "b", HeadSHA: "h"}, Base: "b", Head: "h"}
	for _, tc := range []struct {
		name, org, repo string
		pr              PullRequest
		want            string // in the error; empty: allowed
	}{
		{"narrow the cache", "", `credentials: cache: "none"`, agentPR, ""},
		{"save to the cache from agent work", "", `credentials: cache: "readwrite"`, agentPR, `credentials.cache: "readwrite" where the organisation's is "read"`},
		{"save to the cache from a human's work", "", `credentials: cache: "readwrite"`, humanPR, ""},
		{"push from agent work", "", `credentials: gitPush: true`, agentPR, "credentials.gitPush: true"},
		{"push where the organisation allows it", `credentials: gitPush: true`, `credentials: gitPush: true`, agentPR, ""},
		{"an OIDC audience of the repository's", `credentials: oidc: audiences: [...string]`, `credentials: oidc: audiences: ["sts.amazonaws.com"]`, agentPR, `"sts.amazonaws.com", which the organisation's does not list`},
		{"a secret to another host", `credentials: secrets: NPM_TOKEN: hosts: ["registry.npmjs.org", ...]`, `credentials: secrets: NPM_TOKEN: hosts: ["registry.npmjs.org", "evil.example"]`, agentPR, `host "evil.example"`},
		{"a secret the organisation does not name", "", `credentials: secrets: DEPLOY_KEY: hosts: ["deploy.example.com"]`, agentPR, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewPlan(effective(t, tc.org, tc.repo), tc.pr, Inputs{Workspace: t.TempDir()})
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !errors.As(err, new(PolicyError)) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("err = %v, want a policy error saying %q", err, tc.want)
			}
		})
	}
}
