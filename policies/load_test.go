package policies

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func org(t *testing.T) []Source {
	t.Helper()
	srcs, err := LoadOrgDir("examples/org")
	if err != nil || len(srcs) == 0 {
		t.Fatalf("org examples: %v", err)
	}
	return srcs
}

func repo(text string) Source {
	return Source{Kind: KindRepo, Path: ".github/airlock.cue", Data: []byte(text)}
}

// Every shipped example is a valid policy, alone and under the example
// organisation policy.
func TestExamplesVet(t *testing.T) {
	files, _ := filepath.Glob("examples/*.cue")
	if len(files) < 5 {
		t.Fatalf("expected the five example policies, found %v", files)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			srcs, err := ReadFiles([]string{f}, KindRepo)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Load(context.Background(), srcs); err != nil {
				t.Errorf("alone: %v", err)
			}
			if _, err := Load(context.Background(), append(org(t), srcs...)); err != nil {
				t.Errorf("under the organisation policy: %v", err)
			}
		})
	}
}

// The defaults are the safe choice.
func TestDefaults(t *testing.T) {
	eff, err := Load(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := eff.Policy
	if p.Egress.Default != "deny" || len(p.Egress.Allow) != 0 {
		t.Errorf("egress = %+v, want deny with no allow rules", p.Egress)
	}
	for c, want := range map[string]string{"git-hooks": "readonly", "git-config": "readonly", "git-attributes": "revert", "ci": "fail", "build-entry": "warn"} {
		if p.Trust.Runtime[c] != want || p.Trust.Authored[c] != "warn" {
			t.Errorf("trust %s = %q/%q, want warn/%s", c, p.Trust.Authored[c], p.Trust.Runtime[c], want)
		}
	}
	if p.Sandbox.Limits.Pids != 1024 || p.Sandbox.Limits.Memory != "4G" || p.Agents.Humans != "sandbox" {
		t.Errorf("defaults = %+v %+v", p.Sandbox.Limits, p.Agents)
	}
	if len(eff.Digest) != 64 {
		t.Errorf("digest %q", eff.Digest)
	}
}

// A repository may tighten what the organisation set; loosening it is a
// conflict that names both files and lines; so is overriding a schema
// default that the organisation pinned.
func TestOrgAndRepo(t *testing.T) {
	for _, tc := range []struct {
		name    string
		repo    string
		wantErr []string
		check   func(*testing.T, Policy)
	}{
		{
			name: "tighten limits",
			repo: "sandbox: limits: {pids: 512, cpus: 1}\n",
			check: func(t *testing.T, p Policy) {
				if p.Sandbox.Limits.Pids != 512 || p.Sandbox.Limits.CPUs != 1 {
					t.Errorf("limits = %+v", p.Sandbox.Limits)
				}
			},
		},
		{name: "lower the workspace limit", repo: "sandbox: limits: workspace: \"2G\"\n", check: func(t *testing.T, p Policy) {
			if p.Sandbox.Limits.Workspace != "2G" {
				t.Errorf("workspace = %q", p.Sandbox.Limits.Workspace)
			}
		}},
		{name: "raise the workspace limit", repo: "sandbox: limits: workspace: \"64G\"\n", wantErr: []string{"sandbox.limits.workspace: the repository policy (.github/airlock.cue) raises it to \"64G\", above the organisation's \"16G\"", "only lower it"}},
		{name: "lift the workspace limit", repo: "sandbox: limits: workspace: \"0\"\n", wantErr: []string{"sandbox.limits.workspace", "raises it to \"0\""}},
		{name: "a workspace limit that is not a size", repo: "sandbox: limits: workspace: \"lots\"\n", wantErr: []string{"sandbox.limits.workspace", ".github/airlock.cue:1:"}},
		{name: "raise pids past the org bound", repo: "sandbox: limits: pids: 4096\n", wantErr: []string{"sandbox.limits.pids", "org.cue:", ".github/airlock.cue:1:"}},
		{name: "open egress the org pinned", repo: "egress: default: \"allow\"\n", wantErr: []string{"egress.default", "conflicting values", "org.cue:8:", ".github/airlock.cue:1:"}},
		{name: "relax a pinned trust action", repo: "trust: runtime: \"git-hooks\": \"warn\"\n", wantErr: []string{`trust.runtime."git-hooks"`, "org.cue:", ".github/airlock.cue:1:"}},
		{name: "relax an unpinned default", repo: "trust: authored: \"build-entry\": \"allow\"\n", check: func(t *testing.T, p Policy) {
			if p.Trust.Authored["build-entry"] != "allow" {
				t.Errorf("build-entry = %q", p.Trust.Authored["build-entry"])
			}
		}},
		{name: "exempt humans the org sandboxes", repo: "agents: humans: \"none\"\n", wantErr: []string{"agents.humans", "org.cue:"}},
		{name: "unknown field", repo: "sandbox: limit: memory: \"1G\"\n", wantErr: []string{"sandbox.limit: field not allowed", ".github/airlock.cue:1:10"}},
		{name: "type error", repo: "sandbox: limits: pids: \"many\"\n", wantErr: []string{"sandbox.limits.pids", ".github/airlock.cue:1:24"}},
		{name: "syntax error", repo: "sandbox: {limits: \n", wantErr: []string{"expected operand", ".github/airlock.cue:1:"}},
		{name: "import", repo: "import \"strings\"\negress: default: strings.ToLower(\"DENY\")\n", wantErr: []string{"may not import", ".github/airlock.cue:1:8"}},
		{name: "not UTF-8", repo: "egress: default: \"deny\"\n// \xff\xfe\n", wantErr: []string{".github/airlock.cue:2: not valid UTF-8"}},
		{name: "relative mask path", repo: "sandbox: masks: {\"../etc\": true}\n", wantErr: []string{`sandbox.masks."../etc": field not allowed`}},
		{name: "lift an org mask", repo: "sandbox: masks: {\"/etc/runner-credentials\": false}\n", wantErr: []string{"sandbox.masks", "conflicting values", "org.cue:"}},
		{name: "add a mask and a deny range", repo: "sandbox: masks: {\"/srv/keys\": true}\negress: denyCIDRs: {\"10.0.0.0/8\": true}\n", check: func(t *testing.T, p Policy) {
			if !p.Sandbox.Masks["/srv/keys"] || !p.Sandbox.Masks["/etc/runner-credentials"] || !p.Egress.DenyCIDRs["10.0.0.0/8"] || !p.Egress.DenyCIDRs["169.254.0.0/16"] {
				t.Errorf("sets did not add up: %v %v", p.Sandbox.Masks, p.Egress.DenyCIDRs)
			}
		}},
		{name: "mount a host path", repo: "sandbox: mounts: [{source: \"/etc\", destination: \"/x\", readOnly: false}]\n", wantErr: []string{"sandbox.mounts: set by the repository policy (.github/airlock.cue)", "only the organisation policy"}},
		{name: "choose the root filesystem", repo: "sandbox: rootfs: \"/home\"\n", wantErr: []string{"sandbox.rootfs: set by the repository policy"}},
		{name: "run as the image's user", repo: "sandbox: user: \"image\"\n", wantErr: []string{"sandbox.user: set by the repository policy", "privileges"}},
		{name: "pick the platform", repo: "sandbox: platform: \"systrap\"\n", wantErr: []string{"sandbox.platform: set by the repository policy"}},
		{name: "turn on audit", repo: "egress: mode: \"audit\"\n", wantErr: []string{"egress.mode: set by the repository policy", "enforced at all"}},
		{name: "restate enforcement", repo: "egress: mode: \"enforce\"\n", check: func(t *testing.T, p Policy) {
			if p.Egress.Mode != "enforce" {
				t.Errorf("mode = %q", p.Egress.Mode)
			}
		}},
		{name: "take a capability", repo: "sandbox: capabilities: [\"CAP_SYS_ADMIN\"]\n", wantErr: []string{"sandbox.capabilities: set by the repository policy"}},
		{name: "map an image to a host directory", repo: "sandbox: images: \"node:20\": \"/\"\n", wantErr: []string{"sandbox.images: set by the repository policy"}},
		{name: "restate the default root", repo: "sandbox: rootfs: \"host\"\nsandbox: services: true\n", check: func(t *testing.T, p Policy) {
			if p.Sandbox.RootFS != "host" || !p.Sandbox.Services {
				t.Errorf("sandbox = %+v", p.Sandbox)
			}
		}},
		{name: "bad image reference", repo: "sandbox: images: \"node 20\": \"/srv/x\"\n", wantErr: []string{"sandbox.images"}},
		{name: "bad egress host", repo: "egress: allow: [{host: \"evil.com/x\"}]\n", wantErr: []string{"egress.allow.0.host"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eff, err := Load(context.Background(), append(org(t), repo(tc.repo)))
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("loaded %+v, want an error", eff.Policy)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error lacks %q:\n%v", w, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, eff.Policy)
		})
	}
}

// A mistake in the organisation's own policy is reported file and line
// first, then the value's path, what is wrong, and what the schema
// allows there; the schema's own positions are not shown.
func TestOrgPolicyErrorsSayWhatIsAllowed(t *testing.T) {
	base, err := os.ReadFile("examples/org/org.cue")
	if err != nil {
		t.Fatal(err)
	}
	const pinned = "egress: default: \"deny\"\n"
	if !strings.Contains(string(base), pinned) {
		t.Fatalf("examples/org/org.cue no longer pins %q", pinned)
	}
	for _, tc := range []struct {
		name, replace string
		want          string // the first line of the error, from its start
		also          []string
	}{
		{"a word outside an enumeration", "egress: default: \"maybe\"\n", "org.cue:8:18: egress.default: \"maybe\" is not allowed; allowed: *\"deny\" | \"allow\"", []string{"* marks the default"}},
		{"a string for a number", pinned + "sandbox: limits: pids: \"lots\"\n", "org.cue:9:24: sandbox.limits.pids: conflicting values \"lots\" and <=2048 (mismatched types string and number); allowed:", []string{"uint", "(also ", "org.cue:"}},
		{"a misspelt field", "egress: defalt: \"deny\"\n", "org.cue:8:9: egress.defalt: field not allowed; egress has the fields default, mode, allow,", nil},
		{"a misspelt top-level field", pinned + "sanbox: {}\n", "org.cue:9:1: sanbox: field not allowed; the policy has the fields agents, sandbox, egress, trust,", nil},
		{"a misspelt trust category", pinned + "trust: runtime: \"git-hookz\": \"fail\"\n", "org.cue:9:30: trust.runtime.\"git-hookz\": no such category: the built-in ones are git-hooks, git-config,", []string{"trust.globs.\"git-hookz\""}},
		{"a trust action outside the enumeration", pinned + "trust: authored: ci: \"revert\"\n", "org.cue:9:22: trust.authored.ci: \"revert\" is not allowed; allowed: *\"warn\" | \"allow\" | \"fail\"", nil},
		{"a store that is no URI", pinned + "attest: store: [{uri: \"ghcr.io/org/attestations\"}]\n", "org.cue:9:23: attest.store.0.uri: invalid value \"ghcr.io/org/attestations\" (out of bound =~\"^(oci|file)://\")", nil},
		{"a store with a bad repository", pinned + "attest: store: [{uri: \"oci://ghcr.io/Org/Attestations\"}]\n", "org.cue:9:18: attest.store[0].uri: attestation store \"oci://ghcr.io/Org/Attestations\": the repository is not a valid OCI repository name", []string{"a store is oci://REGISTRY/REPOSITORY"}},
		{"a store with credentials in it", pinned + "attest: store: [{uri: \"oci://bot:hunter2@ghcr.io/org/a\"}, {uri: \"file:///mnt/attestations\", required: false}]\n", "org.cue:9:18: attest.store[0].uri: attestation store \"oci://***@ghcr.io/org/a\"", []string{"holds credentials: name the credentials file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			text := strings.Replace(string(base), pinned, tc.replace, 1)
			os.WriteFile(filepath.Join(dir, "org.cue"), []byte(text), 0o644)
			srcs, err := LoadOrgDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Load(context.Background(), srcs)
			var pe *Error
			if !errors.As(err, &pe) || len(pe.Problems) != 1 {
				t.Fatalf("err = %v, want one problem", err)
			}
			got := strings.TrimPrefix(pe.Problems[0], dir+"/")
			if !strings.HasPrefix(got, tc.want) {
				t.Errorf("problem\n  %s\nwant it to start\n  %s", got, tc.want)
			}
			for _, w := range tc.also {
				if !strings.Contains(got, w) {
					t.Errorf("problem %q lacks %q", got, w)
				}
			}
			if strings.Contains(got, "schema.cue") {
				t.Errorf("problem %q names the schema's positions", got)
			}
		})
	}
	// A category of the policy's own, with its files, is accepted.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "org.cue"), append(base, "trust: runtime: mine: \"fail\"\ntrust: globs: mine: [\"tools/**\"]\n"...), 0o644)
	srcs, _ := LoadOrgDir(dir)
	if eff, err := Load(context.Background(), srcs); err != nil || eff.Policy.Trust.Runtime["mine"] != "fail" {
		t.Errorf("own category: %v", err)
	}
}

// attest.store is the organisation's: a repository that sets it is
// refused, and the organisation's stores are parsed with their options.
func TestAttestStoreIsOrganisationOnly(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "org.cue"), []byte(`attest: store: [{uri: "oci://registry.internal:5000/airlock/attestations"}, {uri: "file:///mnt/attestations", required: false}]`+"\n"), 0o644)
	srcs, err := LoadOrgDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	eff, err := Load(context.Background(), srcs)
	if err != nil {
		t.Fatal(err)
	}
	stores := eff.Policy.Attest.Stores()
	if len(stores) != 2 || stores[0].Registry != "registry.internal:5000" || !stores[0].Required || stores[1].Path != "/mnt/attestations" || stores[1].Required {
		t.Fatalf("Stores() = %+v", stores)
	}
	// Where the organisation names stores, a repository's are a
	// conflict of values; where it names none, a refusal.
	_, err = Load(context.Background(), append(append([]Source{}, srcs...), repo(`attest: store: [{uri: "oci://evil.example/drop"}]`)))
	if err == nil || !strings.Contains(err.Error(), "attest.store") {
		t.Errorf("a repository's store beside the organisation's: %v", err)
	}
	_, err = Load(context.Background(), append(org(t), repo(`attest: store: [{uri: "oci://evil.example/drop"}]`)))
	if err == nil || !strings.Contains(err.Error(), "attest.store: set by the repository policy") {
		t.Errorf("a repository's store where the organisation has none: %v, want the organisation-only refusal", err)
	}
}

