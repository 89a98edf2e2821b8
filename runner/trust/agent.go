package trust

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"

	toml "github.com/pelletier/go-toml/v2"
	"github.com/tailscale/hujson"

	"github.com/airlock-ci/airlock/internal/textsafe"
)

// What a prompt-injected agent edits to reach the next machine: the files
// that tell the next agent what to do (instructions) and the agent tool
// configurations that start programs on a developer's machine (MCP server
// lists, agent hooks, the settings that let an agent act unasked). Names
// and formats as the tools document them: Claude Code (.mcp.json;
// .claude/settings.json hooks and permissions), VS Code (.vscode/mcp.json
// "servers", JSON with comments), Cursor (.cursor/mcp.json), Gemini CLI
// (.gemini/settings.json), Codex (.codex/config.toml [mcp_servers.NAME],
// notify), Zed (context_servers), GitHub Copilot
// (.github/copilot-instructions.md, .github/instructions/**,
// .github/prompts/**) and AGENTS.md, CLAUDE.md and GEMINI.md at any depth.

// maxToolConfig bounds the agent tool config read for its semantic diff;
// a larger one is a finding of its own.
const maxToolConfig = 1 << 20

// maxToolFindings bounds the semantic findings of one config; the rest
// are counted in one more.
const maxToolFindings = 50

// tool is one thing an agent tool config makes a machine run or allow:
// an MCP server (its command line, or the URL it connects to), a hook,
// or a top-level setting. id is its whole normalised definition: any
// change to it (environment, working directory, headers) counts.
type tool struct {
	kind, name, run, id string
	// line finds its 1-based line (0 when unknown). It is called only
	// for the findings shown: finding a line reads the config, and a
	// config of many members would take quadratic time otherwise.
	line func() int
	// prose: run is no command line (a hook's prompt or URL).
	prose bool
}

func (t tool) key() string { return t.kind + "\x00" + t.name }

// verbs are how a finding says what the tool does, and did: a server or
// hook runs its command, a setting is its value.
func (t tool) verbs() (now, then string) {
	if t.kind == "setting" {
		return "is", "was"
	}
	return "runs", "ran"
}

// toolsOf reads the MCP servers, hooks and settings of an agent tool
// config. JSON (with comments and trailing commas) and TOML are read;
// other formats have no semantic diff.
func toolsOf(p string, data []byte) ([]tool, bool, error) {
	if !readableConfig(p) {
		return nil, false, nil
	}
	if len(data) > maxToolConfig {
		return nil, true, fmt.Errorf("%d bytes, more than the %d read", len(data), maxToolConfig)
	}
	if err := boundsError(data, path.Ext(p) == ".toml"); err != nil {
		return nil, true, err
	}
	if path.Ext(p) == ".toml" {
		t, err := tomlTools(data)
		return t, true, err
	}
	t, err := jsonTools(data, isVSCodeSettings(p))
	return t, true, err
}

// Bounds of an agent tool config's shape; no tool's config comes near
// them. maxConfigDepth bounds its nesting (arrays, objects and tables,
// and the parts of a TOML dotted key): the JSON and TOML parsers recurse
// once per level, and a config a million levels deep (1 MiB of "[")
// overflows the goroutine stack, which no recover catches: the process
// dies. maxTOMLKeys bounds the keys of a TOML config (key/value pairs,
// table headers, the parts of dotted keys): the TOML decoder looks each
// key up among all the keys it has seen, which takes quadratic time
// (100,000 keys, in 1 MiB, take minutes).
const (
	maxConfigDepth = 1000
	maxTOMLKeys    = 5000
)

