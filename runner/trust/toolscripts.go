package trust

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/airlock-ci/airlock/internal/shlex"
)

// Files an agent tool runs. A hook's or an MCP server's command often
// names a file of the repository (bash .claude/boot.sh, node
// tools/mcp.js, "$CLAUDE_PROJECT_DIR"/scripts/check.py): changing that
// file changes what the tool runs on the next developer's machine as much
// as changing the config does, without touching the config. So such a
// file is in the agent-tools category too, for as long as a config names
// it (Set.WithToolScripts), in the authored diff and at run time.

// maxToolScripts bounds the files the configs of one tree name.
const maxToolScripts = 200

// projectPrefixes are how commands name their project's directory: the
// agents set these variables (or expand them) to it.
var projectPrefixes = []string{"$CLAUDE_PROJECT_DIR/", "${CLAUDE_PROJECT_DIR}/", "${workspaceFolder}/", "$PWD/", "${PWD}/", "./"}

// scriptExts are the extensions that make a word without a slash a file.
var scriptExts = map[string]bool{".sh": true, ".bash": true, ".zsh": true, ".py": true, ".js": true, ".mjs": true, ".cjs": true, ".ts": true, ".rb": true, ".pl": true, ".ps1": true, ".php": true, ".lua": true}

// toolScripts returns the repository paths (slash separated) that the
// servers and hooks of agent tool config p (repository path) name in
// their commands, each with what names it. A word counts when it is a
// relative path inside the repository with a slash or a script's
// extension; it is taken from the config's project directory (where the
// tools run their commands) and, for a nested project, from the
// repository's root too. A path that names no file changes nothing.
func toolScripts(p string, data []byte) map[string]string {
	tools, parsed, err := toolsOf(p, data)
	if !parsed || err != nil {
		return nil
	}
	project := projectDir(p)
	out := map[string]string{}
	for _, t := range tools {
		if t.kind == "setting" {
			continue
		}
		why := fmt.Sprintf("run by %s %s of %s", t.kind, nameOf(t.name), p)
		for _, w := range commandWords(t.run) {
			for _, base := range []string{project, ""} {
				if f := path.Join(base, w); filepath.IsLocal(f) {
					if _, ok := out[f]; !ok && len(out) < maxToolScripts {
						out[f] = why
					}
				}
			}
		}
	}
	delete(out, p)
	return out
}

// commandWords are the words of a command line that may name a file of
// the repository, with the project prefixes taken off.
func commandWords(run string) []string {
	words, err := shlex.Split(run)
	if err != nil {
		words = strings.Fields(run)
	}
	var out []string
	for _, w := range words {
		for _, part := range strings.FieldsFunc(w, func(r rune) bool { return strings.ContainsRune(";&|()<>`", r) }) {
			if i := strings.LastIndexByte(part, '='); i >= 0 {
				part = part[i+1:] // --config=tools/x.json, VAR=path
			}
			for _, pre := range projectPrefixes {
				part = strings.TrimPrefix(part, pre)
			}
			if part == "" || path.IsAbs(part) || strings.HasPrefix(part, "-") || strings.HasPrefix(part, "~") || strings.Contains(part, "://") || strings.ContainsAny(part, "$*?") {
				continue
			}
			if strings.Contains(part, "/") || scriptExts[strings.ToLower(path.Ext(part))] {
				out = append(out, path.Clean(part))
			}
		}
	}
	return out
}

// projectDir is the directory a config's tool runs commands in: the one
// holding the tool's dot-directory (.claude/settings.json, .kiro/settings/
// mcp.json), or the config's own (.mcp.json, opencode.json).
func projectDir(p string) string {
	dirs := strings.Split(path.Dir(p), "/")
	for i := len(dirs) - 1; i >= 0; i-- {
		if strings.HasPrefix(dirs[i], ".") && dirs[i] != "." {
			return path.Join(dirs[:i]...)
		}
	}
	return path.Dir(p)
}

// WithToolScripts returns a copy of the set in which the given files
// (repository path -> what runs it) are agent-tools too, unless another
// category has them already.
func (s *Set) WithToolScripts(scripts map[string]string) *Set {
	if len(scripts) == 0 {
		return s
	}
	c := *s
	c.scripts = map[string]string{}
	for p, why := range s.scripts {
		c.scripts[p] = why
	}
	for p, why := range scripts {
		if s.Category(p) == "" {
			c.scripts[path.Clean(p)] = why
		}
	}
	return &c
}

// scriptWhy is what runs a file that is agent-tools for being run.
func (s *Set) scriptWhy(p string) string {
	return s.scripts[path.Clean(strings.TrimPrefix(p, "./"))]
}

// explainScripts says, in the findings on files that are agent-tools
// for being run by an agent tool, what runs them.
func explainScripts(fs []Finding, set *Set) []Finding {
	for i, f := range fs {
		if why := set.scriptWhy(f.Path); why != "" && !strings.Contains(f.Reason, why) {
			fs[i].Reason += " (a file " + why + ")"
		}
	}
	return fs
}
