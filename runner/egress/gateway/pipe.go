package gateway

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// pipeBuf is the copy buffer per direction: large enough that a bulk
// transfer costs few system calls, small enough that thousands of idle
// connections do not hold much of the host's memory.
const pipeBuf = 32 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, pipeBuf); return &b }}

// pipe copies both ways between the sandbox side (client, read through
// clientR) and the upstream (read through upR) until both directions end,
// the connection is idle (nothing either way) for idle, or total has
// passed since start. It returns the bytes sent upstream and received
// back.
func pipe(client net.Conn, clientR io.Reader, upstream net.Conn, upR io.Reader, idle, total time.Duration) (out, in int64) {
	l := &link{conns: [2]net.Conn{client, upstream}, idle: idle}
	l.last.Store(time.Now().UnixNano())
	if total > 0 {
		l.deadline = time.Now().Add(total)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		out = l.copy(upstream, clientR, client)
		closeWrite(upstream)
	}()
	go func() {
		defer wg.Done()
		in = l.copy(client, upR, upstream)
		closeWrite(client)
	}()
	wg.Wait()
	return out, in
}

// link is the shared state of a pipe's two directions.
type link struct {
	conns    [2]net.Conn
	idle     time.Duration
	deadline time.Time
	last     atomic.Int64 // unix ns of the last byte either way
	stopped  atomic.Bool
}

// copy copies src (read from srcConn) to dst. Reads time out every idle
// period; the copy goes on while either direction moved data within it,
// and stops for good at the deadline. An error in one direction stops
// both (a clean EOF is a half-close and leaves the other running).
func (l *link) copy(dst io.Writer, src io.Reader, srcConn net.Conn) int64 {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	var n int64
	for !l.stopped.Load() {
		d := l.deadline
		if l.idle > 0 {
			if t := time.Now().Add(l.idle); d.IsZero() || t.Before(d) {
				d = t
			}
		}
		srcConn.SetReadDeadline(d)
		if l.stopped.Load() {
			break
		}
		nr, err := src.Read(buf)
		if nr > 0 {
			l.last.Store(time.Now().UnixNano())
			nw, werr := dst.Write(buf[:nr])
			n += int64(nw)
			if werr != nil {
				l.stop()
				return n
			}
		}
		if err == nil {
			continue
		}
		if isTimeout(err) && !l.stopped.Load() && (l.deadline.IsZero() || time.Now().Before(l.deadline)) &&
			time.Since(time.Unix(0, l.last.Load())) < l.idle {
			continue // the other direction is busy
		}
		if err != io.EOF {
			l.stop()
		}
		return n
	}
	return n
}

// stop ends both directions at once.
func (l *link) stop() {
	l.stopped.Store(true)
	for _, c := range l.conns {
		c.SetReadDeadline(time.Now())
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

// reset closes a TCP connection with RST, so a refused client fails at
// once instead of waiting.
func reset(c net.Conn) {
	setLingerOf(c, 0)
	c.Close()
}