// boundsError says when a JSON (with comments) or TOML config nests
// deeper than maxConfigDepth (brackets and braces outside strings and
// comments, and, in TOML, the dots of a key) or has more than
// maxTOMLKeys keys ("=", table headers and dots outside strings and
// comments: a float's dot counts too, which no config has many of). Up
// to the first syntax error, where the parser stops, it reads strings
// and comments as the parser does, so it counts at least as much as the
// parser meets.
func boundsError(data []byte, isTOML bool) error {
	depth, dots, keys, lineStart := 0, 0, 0, true
	for i := 0; i < len(data); i++ {
		if isTOML && (lineStart && data[i] == '[' || data[i] == '=' || data[i] == '.') {
			if keys++; keys > maxTOMLKeys {
				return fmt.Errorf("more than %d keys", maxTOMLKeys)
			}
		}
		lineStart = data[i] == '\n' || lineStart && (data[i] == ' ' || data[i] == '\t')
		c := data[i]
		switch {
		case c == '"' || isTOML && c == '\'':
			i = stringEnd(data, i, isTOML)
		case isTOML && c == '#', !isTOML && c == '/' && i+1 < len(data) && data[i+1] == '/':
			for i+1 < len(data) && data[i+1] != '\n' {
				i++
			}
		case !isTOML && c == '/' && i+1 < len(data) && data[i+1] == '*':
			end := bytes.Index(data[i+2:], []byte("*/"))
			if end < 0 {
				return nil // unterminated: the parser stops here
			}
			i += 2 + end + 1
		case c == '[' || c == '{':
			depth, dots = depth+1, 0
		case c == ']' || c == '}':
			depth, dots = max(depth-1, 0), 0
		case c == '=' || c == ',' || c == '\n':
			dots = 0
		case isTOML && c == '.':
			dots++
		}
		if depth+dots > maxConfigDepth {
			return fmt.Errorf("nested deeper than %d levels", maxConfigDepth)
		}
	}
	return nil
}

// stringEnd is the index of the last byte of the string that starts at
// data[i] (a quote), len(data) when it does not end: a JSON string, or
// a TOML basic, literal or multi-line one (whose closing quotes may
// follow up to two quotes of its own).
func stringEnd(data []byte, i int, isTOML bool) int {
	q := data[i]
	escapes := q == '"'
	if isTOML && bytes.HasPrefix(data[i:], []byte{q, q, q}) {
		for j := i + 3; j < len(data); j++ {
			if escapes && data[j] == '\\' {
				j++
				continue
			}
			if run := len(data[j:]) - len(bytes.TrimLeft(data[j:], string(q))); run >= 3 {
				return j + min(run, 5) - 1
			}
		}
		return len(data)
	}
	for j := i + 1; j < len(data); j++ {
		if escapes && data[j] == '\\' {
			j++
			continue
		}
		if data[j] == q {
			return j
		}
	}
	return len(data)
}

// readableConfig reports whether p's format is one toolsOf reads.
func readableConfig(p string) bool {
	switch path.Ext(p) {
	case ".json", ".jsonc", ".toml":
		return true
	}
	return false
}

// isVSCodeSettings reports whether p is a VS Code workspace settings
// file (.vscode/settings.json): mostly editor settings, and a few that
// decide what an agent may do or run (see vscodeAgentSetting).
func isVSCodeSettings(p string) bool {
	return strings.EqualFold(path.Base(p), "settings.json") && strings.EqualFold(path.Base(path.Dir(p)), ".vscode")
}

// vscodeAgentSettings are the VS Code settings that let Copilot's agent
// act unasked (tool, terminal and edit auto-approval: the way
// CVE-2025-53773 turned a prompt injection into code execution), add MCP
// servers, prompt and instruction files, run tasks on opening the folder,
// turn workspace trust off, or change what the terminal an agent uses
// runs: these keys and the keys below them.
var vscodeAgentSettings = []string{
	"chat", "github.copilot", "mcp", "task.allowAutomaticTasks", "security.workspace.trust",
	"terminal.integrated.env", "terminal.integrated.profiles", "terminal.integrated.automationProfile", "terminal.integrated.defaultProfile",
}

// vscodeAgentParents are the objects that hold such settings when they
// are written nested ({"terminal": {"integrated.env.linux": ...}}): only
// the parent itself counts, not its other dotted keys (a font size).
var vscodeAgentParents = []string{"github", "task", "security", "security.workspace", "terminal", "terminal.integrated"}

