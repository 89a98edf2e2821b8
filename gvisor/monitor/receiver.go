package monitor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	pb "gvisor.dev/gvisor/pkg/sentry/seccheck/points/points_go_proto"
)

// wireVersion is the remote-sink protocol version this receiver speaks.
const wireVersion = 1

// headerSize is the size of the fixed part of a packet header: header size
// (uint16), message type (uint16), dropped count (uint32), host byte order.
const headerSize = 8

// defaultMaxPacket bounds a single packet. The sentry cannot send more than its
// socket buffer allows in one SEQPACKET message anyway; anything larger is
// truncated by the kernel, detected with MSG_TRUNC and counted as malformed.
const defaultMaxPacket = 256 << 10

// maxConns bounds how many sink connections one receiver serves. runsc opens
// one per sandbox; the socket lives in airlock's private state directory, so
// more than a few means something is wrong.
const maxConns = 4

// Receiver accepts runtime-monitoring connections on a Unix socket and feeds
// every decoded event into a Record.
type Receiver struct {
	path      string
	listener  *net.UnixListener
	record    *Record
	maxPacket int

	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []*net.UnixConn
	closed bool // Close has run: connections accepted after it are closed at once
}

// Listen creates the SOCK_SEQPACKET socket at path (which must not exist)
// and starts serving it in the background. The socket is created 0600 so
// only root (runsc) can connect.
func Listen(path string, record *Record) (*Receiver, error) {
	return listen(path, record, defaultMaxPacket)
}

func listen(path string, record *Record, maxPacket int) (*Receiver, error) {
	old := unix.Umask(0o177)
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen for runtime-monitoring events on %s: %w", path, err)
	}
	r := &Receiver{path: path, listener: l, record: record, maxPacket: maxPacket}
	r.wg.Add(1)
	go r.acceptLoop()
	return r, nil
}

// Path is the socket path to name in the trace session's sink config.
func (r *Receiver) Path() string { return r.path }

// Close stops accepting, closes open connections and waits for the
// goroutines to finish. It is safe to call more than once.
func (r *Receiver) Close() error {
	err := r.listener.Close()
	r.mu.Lock()
	r.closed = true
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
	r.mu.Unlock()
	r.wg.Wait()
	os.Remove(r.path)
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (r *Receiver) acceptLoop() {
	defer r.wg.Done()
	served := 0
	for {
		c, err := r.listener.AcceptUnix()
		if err != nil {
			return
		}
		served++
		if served > maxConns {
			slog.Warn("runtime monitor: refusing extra connection", "socket", r.path)
			c.Close()
			continue
		}
		r.mu.Lock()
		if r.closed {
			// Accepted just as Close ran: Close has already closed the
			// others and would not see this one.
			r.mu.Unlock()
			c.Close()
			return
		}
		r.conns = append(r.conns, c)
		r.mu.Unlock()
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer c.Close()
			if err := r.serve(c); err != nil {
				slog.Warn("runtime monitor: connection ended", "socket", r.path, "err", err)
			}
		}()
	}
}

// serve runs the handshake and then decodes packets until the peer closes.
func (r *Receiver) serve(c *net.UnixConn) error {
	buf := make([]byte, r.maxPacket)
	n, _, flags, _, err := c.ReadMsgUnix(buf, nil)
	if err != nil {
		return fmt.Errorf("read handshake: %w", err)
	}
	if flags&unix.MSG_TRUNC != 0 {
		return errors.New("handshake too large")
	}
	var hs pb.Handshake
	if err := proto.Unmarshal(buf[:n], &hs); err != nil {
		return fmt.Errorf("decode handshake: %w", err)
	}
	if hs.Version < wireVersion {
		return fmt.Errorf("sentry speaks remote-sink version %d, need %d", hs.Version, wireVersion)
	}
	out, err := proto.Marshal(&pb.Handshake{Version: wireVersion})
	if err != nil {
		return fmt.Errorf("encode handshake: %w", err)
	}
	if _, err := c.Write(out); err != nil {
		return fmt.Errorf("write handshake: %w", err)
	}
	for {
		n, _, flags, _, err := c.ReadMsgUnix(buf, nil)
		if err != nil || n == 0 {
			// EOF (n == 0 on SEQPACKET) or a closed connection: the sandbox
			// is gone, nothing more will come.
			return nil
		}
		if flags&unix.MSG_TRUNC != 0 {
			r.record.addMalformed()
			continue
		}
		r.handlePacket(buf[:n])
	}
}

// handlePacket decodes one packet. It never panics on bad input: every
// length is checked and decode errors are counted.
func (r *Receiver) handlePacket(pkt []byte) {
	if len(pkt) < headerSize {
		r.record.addMalformed()
		return
	}
	hdrLen := int(binary.LittleEndian.Uint16(pkt[0:2]))
	msgType := pb.MessageType(binary.LittleEndian.Uint16(pkt[2:4]))
	dropped := binary.LittleEndian.Uint32(pkt[4:8])
	if hdrLen < headerSize || hdrLen > len(pkt) {
		r.record.addMalformed()
		return
	}
	r.record.notePacket(dropped)
	if err := r.record.apply(msgType, pkt[hdrLen:]); err != nil {
		r.record.addMalformed()
	}
}
