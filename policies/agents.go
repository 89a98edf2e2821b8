package policies

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/go-github/v60/github"
)

// MaxEventSize bounds an event payload (GitHub caps webhook payloads at
// 25 MB).
const MaxEventSize = 25 << 20

// Detection is whether a pull request is an agent's, and why.
type Detection struct {
	// Agent is true when one of the agents rules matched.
	Agent bool `json:"agent"`
	// Sandboxed is whether the job runs in the sandbox: always for agents,
	// for humans as agents.humans says.
	Sandboxed bool `json:"sandboxed"`
	// Reason names the rule that decided, with the matching value.
	Reason string `json:"reason"`
	// Author, HeadRef, BaseSHA, HeadSHA and Fork describe the pull
	// request as the event told it.
	Author  string `json:"author"`
	HeadRef string `json:"headRef"`
	BaseSHA string `json:"baseSha"`
	HeadSHA string `json:"headSha"`
	Number  int    `json:"number"`
	Fork    bool   `json:"fork"`
}

// PullRequest is what airlock needs of a pull request event.
type PullRequest struct {
	Author     string
	AuthorType string
	Labels     []string
	HeadRef    string
	BaseSHA    string
	HeadSHA    string
	Number     int
	Fork       bool
}

// ErrNotPullRequest is an event of another kind (push, workflow_dispatch,
// ...): a well-formed payload without a pull request.
var ErrNotPullRequest = errors.New("event payload has no pull_request: airlock decides on pull_request and pull_request_target events")

// ParsePullRequest reads a pull_request or pull_request_target event
// payload (what a runner finds at GITHUB_EVENT_PATH).
func ParsePullRequest(payload []byte) (PullRequest, error) {
	var p PullRequest
	if len(payload) > MaxEventSize {
		return p, fmt.Errorf("event payload is %d bytes, at most %d", len(payload), MaxEventSize)
	}
	var ev github.PullRequestEvent
	if err := json.Unmarshal(payload, &ev); err != nil {
		return p, fmt.Errorf("event payload is not a GitHub event (JSON): %w", err)
	}
	pr := ev.GetPullRequest()
	if pr == nil {
		return p, ErrNotPullRequest
	}
	p = PullRequest{
		Author:     pr.GetUser().GetLogin(),
		AuthorType: pr.GetUser().GetType(),
		HeadRef:    pr.GetHead().GetRef(),
		BaseSHA:    pr.GetBase().GetSHA(),
		HeadSHA:    pr.GetHead().GetSHA(),
		Number:     pr.GetNumber(),
		Fork: pr.GetHead().GetRepo().GetFork() ||
			(pr.GetHead().GetRepo().GetFullName() != "" && pr.GetHead().GetRepo().GetFullName() != pr.GetBase().GetRepo().GetFullName()),
	}
	for _, l := range pr.Labels {
		p.Labels = append(p.Labels, l.GetName())
	}
	if p.Author == "" || p.BaseSHA == "" || p.HeadSHA == "" {
		return p, errors.New("event payload lacks the pull request's author, base or head commit")
	}
	return p, nil
}

// DetectAgent parses an event payload and applies the agents rules.
func DetectAgent(rules Agents, payload []byte) (Detection, error) {
	pr, err := ParsePullRequest(payload)
	if err != nil {
		return Detection{}, err
	}
	return Decide(rules, pr), nil
}

// Decide applies the agents rules to a pull request.
func Decide(rules Agents, pr PullRequest) Detection {
	d := Detection{Author: pr.Author, HeadRef: pr.HeadRef, BaseSHA: pr.BaseSHA, HeadSHA: pr.HeadSHA, Number: pr.Number, Fork: pr.Fork}
	switch {
	case slices.Contains(rules.Logins, d.Author):
		d.Agent, d.Reason = true, fmt.Sprintf("author %q is listed in agents.logins", d.Author)
	case rules.BotSuffix && strings.HasSuffix(d.Author, "[bot]"):
		d.Agent, d.Reason = true, fmt.Sprintf("author %q ends in [bot] (agents.botSuffix)", d.Author)
	case rules.BotSuffix && pr.AuthorType == "Bot":
		d.Agent, d.Reason = true, fmt.Sprintf("author %q is a GitHub bot account (agents.botSuffix)", d.Author)
	}
	if !d.Agent {
		for _, l := range pr.Labels {
			if slices.Contains(rules.Labels, l) {
				d.Agent, d.Reason = true, fmt.Sprintf("label %q is listed in agents.labels", l)
				break
			}
		}
	}
	if !d.Agent {
		for _, p := range rules.HeadBranchPrefixes {
			if p != "" && strings.HasPrefix(d.HeadRef, p) {
				d.Agent, d.Reason = true, fmt.Sprintf("head branch %q starts with %q (agents.headBranchPrefixes)", d.HeadRef, p)
				break
			}
		}
	}
	if d.Agent {
		d.Sandboxed = true
	} else {
		d.Sandboxed = rules.Humans == "sandbox"
		d.Reason = fmt.Sprintf("author %q matches no agents rule; humans' pull requests: %s", d.Author, rules.Humans)
	}
	if d.Fork {
		d.Reason += "; from a fork"
	}
	return d
}
