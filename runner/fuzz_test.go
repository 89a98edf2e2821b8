package runner

import (
	"encoding/json"
	"maps"
	"reflect"
	"strings"
	"testing"
)

// Fuzz targets for the steps file (`airlock run --steps`), YAML or JSON.

// stepsSeeds are steps_test.go's documents and hostile ones.
var stepsSeeds = []string{
	"steps:\n  - name: build\n    run: make\n    timeout: 90s\n    env: {GOFLAGS: -mod=mod}\n  - run: make test\n    working-directory: sub\n",
	`{"steps":[{"name":"a","run":"true","timeout":5}]}`,
	"- run: echo hi\n  shell: bash\n",
	"steps: []\n",
	"steps:\n  - run: x\n    runs-on: linux\n",
	"steps:\n  - {name: a, run: x}\n  - {name: a, run: y}\n",
	"steps:\n  - name: a\n    run: '  '\n",
	"steps:\n  - {run: x, shell: pwsh}\n",
	"steps:\n  - {run: x, timeout: soon}\n",
	"steps:\n  - {run: x, timeout: -5s}\n",
	"steps:\n  - run: x\n    env: {'A=B': c}\n",
	"\x00\x01{{{",
	// Hostile: anchors and merges, case-folded and repeated keys, NUL
	// bytes in every field, odd timeouts, a name another step defaults to.
	"base: &b {run: x, env: {'A=B': c}}\nsteps:\n  - <<: *b\n    name: m\n",
	"steps:\n  - {run: x, RUN: y, Env: {K: v}, env: {'': v}}\n",
	"steps:\n  - {run: \"x\\0y\"}\n  - {run: y, env: {K: \"a\\0b\"}}\n  - {run: y, env: {\"K\\0\": b}}\n",
	"steps:\n  - {run: x, name: \"\\0\", timeout: .inf}\n  - {run: x, timeout: 1e300}\n  - {run: x, timeout: 0.0000000001}\n",
	"steps:\n  - {run: x, name: step 2}\n  - {run: y}\n",
	"steps:\n  - {run: x, timeout: 2562047h47m16.854775807s}\n",
	"- &a {run: x}\n- *a\n",
	"steps: {run: x}\n",
	// Characters YAML reads apart from JSON: escaped in YAML, written
	// raw by the JSON encoder (a DEL, a C1 control, U+0085 NEL, which is
	// a line break to YAML, U+FEFF), and raw in a JSON document.
	"steps:\n  - {run: \"a\\x7f\\x85\\u0085\\ufeffb\", name: \"\\x9b\"}\n",
	"{\"steps\":[{\"run\":\"a\u0085b\",\"env\":{\"K\":\"\x7f\"}}]}",
}

// sameSteps compares steps as a reader of them would: an empty env is
// no env.
func sameSteps(a, b []StepSpec) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if len(x.Env) == 0 && len(y.Env) == 0 {
			x.Env, y.Env = nil, nil
		}
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

