package runner

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"unicode"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/files"
	"github.com/airlock-ci/airlock/runner/credentials"
	"github.com/airlock-ci/airlock/runner/egress/rules"
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
			if v, ok := addMask(strings.TrimRight(string(m.line), "\r")); ok {
				m.vault.Mask(v)
			}
		}
		m.line, m.long = m.line[:0], false
		rest = rest[i+1:]
	}
	m.mu.Unlock()
	return m.w.Write(p)
}

// addMask is the value a line of a step's output masks, read as the
// runner reads workflow commands (actions/runner ActionCommand.cs:
// TryParseV2, "::add-mask::V" after leading white space, properties
// allowed after the name; TryParse, "##[add-mask]V" anywhere in the
// line), V unescaped as the runner does (%0D, %0A, %25), which is how
// core.setSecret writes a value with a newline or a '%'.
func addMask(line string) (string, bool) {
	if rest, ok := strings.CutPrefix(strings.TrimLeftFunc(line, unicode.IsSpace), "::"); ok {
		info, data, ok := strings.Cut(rest, "::")
		name, _, _ := strings.Cut(info, " ")
		if ok && strings.EqualFold(name, "add-mask") {
			return unescapeData(data), strings.TrimSpace(data) != ""
		}
	}
	if i := strings.Index(line, "##["); i >= 0 {
		info, data, ok := strings.Cut(line[i+3:], "]")
		name, _, _ := strings.Cut(info, " ")
		if ok && strings.EqualFold(strings.TrimRight(name, ";"), "add-mask") {
			return unescapeData(data), strings.TrimSpace(data) != ""
		}
	}
	return "", false
}

// unescapeData undoes the runner's escaping of a command's data.
func unescapeData(s string) string {
	return strings.NewReplacer("%0D", "\r", "%0A", "\n", "%25", "%").Replace(s)
}

// redact blanks withheld and masked values in every string a result
// records of the job's making (argv, paths, reasons, diffs, messages),
// but the fields that say what a thing is (a host, an address, a binary:
// identityFields), so that a job cannot hide where it went by masking a
// name. An argument the record cut also loses the start of a value left
// at the cut.
func redact(res *Result, v *credentials.Vault) {
	if v == nil {
		return
	}
	for i := range res.Processes.Execs {
		if x := &res.Processes.Execs[i]; x.ArgvTruncated {
			for j := range x.Argv {
				x.Argv[j] = v.RedactCut(x.Argv[j])
			}
		}
	}
	redactStrings(reflect.ValueOf(res).Elem(), v.Redact)
	rec := v.Record()
	res.Credentials = &rec
}

// withhold is the step as its sandbox may see it: the credentials the
// vault knows replaced by placeholders in the step's environment and,
// for what it learned since (from this step's or an earlier one's
// environment), in the job's own variables, the command line and the
// scripts the step runs; its output watched for the masks it adds.
// Without a vault the step is as given.
func (s *Session) withhold(spec StepSpec, stdout, stderr io.Writer) (StepSpec, []string, io.Writer, io.Writer) {
	v := s.job.Credentials
	if v == nil {
		return spec, s.job.Env, stdout, stderr
	}
	spec.Env = v.Withhold(spec.Env)
	jobEnv := withholdList(v, s.job.Env)
	if spec.Command != nil {
		spec.Command = slices.Clone(spec.Command)
		for i, a := range spec.Command {
			spec.Command[i] = v.Hide(a)
		}
	}
	for _, f := range spec.Scripts {
		if err := hideInFile(v, f); err != nil {
			fmt.Fprintf(s.job.Log, "airlock: step %q: the script %s was not checked for credentials: %v\n", spec.Name, filepath.Base(f.Path), err)
		}
	}
	return spec, jobEnv, &maskWatcher{w: stdout, vault: v}, &maskWatcher{w: stderr, vault: v}
}

// identityFields are the fields redact leaves as they are.
var identityFields = map[string]bool{"Name": true, "Host": true, "Address": true, "Upstream": true, "Binary": true, "SHA256": true, "Workspace": true}

// ruleKind is the type of a rule's kind: one of airlock's constants,
// never the job's words, so redact leaves it (a masked value that is a
// word such as "fronting" must not blank which check decided). The
// rule's detail, which can hold what the job asked for, is redacted.
var ruleKind = reflect.TypeFor[rules.RuleKind]()

// redactStrings applies f to every settable string below v.
func redactStrings(v reflect.Value, f func(string) string) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			redactStrings(v.Elem(), f)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if sf := v.Type().Field(i); sf.IsExported() && !identityFields[sf.Name] {
				redactStrings(v.Field(i), f)
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			redactStrings(v.Index(i), f)
		}
	case reflect.Map:
		if v.Type().Elem().Kind() == reflect.String {
			for _, k := range v.MapKeys() {
				v.SetMapIndex(k, reflect.ValueOf(f(v.MapIndex(k).String())).Convert(v.Type().Elem()))
			}
		}
	case reflect.String:
		if v.CanSet() && v.Type() != ruleKind {
			v.SetString(f(v.String()))
		}
	}
}

