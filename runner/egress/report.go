package egress

import (
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/airlock-ci/airlock/gvisor/monitor"
	"github.com/airlock-ci/airlock/runner/egress/rules"
	"github.com/airlock-ci/airlock/runner/egress/uploads"
)

// Report is a job's egress record (part of `airlock run --json`).
type Report struct {
	Gateway   string           `json:"gateway"`
	Proxy     string           `json:"proxy"`
	Decisions []rules.Decision `json:"decisions"`
	Allowed   int              `json:"allowed"`
	Denied    int              `json:"denied"`
	// WouldDeny counts what audit let through (egress.mode "audit").
	WouldDeny int `json:"wouldDeny"`
	// Mode is "enforce" or "audit"; ModeNote says why a job runs
	// enforced under an organisation policy in audit (agent work).
	Mode     string `json:"mode"`
	ModeNote string `json:"modeNote,omitempty"`
	// Dropped counts decisions not kept because the record was full.
	Dropped uint64 `json:"dropped"`
	// Uploads are the artifacts the job uploaded through the Actions
	// artifact service, with the digest of the bytes the gateway passed.
	Uploads []uploads.Upload `json:"uploads,omitempty"`
}

// Report merges the DNS queries, the gateway's decisions and the
// sandbox's connect events into one time-ordered list, and attributes
// each decision to a process where a connect event matches it.
func (e *Egress) Report(snap monitor.Snapshot) Report {
	gw, dropped := e.log.Snapshot()
	gw = append(gw, e.gw.Active()...)
	queries, qdropped := e.dns.Log().Snapshot()
	all := e.merge(append(queries, gw...), snap.Connects)
	execs := execsByPID(snap.Execs)
	for i := range all {
		if all[i].PID != 0 {
			all[i].Binary = binaryOf(execs[all[i].PID], all[i].Time)
		}
	}
	slices.SortStableFunc(all, byTime)
	r := Report{Gateway: e.pair.GatewayAddr.String(), Proxy: e.ProxyURL(), Decisions: all, Dropped: dropped + qdropped + snap.DroppedConnects}
	if r.Decisions == nil {
		r.Decisions = []rules.Decision{}
	}
	r.Mode, r.ModeNote = e.mode, e.modeNote
	r.Uploads = e.uploads.Uploads()
	for _, d := range all {
		switch d.Decision {
		case rules.Allowed:
			r.Allowed++
		case rules.WouldDeny:
			r.WouldDeny++
		default:
			r.Denied++
		}
	}
	return r
}

// Mark is a place in a job's egress record: where the decisions of a
// step begin. The record only grows, so a step's refusals are read from
// its mark on, not picked out of the whole record again.
type Mark struct{ gateway, dns int }

// Mark returns the end of the record now.
func (e *Egress) Mark() Mark { return Mark{gateway: e.log.Len(), dns: e.dns.Log().Len()} }

// RefusalsSince returns the refusals decided after m, one per destination
// and reason (see Refusals): the DNS server's and the gateway's, and the
// sandbox's connect attempts that never reached the gateway among
// connects (the sandbox's connect events since the same moment).
func (e *Egress) RefusalsSince(m Mark, connects []monitor.Connect) []rules.Decision {
	ds := append(e.dns.Log().Since(m.dns), e.log.Since(m.gateway)...)
	return Refusals(e.merge(ds, connects))
}

// merge puts decisions in time order, gives each the pid of the connect
// event that made it, and adds the connect events no decision accounts
// for.
func (e *Egress) merge(ds []rules.Decision, connects []monitor.Connect) []rules.Decision {
	// In time order, so the first request of a connection is matched
	// before the requests that reuse it.
	slices.SortStableFunc(ds, byTime)
	idx := newConnectIndex(connects, int(e.proxy.Port()))
	for i := range ds {
		if j := idx.match(ds[i]); j >= 0 && ds[i].PID == 0 {
			ds[i].PID = connects[j].PID
		}
	}
	return append(ds, e.unmatched(idx)...)
}

func byTime(a, b rules.Decision) int { return a.Time.Compare(b.Time) }

// unmatched turns the connect events that no gateway decision accounts
// for into decisions: connects to addresses outside the gateway (no
// route: they failed in the sandbox), to gateway ports nothing listens
// on, and UDP "connects" the gateway never sees.
func (e *Egress) unmatched(idx *connectIndex) []rules.Decision {
	var out []rules.Decision
	for i, c := range idx.connects {
		if idx.used[i] || (c.Family != "inet" && c.Family != "inet6") {
			continue
		}
		addr, err := netip.ParseAddr(c.Address)
		if err != nil {
			continue
		}
		addr = addr.Unmap()
		d := rules.Decision{Time: c.Time, PID: c.PID, Protocol: rules.ProtoDirect, Address: c.Address, Port: c.Port, Decision: rules.Denied}
		d.SetRule(rules.RuleID{Kind: rules.KindDefaultDeny})
		switch {
		case addr.IsLoopback() || addr.IsUnspecified():
			if c.Result == "ok" || c.Result == "in progress" {
				continue // the sandbox talking to itself: not egress
			}
			d.Reason = fmt.Sprintf("loopback inside the sandbox (%s): nothing listens there", c.Result)
		case addr == e.pair.GatewayAddr && (c.Port == int(e.proxy.Port()) || c.Port == 53):
			continue // reached the proxy or the DNS server, which record their own decisions
		case addr == e.pair.GatewayAddr:
			d.Reason = fmt.Sprintf("the gateway serves only DNS (53) and the proxy (%d) at its own address (%s)", e.proxy.Port(), c.Result)
		case e.pair.Pool.Contains(addr):
			name, _ := e.book.Name(addr)
			d.Name = name
			if c.Result == "ok" || c.Result == "in progress" {
				d.Reason = "no TCP connection reached the gateway (UDP is not carried)"
			} else {
				d.Reason = fmt.Sprintf("port %d is not allowed for %s (%s)", c.Port, name, c.Result)
			}
			if name != "" {
				d.Suggest = rules.SuggestHost(name, c.Port)
			}
		default:
			d.Reason = fmt.Sprintf("direct connection to an address, not through the gateway: there is no route (%s)", c.Result)
			if c.Result == "ok" {
				d.Decision = rules.Allowed
				d.SetRule(rules.RuleID{Kind: rules.KindNone})
				d.Reason = "connected outside the gateway: report this as an airlock bug"
			}
		}
		out = append(out, d)
	}
	return out
}