// FuzzParseSteps feeds ParseSteps any bytes. Properties:
//   - what it accepts is what it promises: at least one step, unique
//     names, a run that is not blank and has no NUL, sh or bash, every
//     env entry one checkEnv takes (so no document, through YAML
//     anchors, merges, case-folded keys or the bare-list form, gets a
//     refused entry past it), no negative timeout;
//   - accepted steps written out (JSON, a YAML document) read back as
//     the same steps, written out again the same bytes.
func FuzzParseSteps(f *testing.F) {
	for _, s := range stepsSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		steps, err := ParseSteps(data)
		if err != nil {
			return
		}
		if len(steps) == 0 {
			t.Fatal("no steps accepted")
		}
		seen := map[string]bool{}
		for _, s := range steps {
			if seen[s.Name] || s.Name == "" {
				t.Fatalf("name %q empty or used twice", s.Name)
			}
			seen[s.Name] = true
			if strings.TrimSpace(s.Run) == "" || strings.ContainsRune(s.Run, 0) {
				t.Fatalf("run %q accepted", s.Run)
			}
			if s.Shell != "" && s.Shell != "sh" && s.Shell != "bash" {
				t.Fatalf("shell %q accepted", s.Shell)
			}
			for k, v := range s.Env {
				if err := checkEnv(k, v); err != nil {
					t.Fatalf("env entry %q=%q accepted: %v", k, v, err)
				}
			}
			if s.Timeout < 0 {
				t.Fatalf("timeout %v accepted", s.Timeout)
			}
		}
		b, err := json.Marshal(stepsFile{Steps: steps})
		if err != nil {
			t.Fatalf("marshal %+v: %v", steps, err)
		}
		back, err := ParseSteps(b)
		if err != nil {
			t.Fatalf("written out, the steps are refused: %v\n%s", err, b)
		}
		if !sameSteps(back, steps) {
			t.Fatalf("round trip:\n got %+v\nwant %+v\n%s", back, steps, b)
		}
		if b2, _ := json.Marshal(stepsFile{Steps: back}); string(b2) != string(b) {
			t.Fatalf("written out again:\n%s\n%s", b2, b)
		}
	})
}

// FuzzStepsEnvRefusal puts an env entry that checkEnv refuses into a
// valid steps document, anywhere among valid steps and whatever the
// other fields hold. Property: a refusal stays a refusal: ParseSteps
// refuses the document, naming the variable, as JSON and as the bare
// list; and the same document without that entry is accepted when its
// steps are otherwise valid.
func FuzzStepsEnvRefusal(f *testing.F) {
	f.Add("make", "build", "A=B", "c", "GOFLAGS", "-mod=mod", uint8(0), uint8(1))
	f.Add("x", "", "", "v", "PATH", "/bin", uint8(1), uint8(2))
	f.Add("x", "s", "K", "a\x00b", "NODE_OPTIONS", "--require x", uint8(2), uint8(0))
	f.Add("x", "s", "K\x00", "b", "K", "", uint8(3), uint8(3))
	f.Fuzz(func(t *testing.T, run, name, badKey, badVal, okKey, okVal string, at, n uint8) {
		if checkEnv(badKey, badVal) == nil {
			badKey += "="
		}
		count := int(n%4) + 1
		var steps []map[string]any
		for i := 0; i < count; i++ {
			s := map[string]any{"run": "true"}
			if i == int(at)%count {
				env := map[string]string{badKey: badVal}
				if okKey != badKey {
					env[okKey] = okVal
				}
				s = map[string]any{"run": run, "name": name, "env": env}
			}
			steps = append(steps, s)
		}
		doc, _ := json.Marshal(map[string]any{"steps": steps})
		list, _ := json.Marshal(steps)
		for _, d := range [][]byte{doc, list} {
			if got, err := ParseSteps(d); err == nil {
				t.Fatalf("a refused entry %q=%q accepted: %+v\n%s", badKey, badVal, got, d)
			}
		}
		// Without the entry, the refusal goes if nothing else is wrong.
		s := steps[int(at)%count]
		env := maps.Clone(s["env"].(map[string]string))
		delete(env, badKey)
		s["env"] = env
		doc, _ = json.Marshal(map[string]any{"steps": steps})
		_, err := ParseSteps(doc)
		wantOK := strings.TrimSpace(run) != "" && !strings.ContainsRune(run, 0) && !strings.HasPrefix(name, "step ") && (len(env) == 0 || checkEnv(okKey, okVal) == nil)
		if wantOK && err != nil {
			t.Fatalf("without the refused entry: %v\n%s", err, doc)
		}
		if err != nil && strings.Contains(err.Error(), "environment variable") && len(env) == 0 {
			t.Fatalf("refused for an entry it no longer has: %v\n%s", err, doc)
		}
	})
}