// vscodeAgentSetting reports whether a settings.json key is one of
// vscodeAgentSettings or below one, or a parent that may hold one
// (letter case ignored: a twin is flagged rather than missed).
func vscodeAgentSetting(key string) bool {
	key = strings.ToLower(key)
	for _, s := range vscodeAgentSettings {
		s = strings.ToLower(s)
		if key == s || strings.HasPrefix(key, s+".") {
			return true
		}
	}
	for _, s := range vscodeAgentParents {
		if key == strings.ToLower(s) {
			return true
		}
	}
	return false
}

// serverLists are the keys that hold MCP servers by name: Claude Code,
// Cursor and Gemini CLI ("mcpServers"), VS Code ("servers"), Zed
// ("context_servers").
var serverLists = map[string]bool{"mcpServers": true, "servers": true, "context_servers": true}

// jsonTools reads a JSON config member by member, matching names exactly
// as the tools do: a member whose name differs from a known one only in
// letter case makes the config ambiguous (a Go decoder would take either;
// the tool reads one), and ambiguity is an error.
//
// In VS Code's settings only the agent's settings are read (the rest are
// editor settings the plain diff shows), and "mcp" holds its servers.
func jsonTools(data []byte, vscode bool) ([]tool, error) {
	v, err := hujson.Parse(data)
	if err != nil {
		return nil, err
	}
	top, ok := v.Value.(*hujson.Object)
	if !ok {
		return nil, fmt.Errorf("not a JSON object")
	}
	if err := noCaseTwins(top, append(slices.Collect(mapKeys(serverLists)), "hooks")); err != nil {
		return nil, err
	}
	var out []tool
	for _, m := range top.Members {
		name := memberName(m.Name)
		switch {
		case vscode && !vscodeAgentSetting(name):
			continue
		case vscode && name == "mcp":
			mcp, ok := m.Value.Value.(*hujson.Object)
			if !ok {
				return nil, fmt.Errorf("mcp is not an object")
			}
			if err := noCaseTwins(mcp, []string{"servers"}); err != nil {
				return nil, err
			}
			for _, mm := range mcp.Members {
				if memberName(mm.Name) != "servers" {
					val := compactJSON(mm.Value)
					out = append(out, tool{kind: "setting", name: "mcp." + memberName(mm.Name), run: val, id: val, line: func() int { return lineAt(data, mm.Name.StartOffset) }})
					continue
				}
				servers, err := serverTools(data, "mcp.servers", mm.Value)
				if err != nil {
					return nil, err
				}
				out = append(out, servers...)
			}
		case serverLists[name]:
			servers, err := serverTools(data, name, m.Value)
			if err != nil {
				return nil, err
			}
			out = append(out, servers...)
		case name == "hooks":
			hooks, err := jsonHooks(data, m.Value)
			if err != nil {
				return nil, err
			}
			out = append(out, hooks...)
		default:
			// Any other setting: what it is now (permissions, an API key
			// helper, an environment, a plugin marketplace, ...).
			val := compactJSON(m.Value)
			out = append(out, tool{kind: "setting", name: name, run: val, id: val, line: func() int { return lineAt(data, m.Name.StartOffset) }})
		}
	}
	return out, nil
}

// serverTools reads a list of MCP servers by name (the value of key).
func serverTools(data []byte, key string, list hujson.Value) ([]tool, error) {
	servers, ok := list.Value.(*hujson.Object)
	if !ok {
		return nil, fmt.Errorf("%s is not an object", key)
	}
	var out []tool
	for _, s := range servers.Members {
		run, err := serverOf(s.Value)
		if err != nil {
			return nil, fmt.Errorf("MCP server %q: %v", memberName(s.Name), err)
		}
		out = append(out, tool{kind: "MCP server", name: memberName(s.Name), run: run, id: compactJSON(s.Value), line: func() int { return lineAt(data, s.Name.StartOffset) }})
	}
	return out, nil
}

