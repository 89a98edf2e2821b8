// Package trust finds the files an agent can plant for a human or the
// next CI run to execute without reading them: git hooks, code-executing
// git config, attribute drivers, CI definitions, build entry points, and
// what the next agent reads or runs (instructions, MCP servers, hooks).
// It diffs them twice: what the pull request's commits changed (authored,
// from git objects or a trusted source's trees, with a semantic diff of
// GitHub workflows), and what the sandboxed job itself changed in the
// workspace (run time, from snapshots before and after). Each finding
// carries the action the policy sets for its category and phase (allow,
// warn, fail, revert or readonly), the severity that follows from it,
// and the check that made it (checks.go). Findings are made here only.
//
// It owns a job's trust life cycle (watch.go): a Watch takes the
// baseline before the job (or, deferred, after the job's checkout),
// compares the workspace with it once the sandbox is gone (with a
// checked-out commit's tree as the worktree's baseline when the door
// gives Commits), reverts, turns the writes the sandbox refused on the
// read-only paths into findings, and decides the Report. runner calls
// it at those moments and knows no finding.
//
// Everything read here is hostile: paths are opened through os.Root so no
// symlink leads out of the workspace, sizes and counts are bounded, hard
// links are not shown, and git runs with nothing of the repository's
// config able to execute (internal/gitexec).
//
// Layer 2: imports policies, gvisor/monitor (the record of refused writes
// and execs) and internal packages only; it never starts a sandbox and
// knows no job beyond its Config.
package trust

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/airlock-ci/airlock/policies"
)

// Category is a part of the trust set: the built-in ones below, or one
// a policy names (trust.globs), with the policy's actions for it.
type Category string

// Categories.
const (
	GitHooks      Category = "git-hooks"
	GitConfig     Category = "git-config"
	GitAttributes Category = "git-attributes"
	CI            Category = "ci"
	BuildEntry    Category = "build-entry"
	// AgentInstructions are the files that tell the next agent what to
	// do; AgentTools the agent tool configs that start programs (MCP
	// servers, agent hooks). See agent.go.
	AgentInstructions Category = "agent-instructions"
	AgentTools        Category = "agent-tools"
	// Inspection is the category of findings about the inspection
	// itself: it stopped at a bound, or could not read what it must.
	Inspection Category = "trust"
)

// Actions.
const (
	ActionAllow    = "allow"
	ActionWarn     = "warn"
	ActionFail     = "fail"
	ActionRevert   = "revert"
	ActionReadonly = "readonly"
)

// defaultGlobs are the built-in paths of each category, relative to the
// workspace, in doublestar syntax. .git/config's keys are read on their
// own.
var defaultGlobs = map[Category][]string{
	GitHooks:      {".git/hooks/**", ".git/modules/**/hooks/**"},
	GitAttributes: {"**/.gitattributes", ".gitmodules", ".git/info/attributes"},
	// Files inside .git that make git take config or hooks from
	// elsewhere, or that configure submodules and worktrees.
	GitConfig: {".git/commondir", ".git/modules/**/config", ".git/modules/**/config.worktree", ".git/modules/**/commondir",
		".git/worktrees/*/config.worktree", ".git/worktrees/*/commondir", ".git/worktrees/*/gitdir", ".git/objects/info/alternates"},
	CI: {
		".github/workflows/**", ".github/actions/**", "**/action.yml", "**/action.yaml",
		".gitlab-ci.yml", ".circleci/**", "Jenkinsfile", "azure-pipelines.yml", ".buildkite/**",
		policies.RepoPolicyPath,
	},
	// The agent files are matched without regard to letter case (macOS
	// and Windows read AGENTS.md as agents.md) and at any depth where a
	// tool reads a nested project's own. The tool directories themselves
	// are listed too, so that a symlink standing for one is a finding.
	AgentInstructions: {
		"**/AGENTS.md", "**/AGENTS.override.md", "**/AGENT.md", "**/CLAUDE.md", "**/CLAUDE.local.md", "**/GEMINI.md", "**/QWEN.md", "**/CRUSH.md",
		".github/copilot-instructions.md", ".github/instructions/**", ".github/prompts/**", ".github/chatmodes/**", ".github/agents/**",
		".github/instructions", ".github/prompts", ".github/chatmodes", ".github/agents",
		".cursorrules", "**/.cursor/rules/**", "**/.cursor/rules", ".cursor/commands/**", ".windsurfrules", ".windsurf/rules/**", ".windsurf/workflows/**",
		".clinerules", ".clinerules/**", ".roorules", ".roo/rules/**", ".continue/rules/**", ".continue/prompts/**",
		".amazonq/rules/**", ".kiro/steering/**", ".junie/guidelines.md", ".goosehints", ".rules",
		"**/.claude/commands/**", "**/.claude/agents/**", "**/.claude/skills/**", ".claude/output-styles/**", "**/.claude/hooks/**",
		".gemini/commands/**", ".gemini/system.md",
	},
	AgentTools: {
		"**/.mcp.json", "**/.vscode/mcp.json", "**/.cursor/mcp.json", "**/.gemini/settings.json",
		"**/.claude/settings.json", "**/.claude/settings.local.json", "**/.codex/config.toml",
		".cursor/hooks.json", ".cursor/environment.json", ".roo/mcp.json", ".amazonq/mcp.json", ".kiro/settings/mcp.json",
		".zed/settings.json", "opencode.json", "opencode.jsonc", ".continue/mcpServers/**", ".qwen/settings.json", ".crush.json",
		"**/.claude", "**/.cursor", "**/.gemini", "**/.codex", ".windsurf", ".roo", ".kiro", ".amazonq", ".continue", ".zed", ".qwen", ".vscode",
	},
	BuildEntry: {
		"**/Makefile", "**/makefile", "**/GNUmakefile", "**/*.mk", "**/package.json", ".husky/**",
		".pre-commit-config.yaml", "lefthook.yml", "lefthook.yaml", ".lefthook.yml", ".lefthook.yaml",
		// VS Code reads .VSCode/Settings.json too where letter case does
		// not count (macOS, Windows).
		".vscode/tasks.json", "**/.[vV][sS][cC][oO][dD][eE]/[sS][eE][tT][tT][iI][nN][gG][sS].[jJ][sS][oO][nN]", ".devcontainer/**", ".envrc",
		"justfile", "Justfile", ".justfile", "Taskfile.yml", "Taskfile.yaml", "Taskfile.dist.yml", "Taskfile.dist.yaml",
		"**/.npmrc", ".yarnrc", ".yarnrc.yml", ".pnpmfile.cjs", ".cargo/config", ".cargo/config.toml",
		"gradle/wrapper/**", "gradlew", ".mvn/**", "mvnw",
	},
}

