package hook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"github.com/airlock-ci/airlock/internal/paths"
)

// Commands of the protocol.
const (
	PrepareJob       = "prepare_job"
	RunScriptStep    = "run_script_step"
	RunContainerStep = "run_container_step"
	CleanupJob       = "cleanup_job"
)

// maxInput bounds the JSON document read from standard input. The
// runner puts a step's whole environment in it. It also bounds what the
// hook writes out of it and reads back (prepare.json, a request to the
// daemon): see encodeBounded.
const maxInput = 4 << 20

// encodeBounded writes v, read from the runner's payload, as JSON for
// its reader in the hook (the daemon, endStaleJobs), which reads at most
// maxInput bytes. A payload within maxInput can grow when written out
// again (each invalid UTF-8 byte becomes \ufffd, every field the runner
// left out is written, a mount sent as {} takes 90 bytes), so the bound
// is checked on what is written: past it the call fails here, saying
// so, rather than being cut by its reader (a step failing as "the job's
// daemon went away", a job endStaleJobs cannot read and leaves running).
// <, > and & are written as they are (the payload's `&&` and `>` stay
// one byte each).
func encodeBounded(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	if b.Len() > maxInput {
		return nil, fmt.Errorf("the runner's arguments are %d bytes written out as JSON, more than the %d the hook reads back", b.Len(), maxInput)
	}
	return b.Bytes(), nil
}

// The types below are the runner's own, as it serialises them
// (actions/runner src/Runner.Worker/Container/ContainerHooks/HookInput.cs
// and ContainerInfo.cs's MountVolume): camelCase properties, dictionary
// keys verbatim, and nulls written out (the whole state of prepare_job,
// a container's dockerfile, entryPoint, workingDirectory, createOptions
// and registry). A null reads as the zero value.

// Input is one hook call (HookInput).
type Input struct {
	Command      string          `json:"command"`
	ResponseFile *string         `json:"responseFile"`
	Args         json.RawMessage `json:"args"`
	State        State           `json:"state"`
}

// State is what prepare_job returns and the runner hands back: the job
// id and its directory.
type State struct {
	Container string `json:"container,omitempty"`
	JobDir    string `json:"jobDir,omitempty"`
}

// Mount is a volume (MountVolume). UserProvidedValue is set for the
// workflow's own volumes (container: volumes:), which the runner also
// lists apart as userMountVolumes.
type Mount struct {
	UserProvidedValue *string `json:"userProvidedValue"`
	Source            string  `json:"sourceVolumePath"`
	Target            string  `json:"targetVolumePath"`
	ReadOnly          bool    `json:"readOnly"`
}

// Container is a container (HookContainer): the job container and each
// service of prepare_job, and a Docker action's container in
// run_container_step. The runner sends no name for a service: the
// workflow's key for it (services: redis:) is not in the payload
// (actions/runner#2783).
type Container struct {
	Image string `json:"image"`
	// Dockerfile is set (and Image null) when an action builds its image.
	Dockerfile *string `json:"dockerfile"`
	// EntryPointArgs are the container's command (a service's, an
	// action's args:) cut at single spaces, empty pieces dropped, quotes
	// left inside the pieces; see Args.
	EntryPointArgs   []string `json:"entryPointArgs"`
	EntryPoint       string   `json:"entryPoint"`
	WorkingDirectory string   `json:"workingDirectory"`
	CreateOptions    string   `json:"createOptions"`
	// Registry is the workflow's credentials for the image (null when it
	// gives none); never written out again (see Registry).
	Registry *Registry         `json:"registry"`
	Env      map[string]string `json:"environmentVariables"`
	// PortMappings are the workflow's ports: entries as written
	// ("8080:80", "6379", "127.0.0.1:8080:80/tcp").
	PortMappings       []string `json:"portMappings"`
	SystemMountVolumes []Mount  `json:"systemMountVolumes"`
	UserMountVolumes   []Mount  `json:"userMountVolumes"`
}

// PrepareArgs are prepare_job's arguments (PrepareJobArgs).
type PrepareArgs struct {
	Container *Container  `json:"container"`
	Services  []Container `json:"services"`
}

// ScriptArgs are run_script_step's arguments (ScriptStepArgs). The
// runner cuts the step's command line at single spaces
// (arguments.Split(' ')), keeping empty pieces and the quotes inside
// them: `shell: pwsh` arrives as -command, ". and '/__w/_temp/x.ps1'".
type ScriptArgs struct {
	EntryPointArgs   []string          `json:"entryPointArgs"`
	EntryPoint       string            `json:"entryPoint"`
	Env              map[string]string `json:"environmentVariables"`
	PrependPath      PathList          `json:"prependPath"`
	WorkingDirectory string            `json:"workingDirectory"`
}

// ContainerStepArgs are run_container_step's arguments: the Docker
// action's container (ContainerStepArgs is a HookContainer). The runner
// sends no prependPath for it: the action runs with its image's PATH.
type ContainerStepArgs = Container

// PathList is prependPath, newest entry first: a list, or one string
// from runners up to 2.293.
type PathList []string

