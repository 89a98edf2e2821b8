// Package input names what a user gives airlock (a flag of airlock run or
// airlock doctor, an input of the composite action, a setting of the
// runner hook), so that the packages below the doors can say which input
// was wrong without knowing how a door spells it: `airlock run` says
// --rootfs, another door its own name. No package below cmd writes a
// flag's name.
//
// Layer 0: a leaf; it imports nothing of airlock's.
package input

import (
	"errors"
	"fmt"
	"strings"
)

// Name is one input, in words: what an error or a hint is about.
type Name string

// The inputs that errors and hints below the doors name.
const (
	RootFS         Name = "the root filesystem"
	Platform       Name = "the platform"
	WorkspaceMount Name = "the workspace mount"
	Capabilities   Name = "the capabilities"
	User           Name = "the user"
	JobTimeout     Name = "the job timeout"
	StepTimeout    Name = "the step timeout"
	Memory         Name = "the memory limit"
	Pids           Name = "the pids limit"
	CPUs           Name = "the cpu limit"
	Overlay        Name = "the overlay size"
	Tmp            Name = "the /tmp size"
	Output         Name = "the output limit"
	WorkspaceSize  Name = "the workspace size"
	Env            Name = "the environment"
	Format         Name = "the output format"
	Base           Name = "the base revision"
	Event          Name = "the event payload"
	AttestKey      Name = "the signing key"
	StateDir       Name = "the state directory"
	Node           Name = "the runner's node"
	OrgDir         Name = "the organisation policy directory"
	VerifyKey      Name = "the signer's key"
	AllowUnsigned  Name = "the allowance of unsigned evidence"
)

// Error is an input that cannot be honoured: Input names it (empty: the
// inputs as a whole), Err says what was wrong and what to do.
type Error struct {
	Input Name
	Err   error
}

func (e Error) Error() string {
	if e.Input == "" {
		return e.Err.Error()
	}
	return string(e.Input) + ": " + e.Err.Error()
}

func (e Error) Unwrap() error { return e.Err }

// Errorf returns an Error about in.
func Errorf(in Name, format string, args ...any) error {
	return Error{Input: in, Err: fmt.Errorf(format, args...)}
}

// Spelling is how a door names its inputs ("--rootfs").
type Spelling map[Name]string

// Of is n as the door spells it, or n itself when the door has no name
// for it.
func (s Spelling) Of(n Name) string {
	if v, ok := s[n]; ok {
		return v
	}
	return string(n)
}

// Say is err's text with the input it is about named as the door spells
// it: "the root filesystem: the policy sets it" becomes "--rootfs: the
// policy sets it".
func (s Spelling) Say(err error) string {
	text := err.Error()
	var e Error
	if !errors.As(err, &e) || e.Input == "" {
		return text
	}
	if v, ok := s[e.Input]; ok {
		text = strings.Replace(text, string(e.Input)+": ", v+": ", 1)
	}
	return text
}
