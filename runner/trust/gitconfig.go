package trust

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/airlock-ci/airlock/internal/gitexec"
)

// builtinConfigKeys are git config keys that execute code or redirect
// execution, as section.subsection.key patterns ("*" stands for any
// subsection). Every alias counts: a plain one can still pass -c options
// to git (alias.st = "-c core.fsmonitor=... status").
var builtinConfigKeys = []string{
	"core.hooksPath", "core.fsmonitor", "core.sshCommand", "core.pager", "core.editor",
	"core.askPass", "core.gitProxy", "core.worktree", "core.alternateRefsCommand",
	"credential.helper", "credential.*.helper",
	"filter.*.clean", "filter.*.smudge", "filter.*.process",
	"diff.*.textconv", "diff.*.command", "diff.external", "merge.*.driver",
	"difftool.*.cmd", "mergetool.*.cmd", "trailer.*.command", "trailer.*.cmd",
	"gpg.program", "gpg.*.program", "gpg.ssh.defaultKeyCommand", "alias.*", "include.path", "includeIf.*.path",
	"uploadpack.packObjectsHook", "sequence.editor", "pager.*", "web.browser",
	"browser.*.cmd", "browser.*.path", "protocol.allow", "protocol.*.allow", "url.*.insteadOf", "url.*.pushInsteadOf",
	"remote.*.url", "remote.*.pushurl", "remote.*.uploadpack", "remote.*.receivepack", "remote.*.proxy",
	"submodule.*.update", "submodule.*.url", "http.proxy", "http.*.proxy", "http.sslVerify", "http.*.sslVerify",
	"extensions.worktreeConfig",
}

// maxConfigSize bounds a git config file read.
const maxConfigSize = 1 << 20

// ConfigKey is one code-executing key of a git config file.
type ConfigKey struct {
	// Key is section[.subsection].key, section and key in lower case.
	Key   string `json:"key"`
	Value string `json:"value"`

	section, sub, name string // as written, for matching
	bare               bool   // "key" alone (true), not "key =" (empty)
}

// ExecKeys parses a git config file with git itself (`git config --file
// --list`, which runs nothing and follows no include: an include is
// itself reported) and returns its keys that match the patterns, in file
// order.
func ExecKeys(ctx context.Context, data []byte, patterns []string) ([]ConfigKey, error) {
	all, err := configKeys(ctx, data)
	if err != nil {
		return nil, err
	}
	return execKeys(all, patterns), nil
}

func execKeys(all []ConfigKey, patterns []string) []ConfigKey {
	var keys []ConfigKey
	for _, k := range all {
		if matchConfigKey(patterns, k.section, k.sub, k.name, k.Value) {
			keys = append(keys, k)
		}
	}
	return keys
}

// configKeys returns every key of a git config file, in file order.
func configKeys(ctx context.Context, data []byte) ([]ConfigKey, error) {
	if len(data) > maxConfigSize {
		return nil, fmt.Errorf("git config is larger than %d bytes", maxConfigSize)
	}
	f, err := os.CreateTemp("", "airlock-gitconfig-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return nil, werr
	}
	out, err := gitexec.RunCapped(ctx, os.TempDir(), 4*maxConfigSize, "config", "--file", f.Name(), "--no-includes", "--list", "-z")
	if err != nil {
		// Without the temporary file's name, which differs on every
		// call: the error of an unparseable config is one of its facts,
		// and the same bytes must give the same facts (else a config
		// the job never touched compares as changed).
		return nil, fmt.Errorf("parse git config: %s", strings.ReplaceAll(err.Error(), f.Name(), "the config"))
	}
	var keys []ConfigKey
	for _, rec := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if rec == "" {
			continue
		}
		full, value, hasValue := strings.Cut(rec, "\n")
		section, rest, ok := strings.Cut(full, ".")
		if !ok {
			continue
		}
		sub, key := "", rest
		if i := strings.LastIndexByte(rest, '.'); i >= 0 {
			sub, key = rest[:i], rest[i+1:]
		}
		keys = append(keys, ConfigKey{Key: configKey(section, sub, key), Value: value, section: section, sub: sub, name: key, bare: !hasValue})
	}
	return keys, nil
}

// configLines are a git config's keys as "key = value" lines for
// comparing and showing, credentials redacted: the authorization header
// actions/checkout keeps there during a job, and the user-info of URLs
// in keys and values (a short digest stays, so a change still shows).
func configLines(keys []ConfigKey) []string {
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		v := redactURLs(k.Value)
		if strings.EqualFold(k.section, "http") && strings.EqualFold(k.name, "extraheader") {
			v = redacted(k.Value)
		}
		line := redactURLs(k.Key) + " = " + v
		if k.bare {
			line = redactURLs(k.Key)
		}
		out = append(out, line)
	}
	return out
}

// userInfo is the user-info part of a URL ("scheme://user:secret@").
var userInfo = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?i)([a-z][a-z0-9+.-]*://)([^/@\s]+)@`) })

func redactURLs(s string) string {
	return userInfo().ReplaceAllStringFunc(s, func(m string) string {
		sub := userInfo().FindStringSubmatch(m)
		return sub[1] + redacted(sub[2]) + "@"
	})
}

// redacted stands for a secret: enough of its digest to tell two apart.
func redacted(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return fmt.Sprintf("(redacted %x)", sum[:4])
}

func configKey(section, sub, key string) string {
	if sub == "" {
		return strings.ToLower(section) + "." + strings.ToLower(key)
	}
	return strings.ToLower(section) + "." + sub + "." + strings.ToLower(key)
}

// matchConfigKey reports whether section[.sub].key matches a pattern.
// Section and key compare case-insensitively, the subsection exactly
// (or "*" for any, including none for keys like alias.NAME).
func matchConfigKey(patterns []string, section, sub, key, value string) bool {
	for _, p := range patterns {
		ps, rest, ok := strings.Cut(p, ".")
		if !ok || !strings.EqualFold(ps, section) {
			continue
		}
		var psub, pkey string
		if i := strings.LastIndexByte(rest, '.'); i >= 0 {
			psub, pkey = rest[:i], rest[i+1:]
		} else {
			pkey = rest
		}
		switch {
		case psub == "" && pkey == "*" && sub == "":
			return true // alias.*, pager.*
		case psub == "" && sub == "" && strings.EqualFold(pkey, key):
			return true
		case psub != "" && sub != "" && (psub == "*" || psub == sub) && (pkey == "*" || strings.EqualFold(pkey, key)):
			return true
		}
	}
	return false
}

// hooksPathOf returns the workspace-relative directory core.hooksPath
// names, when it is inside the workspace ("" otherwise).
func hooksPathOf(keys []ConfigKey) string {
	for _, k := range slices.Backward(keys) {
		if k.Key == "core.hookspath" {
			p := path.Clean(k.Value)
			if path.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") {
				return ""
			}
			return p
		}
	}
	return ""
}