// categoryOrder decides for a path that several categories match.
var categoryOrder = []Category{GitHooks, GitConfig, GitAttributes, CI, AgentTools, AgentInstructions, BuildEntry}

// Set is the compiled trust section of a policy.
type Set struct {
	// globs per category; those of caseless categories lowered, and
	// matched against the lowered path.
	globs    map[Category][]string
	order    []Category
	authored map[Category]string
	runtime  map[Category]string
	keys     []string // git config key patterns
	// scripts are files that are agent-tools because an agent tool's
	// config runs them (WithToolScripts): path -> what runs it.
	scripts map[string]string
}

// NewSet compiles the policy's trust section over the built-in lists.
func NewSet(t policies.Trust) (*Set, error) {
	s := &Set{globs: map[Category][]string{}, authored: map[Category]string{}, runtime: map[Category]string{}, order: slices.Clone(categoryOrder)}
	for c, g := range defaultGlobs {
		s.globs[c] = slices.Clone(g)
	}
	names := map[string]bool{}
	for c := range t.Globs {
		names[c] = true
	}
	for c := range t.Authored {
		names[c] = true
	}
	for c := range t.Runtime {
		names[c] = true
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		c := Category(name)
		for _, g := range t.Globs[name] {
			if !doublestar.ValidatePattern(g) {
				return nil, fmt.Errorf("trust.globs.%s: %q is not a valid glob", name, g)
			}
			s.globs[c] = append(s.globs[c], g)
		}
		if !slices.Contains(s.order, c) {
			s.order = append(s.order, c)
		}
	}
	for _, c := range s.order {
		s.authored[c] = orDefault(t.Authored[string(c)], ActionWarn)
		s.runtime[c] = orDefault(t.Runtime[string(c)], ActionWarn)
		if caseless[c] {
			for i, g := range s.globs[c] {
				s.globs[c][i] = strings.ToLower(g)
			}
		}
	}
	s.keys = append(slices.Clone(builtinConfigKeys), t.GitConfigKeys...)
	return s, nil
}

func orDefault(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

// caseless are the categories matched without regard to letter case:
// the agents read their files on case-insensitive file systems too.
var caseless = map[Category]bool{AgentInstructions: true, AgentTools: true}

// Category returns the category of a workspace-relative path (slash
// separated), or "".
func (s *Set) Category(p string) Category {
	p = path.Clean(strings.TrimPrefix(p, "./"))
	lower := strings.ToLower(p)
	for _, c := range s.order {
		name := p
		if caseless[c] {
			name = lower
		}
		for _, g := range s.globs[c] {
			if ok, _ := doublestar.Match(g, name); ok {
				return c
			}
		}
	}
	if s.scripts[p] != "" {
		return AgentTools
	}
	return ""
}

// AuthoredAction and RuntimeAction are the policy's action for a
// category in each phase.
func (s *Set) AuthoredAction(category Category) string {
	return orDefault(s.authored[category], ActionWarn)
}

// RuntimeAction: see AuthoredAction.
func (s *Set) RuntimeAction(category Category) string {
	return orDefault(s.runtime[category], ActionWarn)
}

// ReadonlyCategories are the categories whose files are mounted read-only
// into the sandbox.
func (s *Set) ReadonlyCategories() []Category {
	var out []Category
	for _, c := range s.order {
		if s.runtime[c] == ActionReadonly {
			out = append(out, c)
		}
	}
	return out
}
