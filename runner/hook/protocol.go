package hook

import (
	"encoding/json"
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

// maxInput bounds the JSON document read from standard input.
const maxInput = 1 << 20

// Input is one hook call.
type Input struct {
	Command      string          `json:"command"`
	ResponseFile *string         `json:"responseFile"`
	State        State           `json:"state"`
	Args         json.RawMessage `json:"args"`
}

// State is what prepare_job returns and the runner hands back: the job
// id and its directory.
type State struct {
	Container string `json:"container,omitempty"`
	JobDir    string `json:"jobDir,omitempty"`
}

// Mount is a volume of the job container.
type Mount struct {
	Source   string `json:"sourceVolumePath"`
	Target   string `json:"targetVolumePath"`
	ReadOnly bool   `json:"readOnly"`
}

// Container is the job container of prepare_job.
type Container struct {
	Image              string            `json:"image"`
	WorkingDirectory   string            `json:"workingDirectory"`
	Env                map[string]string `json:"environmentVariables"`
	UserMountVolumes   []Mount           `json:"userMountVolumes"`
	SystemMountVolumes []Mount           `json:"systemMountVolumes"`
	PortMappings       []string          `json:"portMappings"`
	// Registry credentials are read only to be dropped: they never
	// enter a sandbox or a log.
	Registry json.RawMessage `json:"registry"`
}

// PrepareArgs are prepare_job's arguments.
type PrepareArgs struct {
	Container *Container `json:"container"`
	Services  []Service  `json:"services"`
}

// ScriptArgs are run_script_step's arguments.
type ScriptArgs struct {
	EntryPoint       string            `json:"entryPoint"`
	EntryPointArgs   []string          `json:"entryPointArgs"`
	Env              map[string]string `json:"environmentVariables"`
	PrependPath      []string          `json:"prependPath"`
	WorkingDirectory string            `json:"workingDirectory"`
}

// ContainerStepArgs are run_container_step's arguments (a Docker action):
// a script step's, and the image with its volumes.
type ContainerStepArgs struct {
	ScriptArgs
	Image string `json:"image"`
	// Dockerfile is set when the action builds its image.
	Dockerfile         *string `json:"dockerfile"`
	UserMountVolumes   []Mount `json:"userMountVolumes"`
	SystemMountVolumes []Mount `json:"systemMountVolumes"`
	// Registry credentials: dropped, as for the job container.
	Registry json.RawMessage `json:"registry"`
}

// Service is one service container of prepare_job.
type Service struct {
	ContextName      string            `json:"contextName"`
	Image            string            `json:"image"`
	EntryPoint       *string           `json:"entrypoint"`
	EntryPointArgs   []string          `json:"entryPointArgs"`
	Env              map[string]string `json:"environmentVariables"`
	UserMountVolumes []Mount           `json:"userMountVolumes"`
	PortMappings     []string          `json:"portMappings"`
	Registry         json.RawMessage   `json:"registry"`
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
// with the longest matching target.
func (m Mounts) Host(containerPath string) (string, bool) {
	p := path.Clean(containerPath)
	best := -1
	for i, mt := range m {
		t := path.Clean(mt.Target)
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
