package runner

import (
	"bytes"
	"io"
	"sync"
)

// prefixWriter writes each line to w with a prefix. Partial lines are held
// until their newline or Flush. Writers of several steps share one
// underlying writer, so writes are serialised by the shared mutex.
type prefixWriter struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix []byte
	buf    []byte
}

// maxHeldLine bounds a partial line kept in memory; a longer one is
// written out as is.
const maxHeldLine = 64 << 10

func newPrefixWriter(mu *sync.Mutex, w io.Writer, prefix string) *prefixWriter {
	return &prefixWriter{mu: mu, w: w, prefix: []byte(prefix)}
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.buf = append(p.buf, b...)
			if len(p.buf) > maxHeldLine {
				p.flushLocked(true)
			}
			break
		}
		p.buf = append(p.buf, b[:i+1]...)
		b = b[i+1:]
		p.flushLocked(false)
	}
	return n, nil
}

// Flush writes a held partial line, ending it with a newline.
func (p *prefixWriter) Flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flushLocked(true)
}

func (p *prefixWriter) flushLocked(addNewline bool) {
	if len(p.buf) == 0 {
		return
	}
	line := append(append([]byte{}, p.prefix...), p.buf...)
	if addNewline && line[len(line)-1] != '\n' {
		line = append(line, '\n')
	}
	p.w.Write(line)
	p.buf = p.buf[:0]
}

// headWriter keeps the first max bytes written to it.
type headWriter struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (h *headWriter) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := h.max - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (h *headWriter) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return string(h.b)
}