// Bounds of what gitConfigView reads.
const (
	maxGitConfig     = 1 << 20
	maxCheckoutCreds = 64 << 10
)

// checkoutCredentials is the include line actions/checkout v6 adds to
// .git/config for its credentials file in $RUNNER_TEMP
// (src/git-auth-helper.ts: git-credentials-<uuid>.config).
var checkoutCredentials = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?m)^[ \t]*path[ \t]*=[ \t]*(/[^\n]*/git-credentials-[0-9a-fA-F-]+\.config)[ \t]*$`)
})

// maxSubmoduleConfigs bounds the submodules' configs gitConfigViews
// looks at.
const maxSubmoduleConfigs = 64

// gitConfigViews give the sandbox views of the repository's git configs
// (repo is relative to the workspace) in which the token actions/checkout
// persisted is its placeholder: when checkout ran on the host before
// airlock (airlock run, the composite action), v4 and v5 left the job's
// token in .git/config itself (and in .git/modules/*/config for
// submodules), and v6 in a file of $RUNNER_TEMP that the config includes
// (runnerTemp; the sandbox does not see it, so its rewritten content is
// appended to the view). Only a file directly in runnerTemp is read, and
// none when it is empty. The host's files are never changed; a view is
// read-only, so a job cannot write the repository's git config (git
// config --global still works). dir is where the views are written.
func gitConfigViews(v *credentials.Vault, workspace, repo, runnerTemp, dir string) ([]gvisor.View, error) {
	configs := []string{filepath.Join(repo, ".git", "config")}
	modules := filepath.Join(workspace, repo, ".git", "modules")
	if root, err := files.OpenRootBeneath(workspace, modules); err == nil {
		fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
			switch {
			case err != nil || len(configs) > maxSubmoduleConfigs:
				return fs.SkipAll
			case d.IsDir() && strings.Count(p, "/") > 8:
				return fs.SkipDir
			case d.Name() == "config" && d.Type().IsRegular():
				configs = append(configs, filepath.Join(repo, ".git", "modules", p))
			}
			return nil
		})
		root.Close()
	}
	var views []gvisor.View
	for _, rel := range configs {
		b, err := readBeneath(workspace, filepath.Join(workspace, rel), maxGitConfig)
		if err != nil {
			continue // no repository (yet), or not one to read
		}
		text := string(b)
		out := v.WithholdGitConfig(text, rel)
		for _, m := range checkoutCredentials().FindAllStringSubmatch(text, -1) {
			if runnerTemp == "" || filepath.Dir(m[1]) != filepath.Clean(runnerTemp) {
				continue
			}
			inc, err := readBeneath(runnerTemp, m[1], maxCheckoutCreds)
			if err != nil {
				continue
			}
			if rewritten := v.WithholdGitConfig(string(inc), filepath.Base(m[1])); rewritten != string(inc) {
				out += fmt.Sprintf("\n# airlock: actions/checkout's credentials (%s), the token replaced by its placeholder\n%s", filepath.Base(m[1]), rewritten)
			}
		}
		if out == text {
			continue
		}
		view, err := writeView(dir, rel, out)
		if err != nil {
			return views, err
		}
		views = append(views, view)
	}
	return views, nil
}

// writeView writes text as the view of the workspace file rel.
func writeView(dir, rel, text string) (gvisor.View, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return gvisor.View{}, fmt.Errorf("git config view: %w", err)
	}
	f, err := os.CreateTemp(dir, "git-config-view-")
	if err != nil {
		return gvisor.View{}, fmt.Errorf("git config view: %w", err)
	}
	_, werr := f.WriteString(text)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(f.Name(), 0o644)
	}
	if werr != nil {
		os.Remove(f.Name())
		return gvisor.View{}, fmt.Errorf("git config view: %w", werr)
	}
	return gvisor.View{Path: rel, Source: f.Name()}, nil
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

// maxScript bounds a script hideInFile rewrites.
const maxScript = 4 << 20

// hideInFile replaces the credentials the vault knows with their
// placeholders in a script the runner wrote for a step (a run: step's
// expressions are expanded into it, ${{ secrets.X }} included), in
// place, before the step reads it.
func hideInFile(v *credentials.Vault, f HostFile) error {
	file, err := files.OpenRegularBeneath(f.Base, f.Path, os.O_RDWR)
	if err != nil {
		return err
	}
	defer file.Close()
	b, err := io.ReadAll(io.LimitReader(file, maxScript+1))
	if err != nil {
		return err
	}
	if len(b) > maxScript {
		return fmt.Errorf("larger than %d bytes", maxScript)
	}
	hidden := v.Hide(string(b))
	if hidden == string(b) {
		return nil
	}
	if err := file.Truncate(0); err != nil {
		return err
	}
	_, err = file.WriteAt([]byte(hidden), 0)
	return err
}