// serverOf is the command line (or URL) of one MCP server definition:
// command as a string or a list (opencode), args, or url, httpUrl or
// serverUrl; names matched exactly.
func serverOf(v hujson.Value) (string, error) {
	obj, ok := v.Value.(*hujson.Object)
	if !ok {
		return "", fmt.Errorf("not an object")
	}
	wanted := []string{"command", "args", "url", "httpUrl", "serverUrl"}
	if err := noCaseTwins(obj, wanted); err != nil {
		return "", err
	}
	var command, args []string
	var url string
	for _, m := range obj.Members {
		raw, err := hujson.Standardize(m.Value.Pack())
		if err != nil {
			return "", err
		}
		// The last of repeated names wins, as in JavaScript.
		switch memberName(m.Name) {
		case "command":
			var s string
			if json.Unmarshal(raw, &s) == nil {
				command = []string{s}
			} else if err := json.Unmarshal(raw, &command); err != nil {
				return "", fmt.Errorf("command is neither a string nor a list of strings")
			}
		case "args":
			if err := json.Unmarshal(raw, &args); err != nil {
				return "", fmt.Errorf("args is not a list of strings")
			}
		case "url", "httpUrl", "serverUrl":
			if err := json.Unmarshal(raw, &url); err != nil {
				return "", fmt.Errorf("%s is not a string", memberName(m.Name))
			}
		}
	}
	if len(command) > 0 {
		return shellJoin(append(command, args...)), nil
	}
	return url, nil
}

// noCaseTwins refuses an object with a member whose name is one of
// wanted in another letter case (or Unicode fold), which some readers
// take for that field and others ignore.
func noCaseTwins(obj *hujson.Object, wanted []string) error {
	for _, m := range obj.Members {
		name := memberName(m.Name)
		for _, w := range wanted {
			if name != w && strings.EqualFold(name, w) {
				return fmt.Errorf("member %q is %q in another letter case: readers disagree on which one counts", textsafe.Line(name), w)
			}
		}
	}
	return nil
}

// jsonHooks reads Claude's hooks: per event, matcher groups of hooks,
// each a command, a URL (http) or a prompt; and Cursor's, a list of
// hooks per event.
func jsonHooks(data []byte, v hujson.Value) ([]tool, error) {
	events, ok := v.Value.(*hujson.Object)
	if !ok {
		return nil, fmt.Errorf("hooks is not an object")
	}
	var out []tool
	for _, ev := range events.Members {
		groups, ok := ev.Value.Value.(*hujson.Array)
		if !ok {
			return nil, fmt.Errorf("hooks %q is not a list", memberName(ev.Name))
		}
		for gi, g := range groups.Elements {
			obj, ok := g.Value.(*hujson.Object)
			if !ok {
				return nil, fmt.Errorf("hooks %q #%d is not an object", memberName(ev.Name), gi+1)
			}
			if err := noCaseTwins(obj, []string{"matcher", "hooks", "command"}); err != nil {
				return nil, err
			}
			matcher := ""
			var hooks []hujson.Value
			for _, m := range obj.Members {
				switch memberName(m.Name) {
				case "command":
					// Cursor's hooks.json: the list holds the hooks
					// themselves ({"command": ...}), not matcher groups.
					// (With "hooks" too, both count: tools differ.)
					hooks = append([]hujson.Value{g}, hooks...)
				case "matcher":
					json.Unmarshal([]byte(compactJSON(m.Value)), &matcher)
				case "hooks":
					arr, ok := m.Value.Value.(*hujson.Array)
					if !ok {
						return nil, fmt.Errorf("hooks %q #%d: hooks is not a list", memberName(ev.Name), gi+1)
					}
					hooks = append(hooks, arr.Elements...)
				}
			}
			for hi, h := range hooks {
				hobj, ok := h.Value.(*hujson.Object)
				if !ok {
					return nil, fmt.Errorf("hook %q #%d.%d is not an object", memberName(ev.Name), gi+1, hi+1)
				}
				if err := noCaseTwins(hobj, []string{"type", "command", "url", "prompt"}); err != nil {
					return nil, err
				}
				fields := map[string]string{}
				for _, m := range hobj.Members {
					var s string
					if json.Unmarshal([]byte(compactJSON(m.Value)), &s) == nil {
						fields[memberName(m.Name)] = s
					}
				}
				run, prose := fields["command"], false
				switch {
				case run != "":
				case fields["url"] != "":
					run, prose = "an HTTP request to "+fields["url"], true
				case fields["prompt"] != "":
					run, prose = "the prompt "+fields["prompt"], true
				}
				name := memberName(ev.Name)
				if matcher != "" {
					name += " " + matcher
				}
				name += fmt.Sprintf(" #%d.%d", gi+1, hi+1)
				out = append(out, tool{kind: "hook", name: name, run: run, id: compactJSON(h), line: func() int { return lineAt(data, h.StartOffset) }, prose: prose})
			}
		}
	}
	return out, nil
}

