package policies

import (
	"context"
	"os"
	"strings"
	"testing"
)

func TestDetectAgent(t *testing.T) {
	eff, err := Load(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	noHumans := eff.Policy.Agents
	noHumans.Humans = "none"
	for _, tc := range []struct {
		event      string
		rules      *Agents
		agent      bool
		sandboxed  bool
		reasonHas  string
		fork       bool
		wantErrHas string
	}{
		{event: "pr-opened-by-copilot.json", agent: true, sandboxed: true, reasonHas: `author "Copilot" is listed`},
		{event: "pr-opened-by-bot-suffix.json", agent: true, sandboxed: true, reasonHas: "ends in [bot]"},
		{event: "pr-labeled-agent.json", agent: true, sandboxed: true, reasonHas: `label "ai-generated"`},
		{event: "pr-from-fork-codex-branch.json", agent: true, sandboxed: true, reasonHas: `starts with "codex/"`, fork: true},
		{event: "pr-opened-by-human.json", agent: false, sandboxed: true, reasonHas: "matches no agents rule"},
		{event: "pr-opened-by-human.json", rules: &noHumans, agent: false, sandboxed: false, reasonHas: "humans' pull requests: none"},
		{event: "push-event.json", wantErrHas: "no pull_request"},
	} {
		t.Run(tc.event, func(t *testing.T) {
			payload, err := os.ReadFile("../testdata/events/" + tc.event)
			if err != nil {
				t.Fatal(err)
			}
			rules := eff.Policy.Agents
			if tc.rules != nil {
				rules = *tc.rules
			}
			d, err := DetectAgent(rules, payload)
			if tc.wantErrHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrHas) {
					t.Fatalf("err = %v, want %q", err, tc.wantErrHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Agent != tc.agent || d.Sandboxed != tc.sandboxed || d.Fork != tc.fork || !strings.Contains(d.Reason, tc.reasonHas) {
				t.Errorf("detection = %+v", d)
			}
			if d.BaseSHA == "" || d.HeadSHA == "" || d.Number != 42 {
				t.Errorf("pull request facts missing: %+v", d)
			}
		})
	}
}

func TestDetectAgentBadPayloads(t *testing.T) {
	for _, tc := range []struct{ name, payload, want string }{
		{"not json", "\xff\x00{", "not a GitHub event"},
		{"empty object", "{}", "no pull_request"},
		{"no shas", `{"pull_request": {"user": {"login": "x"}}}`, "lacks"},
		{"huge", `{"x":"` + strings.Repeat("a", MaxEventSize) + `"}`, "at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DetectAgent(Agents{}, []byte(tc.payload)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
