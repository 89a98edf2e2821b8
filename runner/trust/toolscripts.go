package trust

import (
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/airlock-ci/airlock/internal/shlex"
	"github.com/airlock-ci/airlock/internal/textsafe"
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
		commands := []string{t.run}
		if t.prose {
			continue // a prompt's words are no files
		}
		if t.kind == "setting" {
			if !commandSettings[t.name] {
				continue
			}
			commands = jsonStrings(t.run)
		}
		why := fmt.Sprintf("run by %s %s of %s", t.kind, nameOf(t.name), p)
		var words []string
		for _, c := range commands {
			words = append(words, commandWords(c, 2)...)
		}
		bases := []string{project, ""}
		// An MCP server may run in a directory of its own ("cwd").
		var def struct {
			Cwd string `json:"cwd"`
		}
		if json.Unmarshal([]byte(t.id), &def) == nil && t.kind == "MCP server" {
			if cwd, _ := repoWord(def.Cwd); cwd != "" {
				bases = append(bases, path.Join(project, cwd))
			}
		}
		for _, w := range words {
			for _, base := range bases {
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

// commandSettings are the settings whose values are commands the tool
// runs: Claude Code's status line and credential helpers, Codex's notify.
var commandSettings = map[string]bool{"statusLine": true, "apiKeyHelper": true, "awsAuthRefresh": true, "awsCredentialExport": true, "otelHeadersHelper": true, "notify": true}

// jsonStrings are the strings in a JSON value, at any depth.
func jsonStrings(v string) []string {
	var x any
	if json.Unmarshal([]byte(v), &x) != nil {
		return nil
	}
	var out []string
	var walk func(any)
	walk = func(x any) {
		switch x := x.(type) {
		case string:
			out = append(out, x)
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(x)
	return out
}

// commandWords are the words of a command line that may name a file of
// the repository, with the project prefixes taken off. A word that is a
// command line of its own (sh -c 'bash tools/x.sh') is split again, to
// depth levels. After a cd (or pushd), a word counts from that directory
// too.
func commandWords(run string, depth int) []string {
	words, err := shlex.Split(run)
	if err != nil {
		words = strings.Fields(run)
	}
	var out []string
	dir, cd := "", false
	for _, w := range words {
		if depth > 0 && strings.ContainsAny(w, " \t\n") {
			out = append(out, commandWords(w, depth-1)...)
			continue
		}
		for _, part := range strings.FieldsFunc(w, func(r rune) bool { return strings.ContainsRune(";&|()<>`", r) }) {
			if part == "cd" || part == "pushd" {
				cd = true
				continue
			}
			f, named := repoWord(part)
			if cd {
				cd = false
				if f != "" {
					dir = path.Join(dir, f)
				}
				continue
			}
			if f == "" || !named && !scriptExts[strings.ToLower(path.Ext(f))] {
				continue
			}
			out = append(out, f)
			if dir != "" {
				out = append(out, path.Join(dir, f))
			}
		}
	}
	return out
}

// repoWord is a word as a path relative to the project ("" when it is
// none: absolute, a flag, a URL, a glob or a variable), and whether it
// was written as a path (with a slash: ./boot names a file as much as
// tools/boot does).
func repoWord(w string) (string, bool) {
	if i := strings.LastIndexByte(w, '='); i >= 0 {
		w = w[i+1:] // --config=tools/x.json, VAR=path
	}
	named := strings.Contains(w, "/")
	for _, pre := range projectPrefixes {
		if rest, ok := strings.CutPrefix(w, pre); ok {
			w = strings.TrimLeft(rest, "/")
		}
	}
	if w == "" || path.IsAbs(w) || strings.HasPrefix(w, "-") || strings.HasPrefix(w, "~") || strings.Contains(w, "://") || strings.ContainsAny(w, "$*?") {
		return "", false
	}
	return path.Clean(w), named
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

// runsTools reports whether a file of a category holds agent tool
// commands: an agent tool config, or VS Code's settings (its "mcp").
func runsTools(category Category, p string) bool {
	if category == BuildEntry {
		return isVSCodeSettings(p)
	}
	return category == AgentTools
}

// maxScriptConfigs bounds the agent tool configs of a pull request's two
// trees read for the files they run.
const maxScriptConfigs = 100

// widenForScripts returns the set widened by the files that the agent
// tool configs of the trees (a pull request's head and base) run, their
// bytes from fetch, and an incomplete finding when some configs could
// not be read.
func widenForScripts(set *Set, trees [][]TreeFile, fetch func(TreeFile) ([]byte, error)) (*Set, []Finding) {
	scripts := map[string]string{}
	seen := map[TreeFile]bool{}
	read, missed := 0, ""
	for _, tree := range trees {
		for _, tf := range tree {
			if seen[tf] || !runsTools(set.Category(tf.Path), tf.Path) || !readableConfig(tf.Path) || tf.Mode == "120000" {
				continue
			}
			seen[tf] = true
			if read == maxScriptConfigs || tf.Size > maxToolConfig {
				missed = fmt.Sprintf("%s and maybe others: not read (more than %d agent tool configs, or one over %d bytes)", tf.Path, maxScriptConfigs, maxToolConfig)
				continue
			}
			read++
			data, err := fetch(tf)
			if err == nil && gitBlobID(data) != tf.SHA {
				err = fmt.Errorf("the bytes fetched are not blob %.12s", tf.SHA)
			}
			if err != nil {
				missed = fmt.Sprintf("%s could not be read: %v", tf.Path, err)
				continue
			}
			for f, why := range toolScripts(tf.Path, data) {
				if _, ok := scripts[f]; !ok {
					scripts[f] = why
				}
			}
		}
	}
	var out []Finding
	if missed != "" {
		out = append(out, scriptsIncomplete(set, "the files that agent tool configs run are not all known: "+missed))
	}
	return set.WithToolScripts(scripts), out
}

// scriptsIncomplete is the authored finding that says which files agent
// tool configs run could not all be learnt, with agent-tools' action
// (not the strictest of all, as for an incomplete diff).
func scriptsIncomplete(set *Set, reason string) Finding {
	f := Finding{Path: ".", Check: CheckToolScripts, Kind: KindIncomplete, Reason: textsafe.Line(textsafe.Clip(reason, 300, "..."))}
	return stampAuthored([]Finding{f}, AgentTools, set)[0]
}

// fetchOnce is fetch with what it read kept by blob id (errors are not
// kept: a second try may do better).
func fetchOnce(fetch func(TreeFile) ([]byte, error)) func(TreeFile) ([]byte, error) {
	got := map[string][]byte{}
	return func(tf TreeFile) ([]byte, error) {
		if b, ok := got[tf.SHA]; ok {
			return b, nil
		}
		b, err := fetch(tf)
		if err == nil {
			got[tf.SHA] = b
		}
		return b, err
	}
}

// semanticCategory is the category whose content checks a changed file
// gets: none for a file that is agent-tools for being run (a script, not
// a config).
func (s *Set) semanticCategory(p string, category Category) Category {
	if s.scriptWhy(p) != "" {
		return ""
	}
	return category
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
