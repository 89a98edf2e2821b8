package policies

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-github/v60/github"
)

// Fuzz targets for the pull request event payload (GITHUB_EVENT_PATH):
// GitHub writes it, but its strings (title, body, branch, labels, the
// fork's name) are the pull request author's, who may be the agent
// airlock is about. FuzzLoad (load_test.go) covers the policy text.

// eventSeeds are the test events of ../testdata/events and
// agents_test.go's bad payloads.
func eventSeeds(tb testing.TB) (prs [][]byte, all [][]byte) {
	files, _ := filepath.Glob("../testdata/events/*.json")
	if len(files) < 6 {
		tb.Fatalf("the test events: %v", files)
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := ParsePullRequest(b); err == nil {
			prs = append(prs, b)
		}
		all = append(all, b)
	}
	for _, s := range []string{"\xff\x00{", "{}", `{"pull_request": {"user": {"login": "x"}}}`,
		// Hostile: case-folded and repeated keys, nulls, other types.
		`{"pull_request": {"user": {"login": "human"}, "USER": {"login": "Copilot"}, "base": {"sha": "a"}, "head": {"sha": "b"}}}`,
		`{"pull_request": {"user": {"login": "a"}, "user": {"type": "Bot"}, "base": {"sha": "a"}, "head": {"sha": "b"}}}`,
		`{"pull_request": {"user": {"login": "a"}, "base": {"sha": "a"}, "head": {"sha": "b", "repo": {"fork": true}}, "labels": [null, {"name": 1}]}}`,
		`{"pull_request": {"user": {"login": "a\u0000[bot]"}, "base": {"sha": "\ud800"}, "head": {"sha": "b", "ref": "codex/\u202e"}, "number": 1e3}}`,
		`{"pull_request": null}`, `{"pull_request": 5}`, `[]`, `null`, `{"pull_request": {"created_at": "yesterday"}}`,
	} {
		all = append(all, []byte(s))
	}
	return prs, all
}

// defaultAgents are the schema's default agents rules.
func defaultAgents(tb testing.TB) Agents {
	eff, err := Load(context.Background(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	return eff.Policy.Agents
}

// jsonStrings are the string values (not the keys) and the numbers of a
// JSON document, in the decoder's forms (invalid UTF-8 replaced, as the
// struct decoder does).
func jsonStrings(b []byte) (strs map[string]bool, nums map[string]bool) {
	strs, nums = map[string]bool{}, map[string]bool{}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	// The containers open, and in an object whether a key comes next.
	type frame struct{ object, key bool }
	var stack []frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return strs, nums
		}
		isKey := len(stack) > 0 && stack[len(stack)-1].object && stack[len(stack)-1].key
		if len(stack) > 0 && stack[len(stack)-1].object {
			if _, end := tok.(json.Delim); !end || tok != json.Delim('}') {
				stack[len(stack)-1].key = !stack[len(stack)-1].key
			}
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				stack = append(stack, frame{object: true, key: true})
			case '[':
				stack = append(stack, frame{})
			default:
				stack = stack[:len(stack)-1]
			}
		case string:
			if !isKey {
				strs[v] = true
			}
		case json.Number:
			nums[v.String()] = true
		}
	}
}

// FuzzParsePullRequest feeds ParsePullRequest any bytes. Properties:
//   - a refusal says why: too large, not JSON, not a pull request event
//     (ErrNotPullRequest, which callers take for "no pull request"), or
//     no author, base or head;
//   - what it extracts is in the payload: the author, its type, the
//     head branch, the base and head commits and each label are string
//     values of the document, the number one of its numbers; author,
//     base and head are never empty;
//   - DetectAgent decides as Decide on what ParsePullRequest read, and
//     Decide follows the agents rules: an author listed or a bot
//     (name or account type) is an agent, and so is a pull request with
//     a listed label or a listed head branch prefix; an agent's job is
//     always sandboxed.
func FuzzParsePullRequest(f *testing.F) {
	_, all := eventSeeds(f)
	for _, b := range all {
		f.Add(b)
	}
	rules := defaultAgents(f)
	f.Fuzz(func(t *testing.T, payload []byte) {
		pr, err := ParsePullRequest(payload)
		if err != nil {
			msg := err.Error()
			if !errors.Is(err, ErrNotPullRequest) && !strings.HasPrefix(msg, "event payload is not a GitHub event (JSON): ") &&
				msg != "event payload lacks the pull request's author, base or head commit" && !strings.HasPrefix(msg, "event payload is ") {
				t.Fatalf("an error that says nothing of the event: %q", msg)
			}
			if errors.Is(err, ErrNotPullRequest) {
				// A well-formed event without a pull request: no
				// "pull_request" object in it.
				var ev github.PullRequestEvent
				if json.Unmarshal(payload, &ev) != nil || ev.PullRequest != nil {
					t.Fatalf("ErrNotPullRequest for %q", payload)
				}
			}
			if _, derr := DetectAgent(rules, payload); derr == nil || derr.Error() != msg {
				t.Fatalf("DetectAgent: %v, ParsePullRequest: %v", derr, err)
			}
			return
		}
		if pr.Author == "" || pr.BaseSHA == "" || pr.HeadSHA == "" {
			t.Fatalf("accepted without author, base or head: %+v", pr)
		}
		strs, nums := jsonStrings(payload)
		for what, v := range map[string]string{"author": pr.Author, "author type": pr.AuthorType, "head branch": pr.HeadRef, "base": pr.BaseSHA, "head": pr.HeadSHA} {
			if v != "" && !strs[v] {
				t.Fatalf("the %s %q is no string of the payload", what, v)
			}
		}
		for _, l := range pr.Labels {
			if l != "" && !strs[l] {
				t.Fatalf("the label %q is no string of the payload", l)
			}
		}
		if pr.Number != 0 {
			found := false
			for n := range nums {
				var x float64
				json.Unmarshal([]byte(n), &x)
				found = found || x == float64(pr.Number)
			}
			if !found {
				t.Fatalf("the number %d is not in the payload", pr.Number)
			}
		}
		d, err := DetectAgent(rules, payload)
		if err != nil || !reflect.DeepEqual(d, Decide(rules, pr)) {
			t.Fatalf("DetectAgent = %+v, %v; Decide = %+v", d, err, Decide(rules, pr))
		}
		agent := slices.Contains(rules.Logins, pr.Author) || (rules.BotSuffix && (strings.HasSuffix(pr.Author, "[bot]") || pr.AuthorType == "Bot"))
		for _, l := range pr.Labels {
			agent = agent || slices.Contains(rules.Labels, l)
		}
		for _, p := range rules.HeadBranchPrefixes {
			agent = agent || (p != "" && strings.HasPrefix(pr.HeadRef, p))
		}
		if d.Agent != agent || (d.Agent && !d.Sandboxed) || d.Author != pr.Author || d.BaseSHA != pr.BaseSHA || d.HeadSHA != pr.HeadSHA {
			t.Fatalf("Decide(%+v) = %+v, want agent %v", pr, d, agent)
		}
	})
}

