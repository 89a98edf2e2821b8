package github

import (
	"context"
	"fmt"
	"time"

	gh "github.com/google/go-github/v60/github"

	"github.com/airlock-ci/airlock/internal/textsafe"
)

// CheckName is the check run airlock reports as.
const CheckName = "airlock"

// maxAnnotations is how many annotations GitHub takes per request.
const maxAnnotations = 50

// Annotation is one line-level note on the pull request's files.
type Annotation struct {
	Path    string
	Line    int
	Level   string // notice, warning or failure
	Title   string
	Message string
}

// Report is a completed check run.
type Report struct {
	// Conclusion: success, failure, cancelled, timed_out or neutral.
	Conclusion  string
	Title       string
	Summary     string // Markdown
	Text        string // Markdown: attestation digest, egress summary
	Annotations []Annotation
}

// maxSummary is GitHub's limit on a check run's summary and text.
const maxSummary = 65535

// StartCheck creates the check run on the head commit, in progress.
func (c *Client) StartCheck(ctx context.Context, owner, repo, headSHA string) (int64, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	run, _, err := c.gh.Checks.CreateCheckRun(ctx, owner, repo, gh.CreateCheckRunOptions{
		Name: CheckName, HeadSHA: headSHA, Status: gh.String("in_progress"), StartedAt: &gh.Timestamp{Time: time.Now()},
	})
	if err != nil {
		return 0, fmt.Errorf("github: create check run on %.12s: %w", headSHA, c.explain(ctx, err))
	}
	return run.GetID(), nil
}

// CompleteCheck completes the check run with the report. Annotations go
// in batches of 50 (GitHub's limit per request): the first batch with the
// conclusion, the rest as updates to the output.
func (c *Client) CompleteCheck(ctx context.Context, owner, repo string, id int64, r Report) error {
	ctx, cancel := c.call(ctx)
	defer cancel()
	batches := batch(r.Annotations)
	out := func(anns []*gh.CheckRunAnnotation) *gh.CheckRunOutput {
		return &gh.CheckRunOutput{Title: gh.String(r.Title), Summary: gh.String(textsafe.Clip(r.Summary, maxSummary-20, "\n\n(cut)")), Text: gh.String(textsafe.Clip(r.Text, maxSummary-20, "\n\n(cut)")), Annotations: anns}
	}
	first := []*gh.CheckRunAnnotation{}
	if len(batches) > 0 {
		first = batches[0]
	}
	_, _, err := c.gh.Checks.UpdateCheckRun(ctx, owner, repo, id, gh.UpdateCheckRunOptions{
		Name: CheckName, Status: gh.String("completed"), Conclusion: gh.String(r.Conclusion),
		CompletedAt: &gh.Timestamp{Time: time.Now()}, Output: out(first),
	})
	if err != nil {
		return fmt.Errorf("github: complete check run %d: %w", id, c.explain(ctx, err))
	}
	for i, b := range batches[min(1, len(batches)):] {
		if _, _, err := c.gh.Checks.UpdateCheckRun(ctx, owner, repo, id, gh.UpdateCheckRunOptions{Name: CheckName, Output: out(b)}); err != nil {
			return fmt.Errorf("github: annotations batch %d of check run %d: %w", i+2, id, c.explain(ctx, err))
		}
	}
	return nil
}

func batch(anns []Annotation) [][]*gh.CheckRunAnnotation {
	var out [][]*gh.CheckRunAnnotation
	for i := 0; i < len(anns); i += maxAnnotations {
		var b []*gh.CheckRunAnnotation
		for _, a := range anns[i:min(i+maxAnnotations, len(anns))] {
			line := max(a.Line, 1)
			b = append(b, &gh.CheckRunAnnotation{
				Path: gh.String(a.Path), StartLine: gh.Int(line), EndLine: gh.Int(line),
				AnnotationLevel: gh.String(a.Level), Title: gh.String(a.Title), Message: gh.String(a.Message),
			})
		}
		out = append(out, b)
	}
	return out
}