// UnmarshalJSON reads a list, a string or null.
func (p *PathList) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*p = nil
		if s != "" {
			*p = PathList{s}
		}
		return nil
	}
	var l []string
	if err := json.Unmarshal(b, &l); err != nil {
		return fmt.Errorf("prependPath: want a list of directories or one string: %w", err)
	}
	*p = l
	return nil
}

// Registry is a container's registry credentials as the runner sends
// them (ContainerRegistry; HookContainer sets it only when the workflow's
// credentials: give a username): serverUrl is what the runner read off
// the image's name (DockerUtil.ParseRegistryHostnameFromImageName), which
// airlock does not use: the credentials go to the registry of the image
// they came with, as images.ParseRef reads it (pullCredentials).
//
// They serve the pull on the host alone: a Registry is never written out
// (it marshals as null, so neither the job's stored payload nor a request
// to the daemon holds it), never printed (String), and prepare_job hands
// them to the job's daemon through a pipe (call.go).
type Registry struct {
	Username, Password, ServerURL string
}

// UnmarshalJSON reads the runner's {"username", "password", "serverUrl"};
// an error never quotes the value.
func (r *Registry) UnmarshalJSON(b []byte) error {
	var w struct {
		Username  *string `json:"username"`
		Password  *string `json:"password"`
		ServerURL *string `json:"serverUrl"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return errors.New("registry: want null or {username, password, serverUrl}, each a string or null")
	}
	*r = Registry{Username: deref(w.Username), Password: deref(w.Password), ServerURL: deref(w.ServerURL)}
	return nil
}

// MarshalJSON writes null: the credentials are never stored nor sent on.
func (Registry) MarshalJSON() ([]byte, error) { return []byte("null"), nil }

// String never shows the password.
func (r Registry) String() string { return fmt.Sprintf("registry credentials of %q", r.Username) }

// GoString never shows the password (%#v).
func (r Registry) GoString() string { return r.String() }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Response is prepare_job's answer, one JSON line in the response file.
type Response struct {
	State    State           `json:"state"`
	Context  ResponseContext `json:"context"`
	IsAlpine bool            `json:"isAlpine"`
}

// ResponseContext describes the job container to the runner.
type ResponseContext struct {
	Container ResponseContainer   `json:"container"`
	Services  []ResponseContainer `json:"services"`
}

// ResponseContainer is a container as the runner sees it.
type ResponseContainer struct {
	ID      string            `json:"id"`
	Network string            `json:"network"`
	Ports   map[string]string `json:"ports"`
}

// ReadInput reads and checks one hook call.
func ReadInput(r io.Reader) (Input, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxInput+1))
	if err != nil {
		return Input{}, fmt.Errorf("hook: read standard input: %w", err)
	}
	if len(b) > maxInput {
		return Input{}, fmt.Errorf("hook: the input is larger than %d bytes", maxInput)
	}
	var in Input
	if err := json.Unmarshal(b, &in); err != nil {
		return Input{}, fmt.Errorf("hook: the input is not the runner's JSON: %w", err)
	}
	switch in.Command {
	case PrepareJob, RunScriptStep, RunContainerStep, CleanupJob:
	default:
		return Input{}, fmt.Errorf("hook: unknown command %q (want prepare_job, run_script_step, run_container_step or cleanup_job)", in.Command)
	}
	return in, nil
}

// Mounts maps container paths to host paths.
type Mounts []Mount

// Host returns the host path of a container path, through the mount
// with the longest matching target. Only absolute paths map, through
// mounts whose target and source are absolute (the runner's are): a
// relative target would match ".../x" and map it above its source
// (cut after the target's "."), an empty source would map below "/".
func (m Mounts) Host(containerPath string) (string, bool) {
	p := path.Clean(containerPath)
	if !path.IsAbs(p) {
		return "", false
	}
	best := -1
	for i, mt := range m {
		t := path.Clean(mt.Target)
		if !path.IsAbs(t) || !path.IsAbs(mt.Source) {
			continue
		}
		if paths.Within(p, t) && (best < 0 || len(t) > len(path.Clean(m[best].Target))) {
			best = i
		}
	}
	if best < 0 {
		return "", false
	}
	t := path.Clean(m[best].Target)
	return path.Join(m[best].Source, strings.TrimPrefix(p, t)), true
}

// Sorted returns the mounts by target, parents first.
func (m Mounts) Sorted() Mounts {
	out := append(Mounts(nil), m...)
	sort.Slice(out, func(i, j int) bool { return out[i].Target < out[j].Target })
	return out
}

// Frame is one message of the daemon's answer to a step: output, or the
// end with the exit code.
type Frame struct {
	// Stream is 1 (stdout) or 2 (stderr) for output.
	Stream int    `json:"stream,omitempty"`
	Data   []byte `json:"data,omitempty"`
	// Done ends the answer; Exit is the step's exit code, Error airlock's
	// own trouble.
	Done  bool   `json:"done,omitempty"`
	Exit  int    `json:"exit"`
	Error string `json:"error,omitempty"`
}

// Request is what a hook call asks of the daemon.
type Request struct {
	Op        string             `json:"op"` // "step", "container-step" or "cleanup"
	Step      *ScriptArgs        `json:"step,omitempty"`
	Container *ContainerStepArgs `json:"container,omitempty"`
}
