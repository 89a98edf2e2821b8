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
//
// Which names it answers, and which only because of audit, its caller
// says (rules.Decider's NameAllowed, through the Allowlist, and
// NameWouldDeny); the server adds what DNS itself refuses.
//
// Layer 3: it records into the rules.Log its caller gives it and imports
// rules only; it never dials anything and knows no namespace.
package dns

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/airlock-ci/airlock/internal/textsafe"
	"github.com/airlock-ci/airlock/runner/egress/rules"
)

// Book maps allowed names to the gateway addresses that stand for them.
type Book interface {
	// Lookup returns the address for name (lower-case, no trailing dot),
	// and false when the policy does not allow the name.
	Lookup(name string) (netip.Addr, bool)
}

// MaxLog bounds the allowed and the refused queries a server's log keeps,
// each on its own (see rules.NewLog); later ones are counted.
const MaxLog = 10000

// Server answers DNS queries from the sandbox.
type Server struct {
	book Book
	ttl  uint32
	log  *rules.Log
	self string // the address the sandbox asks, for the record
	// audited reports a name the book answers only because egress is in
	// audit (nil when enforced): its queries are recorded as would-deny.
	audited func(name string) bool

	mu      sync.Mutex
	servers []*mdns.Server
}

// New returns a server that answers from book with the given TTL and
// records every query as a decision in log (self is the server's address
// as the sandbox asks it, port 53). audited, when not nil, names what the
// book answers only because egress is in audit.
func New(book Book, ttl time.Duration, log *rules.Log, self netip.Addr, audited func(name string) bool) *Server {
	return &Server{book: book, ttl: uint32(ttl / time.Second), log: log, self: self.String(), audited: audited}
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

// Log is the server's record of queries.
func (s *Server) Log() *rules.Log { return s.log }

func (s *Server) handle(w mdns.ResponseWriter, req *mdns.Msg) {
	resp := new(mdns.Msg)
	d := rules.Decision{Time: time.Now().UTC(), Protocol: rules.ProtoDNS, Transport: w.RemoteAddr().Network(), Address: s.self, Port: 53}
	raw, allowed, audited := "", false, false
	defer func() {
		s.log.Add(decide(d, raw, allowed, audited, mdns.RcodeToString[resp.Rcode]))
		w.WriteMsg(resp)
	}()
	if req.Opcode != mdns.OpcodeQuery || len(req.Question) != 1 || req.Response {
		resp.SetRcode(req, mdns.RcodeFormatError)
		d.QueryType = "invalid"
		return
	}
	resp.SetReply(req)
	resp.Authoritative = true
	resp.RecursionAvailable = false
	question := req.Question[0]
	raw = textsafe.Clip(question.Name, 255, "")
	d.Name = strings.TrimSuffix(raw, ".")
	d.QueryType = mdns.TypeToString[question.Qtype]
	if d.QueryType == "" {
		d.QueryType = fmt.Sprintf("TYPE%d", question.Qtype)
	}
	name := strings.TrimSuffix(strings.ToLower(question.Name), ".")
	if question.Qclass != mdns.ClassINET {
		resp.SetRcode(req, mdns.RcodeRefused)
		return
	}
	addr, ok := s.book.Lookup(name)
	allowed = ok
	audited = ok && s.audited != nil && s.audited(name)
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
		d.Answer = addr.String()
	case question.Qtype == mdns.TypeAAAA:
		// Allowed name, but the sandbox has no IPv6: an empty answer
		// makes resolvers fall back to A at once.
	default:
		resp.SetRcode(req, mdns.RcodeRefused)
	}
}

// decide completes a query's decision: allowed (the name is in the
// policy), would-deny (answered only because of audit), or refused with
// the reason and the policy line that would allow it. The answer is the
// address given, or else the rcode.
func decide(d rules.Decision, raw string, allowed, audited bool, rcode string) rules.Decision {
	if d.Answer == "" {
		d.Answer = rcode
	}
	switch {
	case audited:
		d.Decision = rules.WouldDeny
		d.SetRule(rules.RuleID{Kind: rules.KindDefaultDeny})
		d.Reason = fmt.Sprintf("%s is not in egress.allow; answered because egress is in audit", d.Name)
		d.Suggest = rules.SuggestHost(d.Name, 443)
		return d
	case allowed:
		d.Decision = rules.Allowed
		d.SetRule(rules.RuleID{Kind: rules.KindAllowName})
		return d
	}
	d.Decision = rules.Denied
	d.SetRule(rules.RuleID{Kind: rules.KindDefaultDeny})
	switch {
	case d.QueryType == "invalid":
		d.Reason = "malformed DNS message"
	case raw == "":
		d.Reason = "empty name"
	default:
		d.Reason = fmt.Sprintf("%s is not in egress.allow; the gateway answers NXDOMAIN and asks no one else", d.Name)
		d.Suggest = rules.SuggestHost(d.Name, 443)
	}
	return d
}
