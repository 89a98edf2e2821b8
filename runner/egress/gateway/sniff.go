package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"time"
)

// What the first bytes of a connection say it is.
const (
	kindUnknown = iota // nothing arrived in time: a server-speaks-first protocol
	kindTLS
	kindHTTP
	kindOther
	kindClosed // the client closed without sending
	kindClient // firstSpeaker: the client spoke first
	kindServer // firstSpeaker: the upstream spoke first
)

// sniff waits up to wait for the client's first bytes and classifies them
// without consuming anything.
func sniff(conn net.Conn, br *bufio.Reader, wait time.Duration) int {
	conn.SetReadDeadline(time.Now().Add(wait))
	defer conn.SetReadDeadline(time.Time{})
	first, err := br.Peek(1)
	switch {
	case err != nil && isTimeout(err):
		return kindUnknown
	case err != nil:
		return kindClosed
	case first[0] == 0x16: // TLS handshake record
		return kindTLS
	}
	// Anything that starts like an HTTP/1 request line (leading blank
	// lines, then a method token of letters, '-' and '_' (nginx takes '_'), then a space) is
	// HTTP, whatever the method and its case: servers accept those, so
	// the Host check must see them. Wait for more only while that is
	// still undecided. What is still undecided when the client pauses
	// past wait, stops, or fills the buffer with blank lines (which
	// servers skip, however many) is HTTP too, and the HTTP server
	// answers it 400 if it is not: else a request line sent a few bytes
	// at a time, or after enough blank lines, would be spliced past the
	// Host check.
	skip := 0 // leading blank-line bytes seen so far
	for {
		head, _ := br.Peek(br.Buffered())
		for skip < len(head) && (head[skip] == '\r' || head[skip] == '\n') {
			skip++
		}
		switch requestLine(head[skip:]) {
		case lineYes:
			return kindHTTP
		case lineNo:
			return kindOther
		}
		if _, err := br.Peek(len(head) + 1); err != nil {
			return kindHTTP
		}
	}
}

const (
	lineNo = iota
	lineYes
	lineMaybe
)

// requestLine says whether b starts an HTTP/1 request line.
func requestLine(b []byte) int {
	b = bytes.TrimLeft(b, "\r\n")
	if len(b) == 0 {
		return lineMaybe
	}
	for i, c := range b {
		switch {
		case c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || (c == '-' || c == '_') && i > 0:
			if i >= 24 {
				return lineNo
			}
		case c == ' ' && i > 0:
			return lineYes
		default:
			return lineNo
		}
	}
	return lineMaybe
}

// errNotClientHello is returned for a TLS connection whose first record
// is not a ClientHello airlock can read.
var errNotClientHello = errors.New("the first TLS record is not a readable ClientHello")

// errHelloRead stops the TLS handshake once the ClientHello is parsed.
var errHelloRead = errors.New("client hello read")

// readSNI returns the server name of the ClientHello at the front of br,
// without consuming it, using crypto/tls's own parser: the handshake is
// run against a copy of the bytes and stopped right after the hello.
func readSNI(conn net.Conn, br *bufio.Reader, wait time.Duration) (string, error) {
	conn.SetReadDeadline(time.Now().Add(wait))
	defer conn.SetReadDeadline(time.Time{})
	hdr, err := br.Peek(5)
	if err != nil {
		return "", errNotClientHello
	}
	n := int(hdr[3])<<8 | int(hdr[4])
	if hdr[0] != 0x16 || n == 0 || n > 1<<14 {
		return "", errNotClientHello
	}
	record, err := br.Peek(5 + n)
	if err != nil {
		return "", errNotClientHello
	}
	var name string
	var seen bool
	srv := tls.Server(replayConn{Reader: bytes.NewReader(record)}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			name, seen = h.ServerName, true
			return nil, errHelloRead
		},
	})
	srv.Handshake()
	if !seen {
		return "", errNotClientHello
	}
	return name, nil
}

// replayConn is a read-only net.Conn over bytes already received; writes
// (the alert crypto/tls sends on the aborted handshake) go nowhere.
type replayConn struct {
	io.Reader
	net.Conn // nil: only the methods below are called
}

func (c replayConn) Read(p []byte) (int, error)       { return c.Reader.Read(p) }
func (c replayConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c replayConn) Close() error                     { return nil }
func (c replayConn) SetDeadline(time.Time) error      { return nil }
func (c replayConn) SetReadDeadline(time.Time) error  { return nil }
func (c replayConn) SetWriteDeadline(time.Time) error { return nil }
func (c replayConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c replayConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// firstSpeaker waits up to wait for either side of a fresh connection to
// send something, and reports which did first (kindClient or kindServer),
// or kindClosed / kindUnknown when neither did. Nothing is consumed.
func firstSpeaker(c net.Conn, br *bufio.Reader, up net.Conn, upR *bufio.Reader, wait time.Duration) int {
	type result struct {
		client bool
		err    error
	}
	res := make(chan result, 2)
	deadline := time.Now().Add(wait)
	c.SetReadDeadline(deadline)
	up.SetReadDeadline(deadline)
	go func() { _, err := br.Peek(1); res <- result{true, err} }()
	go func() { _, err := upR.Peek(1); res <- result{false, err} }()
	first := <-res
	// Stop the other wait; a timeout error left in a bufio.Reader is
	// returned once and then cleared, so nothing is lost.
	now := time.Now()
	c.SetReadDeadline(now)
	up.SetReadDeadline(now)
	second := <-res
	c.SetReadDeadline(time.Time{})
	up.SetReadDeadline(time.Time{})
	switch {
	case first.client && first.err == nil, !first.client && second.err == nil && first.err != nil:
		return kindClient
	case !first.client && first.err == nil:
		return kindServer
	case isTimeout(first.err) && isTimeout(second.err):
		return kindUnknown
	}
	return kindClosed
}
