// Package gitexec runs git plumbing commands on repositories whose
// configuration an agent may have written. Nothing in the repository's
// config may run: hooks and fsmonitor are switched off, system and global
// config ignored, and callers use only plumbing commands that apply no
// filters, textconv or external diff drivers.
//
// Layer 0: the bottom (see internal/layers); imports nothing of airlock's.
package gitexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Timeout bounds each git command.
const Timeout = 30 * time.Second

// ErrTooLarge is returned when a command's output passes the caller's cap.
var ErrTooLarge = errors.New("git output larger than the limit")

// Run runs git with args in repo and returns its standard output.
func Run(ctx context.Context, repo string, args ...string) ([]byte, error) {
	return RunCapped(ctx, repo, 0, args...)
}

// RunCapped is Run with standard output capped at limit bytes (0: no
// cap); past it the command is stopped and ErrTooLarge returned with the
// first limit bytes.
func RunCapped(ctx context.Context, repo string, limit int, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	// No network, no helper, no hook, no fsmonitor: whatever the
	// repository's config says (a promisor remote would make git fetch,
	// and a fetch can run ext:: or core.sshCommand).
	full := append([]string{"-C", repo, "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null",
		"-c", "protocol.allow=never", "-c", "core.sshCommand=false", "-c", "credential.helper=",
		"--no-replace-objects"}, args...)
	cmd := exec.CommandContext(ctx, "git", full...)
	cmd.Env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_NO_LAZY_FETCH=1",
		"GIT_PROTOCOL_FROM_USER=0",
		// Never look above the repository for a git directory.
		"GIT_CEILING_DIRECTORIES=" + filepath.Dir(filepath.Clean(repo)),
		// The workspace may belong to another user than airlock's.
		"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=safe.directory", "GIT_CONFIG_VALUE_0=*",
	}
	out := &cappedBuffer{limit: limit, cancel: cancel}
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &errb
	err := cmd.Run()
	if out.over {
		return out.buf.Bytes(), ErrTooLarge
	}
	if err != nil {
		return nil, fmt.Errorf("git %s: %w: %s", args[0], err, strings.TrimSpace(errb.String()))
	}
	return out.buf.Bytes(), nil
}

// ResolveCommit turns a revision into a full commit id.
func ResolveCommit(ctx context.Context, repo, rev string) (string, error) {
	if rev == "" || strings.HasPrefix(rev, "-") {
		return "", fmt.Errorf("revision %q: give a commit id or ref", rev)
	}
	out, err := Run(ctx, repo, "rev-parse", "--verify", "--end-of-options", rev+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("resolve %s in %s: %w", rev, repo, err)
	}
	return strings.TrimSpace(string(out)), nil
}

type cappedBuffer struct {
	buf    bytes.Buffer
	limit  int
	over   bool
	cancel func()
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if c.limit > 0 && c.buf.Len()+len(p) > c.limit {
		c.buf.Write(p[:c.limit-c.buf.Len()])
		c.over = true
		c.cancel()
		return 0, ErrTooLarge
	}
	return c.buf.Write(p)
}
