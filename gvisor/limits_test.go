package gvisor

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// Every limit is hit by a real hostile step; each must be reported with its
// own name, end quickly, and leave airlock (this test process) healthy.
func TestLimits(t *testing.T) {
	for _, tc := range []struct {
		name    string
		limits  func(*Limits)
		step    Step
		want    string
		maxTime time.Duration
		// after runs in the same sandbox afterwards; "" when the sandbox
		// is expected to be gone.
		after string
	}{
		{
			name:    "timeout",
			limits:  func(l *Limits) {},
			step:    Step{Args: []string{"sleep", "600"}, Timeout: 2 * time.Second},
			want:    LimitTimeout,
			maxTime: 10 * time.Second,
			after:   "echo ok",
		},
		{
			name:    "fork bomb",
			limits:  func(l *Limits) { l.Pids = 64 },
			step:    Step{Args: []string{"/bin/bash", "-c", "bomb() { bomb | bomb & }; bomb; sleep 5"}, Timeout: 20 * time.Second},
			want:    LimitPids,
			maxTime: 40 * time.Second,
			after:   "echo ok",
		},
		{
			name:    "memory bomb",
			limits:  func(l *Limits) { l.Memory = 256 << 20 },
			step:    Step{Args: []string{"/bin/sh", "-c", "head -c 2000000000 /dev/zero | tail -c 1900000000 > /dev/null"}, Timeout: 60 * time.Second},
			want:    LimitOOM,
			maxTime: 60 * time.Second,
		},
		{
			name:    "overlay filler",
			limits:  func(l *Limits) { l.Overlay = 64 << 20 },
			step:    Step{Args: []string{"/bin/sh", "-c", "dd if=/dev/zero of=/var/tmp/fill bs=1M count=512"}},
			want:    LimitDisk,
			maxTime: 30 * time.Second,
			after:   "rm /var/tmp/fill && echo ok",
		},
		{
			name:    "tmp filler",
			limits:  func(l *Limits) { l.Tmp = 32 << 20 },
			step:    Step{Args: []string{"/bin/sh", "-c", "dd if=/dev/zero of=/tmp/fill bs=1M count=512"}},
			want:    LimitDisk,
			maxTime: 30 * time.Second,
			after:   "rm /tmp/fill && echo ok",
		},
		{
			name:    "workspace filler",
			limits:  func(l *Limits) { l.Workspace = 32 << 20 },
			step:    Step{Args: []string{"/bin/sh", "-c", "dd if=/dev/zero of=/workspace/fill bs=1M count=512"}},
			want:    LimitWorkspace,
			maxTime: 30 * time.Second,
			after:   "rm /workspace/fill && echo ok > /workspace/after && cat /workspace/after",
		},
		{
			// 32 MiB buy 2048 files: many empty ones run out too.
			name:    "workspace file flood",
			limits:  func(l *Limits) { l.Workspace = 32 << 20 },
			step:    Step{Args: []string{"/bin/sh", "-c", "mkdir /workspace/many && cd /workspace/many && i=0; while : > f$i; do i=$((i+1)); done"}},
			want:    LimitWorkspace,
			maxTime: 60 * time.Second,
			after:   "rm -r /workspace/many && echo ok",
		},
		{
			name:    "1 GiB of output",
			limits:  func(l *Limits) { l.Output = 1 << 20 },
			step:    Step{Args: []string{"/bin/sh", "-c", "head -c 1073741824 /dev/urandom"}},
			want:    LimitOutput,
			maxTime: 30 * time.Second,
			after:   "echo ok",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := newTestSandbox(t, func(c *Config) { tc.limits(&c.Limits) })
			var out bytes.Buffer
			st := tc.step
			st.Stdout, st.Stderr = &out, &out
			start := time.Now()
			res, err := sb.Exec(context.Background(), st)
			took := time.Since(start)
			if err != nil {
				t.Fatalf("exec: %v", err)
			}
			if res.Limit != tc.want {
				t.Fatalf("limit = %q, want %q (exit %d, message %q, output %q)", res.Limit, tc.want, res.ExitCode, res.Message, truncateForLog(out.String()))
			}
			if res.Message == "" {
				t.Errorf("a step that hit a limit must say so: %+v", res)
			}
			if took > tc.maxTime {
				t.Errorf("took %s to stop, want under %s", took, tc.maxTime)
			}
			if tc.want == LimitOutput && int64(out.Len()) > 1<<20 {
				t.Errorf("captured %d bytes past the 1 MiB cap", out.Len())
			}
			if tc.after == "" {
				if _, err := sb.Exec(context.Background(), Step{Args: []string{"true"}}); err == nil {
					t.Errorf("expected the sandbox to be gone after %s", tc.want)
				}
				return
			}
			if tc.want == LimitPids {
				// The bomb's processes were killed with the step: the
				// process limit is free again.
				out, _, _ := sh(t, sb, "ps -e --no-headers | wc -l")
				if n := strings.TrimSpace(out); n == "" || len(n) > 1 {
					t.Errorf("%s processes left after the fork bomb was stopped", n)
				}
			}
			got, errOut, res := sh(t, sb, tc.after)
			if res.ExitCode != 0 || !strings.Contains(got, "ok") {
				t.Errorf("sandbox unusable after %s: %q %q %+v", tc.want, got, errOut, res)
			}
		})
	}
}

func truncateForLog(s string) string {
	if len(s) > 500 {
		return s[:500] + "..."
	}
	return s
}
