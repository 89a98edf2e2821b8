// Package runnersim is the official Actions runner (actions/runner) as a
// container hook sees it, for tests: the payloads it writes on the
// hook's standard input (payloads/, in its own shape), the directories it
// keeps for a job, the response file it creates before a call and the way
// it reads it after, and the way it runs a script step and a JavaScript
// action. The hook's tests run it on the test's host; deploy/arc's run it
// inside a runner pod, writing the files through the pod's volume.
//
// Layer 0: the bottom, for tests only; imports nothing of airlock's.
package runnersim

import (
	"bytes"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/template"
)

// The runner's names for what it sends and keeps.
const (
	PrepareJob    = "prepare_job"
	RunScriptStep = "run_script_step"
	CleanupJob    = "cleanup_job"
	// ResponsesDir is where, under its temp directory, the runner
	// creates a call's response file (ContainerHookManager's
	// GenerateResponsePath).
	ResponsesDir = "_runner_hook_responses"
	// FileCommandsDir holds a step's file commands (GITHUB_OUTPUT, ...).
	FileCommandsDir = "_runner_file_commands"
)

//go:embed payloads/*.json
var payloads embed.FS

// Payload fills a template of payloads/.
type Payload struct {
	Response                                   string
	Work, Externals, Temp, Actions, Tool, Home string
	Workflow, FileCommands, Repo               string
	// prepare_job's job container (none: NoContainer, a job with
	// services only) and services.
	NoContainer bool
	Image       string
	Options     *string
	// The container's registry block: none unless one of these is set
	// (RegistryUser "octocat" unless given).
	RegistryUser, RegistryPassword string
	Services                       []Service
	// A step's.
	EntryPoint  string
	Args        []string
	Env         map[string]string
	PrependPath any // a list, or a string (runners up to 2.293)
	Dockerfile  *string
	State       json.RawMessage
}

// Service is one service of prepare_job.
type Service struct {
	Image   string
	Args    []string
	Options *string
	Env     map[string]string
	Ports   []string
	// The service's registry block: none unless RegistryUser is set.
	RegistryUser, RegistryPassword string
}

