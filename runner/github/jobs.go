package github

import (
	"context"
	"fmt"
	"slices"

	gh "github.com/google/go-github/v60/github"
)

// WorkflowJob is a job of a workflow run: which run and attempt, its
// name, how it ended, the labels it asked a runner for (runs-on) and the
// runner that took it.
type WorkflowJob struct {
	ID, RunID, RunAttempt int64
	Name, Workflow        string
	Status, Conclusion    string
	HeadSHA               string
	Labels                []string
	RunnerName            string
}

// maxRuns bounds the workflow runs PullRequestJobs reads: a pull request
// with more is read up to there.
const maxRuns = 1000

// PullRequestJobs lists the jobs of every workflow run of the pull
// request's commits, every attempt of each: the runs whose head is one
// of its commits and whose event is a pull request's (the API's
// pull_requests field is empty for a fork's runs, so the commits, not
// that field, find them).
func (c *Client) PullRequestJobs(ctx context.Context, owner, repo string, number int) ([]WorkflowJob, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	var shas []string
	opts := &gh.ListOptions{PerPage: 100}
	for {
		commits, resp, err := c.gh.PullRequests.ListCommits(ctx, owner, repo, number, opts)
		if err != nil {
			return nil, fmt.Errorf("github: commits of %s/%s#%d: %w", owner, repo, number, c.explain(ctx, err))
		}
		for _, cm := range commits {
			shas = append(shas, cm.GetSHA())
		}
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	var runs []*gh.WorkflowRun
	for _, sha := range shas {
		ro := &gh.ListWorkflowRunsOptions{HeadSHA: sha, ListOptions: gh.ListOptions{PerPage: 100}}
		for len(runs) < maxRuns {
			page, resp, err := c.gh.Actions.ListRepositoryWorkflowRuns(ctx, owner, repo, ro)
			if err != nil {
				return nil, fmt.Errorf("github: workflow runs of %s/%s at %s: %w", owner, repo, sha, c.explain(ctx, err))
			}
			for _, r := range page.WorkflowRuns {
				if slices.Contains([]string{"pull_request", "pull_request_target"}, r.GetEvent()) {
					runs = append(runs, r)
				}
			}
			if resp.NextPage == 0 {
				break
			}
			ro.Page = resp.NextPage
		}
	}
	var out []WorkflowJob
	for _, r := range runs {
		jo := &gh.ListWorkflowJobsOptions{Filter: "all", ListOptions: gh.ListOptions{PerPage: 100}}
		for {
			page, resp, err := c.gh.Actions.ListWorkflowJobs(ctx, owner, repo, r.GetID(), jo)
			if err != nil {
				return nil, fmt.Errorf("github: jobs of run %d: %w", r.GetID(), c.explain(ctx, err))
			}
			for _, j := range page.Jobs {
				out = append(out, WorkflowJob{
					ID: j.GetID(), RunID: j.GetRunID(), RunAttempt: j.GetRunAttempt(), Name: j.GetName(), Workflow: r.GetName(),
					Status: j.GetStatus(), Conclusion: j.GetConclusion(), HeadSHA: j.GetHeadSHA(), Labels: j.Labels, RunnerName: j.GetRunnerName(),
				})
			}
			if resp.NextPage == 0 {
				break
			}
			jo.Page = resp.NextPage
		}
	}
	return out, nil
}