// tomlTools reads Codex's config: [mcp_servers.NAME] (command, args,
// url), and every other top-level key as a setting (notify is a program
// Codex runs on its events). TOML keys are exact.
func tomlTools(data []byte) ([]tool, error) {
	var cfg map[string]any
	if err := toml.Unmarshal(data, &cfg); err != nil {
		return nil, err
	}
	var out []tool
	for _, key := range slices.Sorted(mapKeys(cfg)) {
		if key != "mcp_servers" {
			b, _ := json.Marshal(cfg[key])
			out = append(out, tool{kind: "setting", name: key, run: string(b), id: string(b), line: func() int { return lineOf(data, key) }})
			continue
		}
		servers, ok := cfg[key].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("mcp_servers is not a table")
		}
		for _, name := range slices.Sorted(mapKeys(servers)) {
			s, ok := servers[name].(map[string]any)
			if !ok {
				return nil, fmt.Errorf("MCP server %q is not a table", name)
			}
			var run []string
			if c, ok := s["command"].(string); ok {
				run = append(run, c)
				if args, ok := s["args"].([]any); ok {
					for _, a := range args {
						run = append(run, fmt.Sprint(a))
					}
				}
			}
			id, _ := json.Marshal(s)
			r := shellJoin(run)
			if r == "" {
				r, _ = s["url"].(string)
			}
			out = append(out, tool{kind: "MCP server", name: name, run: r, id: string(id), line: func() int { return lineOf(data, "[mcp_servers."+name+"]") }})
		}
	}
	return out, nil
}