// matchWindow is how long before the gateway's record of an attempt the
// sandbox's connect event for it may be; clockSkew how long after (the
// two clocks are the host's, read in different places).
const (
	matchWindow = 3 * time.Second
	clockSkew   = 100 * time.Millisecond
)

// connectIndex finds the connect event behind a gateway decision.
type connectIndex struct {
	connects  []monitor.Connect
	byDest    map[string][]int
	used      []bool
	byClient  map[string]int // a connection's first match, for its later requests
	proxyPort int
}

func newConnectIndex(connects []monitor.Connect, proxyPort int) *connectIndex {
	x := &connectIndex{connects: connects, byDest: map[string][]int{}, used: make([]bool, len(connects)), byClient: map[string]int{}, proxyPort: proxyPort}
	for i, c := range connects {
		k := destKey(c.Address, c.Port)
		x.byDest[k] = append(x.byDest[k], i)
	}
	return x
}

func destKey(addr string, port int) string { return addr + "|" + strconv.Itoa(port) }

// match returns the connect event that most likely made d, or -1: to the
// same address and port, shortly before it, the closest in time. Events a
// TCP decision took are not offered again; DNS decisions share theirs (a
// resolver sends several queries on one connected socket). A proxied
// attempt's connect went to the proxy port, whatever port it asked for.
func (x *connectIndex) match(d rules.Decision) int {
	if i, ok := x.byClient[d.Client]; ok && d.Client != "" {
		return i // a later request on the same connection
	}
	port := d.Port
	if d.Protocol == rules.ProtoProxyHTTP || d.Protocol == rules.ProtoProxyConnect {
		port = x.proxyPort
	}
	best, bestGap := -1, matchWindow+1
	for _, i := range x.byDest[destKey(d.Address, port)] {
		if x.used[i] {
			continue
		}
		gap := d.Time.Sub(x.connects[i].Time)
		if gap < -clockSkew || gap > matchWindow {
			continue
		}
		gap = max(gap, -gap)
		if gap < bestGap {
			best, bestGap = i, gap
		}
	}
	if best >= 0 && d.Protocol != rules.ProtoDNS {
		x.used[best] = true
		if d.Client != "" {
			x.byClient[d.Client] = best
		}
	}
	return best
}

// execsByPID groups the exec record by process.
func execsByPID(execs []monitor.Exec) map[int32][]monitor.Exec {
	out := map[int32][]monitor.Exec{}
	for _, x := range execs {
		out[x.PID] = append(out[x.PID], x)
	}
	return out
}

// binaryOf is the last program a process exec'd before t.
func binaryOf(execs []monitor.Exec, t time.Time) string {
	bin := ""
	for _, x := range execs {
		if !x.Time.After(t) {
			bin = x.Binary
		}
	}
	return bin
}

// Refusals returns the denied and would-deny decisions, one per
// destination, outcome and reason.
func Refusals(ds []rules.Decision) []rules.Decision {
	seen := map[string]bool{}
	var out []rules.Decision
	for _, d := range ds {
		if d.Decision != rules.Denied && d.Decision != rules.WouldDeny {
			continue
		}
		k := fmt.Sprintf("%s|%s|%d|%s|%s", d.Name, d.Address, d.Port, d.Reason, d.Decision)
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, d)
	}
	return out
}

// WriteRefusals prints the block a step's stderr gets when egress was
// refused during it (or, under audit, would have been): each
// destination, why, and the policy line that would allow it.
func WriteRefusals(w io.Writer, ds []rules.Decision) {
	var denied, would []rules.Decision
	for _, d := range ds {
		if d.Decision == rules.WouldDeny {
			would = append(would, d)
		} else {
			denied = append(denied, d)
		}
	}
	writeRefusals(w, "airlock: network egress refused during this step", denied)
	writeRefusals(w, "airlock: network egress let through by audit during this step, which enforcement would refuse", would)
}

func writeRefusals(w io.Writer, title string, ds []rules.Decision) {
	if len(ds) == 0 {
		return
	}
	const most = 20
	fmt.Fprintf(w, "%s (%d):\n", title, len(ds))
	for i, d := range ds {
		if i == most {
			fmt.Fprintf(w, "  ... and %d more (see the egress section of the JSON result)\n", len(ds)-most)
			break
		}
		dest := d.Address
		if d.Name != "" {
			dest = d.Name
		}
		if d.Port != 0 && d.Protocol != rules.ProtoDNS {
			dest = fmt.Sprintf("%s:%d", dest, d.Port)
		}
		fmt.Fprintf(w, "  - %s (%s): %s\n", dest, d.Protocol, d.Reason)
		if d.Suggest != "" {
			fmt.Fprintf(w, "    to allow it: %s\n", d.Suggest)
		}
	}
}
