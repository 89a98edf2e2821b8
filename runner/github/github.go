// Package github is airlock's GitHub API client: go-github v60 over
// go-retryablehttp. It reads what an event payload lacks (pull request
// details, changed files, the policy file at the base commit) and reports
// a job as a check run with its trust findings as annotations.
//
// The API is never on a job's critical path: every call has a deadline,
// retries are bounded, and errors are returned for the caller to report,
// not to fail the job with. Tokens never reach a log or an error.
//
// Layer 1: imports nothing of airlock's: it speaks GitHub's shapes (TreeFile,
// Report), and its callers (runner/hook) convert them.
package github

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	gh "github.com/google/go-github/v60/github"
	"github.com/hashicorp/go-retryablehttp"
)

// Options configures a Client. Give a Token, or an App (ID, installation
// and private key): its installation tokens are made and refreshed before
// they expire.
type Options struct {
	// BaseURL is the API root (tests, GitHub Enterprise); default
	// https://api.github.com/.
	BaseURL string
	Token   string
	App     *App
	// Log receives retries and rate-limit waits (never a token).
	Log *slog.Logger
	// RetryMax bounds retries per request (4); RetryWaitMax bounds one
	// wait (60 s), Retry-After included.
	RetryMax     int
	RetryWaitMax time.Duration
	// CallTimeout bounds one API call with its retries (2 min).
	CallTimeout time.Duration
}

// App is a GitHub App installation.
type App struct {
	ID             int64
	InstallationID int64
	PrivateKey     []byte // PEM
}

// Client talks to the GitHub API.
type Client struct {
	gh      *gh.Client
	timeout time.Duration
}

// New returns a client.
func New(o Options) (*Client, error) {
	if o.RetryMax == 0 {
		o.RetryMax = 4
	}
	if o.RetryWaitMax == 0 {
		o.RetryWaitMax = time.Minute
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = 2 * time.Minute
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	rc := retryablehttp.NewClient()
	rc.RetryMax = o.RetryMax
	rc.RetryWaitMin = 500 * time.Millisecond
	rc.RetryWaitMax = o.RetryWaitMax
	rc.CheckRetry = checkRetry
	rc.Backoff = backoff
	rc.ErrorHandler = retryablehttp.PassthroughErrorHandler
	// retryablehttp's own logger prints URLs; ours prints only what we
	// choose (method, path, status, wait).
	rc.Logger = nil
	rc.RequestLogHook = func(_ retryablehttp.Logger, r *http.Request, attempt int) {
		if attempt > 0 {
			o.Log.Info("github: retrying", "method", r.Method, "path", r.URL.Path, "attempt", attempt)
		}
	}
	rc.HTTPClient.Timeout = 30 * time.Second
	var tr http.RoundTripper = &retryablehttp.RoundTripper{Client: rc}
	base := strings.TrimSuffix(o.BaseURL, "/")
	switch {
	case o.App != nil:
		it, err := ghinstallation.New(tr, o.App.ID, o.App.InstallationID, o.App.PrivateKey)
		if err != nil {
			return nil, fmt.Errorf("github: app key: %w", err)
		}
		if base != "" {
			it.BaseURL = base
		}
		tr = it
	case o.Token != "":
		tr = &tokenTransport{token: o.Token, next: tr}
	default:
		return nil, errors.New("github: no credentials: set GITHUB_TOKEN or a GitHub App")
	}
	c := gh.NewClient(&http.Client{Transport: tr})
	if base != "" {
		var err error
		if c, err = c.WithEnterpriseURLs(base+"/", base+"/"); err != nil {
			return nil, fmt.Errorf("github: base URL: %w", err)
		}
		// WithEnterpriseURLs adds /api/v3/ for GHES; a plain base (tests)
		// keeps its path.
		c.BaseURL.Path = strings.TrimSuffix(c.BaseURL.Path, "api/v3/")
	}
	return &Client{gh: c, timeout: o.CallTimeout}, nil
}

// tokenTransport adds the token to every request.
type tokenTransport struct {
	token string
	next  http.RoundTripper
}

func (t *tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.token)
	return t.next.RoundTrip(r)
}

