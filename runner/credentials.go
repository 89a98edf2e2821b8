package runner

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/files"
	"github.com/airlock-ci/airlock/runner/credentials"
)

// A job's credentials stay out of its sandbox (runner/credentials): the
// session gives every environment it hands the sandbox (the job's, each
// step's, each container's) to the job's vault first, which puts
// placeholders in place of the credentials and learns where they go; the
// egress gateway puts them back on the way out. What the job masks
// (::add-mask::) and every withheld value are redacted from the result
// before anything is recorded or signed.

// withholdList is Vault.Withhold for a KEY=VALUE list, order kept.
func withholdList(v *credentials.Vault, env []string) []string {
	if v == nil || len(env) == 0 {
		return env
	}
	m := map[string]string{}
	for _, kv := range env {
		k, val, _ := strings.Cut(kv, "=")
		m[k] = val
	}
	m = v.Withhold(m)
	out := make([]string, len(env))
	for i, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		out[i] = k + "=" + m[k]
	}
	return out
}

// maxMaskLine bounds the line a maskWatcher keeps looking at: a longer
// one is no workflow command.
const maxMaskLine = 64 << 10

// maskWatcher passes a step's output through and tells the vault every
// value the step masks with the workflow command ::add-mask::, so that
// airlock redacts it from what it records and signs as the runner does
// from the log.
type maskWatcher struct {
	w     io.Writer
	vault *credentials.Vault
	mu    sync.Mutex
	line  []byte
	long  bool // the current line passed maxMaskLine
}

func (m *maskWatcher) Write(p []byte) (int, error) {
	m.mu.Lock()
	for rest := p; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		chunk := rest
		if i >= 0 {
			chunk = rest[:i]
		}
		if !m.long {
			if len(m.line)+len(chunk) > maxMaskLine {
				m.long, m.line = true, m.line[:0]
			} else {
				m.line = append(m.line, chunk...)
			}
		}
		if i < 0 {
			break
		}
		if !m.long {
			if v, ok := strings.CutPrefix(strings.TrimRight(string(m.line), "\r"), "::add-mask::"); ok {
				m.vault.Mask(strings.TrimSpace(v))
			}
		}
		m.line, m.long = m.line[:0], false
		rest = rest[i+1:]
	}
	m.mu.Unlock()
	return m.w.Write(p)
}

// redact blanks withheld and masked values in what a result records of
// the job's own making: argv and binaries of its processes, paths of its
// requests, steps' messages.
func redact(res *Result, v *credentials.Vault) {
	if v == nil {
		return
	}
	for i := range res.Processes.Execs {
		x := &res.Processes.Execs[i]
		x.Binary = v.Redact(x.Binary)
		for j := range x.Argv {
			x.Argv[j] = v.Redact(x.Argv[j])
		}
	}
	for i := range res.Processes.WritesRefused {
		res.Processes.WritesRefused[i].Path = v.Redact(res.Processes.WritesRefused[i].Path)
	}
	if res.Egress != nil {
		for i := range res.Egress.Decisions {
			d := &res.Egress.Decisions[i]
			d.Path, d.Name = v.Redact(d.Path), v.Redact(d.Name)
		}
	}
	for i := range res.Steps {
		res.Steps[i].Message = v.Redact(res.Steps[i].Message)
	}
	rec := v.Record()
	res.Credentials = &rec
}

// Bounds of what gitConfigView reads.
const (
	maxGitConfig     = 1 << 20
	maxCheckoutCreds = 64 << 10
)

// checkoutCredentials is the include line actions/checkout v6 adds to
// .git/config for its credentials file in $RUNNER_TEMP
// (src/git-auth-helper.ts: git-credentials-<uuid>.config).
var checkoutCredentials = regexp.MustCompile(`(?m)^[ \t]*path[ \t]*=[ \t]*(/[^\n]*/git-credentials-[0-9a-fA-F-]+\.config)[ \t]*$`)

// gitConfigView gives the sandbox a view of the repository's
// .git/config (repo is relative to the workspace) in which the token
// actions/checkout persisted is its placeholder: when checkout ran on the
// host before airlock (airlock run, the composite action), v4 and v5 left
// the job's token in .git/config itself, and v6 in a file of $RUNNER_TEMP
// that .git/config includes (which the sandbox does not see: its
// rewritten content is appended to the view). The host's files are never
// changed; the view is read-only, so a job cannot write the repository's
// git config (git config --global still works). dir is where the view is
// written. ok is false when there is nothing to hide.
func gitConfigView(v *credentials.Vault, workspace, repo, dir string) (view gvisor.View, ok bool, err error) {
	rel := filepath.Join(repo, ".git", "config")
	b, err := readBeneath(workspace, filepath.Join(workspace, rel), maxGitConfig)
	if err != nil {
		return view, false, nil // no repository (yet), or not one to read
	}
	text := string(b)
	out := v.WithholdGitConfig(text, ".git/config")
	for _, m := range checkoutCredentials.FindAllStringSubmatch(text, -1) {
		fi, err := os.Lstat(m[1])
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		inc, err := files.ReadCapped(m[1], maxCheckoutCreds)
		if err != nil {
			continue
		}
		if rewritten := v.WithholdGitConfig(string(inc), filepath.Base(m[1])); rewritten != string(inc) {
			out += fmt.Sprintf("\n# airlock: actions/checkout's credentials (%s), the token replaced by its placeholder\n%s", filepath.Base(m[1]), rewritten)
		}
	}
	if out == text {
		return view, false, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return view, false, fmt.Errorf("git config view: %w", err)
	}
	f, err := os.CreateTemp(dir, "git-config-view-")
	if err != nil {
		return view, false, fmt.Errorf("git config view: %w", err)
	}
	_, werr := f.WriteString(out)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(f.Name(), 0o644)
	}
	if werr != nil {
		os.Remove(f.Name())
		return view, false, fmt.Errorf("git config view: %w", werr)
	}
	return gvisor.View{Path: rel, Source: f.Name()}, true, nil
}

// readBeneath reads the regular file p below base, no symlink followed,
// at most limit bytes.
func readBeneath(base, p string, limit int64) ([]byte, error) {
	f, err := files.OpenBeneath(base, p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	return files.ReadCapped(files.FDPath(f), limit)
}
