package runner

import (
	"bytes"
	"io"
	"strings"
	"sync"

	"github.com/airlock-ci/airlock/runner/credentials"
)

// A job's credentials stay out of its sandbox (runner/credentials): the
// session gives every environment it hands the sandbox (the job's, each
// step's, each container's) to the job's vault first, which puts
// placeholders in place of the credentials and learns where they go; the
// egress gateway puts them back on the way out. What the job masks
// (::add-mask::) and every withheld value are redacted from the result
// before anything is recorded or signed.

// withholdList is Vault.Withhold for a KEY=VALUE list, order kept.
func withholdList(v *credentials.Vault, env []string) []string {
	if v == nil || len(env) == 0 {
		return env
	}
	m := map[string]string{}
	for _, kv := range env {
		k, val, _ := strings.Cut(kv, "=")
		m[k] = val
	}
	m = v.Withhold(m)
	out := make([]string, len(env))
	for i, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		out[i] = k + "=" + m[k]
	}
	return out
}

// maxMaskLine bounds the line a maskWatcher keeps looking at: a longer
// one is no workflow command.
const maxMaskLine = 64 << 10

// maskWatcher passes a step's output through and tells the vault every
// value the step masks with the workflow command ::add-mask::, so that
// airlock redacts it from what it records and signs as the runner does
// from the log.
type maskWatcher struct {
	w     io.Writer
	vault *credentials.Vault
	mu    sync.Mutex
	line  []byte
	long  bool // the current line passed maxMaskLine
}

func (m *maskWatcher) Write(p []byte) (int, error) {
	m.mu.Lock()
	for rest := p; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		chunk := rest
		if i >= 0 {
			chunk = rest[:i]
		}
		if !m.long {
			if len(m.line)+len(chunk) > maxMaskLine {
				m.long, m.line = true, m.line[:0]
			} else {
				m.line = append(m.line, chunk...)
			}
		}
		if i < 0 {
			break
		}
		if !m.long {
			if v, ok := strings.CutPrefix(strings.TrimRight(string(m.line), "\r"), "::add-mask::"); ok {
				m.vault.Mask(strings.TrimSpace(v))
			}
		}
		m.line, m.long = m.line[:0], false
		rest = rest[i+1:]
	}
	m.mu.Unlock()
	return m.w.Write(p)
}

// redact blanks withheld and masked values in what a result records of
// the job's own making: argv and binaries of its processes, paths of its
// requests, steps' messages.
func redact(res *Result, v *credentials.Vault) {
	if v == nil {
		return
	}
	for i := range res.Processes.Execs {
		x := &res.Processes.Execs[i]
		x.Binary = v.Redact(x.Binary)
		for j := range x.Argv {
			x.Argv[j] = v.Redact(x.Argv[j])
		}
	}
	for i := range res.Processes.WritesRefused {
		res.Processes.WritesRefused[i].Path = v.Redact(res.Processes.WritesRefused[i].Path)
	}
	if res.Egress != nil {
		for i := range res.Egress.Decisions {
			d := &res.Egress.Decisions[i]
			d.Path, d.Name = v.Redact(d.Path), v.Redact(d.Name)
		}
	}
	for i := range res.Steps {
		res.Steps[i].Message = v.Redact(res.Steps[i].Message)
	}
	rec := v.Record()
	res.Credentials = &rec
}