// checkRetry retries server errors, 429, and the 403 of a secondary rate
// limit; nothing else.
func checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if err != nil {
		return true, nil // connection trouble
	}
	switch {
	case resp.StatusCode >= 500, resp.StatusCode == http.StatusTooManyRequests:
		return true, nil
	case resp.StatusCode == http.StatusForbidden && rateLimited(resp):
		return true, nil
	}
	return false, nil
}

// rateLimited reports a rate-limit 403: a secondary limit (Retry-After)
// or the primary one exhausted.
func rateLimited(resp *http.Response) bool {
	return resp.Header.Get("Retry-After") != "" || resp.Header.Get("X-Ratelimit-Remaining") == "0"
}

// backoff honours Retry-After and the primary limit's reset, else backs
// off exponentially; always within max.
func backoff(min, max time.Duration, attempt int, resp *http.Response) time.Duration {
	if resp != nil {
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
			return clamp(time.Duration(s)*time.Second, max)
		}
		if resp.Header.Get("X-Ratelimit-Remaining") == "0" {
			if reset, err := strconv.ParseInt(resp.Header.Get("X-Ratelimit-Reset"), 10, 64); err == nil {
				return clamp(time.Until(time.Unix(reset, 0))+time.Second, max)
			}
		}
	}
	return retryablehttp.DefaultBackoff(min, max, attempt, resp)
}

func clamp(d, max time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	if d > max {
		return max
	}
	return d
}

// call bounds one API call with the client's deadline.
func (c *Client) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

// explain says, of a call that ran out of its deadline (ctx is the
// call's), that the API did not answer in time, rather than only
// "context deadline exceeded".
func (c *Client) explain(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %s, retries included (GitHub's API is down or unreachable from this runner): %w", c.timeout, err)
	}
	return err
}

// PullRequest is what airlock needs of a pull request.
type PullRequest struct {
	Number         int
	Author         string
	AuthorType     string
	BaseSHA        string
	HeadSHA        string
	Labels         []string
	Files          []ChangedFile
	FilesTruncated bool
}

// ChangedFile is one file a pull request changes.
type ChangedFile struct {
	Path string
	// Previous is the old path of a renamed or copied file.
	Previous string
	// Status as GitHub says it: added, removed, modified, renamed,
	// copied, changed or unchanged.
	Status string
}

// maxFiles bounds the changed files read (GitHub lists 3,000 at most).
const maxFiles = 3000

// GetPullRequest reads a pull request and its changed files.
func (c *Client) GetPullRequest(ctx context.Context, owner, repo string, number int) (PullRequest, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	pr, _, err := c.gh.PullRequests.Get(ctx, owner, repo, number)
	if err != nil {
		return PullRequest{}, fmt.Errorf("github: pull request %s/%s#%d: %w", owner, repo, number, c.explain(ctx, err))
	}
	out := PullRequest{Number: number, Author: pr.GetUser().GetLogin(), AuthorType: pr.GetUser().GetType(), BaseSHA: pr.GetBase().GetSHA(), HeadSHA: pr.GetHead().GetSHA()}
	for _, l := range pr.Labels {
		out.Labels = append(out.Labels, l.GetName())
	}
	out.Files, out.FilesTruncated, err = c.listFiles(ctx, owner, repo, number)
	return out, err
}

func (c *Client) listFiles(ctx context.Context, owner, repo string, number int) ([]ChangedFile, bool, error) {
	var out []ChangedFile
	opts := &gh.ListOptions{PerPage: 100}
	for {
		files, resp, err := c.gh.PullRequests.ListFiles(ctx, owner, repo, number, opts)
		if err != nil {
			return out, false, fmt.Errorf("github: files of %s/%s#%d: %w", owner, repo, number, c.explain(ctx, err))
		}
		for _, f := range files {
			out = append(out, ChangedFile{Path: f.GetFilename(), Previous: f.GetPreviousFilename(), Status: f.GetStatus()})
		}
		if resp.NextPage == 0 {
			return out, false, nil
		}
		if len(out) >= maxFiles {
			return out, true, nil
		}
		opts.Page = resp.NextPage
	}
}

