package policies

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"golang.org/x/tools/txtar"
)

// Policy test cases live beside the policies as txtar archives:
//
//	# what the case checks
//	-- org/base.cue --          organisation files (any number, under org/)
//	-- .github/airlock.cue --   the repository policy (optional)
//	-- event.json --            a pull request event (optional)
//	-- want.json --             expected values: a subset of the effective policy
//	-- want-agent --            "true" or "false" (with event.json)
//	-- want-error --            substrings the error must contain, one per line
//
// A case expects either want-error or success (with want.json and/or
// want-agent checked when present).

// TestResult is the outcome of one case.
type TestResult struct {
	Name   string
	Failed bool
	Reason string
}

// RunTests runs every *.txtar case in dir and writes one line per case
// and a summary ("N passed, N failed") to w.
func RunTests(ctx context.Context, dir string, w io.Writer) ([]TestResult, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.txtar"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no policy test cases (*.txtar) in %s", dir)
	}
	sort.Strings(files)
	var results []TestResult
	passed, failed := 0, 0
	for _, f := range files {
		r := runCase(ctx, f)
		results = append(results, r)
		if r.Failed {
			failed++
			fmt.Fprintf(w, "FAIL %s: %s\n", r.Name, r.Reason)
		} else {
			passed++
			fmt.Fprintf(w, "PASS %s\n", r.Name)
		}
	}
	fmt.Fprintf(w, "%d passed, %d failed\n", passed, failed)
	return results, nil
}

func runCase(ctx context.Context, file string) TestResult {
	r := TestResult{Name: filepath.Base(file)}
	fail := func(format string, args ...any) TestResult {
		r.Failed, r.Reason = true, fmt.Sprintf(format, args...)
		return r
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return fail("%v", err)
	}
	ar := txtar.Parse(data)
	var srcs []Source
	var event, want, wantAgent, wantErr []byte
	for _, f := range ar.Files {
		switch {
		case strings.HasPrefix(f.Name, "org/") && strings.HasSuffix(f.Name, ".cue"):
			srcs = append(srcs, Source{Kind: KindOrg, Path: f.Name, Data: f.Data})
		case f.Name == RepoPolicyPath:
			srcs = append(srcs, Source{Kind: KindRepo, Path: f.Name, Data: f.Data})
		case f.Name == "event.json":
			event = f.Data
		case f.Name == "want.json":
			want = f.Data
		case f.Name == "want-agent":
			wantAgent = bytes.TrimSpace(f.Data)
		case f.Name == "want-error":
			wantErr = f.Data
		default:
			return fail("unknown section %q (want org/*.cue, %s, event.json, want.json, want-agent, want-error)", f.Name, RepoPolicyPath)
		}
	}
	// Organisation files first, then the repository's, as airlock does.
	sort.SliceStable(srcs, func(i, j int) bool { return srcs[i].Kind == KindOrg && srcs[j].Kind != KindOrg })
	eff, err := Load(ctx, srcs)
	if wantErr != nil {
		if err == nil {
			return fail("loaded, want an error")
		}
		for _, line := range strings.Split(strings.TrimSpace(string(wantErr)), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.Contains(err.Error(), line) {
				return fail("error lacks %q: %v", line, err)
			}
		}
		return r
	}
	if err != nil {
		return fail("%v", err)
	}
	if want != nil {
		var got, exp any
		b, _ := json.Marshal(eff.Policy)
		json.Unmarshal(b, &got)
		if err := json.Unmarshal(want, &exp); err != nil {
			return fail("want.json: %v", err)
		}
		if path, ok := subset(exp, got, ""); !ok {
			return fail("effective policy differs at %s", path)
		}
	}
	if wantAgent != nil {
		if event == nil {
			return fail("want-agent needs event.json")
		}
		d, err := DetectAgent(eff.Policy.Agents, event)
		if err != nil {
			return fail("event.json: %v", err)
		}
		if fmt.Sprint(d.Agent) != string(wantAgent) {
			return fail("agent = %v (%s), want %s", d.Agent, d.Reason, wantAgent)
		}
	}
	return r
}

// subset reports whether every value in want is equal in got (objects may
// leave keys out, at any depth; lists must have the same length), and the
// first path where it is not.
func subset(want, got any, path string) (string, bool) {
	if wl, ok := want.([]any); ok {
		gl, ok := got.([]any)
		if !ok || len(gl) != len(wl) {
			return path, false
		}
		for i := range wl {
			if p, ok := subset(wl[i], gl[i], fmt.Sprintf("%s.%d", path, i)); !ok {
				return p, false
			}
		}
		return path, true
	}
	wm, ok := want.(map[string]any)
	if !ok {
		return path, reflect.DeepEqual(want, got)
	}
	gm, ok := got.(map[string]any)
	if !ok {
		return path, false
	}
	keys := make([]string, 0, len(wm))
	for k := range wm {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if p, ok := subset(wm[k], gm[k], strings.TrimPrefix(path+"."+k, ".")); !ok {
			return p, false
		}
	}
	return path, true
}