// Oversized, deeply nested and pathological input fails within bounded
// time with a clear error.
func TestHostileInput(t *testing.T) {
	deep := strings.Repeat("{a: ", 5000) + "1" + strings.Repeat("}", 5000)
	var disj strings.Builder
	disj.WriteString("x: ")
	for i := 0; i < 40; i++ {
		disj.WriteString("(1 | 2 | 3) & ")
	}
	disj.WriteString("int\n")
	for _, tc := range []struct {
		name, data, want string
	}{
		{"50 MB", strings.Repeat("// x\n", 10<<20), "bytes, at most"},
		{"deep nesting", "sandbox: x: " + deep + "\n", "field not allowed"},
		{"disjunctions", disj.String(), ""},
		{"recursion", "a: b\nb: a\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := Load(context.Background(), []Source{repo(tc.data)})
			if err == nil {
				t.Fatal("loaded hostile input")
			}
			if tc.want != "" && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v lacks %q", err, tc.want)
			}
			if took := time.Since(start); took > EvalTimeout+2*time.Second {
				t.Errorf("took %s", took)
			}
		})
	}
}

func TestReadFileRefusesOversized(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.cue")
	if err := os.WriteFile(p, make([]byte, MaxFileSize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFiles([]string{p}, KindOrg); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("err = %v", err)
	}
}

func BenchmarkLoadExamples(b *testing.B) {
	orgSrc, err := LoadOrgDir("examples/org")
	if err != nil {
		b.Fatal(err)
	}
	files, _ := filepath.Glob("examples/*.cue")
	var repos []Source
	for _, f := range files {
		s, err := ReadFiles([]string{f}, KindRepo)
		if err != nil {
			b.Fatal(err)
		}
		repos = append(repos, s...)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := repos[i%len(repos)]
		if _, err := Load(context.Background(), append(append([]Source{}, orgSrc...), r)); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzLoad(f *testing.F) {
	files, _ := filepath.Glob("examples/*.cue")
	for _, p := range append(files, "examples/org/org.cue") {
		b, _ := os.ReadFile(p)
		f.Add(b)
	}
	f.Add([]byte("egress: default: \"allow\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		start := time.Now()
		Load(context.Background(), []Source{repo(string(data))})
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("load took %s", took)
		}
	})
}

func TestExplain(t *testing.T) {
	eff, err := Load(context.Background(), append(org(t), repo("sandbox: limits: pids: 256\n")))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Origin{}
	for _, o := range eff.Explain {
		got[o.Path] = o
	}
	for _, tc := range []struct {
		path, value string
		setBy       []string
	}{
		{"sandbox.limits.pids", "256", []string{"org.cue:", "(org)", ".github/airlock.cue:1:18 (repo)"}},
		{"egress.default", `"deny"`, []string{"org.cue:8:", "(org)"}},
		{"sandbox.limits.memory", `"4G"`, nil},
	} {
		o, ok := got[tc.path]
		if !ok {
			t.Fatalf("no origin for %s", tc.path)
		}
		by := strings.Join(o.SetBy, "; ")
		if o.Value != tc.value || (tc.setBy == nil) != (by == "") {
			t.Errorf("%s = %q set by %q", tc.path, o.Value, by)
		}
		for _, w := range tc.setBy {
			if !strings.Contains(by, w) {
				t.Errorf("%s: set by %q, want %q in it", tc.path, by, w)
			}
		}
	}
}

// Without an organisation policy the default (16G) is the most a
// repository may ask for.
func TestWorkspaceLimitWithoutOrganisation(t *testing.T) {
	for _, tc := range []struct{ repo, want, wantErr string }{
		{repo: "sandbox: limits: workspace: \"8G\"\n", want: "8G"},
		{repo: "egress: default: \"deny\"\n", want: ""},
		{repo: "sandbox: limits: workspace: \"17G\"\n", wantErr: `above the organisation's "16G"`},
	} {
		eff, err := Load(context.Background(), []Source{repo(tc.repo)})
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: %v, want %q", tc.repo, err, tc.wantErr)
			}
			continue
		}
		if err != nil || eff.Policy.Sandbox.Limits.Workspace != tc.want {
			t.Errorf("%q: %v %q, want %q", tc.repo, err, eff.Policy.Sandbox.Limits.Workspace, tc.want)
		}
	}
}