// knownKeys are the JSON names of an event's and a pull request's fields
// (go-github's), which the decoder would read: a field a payload adds is
// unrelated when its name is none of these, in any case.
func knownKeys(types ...any) []string {
	var out []string
	for _, v := range types {
		rt := reflect.TypeOf(v)
		for i := 0; i < rt.NumField(); i++ {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			out = append(out, name, rt.Field(i).Name)
		}
	}
	return out
}

// FuzzPullRequestNoise takes a test event of a pull request and sets what
// its author controls (title, body, head branch, the fork's name, a
// label, and any unrelated field, at the top or in the pull request) to
// the fuzzer's strings. Properties:
//   - it still parses, with the same author, author type, base and head
//     commits, number and fork status: nothing the author writes moves
//     what airlock decides on;
//   - the head branch and labels are what was written;
//   - an agent by its author (listed, or a bot) stays one, for the same
//     reason; and with the branch as it was, an agent stays an agent
//     whatever label is added.
func FuzzPullRequestNoise(f *testing.F) {
	prs, _ := eventSeeds(f)
	f.Add(uint8(0), "Fix the flaky parser test", "", "copilot/fix-parser", "agent", "x", "y", false)
	f.Add(uint8(1), "\"}, \"user\": {\"login\": \"human\"}", "\x00\xff", "main", "", "USER", "human", true)
	f.Add(uint8(2), "t", "b", "codex/x", "ai-generated", "pull_request", "{}", false)
	f.Add(uint8(3), "<script>", "\u2028", "refs/heads/x", "\xed\xa0\x80", "sender", "Copilot", true)
	f.Add(uint8(4), "", "", "", "", "base", "", true)
	rules := defaultAgents(f)
	known := knownKeys(github.PullRequestEvent{}, github.PullRequest{})
	f.Fuzz(func(t *testing.T, which uint8, title, body, ref, label, key, val string, nested bool) {
		// As the JSON encoder writes them: each invalid byte a U+FFFD.
		title, body, ref, label, key, val = string([]rune(title)), string([]rune(body)), string([]rune(ref)), string([]rune(label)), string([]rune(key)), string([]rune(val))
		orig := prs[int(which)%len(prs)]
		before, err := ParsePullRequest(orig)
		if err != nil {
			t.Fatal(err)
		}
		var ev map[string]any
		if err := json.Unmarshal(orig, &ev); err != nil {
			t.Fatal(err)
		}
		pr := ev["pull_request"].(map[string]any)
		pr["title"], pr["body"] = title, body
		head := pr["head"].(map[string]any)
		head["ref"], head["label"] = ref, "acme:"+ref
		if repo, ok := head["repo"].(map[string]any); ok {
			repo["description"] = val
		}
		labels, _ := pr["labels"].([]any)
		pr["labels"] = append(slices.Clone(labels), map[string]any{"name": label, "description": val})
		unrelated := !slices.ContainsFunc(known, func(k string) bool { return k != "" && strings.EqualFold(k, key) })
		if unrelated {
			if nested {
				pr[key] = val
			} else {
				ev[key] = map[string]any{"login": val, "type": "Bot"}
			}
		}
		noisy, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		after, err := ParsePullRequest(noisy)
		if err != nil {
			t.Fatalf("the noised event does not parse: %v\n%s", err, noisy)
		}
		if after.Author != before.Author || after.AuthorType != before.AuthorType || after.BaseSHA != before.BaseSHA ||
			after.HeadSHA != before.HeadSHA || after.Number != before.Number || after.Fork != before.Fork {
			t.Fatalf("noise moved the pull request:\n got %+v\nwant %+v", after, before)
		}
		if after.HeadRef != ref || !slices.Equal(after.Labels, append(slices.Clone(before.Labels), label)) {
			t.Fatalf("head %q, labels %q; written %q, %q", after.HeadRef, after.Labels, ref, label)
		}
		d0, d1 := Decide(rules, before), Decide(rules, after)
		byAuthor := strings.HasPrefix(d0.Reason, "author ") && d0.Agent
		if byAuthor && (!d1.Agent || d1.Reason != d0.Reason) {
			t.Fatalf("an agent by its author is no longer one: %+v, was %+v", d1, d0)
		}
		sameBranch := after
		sameBranch.HeadRef = before.HeadRef
		if d2 := Decide(rules, sameBranch); d0.Agent && !d2.Agent {
			t.Fatalf("a label undid an agent: %+v, was %+v", d2, d0)
		}
	})
}
