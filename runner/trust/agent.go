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

	toml "github.com/pelletier/go-toml/v2"
	"github.com/tailscale/hujson"

	"github.com/airlock-ci/airlock/internal/textsafe"
)

// What a prompt-injected agent edits to reach the next machine: the files
// that tell the next agent what to do (instructions) and the agent tool
// configurations that start programs on a developer's machine (MCP server
// lists, agent hooks). Names and formats as the tools document them:
// Claude Code (.mcp.json; .claude/settings.json hooks), VS Code
// (.vscode/mcp.json "servers", JSON with comments), Cursor
// (.cursor/mcp.json), Gemini CLI (.gemini/settings.json), Codex
// (.codex/config.toml [mcp_servers.NAME], notify), GitHub Copilot
// (.github/copilot-instructions.md, .github/instructions/**,
// .github/prompts/**) and AGENTS.md, CLAUDE.md and GEMINI.md at any depth.

// maxToolConfig bounds the agent tool config read for its semantic diff;
// a larger one is a finding of its own.
const maxToolConfig = 1 << 20

// tool is one program an agent tool config makes a machine run: an MCP
// server (its command line, or the URL it connects to) or a hook.
type tool struct {
	kind, name, run string
	line            int
}

func (t tool) key() string { return t.kind + "\x00" + t.name }

// toolsOf reads the MCP servers and hooks of an agent tool config.
func toolsOf(p string, data []byte) ([]tool, error) {
	if len(data) > maxToolConfig {
		return nil, fmt.Errorf("%d bytes, more than the %d read", len(data), maxToolConfig)
	}
	if path.Ext(p) == ".toml" {
		return tomlTools(data)
	}
	return jsonTools(data)
}

// jsonTools reads JSON (with comments and trailing commas, as VS Code
// writes them): "mcpServers" (Claude, Cursor, Gemini) or "servers" (VS
// Code) by name, and Claude's "hooks": event -> [{matcher, hooks:
// [{type, command | url}]}].
func jsonTools(data []byte) ([]tool, error) {
	v, err := hujson.Parse(data)
	if err != nil {
		return nil, err
	}
	top, ok := v.Value.(*hujson.Object)
	if !ok {
		return nil, fmt.Errorf("not a JSON object")
	}
	var out []tool
	for _, m := range top.Members {
		switch memberName(m.Name) {
		case "mcpServers", "servers":
			servers, ok := m.Value.Value.(*hujson.Object)
			if !ok {
				continue
			}
			for _, s := range servers.Members {
				var def struct {
					Command string   `json:"command"`
					Args    []string `json:"args"`
					URL     string   `json:"url"`
					HTTPURL string   `json:"httpUrl"`
				}
				raw, err := hujson.Standardize(s.Value.Pack())
				if err == nil {
					err = json.Unmarshal(raw, &def)
				}
				if err != nil {
					return nil, fmt.Errorf("MCP server %q: %v", memberName(s.Name), err)
				}
				out = append(out, tool{kind: "MCP server", name: memberName(s.Name), run: serverRun(def.Command, def.Args, def.URL+def.HTTPURL), line: lineAt(data, s.Name.StartOffset)})
			}
		case "hooks":
			hooks, err := jsonHooks(data, m.Value)
			if err != nil {
				return nil, err
			}
			out = append(out, hooks...)
		case "enableAllProjectMcpServers", "enabledMcpjsonServers":
			// Claude Code: the project's MCP servers start without asking.
			out = append(out, tool{kind: "setting", name: memberName(m.Name), run: compactJSON(m.Value), line: lineAt(data, m.Name.StartOffset)})
		case "permissions":
			perms, ok := m.Value.Value.(*hujson.Object)
			if !ok {
				continue
			}
			for _, pm := range perms.Members {
				if n := memberName(pm.Name); n == "allow" || n == "defaultMode" {
					out = append(out, tool{kind: "setting", name: "permissions." + n, run: compactJSON(pm.Value), line: lineAt(data, pm.Name.StartOffset)})
				}
			}
		}
	}
	return out, nil
}

// jsonHooks reads Claude's hooks: per event, matcher groups of commands.
func jsonHooks(data []byte, v hujson.Value) ([]tool, error) {
	events, ok := v.Value.(*hujson.Object)
	if !ok {
		return nil, nil
	}
	var out []tool
	for _, ev := range events.Members {
		groups, ok := ev.Value.Value.(*hujson.Array)
		if !ok {
			continue
		}
		for gi, g := range groups.Elements {
			var group struct {
				Matcher string `json:"matcher"`
				Hooks   []struct {
					Type    string `json:"type"`
					Command string `json:"command"`
					URL     string `json:"url"`
				} `json:"hooks"`
			}
			raw, err := hujson.Standardize(g.Pack())
			if err == nil {
				err = json.Unmarshal(raw, &group)
			}
			if err != nil {
				return nil, fmt.Errorf("hook %s: %v", memberName(ev.Name), err)
			}
			for hi, h := range group.Hooks {
				name := memberName(ev.Name)
				if group.Matcher != "" {
					name += " " + group.Matcher
				}
				name += fmt.Sprintf(" #%d.%d", gi+1, hi+1)
				run := h.Command
				if run == "" {
					run = h.URL
				}
				out = append(out, tool{kind: "hook", name: name, run: run, line: lineAt(data, g.StartOffset)})
			}
		}
	}
	return out, nil
}

