package runner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/input"
)

// StepSpec is one step of a steps file.
type StepSpec struct {
	// Name labels the step's output and result. Default: "step N".
	Name string `json:"name,omitempty"`
	// Run is a shell script.
	Run string `json:"run"`
	// Shell is "sh" (default: sh -e) or "bash" (bash -eo pipefail).
	Shell string `json:"shell,omitempty"`
	// Env is added to the step's environment.
	Env map[string]string `json:"env,omitempty"`
	// WorkingDirectory is relative to the workspace, or absolute inside
	// the sandbox. Default: the workspace.
	WorkingDirectory string `json:"working-directory,omitempty"`
	// Timeout bounds the step ("90s", "10m").
	Timeout Duration `json:"timeout,omitempty"`
	// Command, when set, is run as is instead of Run through a shell
	// (the runner hook's entry point and arguments).
	Command []string `json:"-"`
	// Image, when set, runs the step in a container of its own inside the
	// job's sandbox, on that image's root with Mounts (a Docker action):
	// the network, limits and record are the job's.
	Image  *Image         `json:"-"`
	Mounts []gvisor.Mount `json:"-"`
	Files  []gvisor.File  `json:"-"`
	// Scripts are host files the step runs that its caller wrote for it
	// (the runner's script of a run: step, which holds its expressions
	// expanded): the job's credentials in them are replaced by their
	// placeholders before the step starts.
	Scripts []HostFile `json:"-"`
}

// HostFile is a host file below Base, reached without following
// symlinks.
type HostFile struct {
	Base, Path string
}

// Duration is a time.Duration that reads "90s" or a number of seconds.
type Duration time.Duration

// UnmarshalJSON accepts "1m30s" or 90.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("timeout %q: use a duration such as 90s or 10m", s)
		}
		*d = Duration(v)
		return nil
	}
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil {
		return fmt.Errorf("timeout %s: use a duration such as 90s or 10m", b)
	}
	*d = Duration(secs * float64(time.Second))
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// stepsFile is the document form: {steps: [...]}. A bare list is accepted
// too.
type stepsFile struct {
	Steps []StepSpec `json:"steps"`
}

// maxStepsFile bounds the steps file we read.
const maxStepsFile = 4 << 20

// LoadSteps reads a YAML or JSON steps file and validates it.
func LoadSteps(path string) ([]StepSpec, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("steps file: %w", err)
	}
	if fi.Size() > maxStepsFile {
		return nil, fmt.Errorf("steps file %s is %d bytes; the limit is %d", path, fi.Size(), maxStepsFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("steps file: %w", err)
	}
	steps, err := ParseSteps(b)
	if err != nil {
		return nil, fmt.Errorf("steps file %s: %w", path, err)
	}
	return steps, nil
}

// ParseSteps parses and validates a steps document.
func ParseSteps(b []byte) ([]StepSpec, error) {
	var doc stepsFile
	if err := unmarshalStrict(b, &doc); err != nil {
		var list []StepSpec
		if err2 := unmarshalStrict(b, &list); err2 != nil {
			return nil, fmt.Errorf("not a steps document (want `steps:` with a list of {name, run, env, working-directory, timeout}): %w", err)
		}
		doc.Steps = list
	}
	if len(doc.Steps) == 0 {
		return nil, errors.New("no steps: add at least one {name, run} under `steps:`")
	}
	seen := map[string]bool{}
	for i := range doc.Steps {
		s := &doc.Steps[i]
		if s.Name == "" {
			s.Name = fmt.Sprintf("step %d", i+1)
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("step %d: name %q is used twice; step names must be unique", i+1, s.Name)
		}
		seen[s.Name] = true
		if strings.TrimSpace(s.Run) == "" {
			return nil, fmt.Errorf("step %q: `run` is empty", s.Name)
		}
		if strings.ContainsRune(s.Run, 0) {
			return nil, fmt.Errorf("step %q: `run` contains a NUL byte", s.Name)
		}
		switch s.Shell {
		case "", "sh", "bash":
		default:
			return nil, fmt.Errorf("step %q: shell %q is not supported; use sh or bash", s.Name, s.Shell)
		}
		for k, v := range s.Env {
			if err := checkEnv(k, v); err != nil {
				return nil, fmt.Errorf("step %q: %w", s.Name, err)
			}
		}
		if s.Timeout < 0 {
			return nil, fmt.Errorf("step %q: timeout must be positive", s.Name)
		}
	}
	return doc.Steps, nil
}

// unmarshalStrict reads a JSON document as JSON, anything else as YAML,
// unknown fields refused either way. JSON is not read as YAML, which
// refuses some characters a JSON string may hold (a DEL, a C1 control)
// and reads others apart: a U+0085 is a line break to YAML, so a JSON
// run "a\u0085b" (the character itself) was read "a b".
func unmarshalStrict(b []byte, v any) error {
	if !json.Valid(b) {
		return yaml.UnmarshalStrict(b, v)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// checkEnv rejects names and values that cannot be an environment entry.
func checkEnv(k, v string) error {
	if k == "" || strings.ContainsAny(k, "=\x00") {
		return fmt.Errorf("environment variable name %q is invalid", k)
	}
	if strings.ContainsRune(v, 0) {
		return fmt.Errorf("environment variable %s contains a NUL byte", k)
	}
	return nil
}

// argv is the command that runs the step's script.
func (s StepSpec) argv() []string {
	if len(s.Command) > 0 {
		return s.Command
	}
	if s.Shell == "bash" {
		return []string{"bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", s.Run}
	}
	return []string{"/bin/sh", "-e", "-c", s.Run}
}

// ChooseSteps are the steps of airlock run: a steps file, a command (run
// as given, as docker run does: no shell in between), or none when the
// policy's named job (policyJob) gives them; exactly one of the three.
func ChooseSteps(stepsFile string, command []string, policyJob string) ([]StepSpec, error) {
	switch {
	case stepsFile != "" && len(command) > 0, policyJob != "" && (stepsFile != "" || len(command) > 0):
		return nil, input.Errorf("", "give one of a steps file, a policy's job or a command")
	case stepsFile != "":
		steps, err := LoadSteps(stepsFile)
		if err != nil {
			return nil, input.Error{Err: err}
		}
		return steps, nil
	case len(command) > 0:
		return []StepSpec{{Name: "run", Command: command}}, nil
	case policyJob != "":
		return nil, nil
	}
	return nil, input.Errorf("", "nothing to run: give a command after -- (airlock run -- make test) or a steps file")
}
