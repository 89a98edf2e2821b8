package trust

// Check names the inspection that made a finding, as a linter's rules
// name themselves: a compliance policy or a reviewer can tell a workflow
// that widened its permissions from a file that merely changed, and the
// names are stable (they are in attestations). A check's trouble (a
// bound reached, something unreadable) is a finding of that check with
// the kind KindIncomplete.
type Check string

// The checks.
const (
	// CheckAuthoredDiff compares the trust-set files of the pull
	// request's merge base and head: from the repository's git objects
	// (AuthoredDiff) or from a trusted source's trees (AuthoredFromTrees,
	// IncompleteAuthored).
	CheckAuthoredDiff Check = "authored-diff"
	// CheckRuntimeDiff compares the workspace's trust set before and
	// after the job (Compare), and says when the repository could not be
	// inspected at all (Watch.Finish).
	CheckRuntimeDiff Check = "runtime-diff"
	// CheckWorkflow reads a GitHub workflow's new version for what became
	// more dangerous (WorkflowEscalations).
	CheckWorkflow Check = "workflow"
	// CheckToolConfig reads an agent tool config's MCP servers, hooks and
	// settings (toolFindings).
	CheckToolConfig Check = "tool-config"
	// CheckInstructions reads the lines an instruction file for the next
	// agent gained (instructionFindings).
	CheckInstructions Check = "instructions"
	// CheckToolScripts learns the files that agent tool configs run,
	// which then count as agent-tools (widenForScripts); its findings say
	// when they could not all be learnt.
	CheckToolScripts Check = "tool-scripts"
	// CheckRefusedWrite turns the job's writes that the read-only mounts
	// refused into findings (refusedWrites): nothing changed, and the
	// attempt is on record.
	CheckRefusedWrite Check = "refused-write"
)

// Checks are all the checks, in the order a job meets them.
func Checks() []Check {
	return []Check{CheckAuthoredDiff, CheckWorkflow, CheckToolConfig, CheckInstructions, CheckToolScripts, CheckRuntimeDiff, CheckRefusedWrite}
}
