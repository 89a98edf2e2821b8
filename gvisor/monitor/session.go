package monitor

import (
	"encoding/json"
	"fmt"
	"os"
)

// PodInitConfig returns the contents of a runsc --pod-init-config file that
// starts a trace session sending the points this package decodes to the
// receiver's socket. Opens are traced only when opens is set: they are
// most of a build's events, and only the writes refused on read-only
// paths are kept of them, which only matter where the job has read-only
// trust paths. The sentry sends only what the record keeps (SinkName).
func PodInitConfig(socketPath string, opens bool) ([]byte, error) {
	ctx := []string{"time", "thread_id", "group_id", "parent_thread_group_id", "credentials"}
	openCtx := []string{"time", "group_id"}
	type point struct {
		Name           string   `json:"name"`
		OptionalFields []string `json:"optional_fields,omitempty"`
		ContextFields  []string `json:"context_fields,omitempty"`
	}
	points := []point{
		{Name: "sentry/execve", OptionalFields: []string{"binary_sha256"}, ContextFields: ctx},
		// A container's first process is started, not exec'd. Its
		// environment (the optional field) is not asked for.
		{Name: "container/start", ContextFields: ctx},
		{Name: "sentry/exit_notify_parent", ContextFields: ctx},
		{Name: "sentry/task_exit", ContextFields: ctx},
		{Name: "syscall/connect/exit", ContextFields: ctx},
		// Forks refused with EAGAIN: the process limit at work.
		{Name: "syscall/clone/exit"},
		{Name: "syscall/fork/exit"},
		{Name: "syscall/vfork/exit"},
	}
	if opens {
		// For the writes refused on read-only paths (only those are
		// kept; see Kept).
		points = append(points,
			// Only what every open needs: the directory a relative path
			// is relative to (cwd, fd_path) is filled in by the sink in
			// the sentry, for the opens it sends (resolveOpen).
			point{Name: "syscall/openat/exit", ContextFields: openCtx},
			point{Name: "syscall/open/exit", ContextFields: openCtx})
	}
	cfg := map[string]any{
		"trace_session": map[string]any{
			"name":   "Default",
			"points": points,
			// No digest cache: the sentry's is keyed by mount, inode,
			// size and mtime, all of which a job can repeat (an inode
			// the host reuses, touch -d): a program swapped in under
			// the same key would be recorded with the digest of the
			// one before it (TestDigestCacheCannotBePoisoned). Every
			// exec is hashed.
			"options": map[string]any{"execve_hash_cache_capacity": 0},
			"sinks": []map[string]any{{
				// gVisor's remote sink, filtered in the sentry (sink.go).
				"name": SinkName,
				// A few retries with short backoff: losing fewer events is
				// worth a few microseconds in the sandbox when we are slow.
				"config": map[string]any{
					"endpoint":    socketPath,
					"retries":     3,
					"backoff":     "100us",
					"backoff_max": "1ms",
				},
			}},
		},
	}
	return json.MarshalIndent(cfg, "", "  ")
}

// WritePodInitConfig writes PodInitConfig(socketPath, opens) to file
// with mode 0600.
func WritePodInitConfig(file, socketPath string, opens bool) error {
	b, err := PodInitConfig(socketPath, opens)
	if err != nil {
		return fmt.Errorf("encode pod init config: %w", err)
	}
	if err := os.WriteFile(file, b, 0o600); err != nil {
		return fmt.Errorf("write pod init config: %w", err)
	}
	return nil
}
