package attest

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/internal/testtool"
)

// chromium finds Debian's headless browser. CI installs it and sets
// AIRLOCK_REQUIRE_CHROMIUM, so there the test never skips.
func chromium(t *testing.T) string {
	t.Helper()
	return testtool.Path(t, testtool.Chromium, "the reviewer's HTML report is rendered in a real headless browser")
}

// headless runs chromium on a file:// page in a network namespace of its
// own (loopback only, down): a browser started by a test reaches no
// network, whatever it would fetch at start.
func headless(t *testing.T, browser string, args ...string) ([]byte, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := []string{"--net", browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", "--user-data-dir=" + t.TempDir()}
	cmd := exec.CommandContext(ctx, "unshare", append(base, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return stdout.Bytes(), time.Since(start)
}

// The reviewer's report in a real browser: the verdict and the one-line
// summary come first, then trust findings, egress (refused first),
// steps and processes, each step's processes collapsed; a report of
// 10,000 processes renders (DOM and screenshot) in a few seconds.
func TestReportInBrowser(t *testing.T) {
	browser := chromium(t)
	p := predicate(10000, 200, 3)
	t0 := p.Steps[0].Start
	p.Steps = []Step{
		{Name: "build", Status: "passed", Start: t0, End: t0.Add(4 * time.Second)},
		{Name: "test", Status: "failed", ExitCode: 1, Start: t0.Add(4 * time.Second), End: t0.Add(20 * time.Second)},
	}
	p.Egress.Mode = "audit"
	p.Egress.Summary = append(p.Egress.Summary, EgressSummary{Destination: "pypi.org:443", WouldDeny: 4})
	var page bytes.Buffer
	if err := WriteHTML(&page, &Verified{Predicate: p, Subject: SubjectInfo{Name: "repo", Digest: map[string]string{"gitCommit": commitA}}}, true, "signature verified with k.pub"); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(file, page.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	dom, took := headless(t, browser, "--dump-dom", "file://"+file)
	t.Logf("10,000 processes: %d bytes of HTML, DOM dumped in %v", page.Len(), took)
	text := string(dom)
	order := []string{`id="verdict"`, `id="summary"`, `id="trust"`, `id="egress"`, `id="steps"`, `id="processes"`}
	last := -1
	for _, id := range order {
		i := strings.Index(text, id)
		if i < 0 || i < last {
			t.Fatalf("section %s missing or out of order (%v)", id, order)
		}
		last = i
	}
	for _, want := range []string{"agent work (author Copilot is a bot)", "2 step(s): 1 passed, 1 failed", "egress: 20 denied, 4 would-deny (audit)", "trust: 3 finding(s), strongest action readonly", "signature verified with k.pub",
		"build: 4001 process(es)", "test: 5999 process(es)"} {
		if !strings.Contains(text, want) {
			t.Errorf("the rendered page lacks %q", want)
		}
	}
	if strings.Index(text, "evil.test:443") > strings.Index(text, "pypi.org:443") || strings.Index(text, "pypi.org:443") > strings.Index(text, "host1.example.com:443") {
		t.Error("egress is not ordered denied, would-deny, allowed")
	}
	if strings.Contains(text, "<details class=\"step\" open") || strings.Contains(text, "<script") {
		t.Error("the process trees are not collapsed, or the page has a script")
	}
	if took > 20*time.Second {
		t.Errorf("rendering 10,000 processes took %v", took)
	}
	shot := filepath.Join(t.TempDir(), "report.png")
	headless(t, browser, "--screenshot="+shot, "--window-size=1280,2000", "file://"+file)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil || img.Bounds().Dx() != 1280 {
		t.Fatalf("screenshot: %v %v", err, img)
	}
}

// A pull request's page in a real browser: the jobs' table first (each
// job's verdict, a job whose bundle did not verify marked so, the same
// summary line as the single-job page), then each job's report,
// collapsed, with the single-job page's sections under ids of its own.
func TestPullRequestReportInBrowser(t *testing.T) {
	browser := chromium(t)
	passed, failed := predicate(300, 20, 1), predicate(200, 5, 2)
	failed.Verdict.Passed, failed.Verdict.ExitCode = false, 2
	subject := SubjectInfo{Name: "https://github.com/octo-org/widgets", Digest: map[string]string{"gitCommit": commitA}}
	jobs := []JobPage{
		{Tag: "octo-org_widgets.pr42.0123456789ab.r88-1.build.aaaaaaaaaaaa.att", Ref: "reg/a@sha256:1", V: &Verified{Predicate: passed, Subject: subject}, Verified: true, Status: "signature verified"},
		{Tag: "octo-org_widgets.pr42.0123456789ab.r88-1.test.bbbbbbbbbbbb.att", Ref: "reg/a@sha256:2", V: &Verified{Predicate: failed, Subject: subject}, Verified: true, Status: "signature verified"},
		{Tag: "octo-org_widgets.pr42.0123456789ab.r89-1.lint.cccccccccccc.att", Ref: "reg/a@sha256:3", Error: "not verified: signature does not match"},
	}
	var page bytes.Buffer
	if err := WritePullRequestHTML(&page, "airlock: pull request #42 of octo-org/widgets", jobs); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "pr.html")
	os.WriteFile(file, page.Bytes(), 0o644)
	dom, _ := headless(t, browser, "--dump-dom", "file://"+file)
	text := string(dom)
	order := []string{`id="title"`, `id="verdicts"`, `id="jobs"`, `id="job1-verdict"`, `id="job1-processes"`, `id="job2-verdict"`, `id="job2-trust"`}
	last := -1
	for _, id := range order {
		i := strings.Index(text, id)
		if i < 0 || i < last {
			t.Fatalf("section %s missing or out of order (%v)", id, order)
		}
		last = i
	}
	for _, want := range []string{"3 job(s)</strong>: 1 passed, 1 failed, 1 not verified", "NOT VERIFIED: not verified: signature does not match",
		"octo-org_widgets.pr42.0123456789ab.r89-1.lint.cccccccccccc.att", "egress: 2 denied, 0 would-deny · trust: 1 finding(s)", "egress: 0 denied, 0 would-deny · trust: 2 finding(s)", "FAILED</strong> (exit 2)"} {
		if !strings.Contains(text, want) {
			t.Errorf("the rendered page lacks %q", want)
		}
	}
	if strings.Contains(text, `id="job3-`) || strings.Contains(text, "<script") {
		t.Error("a job that did not verify has a report, or the page has a script")
	}
	shot := filepath.Join(t.TempDir(), "pr.png")
	headless(t, browser, "--screenshot="+shot, "--window-size=1280,1200", "file://"+file)
	if f, err := os.Open(shot); err != nil {
		t.Fatalf("no screenshot: %v", err)
	} else if img, err := png.Decode(f); err != nil || img.Bounds().Dx() != 1280 {
		t.Fatalf("screenshot: %v", err)
	}
}
