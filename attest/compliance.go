package attest

import (
	"fmt"
	"strings"
	"time"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
	cueerrors "cuelang.org/go/cue/errors"
)

// Comply evaluates a CUE compliance policy against a predicate (JSON).
// The policy constrains the field `predicate`, for example:
//
//	predicate: verdict: passed: true
//	predicate: trust: findings: [...{severity: !="error"}]
//	predicate: egress: decisions: [...{decision: "allowed"} | {decision: "denied", protocol: "dns"}]
//	predicate: policy: effectiveSha256: "9f2c..." | "77ab..."
//	predicate: runner: gvisorVersion: >="v0.0.0-20260901"
//
// Every violation is reported with its path.
func Comply(name string, policy, predicate []byte) error {
	// CUE evaluation cannot be cancelled; a policy that takes too long is
	// an error (the evaluation finishes in the background).
	done := make(chan error, 1)
	go func() { done <- comply(name, policy, predicate) }()
	select {
	case err := <-done:
		return err
	case <-time.After(complianceTimeout):
		return fmt.Errorf("policy %s: evaluation took longer than %v", name, complianceTimeout)
	}
}

const complianceTimeout = 30 * time.Second

func comply(name string, policy, predicate []byte) error {
	ctx := cuecontext.New()
	pol := ctx.CompileBytes(policy, cue.Filename(name))
	if err := pol.Err(); err != nil {
		return fmt.Errorf("policy %s: %s", name, details(err))
	}
	data := ctx.CompileBytes(predicate, cue.Filename("predicate.json"))
	if err := data.Err(); err != nil {
		return fmt.Errorf("predicate: %s", details(err))
	}
	v := pol.FillPath(cue.ParsePath("predicate"), data)
	if err := v.Validate(cue.Concrete(true)); err != nil {
		return fmt.Errorf("%s", details(err))
	}
	return nil
}

func details(err error) string {
	var msgs []string
	for _, e := range cueerrors.Errors(err) {
		msgs = append(msgs, strings.TrimSpace(cueerrors.Details(e, nil)))
		if len(msgs) == 10 {
			msgs = append(msgs, "...")
			break
		}
	}
	return strings.Join(msgs, "; ")
}