// Render fills the template of command with p (its paths included), as
// one compact line, as the runner writes it.
func Render(t testing.TB, command string, p Payload) []byte {
	t.Helper()
	if p.State == nil {
		p.State = json.RawMessage("null")
	}
	tmpl, err := template.New(command+".json").Funcs(template.FuncMap{"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	}, "registryServer": registryServer}).ParseFS(payloads, "payloads/"+command+".json")
	if err != nil {
		t.Fatal(err)
	}
	var b, line bytes.Buffer
	if err := tmpl.Execute(&b, p); err != nil {
		t.Fatal(err)
	}
	if err := json.Compact(&line, b.Bytes()); err != nil {
		t.Fatalf("%s: %v\n%s", command, err, b.String())
	}
	return line.Bytes()
}

// registryServer is the serverUrl the runner sends with a container's
// credentials (actions/runner src/Runner.Worker/Container/DockerUtil.cs,
// ParseRegistryHostnameFromImageName, as ContainerInfo.cs sets
// RegistryServer): the first component of a name of two that has a ':'
// or a '.', the first of a name of three or more, else "" (Docker Hub).
func registryServer(image string) string {
	parts := strings.Split(image, "/")
	switch {
	case len(parts) == 2 && strings.ContainsAny(parts[0], ":."):
		return parts[0]
	case len(parts) > 2:
		return parts[0]
	}
	return ""
}

// Runner is the runner's side of a job: its work directory as the hook
// sees it (Work), where the test reaches that same directory (Disk: Work
// itself on the test's host, or the pod's work volume on the node), the
// externals directory with the runner's node, and the checked-out
// repository (under Work).
type Runner struct {
	Work, Disk, Externals, Repo string
}

// Temp is the runner's temp directory, as the hook sees it.
func (r Runner) Temp() string { return filepath.Join(r.Work, "_temp") }

// OnDisk is where the test reaches path, a path under Work.
func (r Runner) OnDisk(path string) string {
	rel, err := filepath.Rel(r.Work, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		panic(fmt.Sprintf("runnersim: %s is not under the work directory %s", path, r.Work))
	}
	return filepath.Join(r.Disk, rel)
}

// MakeDirs makes the directories the runner keeps under its work
// directory for a job: temp (with the GitHub home, the workflow
// directory, file commands and hook responses), actions and tool.
func (r Runner) MakeDirs(t testing.TB) {
	t.Helper()
	temp := r.OnDisk(r.Temp())
	for _, d := range []string{filepath.Join(temp, "_github_home"), filepath.Join(temp, "_github_workflow"), filepath.Join(temp, FileCommandsDir),
		filepath.Join(temp, ResponsesDir), r.OnDisk(filepath.Join(r.Work, "_actions")), r.OnDisk(filepath.Join(r.Work, "_tool"))} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// Fill sets p's paths to this runner's.
func (r Runner) Fill(p Payload) Payload {
	temp := r.Temp()
	p.Work, p.Externals, p.Temp = r.Work, r.Externals, temp
	p.Actions, p.Tool = filepath.Join(r.Work, "_actions"), filepath.Join(r.Work, "_tool")
	p.Home, p.Workflow = filepath.Join(temp, "_github_home"), filepath.Join(temp, "_github_workflow")
	p.FileCommands, p.Repo = filepath.Join(temp, FileCommandsDir), r.Repo
	return p
}

// WriteEvent writes the workflow's event, a pull request of acme/app
// opened by an agent (Copilot, a Bot) from head onto base, where the
// runner keeps it (_github_workflow/event.json, /github/workflow in the
// job).
func (r Runner) WriteEvent(t testing.TB, base, head string) {
	t.Helper()
	event := map[string]any{"action": "opened", "number": 7, "pull_request": map[string]any{
		"number": 7, "user": map[string]any{"login": "Copilot", "type": "Bot"},
		"head": map[string]any{"ref": "copilot/x", "sha": head, "repo": map[string]any{"full_name": "acme/app"}},
		"base": map[string]any{"ref": "main", "sha": base, "repo": map[string]any{"full_name": "acme/app"}},
	}}
	b, _ := json.Marshal(event)
	if err := os.WriteFile(r.OnDisk(filepath.Join(r.Temp(), "_github_workflow", "event.json")), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// NewResponseFile is where the runner wants a call's response, as the
// hook sees it: a new empty file in _runner_hook_responses
// (GenerateResponsePath, IOUtil.CreateEmptyFile).
func (r Runner) NewResponseFile(t testing.TB) string {
	t.Helper()
	p := filepath.Join(r.Temp(), ResponsesDir, randomHex(16)+".json")
	if err := os.MkdirAll(filepath.Dir(r.OnDisk(p)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.OnDisk(p), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// ScriptStep is the run_script_step payload of a run: step with the
// runner's shell format (a ScriptHandlerHelpers format such as
// "bash --noprofile --norc -e -o pipefail {0}", its arguments with {0}
// for the script file, cut at single spaces as the runner cuts them),
// the script written to the runner's temp directory. The step's
// environment is GITHUB_WORKSPACE and STEP_VAR=x, and env.
func (r Runner) ScriptStep(t testing.TB, state json.RawMessage, shell, format, script string, env map[string]string) Payload {
	t.Helper()
	name := randomHex(8) + ".sh"
	if err := os.WriteFile(r.OnDisk(filepath.Join(r.Temp(), name)), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	stepEnv := map[string]string{"GITHUB_WORKSPACE": "/__w/app/app", "STEP_VAR": "x"}
	for k, v := range env {
		stepEnv[k] = v
	}
	return Payload{
		EntryPoint: shell, Args: strings.Split(strings.ReplaceAll(format, "{0}", "/__w/_temp/"+name), " "),
		Env: stepEnv, PrependPath: []string{"/__w/_temp/bin"}, State: state,
	}
}

// JavaScriptAction is the run_script_step payload of a small node action
// (acme/greet@v1: it greets INPUT_WHO, sets the output greeting and
// writes a step summary), run the way the runner runs one
// (NodeScriptActionHandler.cs): its node from the externals, the
// script's path (its quotes trimmed by ResolvePathForStepHost), INPUT_
// variables, and file commands that the runner creates, empty, before
// the step: set_output_js, step_summary_js, set_env_js, add_path_js.
func (r Runner) JavaScriptAction(t testing.TB, state json.RawMessage, inputs map[string]string) Payload {
	t.Helper()
	dir := r.OnDisk(filepath.Join(r.Work, "_actions", "acme", "greet", "v1"))
	files := map[string]string{
		"action.yml": "name: greet\ninputs:\n  who: {required: true}\nruns:\n  using: node20\n  main: index.js\n",
		"index.js": `const fs = require("fs");
const who = process.env.INPUT_WHO;
fs.appendFileSync(process.env.GITHUB_OUTPUT, "greeting=Hello " + who + "\n");
fs.appendFileSync(process.env.GITHUB_STEP_SUMMARY, "### greeted " + who + "\n");
console.log("::notice::greeted " + who + " with node " + process.version + " in " + process.cwd());
`,
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"GITHUB_WORKSPACE": "/__w/app/app"}
	for _, f := range []struct{ variable, file string }{{"GITHUB_OUTPUT", "set_output_js"}, {"GITHUB_STEP_SUMMARY", "step_summary_js"}, {"GITHUB_ENV", "set_env_js"}, {"GITHUB_PATH", "add_path_js"}} {
		env[f.variable] = "/__w/_temp/" + FileCommandsDir + "/" + f.file
		if err := os.WriteFile(r.OnDisk(filepath.Join(r.Temp(), FileCommandsDir, f.file)), nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range inputs {
		env[k] = v
	}
	return Payload{EntryPoint: "/__e/node20/bin/node", Args: []string{"/__w/_actions/acme/greet/v1/index.js"}, Env: env, PrependPath: []string{}, State: state}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