// tomlTools reads Codex's config: [mcp_servers.NAME] command, args, url,
// and notify, a program Codex runs on its events.
func tomlTools(data []byte) ([]tool, error) {
	var cfg struct {
		MCPServers map[string]struct {
			Command string   `toml:"command"`
			Args    []string `toml:"args"`
			URL     string   `toml:"url"`
		} `toml:"mcp_servers"`
		Notify []string `toml:"notify"`
	}
	if err := toml.Unmarshal(data, &cfg); err != nil {
		return nil, err
	}
	var out []tool
	for name, s := range cfg.MCPServers {
		out = append(out, tool{kind: "MCP server", name: name, run: serverRun(s.Command, s.Args, s.URL), line: lineOf(data, "[mcp_servers."+name)})
	}
	if len(cfg.Notify) > 0 {
		out = append(out, tool{kind: "hook", name: "notify", run: strings.Join(cfg.Notify, " "), line: lineOf(data, "notify")})
	}
	slices.SortFunc(out, func(a, b tool) int { return strings.Compare(a.key(), b.key()) })
	return out, nil
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

func serverRun(command string, args []string, url string) string {
	if command == "" {
		return url
	}
	return strings.Join(append([]string{command}, args...), " ")
}

func memberName(v hujson.Value) string {
	lit, ok := v.Value.(hujson.Literal)
	if !ok {
		return ""
	}
	s, err := strconv.Unquote(string(lit))
	if err != nil {
		var out string
		if json.Unmarshal(lit, &out) == nil {
			return out
		}
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
	for i, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), prefix) {
			return i + 1
		}
	}
	return 0
}

// toolFindings is the semantic diff of an agent tool config: each MCP
// server or hook added, or whose command changed, with the command line
// it would run and where; a config that does not parse is a finding of
// its own.
func toolFindings(p string, old, new []byte) []Finding {
	after, err := toolsOf(p, new)
	if err != nil {
		return []Finding{{Path: p, Kind: KindUnparsable, Reason: "agent tool config that could not be read: " + textsafe.Line(truncate(err.Error(), 200)) + "; every server or hook in it is unknown"}}
	}
	before, _ := toolsOf(p, old)
	was := map[string]tool{}
	for _, t := range before {
		was[t.key()] = t
	}
	var out []Finding
	for _, t := range after {
		f := Finding{Path: p, Line: t.line, Kind: KindEscalation}
		prev, existed := was[t.key()]
		verb := "runs"
		if t.kind == "setting" {
			// What the next agent may do unasked (Claude Code's
			// permissions, project MCP servers approved in advance).
			verb = "is"
		}
		switch {
		case !existed:
			f.Reason = fmt.Sprintf("new %s %s %s %s", t.kind, nameOf(t.name), verb, shown(t.run))
		case prev.run != t.run:
			f.Reason = fmt.Sprintf("%s %s now %s %s (was %s)", t.kind, nameOf(t.name), verb, shown(t.run), shown(prev.run))
		default:
			continue
		}
		out = append(out, f)
	}
	return out
}

// agentFindings are what a change to an agent file says beyond its diff:
// the servers and hooks of a tool config, the marked lines of an
// instruction file. (Phase, category and action are the caller's.)
func agentFindings(category, p string, old, new []byte) []Finding {
	switch category {
	case AgentTools:
		return toolFindings(p, old, new)
	case AgentInstructions:
		return instructionFindings(p, old, new)
	}
	return nil
}

// nameOf is a server's or hook's name as a finding says it.
func nameOf(name string) string { return strconv.Quote(truncate(textsafe.Line(name), 100)) }

// shown is a command line as a finding says it: one line, bounded.
func shown(run string) string {
	if run == "" {
		return "nothing it names (no command or URL)"
	}
	return strconv.Quote(truncate(textsafe.Line(run), 300))
}

// urlOrCommand marks an instruction line that tells the next agent to
// fetch something or run a command.
var (
	urlInLine     = regexp.MustCompile(`(?i)\b(https?|ftp|git|ssh)://[^\s)>\]"'` + "`" + `]+`)
	commandInLine = regexp.MustCompile(`(?i)(^|[\s` + "`" + `$>(;&|])(curl|wget|npx|bunx|uvx|pipx?|npm|pnpm|yarn|bash|sh|zsh|python3?|node|deno|powershell|pwsh|iex|invoke-expression|chmod|eval|base64|nc|ncat|ssh|scp|rm|git\s+(push|config|remote|clone))(\s|$|` + "`" + `)|\|\s*(ba|z)?sh\b`)
)

// instructionFindings marks the lines an instruction file gained that
// hold a URL or a command line, shown inertly: the reviewer sees at once
// what the agent wants the next agent to fetch or run.
func instructionFindings(p string, old, new []byte) []Finding {
	had := map[string]int{}
	for _, l := range strings.Split(string(old), "\n") {
		had[l]++
	}
	var out []Finding
	for i, l := range strings.Split(string(new), "\n") {
		if had[l] > 0 {
			had[l]--
			continue
		}
		var what []string
		if u := urlInLine.FindString(l); u != "" {
			what = append(what, "a URL ("+truncate(textsafe.Line(u), 120)+")")
		}
		if commandInLine.MatchString(l) {
			what = append(what, "a command line")
		}
		if len(what) == 0 {
			continue
		}
		out = append(out, Finding{Path: p, Line: i + 1, Kind: KindEscalation,
			Reason: fmt.Sprintf("instruction for the next agent with %s: %s", strings.Join(what, " and "), strconv.Quote(truncate(textsafe.Line(strings.TrimSpace(l)), 200)))})
		if len(out) == maxInstructionMarks {
			out = append(out, Finding{Path: p, Kind: KindEscalation, Reason: fmt.Sprintf("more lines with URLs or commands past the first %d: see the diff", maxInstructionMarks)})
			break
		}
	}
	return out
}

// maxInstructionMarks bounds the marked lines of one file.
const maxInstructionMarks = 20
