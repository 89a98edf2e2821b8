package rules

import (
	"sync"
	"time"
)

// Protocols of a Decision.
const (
	ProtoDNS          = "dns"           // a query to the gateway's DNS server
	ProtoTCP          = "tcp"           // a connection to a gateway address, neither TLS nor HTTP
	ProtoTLS          = "tls"           // a TLS connection to a gateway address
	ProtoHTTP         = "http"          // a plain HTTP request to a gateway address
	ProtoHTTPS        = "https"         // an HTTPS request the gateway decrypted to add a secret
	ProtoProxyConnect = "proxy-connect" // a CONNECT through the explicit proxy
	ProtoProxyHTTP    = "proxy-http"    // a plain HTTP request through the explicit proxy
	ProtoDirect       = "direct"        // a connect(2) that did not go to the gateway
)

// Decision is one egress attempt and what the gateway did with it.
type Decision struct {
	Time time.Time `json:"time"`
	// PID and Binary name the sandboxed process, when the runtime
	// monitoring events attribute the attempt.
	PID    int32  `json:"pid,omitempty"`
	Binary string `json:"binary,omitempty"`
	// Protocol is one of the Proto* constants; Transport is udp or tcp
	// for DNS.
	Protocol  string `json:"protocol"`
	Transport string `json:"transport,omitempty"`
	// Name is the host name asked for; Address and Port where the
	// sandbox sent it (a gateway address, or the direct destination).
	Name    string `json:"name,omitempty"`
	Address string `json:"address,omitempty"`
	Port    int    `json:"port,omitempty"`
	// Method and Path of an HTTP request; QueryType of a DNS query.
	Method    string `json:"method,omitempty"`
	Path      string `json:"path,omitempty"`
	QueryType string `json:"queryType,omitempty"`
	// Decision is "allowed", "denied" or "would-deny" (audit let it
	// through; Rule, Reason and Suggest say what would have denied it).
	Decision string `json:"decision"`
	// Rule is RuleID's text (SetRule sets both): the record says which
	// rule decided in words, the program reads RuleID.
	Rule    string `json:"rule"`
	RuleID  RuleID `json:"-"`
	Reason  string `json:"reason,omitempty"`
	Suggest string `json:"suggest,omitempty"`
	// Upstream is the address dialled on the host side.
	Upstream string `json:"upstream,omitempty"`
	// Answer is what DNS answered (a gateway address), or the rcode.
	Answer string `json:"answer,omitempty"`
	// SecretsInjected names headers the gateway added.
	SecretsInjected []string `json:"secretsInjected,omitempty"`
	// Client is the sandbox's end of the connection (address:port):
	// requests with the same client came over one connection.
	Client string `json:"client,omitempty"`
	// Open marks a connection still open when the record was read.
	Open bool `json:"open,omitempty"`
	// BytesOut went from the sandbox upstream, BytesIn came back.
	BytesOut   int64         `json:"bytesOut"`
	BytesIn    int64         `json:"bytesIn"`
	DurationNs time.Duration `json:"durationNs"`
}

// Decision values.
const (
	Allowed   = "allowed"
	Denied    = "denied"
	WouldDeny = "would-deny"
)

// Apply copies a verdict into the decision.
func (d *Decision) Apply(v Verdict) {
	switch {
	case v.WouldDeny:
		d.Decision = WouldDeny
	case v.Allowed:
		d.Decision = Allowed
	default:
		d.Decision = Denied
	}
	d.SetRule(v.Rule)
	d.Reason, d.Suggest = v.Reason, v.Suggest
}

// SetRule records the rule that decided, and its text.
func (d *Decision) SetRule(id RuleID) { d.RuleID, d.Rule = id, id.String() }

// MaxLog bounds the allowed, the denied and the would-deny decisions a
// gateway's log keeps per job, each on its own: a flood of refusals
// cannot push allowed traffic, or what audit let through, out of the
// record. Later ones are counted.
const MaxLog = 20000

// Log is the bounded, concurrency-safe list of decisions that every
// deciding part of the gateway (the DNS server, the TCP gateway and the
// proxy) records into. It only grows, so a position in it (Len) stays
// valid: Since reads what came after one.
type Log struct {
	max     int
	mu      sync.Mutex
	items   []Decision
	kept    map[string]int // per Decision value
	dropped uint64
}

// NewLog returns a log that keeps at most max decisions of each outcome.
// The zero Log keeps MaxLog of each.
func NewLog(max int) *Log { return &Log{max: max} }

// Add appends d, or counts it when its outcome's share of the log is
// full.
func (l *Log) Add(d Decision) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kept == nil {
		l.kept = map[string]int{}
	}
	limit := l.max
	if limit == 0 {
		limit = MaxLog
	}
	if l.kept[d.Decision] >= limit {
		l.dropped++
		return
	}
	l.kept[d.Decision]++
	l.items = append(l.items, d)
}

// Snapshot returns a copy of the decisions and how many were dropped.
func (l *Log) Snapshot() ([]Decision, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Decision(nil), l.items...), l.dropped
}

// Since returns a copy of the decisions kept after the first n (n is an
// earlier Len).
func (l *Log) Since(n int) []Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n >= len(l.items) {
		return nil
	}
	return append([]Decision(nil), l.items[max(n, 0):]...)
}

// Len is how many decisions are kept.
func (l *Log) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.items)
}