// shellJoin writes a command line so that its words can be told apart.
func shellJoin(words []string) string {
	out := make([]string, len(words))
	for i, w := range words {
		if w != "" && !strings.ContainsAny(w, " \t\n\"'\\$`|&;<>(){}*?") {
			out[i] = w
		} else {
			out[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}

// compactJSON is a value as compact standard JSON (comments and blanks
// do not count as a change).
func compactJSON(v hujson.Value) string {
	std, err := hujson.Standardize(v.Pack())
	var b bytes.Buffer
	if err != nil || json.Compact(&b, std) != nil {
		return strings.TrimSpace(string(v.Pack()))
	}
	return b.String()
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func memberName(v hujson.Value) string {
	lit, ok := v.Value.(hujson.Literal)
	if !ok {
		return ""
	}
	var s string
	if json.Unmarshal(lit, &s) != nil {
		return string(lit)
	}
	return s
}

// lineAt is the 1-based line of a byte offset.
func lineAt(data []byte, off int) int {
	if off < 0 || off > len(data) {
		return 0
	}
	return bytes.Count(data[:off], []byte("\n")) + 1
}

// lineOf is the line of the first line that starts with prefix (after
// blanks), 0 when none does.
func lineOf(data []byte, prefix string) int {
	for n := 1; ; n++ {
		l, rest, more := bytes.Cut(data, []byte("\n"))
		if bytes.HasPrefix(bytes.TrimSpace(l), []byte(prefix)) {
			return n
		}
		if !more {
			return 0
		}
		data = rest
	}
}

// toolFindings is the semantic diff of an agent tool config: each MCP
// server, hook or setting added, changed or removed, with the command
// line it would run and where; a config that does not parse (or is too
// large, or ambiguous) is a finding of its own.
func toolFindings(p string, old, new []byte) []Finding {
	after, parsed, err := toolsOf(p, new)
	if err != nil {
		return []Finding{{Path: p, Check: CheckToolConfig, Kind: KindUnparsable, Reason: "agent tool config that could not be read: " + textsafe.Line(textsafe.Clip(err.Error(), 200, "...")) + "; every server, hook and setting in it is unknown"}}
	}
	if !parsed {
		return nil
	}
	before, _, _ := toolsOf(p, old)
	was := map[string]tool{}
	for _, t := range before {
		was[t.key()] = t
	}
	now := map[string]bool{}
	var out []Finding
	var lines []func() int // out[i]'s line, found for the findings shown
	for _, t := range after {
		now[t.key()] = true
		f := Finding{Path: p, Check: CheckToolConfig, Kind: KindEscalation}
		prev, existed := was[t.key()]
		verb, _ := t.verbs()
		switch {
		case !existed:
			f.Reason = fmt.Sprintf("new %s %s %s %s", t.kind, nameOf(t.name), verb, shown(t.run))
		case prev.run != t.run:
			f.Reason = fmt.Sprintf("%s %s now %s %s (was %s)", t.kind, nameOf(t.name), verb, shown(t.run), shown(prev.run))
		case prev.id != t.id:
			f.Reason = fmt.Sprintf("%s %s changed (its environment, directory, headers or options), still %s %s", t.kind, nameOf(t.name), verb, shown(t.run))
		default:
			continue
		}
		out = append(out, f)
		lines = append(lines, t.line)
	}
	for _, t := range before {
		if !now[t.key()] {
			_, was := t.verbs()
			out = append(out, Finding{Path: p, Check: CheckToolConfig, Kind: KindEscalation, Reason: fmt.Sprintf("%s %s removed (it %s %s)", t.kind, nameOf(t.name), was, shown(t.run))})
			lines = append(lines, nil)
		}
	}
	for i := range min(len(out), maxToolFindings) {
		if lines[i] != nil {
			out[i].Line = lines[i]()
		}
	}
	if len(out) > maxToolFindings {
		more := len(out) - maxToolFindings
		out = append(out[:maxToolFindings], Finding{Path: p, Check: CheckToolConfig, Kind: KindEscalation, Reason: fmt.Sprintf("%d more servers, hooks or settings changed: see the diff", more)})
	}
	return out
}

// nameOf is a server's, hook's or setting's name as a finding says it.
func nameOf(name string) string { return strconv.Quote(textsafe.Clip(textsafe.Line(name), 100, "...")) }

// shown is a command line as a finding says it: one line, bounded.
func shown(run string) string {
	if run == "" {
		return "nothing it names (no command or URL)"
	}
	return strconv.Quote(textsafe.Clip(textsafe.Line(run), 300, "..."))
}

// agentFindings are what a change to an agent file says beyond its diff:
// the servers, hooks and settings of a tool config, the marked lines of
// an instruction file. (Phase, category and action are the caller's.)
func agentFindings(category Category, p string, old, new []byte) []Finding {
	switch {
	case runsTools(category, p):
		fs := toolFindings(p, old, new)
		// VS Code's settings are build-entry (editor settings); their
		// agent settings are agent-tools findings of their own.
		for i := range fs {
			fs[i].Category = AgentTools
		}
		return fs
	case category == AgentInstructions:
		return instructionFindings(p, old, new)
	}
	return nil
}

// An instruction line that tells the next agent to fetch something or
// run a command. Blanks include the no-break space; a command may be
// named by its path (/usr/bin/curl, ./setup.sh).
var (
	urlInLine = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?i)\b((https?|ftp|git|ssh|file)://|www\.)[^\s)>\]"'` + "`" + `]+`)
	})
	commandInLine = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?i)(^|[\s\x{00A0}` + "`" + `$>(;&|"'])([\w./~-]*/)?(curl|wget|npx|bunx|uvx|pipx?3?|npm|pnpm|yarn|bun|bash|sh|zsh|fish|python[0-9.]*|node|deno|perl|ruby|php|powershell|pwsh|iex|invoke-expression|chmod|eval|source|sudo|base64|nc|ncat|socat|ssh|scp|rm|make|docker|gh|go\s+run|uv\s+run|git\s+(push|config|remote|clone|-c))([\s\x{00A0}` + "`" + `;|&)"']|$)|\|\s*(/\S*/)?(ba|z|da)?sh\b|(^|[\s` + "`" + `"'(])\.{1,2}/\S+\.(sh|py|js|ps1)\b`)
	})
)

// importInLine is an @path import (Claude Code's and Gemini CLI's
// instruction files include other files so).
var importInLine = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(^|[\s(])@(~|\.{1,2})?/?[\w.-]+/[\w./-]*|(^|[\s(])@[\w./-]+\.(md|mdc|txt)\b`)
})

// maxInstructionMarks bounds the marked lines of one file.
const maxInstructionMarks = 20

// instructionFindings marks the lines an instruction file gained that
// hold a URL or a command line, or characters a reviewer cannot see
// (zero-width, bidi, tag characters), shown inertly: the reviewer sees at
// once what the agent wants the next agent to fetch or run. Commands come
// first when there are more than the bound.
func instructionFindings(p string, old, new []byte) []Finding {
	var out []Finding
	if bytes.IndexByte(new, 0) >= 0 {
		out = append(out, Finding{Path: p, Check: CheckInstructions, Kind: KindEscalation, Reason: "instruction file with NUL bytes: diffs show it as binary, so its lines are read here"})
	}
	had := map[string]int{}
	for _, l := range strings.Split(string(old), "\n") {
		had[l]++
	}
	type mark struct {
		f    Finding
		rank int
	}
	var marks []mark
	for i, l := range strings.Split(string(new), "\n") {
		if had[l] > 0 {
			had[l]--
			continue
		}
		var what []string
		rank := 2
		if n := hiddenRunes(l); n > 0 {
			what = append(what, fmt.Sprintf("%d character(s) a reader cannot see (zero-width, bidi or tag)", n))
			rank = 0
		}
		if commandInLine().MatchString(l) {
			what = append(what, "a command line")
			rank = min(rank, 1)
		}
		if importInLine().MatchString(l) {
			// CLAUDE.md and GEMINI.md pull in other files with @path.
			what = append(what, "an import of another file")
			rank = min(rank, 1)
		}
		if urls := urlInLine().FindAllString(l, 3); len(urls) > 0 {
			for j, u := range urls {
				urls[j] = strconv.Quote(textsafe.Clip(textsafe.Line(u), 120, "..."))
			}
			what = append(what, "URLs "+strings.Join(urls, ", "))
		}
		if len(what) == 0 {
			continue
		}
		marks = append(marks, mark{rank: rank, f: Finding{Path: p, Check: CheckInstructions, Line: i + 1, Kind: KindEscalation,
			Reason: fmt.Sprintf("instruction for the next agent with %s: %s", strings.Join(what, " and "), strconv.Quote(textsafe.Clip(textsafe.Line(strings.TrimSpace(l)), 400, "...")))}})
	}
	slices.SortStableFunc(marks, func(a, b mark) int { return a.rank - b.rank })
	for i, m := range marks {
		if i == maxInstructionMarks {
			out = append(out, Finding{Path: p, Check: CheckInstructions, Kind: KindEscalation, Reason: fmt.Sprintf("%d more added lines with URLs, commands or hidden characters: see the diff", len(marks)-i)})
			break
		}
		out = append(out, m.f)
	}
	return out
}

// hiddenRunes counts the format characters of a line (zero-width
// spaces and joiners, bidi controls, tag characters, the byte order
// mark): text a model may read and a reviewer does not see.
func hiddenRunes(l string) int {
	n := 0
	for _, r := range l {
		if unicode.Is(unicode.Cf, r) {
			n++
		}
	}
	return n
}