// maxFile bounds a file read through the contents API.
const maxFile = 1 << 20

// FileAtRef reads a file at a commit through the contents API (for the
// policy at the base commit when the workspace lacks its objects). A
// missing file is (nil, nil).
func (c *Client) FileAtRef(ctx context.Context, owner, repo, path, ref string) ([]byte, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	fc, _, resp, err := c.gh.Repositories.GetContents(ctx, owner, repo, path, &gh.RepositoryContentGetOptions{Ref: ref})
	if resp != nil && resp.StatusCode == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("github: %s at %.12s: %w", path, ref, c.explain(ctx, err))
	}
	if fc == nil || fc.GetType() != "file" {
		return nil, fmt.Errorf("github: %s at %.12s is not a file (a symlink or directory is refused)", path, ref)
	}
	if fc.GetSize() > maxFile {
		return nil, fmt.Errorf("github: %s at %.12s is %d bytes, more than %d", path, ref, fc.GetSize(), maxFile)
	}
	// GetContent decodes the base64 the API sends.
	content, err := fc.GetContent()
	if err != nil {
		return nil, fmt.Errorf("github: %s at %.12s: %w", path, ref, c.explain(ctx, err))
	}
	if len(content) > maxFile {
		return nil, fmt.Errorf("github: %s at %.12s is larger than %d bytes", path, ref, maxFile)
	}
	return []byte(content), nil
}

// MergeBase is the merge base of two commits (what a pull request's
// changes are measured from; its base branch may have moved on).
func (c *Client) MergeBase(ctx context.Context, owner, repo, base, head string) (string, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	// One commit per page: only the merge base is wanted.
	cmp, _, err := c.gh.Repositories.CompareCommits(ctx, owner, repo, base, head, &gh.ListOptions{PerPage: 1})
	if err != nil {
		return "", fmt.Errorf("github: compare %.12s...%.12s: %w", base, head, c.explain(ctx, err))
	}
	sha := cmp.GetMergeBaseCommit().GetSHA()
	if sha == "" {
		return "", fmt.Errorf("github: compare %.12s...%.12s: no merge base", base, head)
	}
	return sha, nil
}

// TreeFile is a file (blob) of a commit's tree.
type TreeFile struct {
	Path, Mode, SHA string
	Size            int64
}

// Tree lists the files of a commit (recursively; blobs and submodules). GitHub
// lists at most 100,000 entries: truncated says it stopped.
func (c *Client) Tree(ctx context.Context, owner, repo, commit string) ([]TreeFile, bool, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	t, _, err := c.gh.Git.GetTree(ctx, owner, repo, commit, true)
	if err != nil {
		return nil, false, fmt.Errorf("github: tree of %.12s: %w", commit, c.explain(ctx, err))
	}
	var out []TreeFile
	for _, e := range t.Entries {
		// Files, and submodules (their commits): where a worktree has
		// another repository's files.
		if e.GetType() == "blob" || e.GetType() == "commit" {
			out = append(out, TreeFile{Path: e.GetPath(), Mode: e.GetMode(), SHA: e.GetSHA(), Size: int64(e.GetSize())})
		}
	}
	return out, t.GetTruncated(), nil
}

// Blob reads a file's bytes by its object id, up to maxFile bytes.
func (c *Client) Blob(ctx context.Context, owner, repo, sha string) ([]byte, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	b, _, err := c.gh.Git.GetBlobRaw(ctx, owner, repo, sha)
	if err != nil {
		return nil, fmt.Errorf("github: blob %.12s: %w", sha, c.explain(ctx, err))
	}
	if len(b) > maxFile {
		return nil, fmt.Errorf("github: blob %.12s is larger than %d bytes", sha, maxFile)
	}
	return b, nil
}
