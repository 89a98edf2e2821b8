package dns

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	mdns "github.com/miekg/dns"

	"github.com/airlock-ci/airlock/internal/textsafe"
	"github.com/airlock-ci/airlock/runner/egress/rules"
)

// The policy the fuzz targets answer for (dns_test.go's, and a name with
// a digit and a hyphen), and a pool no run exhausts.
var (
	fuzzHosts     = []string{"proxy.golang.org", "*.githubusercontent.com", "ok.example"}
	fuzzPoolFirst = netip.MustParseAddr("198.18.0.1")
	fuzzPoolLast  = netip.MustParseAddr("198.18.255.254")
)

// fuzzSeeds are queries as resolvers send them (dns_test.go's, and the
// sandbox test's raw query.py packet) and hostile ones: case, escaped
// bytes in a label, compression pointers, several questions, EDNS options,
// every kind of QTYPE and QCLASS, odd header bits.
func fuzzSeeds(tb testing.TB) [][]byte {
	var out [][]byte
	add := func(m *mdns.Msg) {
		b, err := m.Pack()
		if err != nil {
			tb.Fatalf("seed %v: %v", m, err)
		}
		out = append(out, b)
	}
	q := func(name string, qtype uint16) *mdns.Msg {
		m := new(mdns.Msg)
		m.SetQuestion(name, qtype)
		m.Id = 0x1234
		return m
	}
	for _, name := range []string{"proxy.golang.org.", "PROXY.golang.org.", "raw.githubusercontent.com.", "githubusercontent.com.",
		"c2VjcmV0LXRva2Vu.evil.example.", "_dmarc.githubusercontent.com.", "metadata.google.internal.", "ok.example.",
		"a-1.githubusercontent.com.", `ok\.example.`, `raw\046githubusercontent.com.`, `x\.raw.githubusercontent.com.`,
		`\000.githubusercontent.com.`, `raw.githubusercontent.com\.evil.`, "10.0.0.1.", "x.githubusercontent.123.",
		"RAW.GitHubUserContent.COM.", ".", "-a.githubusercontent.com.", "xn--bcher-kva.githubusercontent.com."} {
		for _, t := range []uint16{mdns.TypeA, mdns.TypeAAAA, mdns.TypeANY, mdns.TypeCNAME, mdns.TypeTXT, mdns.TypeHTTPS, mdns.TypePTR} {
			add(q(name, t))
		}
	}
	m := q("ok.example.", mdns.TypeA)
	m.Question = append(m.Question, mdns.Question{Name: "evil.example.", Qtype: mdns.TypeA, Qclass: mdns.ClassINET})
	add(m)
	m = q("ok.example.", mdns.TypeA)
	m.Question[0].Qclass = mdns.ClassCHAOS
	add(m)
	m = q("ok.example.", mdns.TypeA)
	m.Question[0].Qclass = mdns.ClassANY
	add(m)
	m = q("ok.example.", mdns.TypeA)
	m.SetEdns0(4096, true)
	opt := m.IsEdns0()
	opt.Option = append(opt.Option, &mdns.EDNS0_SUBNET{Code: mdns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: net.IPv4(10, 0, 0, 0)},
		&mdns.EDNS0_COOKIE{Code: mdns.EDNS0COOKIE, Cookie: "0102030405060708"}, &mdns.EDNS0_PADDING{Padding: make([]byte, 16)})
	add(m)
	m = q("evil.example.", mdns.TypeA)
	m.SetEdns0(65535, false)
	m.IsEdns0().SetExtendedRcode(mdns.RcodeBadVers)
	add(m)
	m = q("ok.example.", mdns.TypeA)
	m.Opcode = mdns.OpcodeNotify
	add(m)
	m = q("ok.example.", mdns.TypeA)
	m.Opcode = mdns.OpcodeUpdate
	add(m)
	m = q("ok.example.", mdns.TypeA)
	m.Response = true
	add(m)
	m = q("ok.example.", mdns.TypeA)
	m.Zero, m.AuthenticatedData, m.CheckingDisabled = true, true, true
	add(m)
	m = q("ok.example.", mdns.TypeA)
	m.Answer = append(m.Answer, &mdns.A{Hdr: mdns.RR_Header{Name: "ok.example.", Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 1}, A: net.IPv4(1, 2, 3, 4)})
	add(m)
	// query.py's packet, as the sandbox sends it.
	out = append(out, []byte("\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x02ok\x07example\x00\x00\x01\x00\x01"))
	// A question name by a compression pointer: into the header, to
	// itself, to a name that follows, and a name that ends in one.
	hdr := "\xab\xcd\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
	out = append(out,
		[]byte(hdr+"\xc0\x0c\x00\x01\x00\x01"),
		[]byte(hdr+"\xc0\x00\x00\x01\x00\x01"),
		[]byte(hdr+"\x03raw\xc0\x16\x00\x01\x00\x01\x10githubusercontent\x03com\x00"),
		[]byte(hdr+"\x02OK\x07EXAMPLE\x00\x00\x01\x00\x01"),
		[]byte(hdr+"\x0aok.example\x00\x00\x01\x00\x01"),
	)
	// dns_test.go's junk.
	out = append(out, []byte{0}, []byte("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"), make([]byte, 4000))
	return out
}

// fuzzWriter is the ResponseWriter of one query driven in-process: it
// keeps what the handler writes, as the server would send it.
type fuzzWriter struct {
	remote net.Addr
	out    [][]byte
	err    error
}

func (w *fuzzWriter) LocalAddr() net.Addr  { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53} }
func (w *fuzzWriter) RemoteAddr() net.Addr { return w.remote }
func (w *fuzzWriter) WriteMsg(m *mdns.Msg) error {
	b, err := m.Pack()
	if err != nil {
		w.err = err
		return err
	}
	w.out = append(w.out, b)
	return nil
}
func (w *fuzzWriter) Write(b []byte) (int, error) {
	w.out = append(w.out, bytes.Clone(b))
	return len(b), nil
}
func (w *fuzzWriter) Close() error        { return nil }
func (w *fuzzWriter) TsigStatus() error   { return nil }
func (w *fuzzWriter) TsigTimersOnly(bool) {}
func (w *fuzzWriter) Hijack()             {}

// wireName decodes the name at off in a message as the wire has it: its
// labels' bytes, compression pointers followed. ok is false for a name
// miekg/dns would not read either.
func wireName(msg []byte, off int) (labels [][]byte, ok bool) {
	for hops := 0; hops < 128; hops++ {
		if off >= len(msg) {
			return nil, false
		}
		c := int(msg[off])
		switch c & 0xc0 {
		case 0x00:
			if c == 0 {
				return labels, true
			}
			if off+1+c > len(msg) {
				return nil, false
			}
			labels = append(labels, msg[off+1:off+1+c])
			off += 1 + c
		case 0xc0:
			if off+1 >= len(msg) {
				return nil, false
			}
			off = (c&0x3f)<<8 | int(msg[off+1])
		default:
			return nil, false
		}
	}
	return nil, false
}

// oracleAllowed is whether the policy allows the name a question's wire
// labels spell, by the rules the package documents: host-name labels only
// (letters, digits, hyphens, not at a label's ends; 1-63 bytes), 253
// bytes in all, a last label that is not a number, compared without
// regard to ASCII case, and then the policy's own check. It reads the
// wire, not miekg/dns's text form of it, so an escaped byte (\046, \.)
// cannot pass for a dot.
func oracleAllowed(labels [][]byte, allowed func(string) bool) (string, bool) {
	if len(labels) == 0 {
		return "", false
	}
	parts := make([]string, len(labels))
	for i, l := range labels {
		if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "", false
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return "", false
			}
		}
		parts[i] = strings.ToLower(string(l))
	}
	name := strings.Join(parts, ".")
	if len(name) > 253 || strings.Trim(parts[len(parts)-1], "0123456789") == "" {
		return "", false
	}
	return name, allowed(name)
}

// checkAnswer holds one response to one query (both raw) to the
// properties the server promises:
//   - the response parses as DNS, is a response, and echoes the query's id;
//   - it carries at most one record, an A, and nothing in the authority
//     or additional sections; when the handler (not miekg/dns's own
//     FORMERR or NOTIMP, which echoes the query's header bits) wrote it,
//     it never claims to recurse;
//   - a name the policy does not allow (read from the wire by
//     oracleAllowed) gets no address and no empty success: NXDOMAIN,
//     REFUSED or FORMERR, whatever its case, escapes, compression, type,
//     class or EDNS options;
//   - an address is only ever the book's for that very name, for an A
//     question of class IN in a well-formed single-question query;
//   - when live (the pool cannot be exhausted) and the handler answered a
//     well-formed A query of class IN for an allowed name, the answer is
//     that address.
func checkAnswer(t *testing.T, query, resp []byte, book *Allowlist, allowed func(string) bool, handled, live bool) {
	t.Helper()
	r := new(mdns.Msg)
	if err := r.Unpack(resp); err != nil {
		t.Fatalf("the response to %x does not parse: %v (%x)", query, err, resp)
	}
	if len(query) < 2 || r.Id != binary.BigEndian.Uint16(query) {
		t.Fatalf("the response's id %#x is not the query's (%x)", r.Id, query)
	}
	if !r.Response || handled && r.RecursionAvailable {
		t.Fatalf("response bits: %v", r.MsgHdr)
	}
	if len(r.Answer) > 1 || len(r.Ns) > 0 || len(r.Extra) > 0 {
		t.Fatalf("the response to %x carries %v / %v / %v", query, r.Answer, r.Ns, r.Extra)
	}
	req := new(mdns.Msg)
	reqErr := req.Unpack(query)
	var labels [][]byte
	ok := len(query) > 12
	if ok {
		labels, ok = wireName(query, 12)
	}
	name, allow := "", false
	if ok && reqErr == nil && len(req.Question) > 0 {
		name, allow = oracleAllowed(labels, allowed)
	}
	wellFormed := reqErr == nil && len(req.Question) == 1 && req.Opcode == mdns.OpcodeQuery && !req.Response
	if !allow && (r.Rcode == mdns.RcodeSuccess || len(r.Answer) > 0) {
		t.Fatalf("a name the policy denies (%q, wire %q) was answered %s %v", name, labels, mdns.RcodeToString[r.Rcode], r.Answer)
	}
	if len(r.Answer) == 1 {
		a, isA := r.Answer[0].(*mdns.A)
		if !isA || !wellFormed || req.Question[0].Qtype != mdns.TypeA || req.Question[0].Qclass != mdns.ClassINET || a.Hdr.Class != mdns.ClassINET {
			t.Fatalf("answer %v to %v", r.Answer[0], req)
		}
		if !strings.EqualFold(a.Hdr.Name, req.Question[0].Name) {
			t.Fatalf("answer for %q to a question for %q", a.Hdr.Name, req.Question[0].Name)
		}
		addr, _ := netip.AddrFromSlice(a.A.To4())
		if got, known := book.Name(addr); !known || got != name {
			t.Fatalf("%q answered %s, which the book holds for %q (%v)", name, addr, got, known)
		}
	}
	if live && handled && allow && wellFormed && req.Question[0].Qtype == mdns.TypeA && req.Question[0].Qclass == mdns.ClassINET &&
		(r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1) {
		t.Fatalf("the allowed name %q was not answered: %s %v", name, mdns.RcodeToString[r.Rcode], r.Answer)
	}
}

// FuzzHandle feeds the server's handler arbitrary bytes as a query over
// UDP or TCP, in-process: the bytes go the way miekg/dns's server takes
// them (a header it would ignore or reject never reaches the handler; a
// message it cannot unpack gets its own FORMERR), and when direct is
// set, any message that unpacks goes to the handler as is (should the
// server's accept function ever let more through). Properties: never
// panics (a panic in a handler ends the gateway); the handler writes
// exactly one response, which packs; checkAnswer's properties; and the
// query is recorded once, as denied when the policy denies the name, with
// a name that is one safe line of text.
func FuzzHandle(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s, false, false)
		f.Add(s, true, true)
	}
	allowed := allowing(f, fuzzHosts...)
	f.Fuzz(func(t *testing.T, raw []byte, tcp, direct bool) {
		book, err := NewAllowlist(allowed, fuzzPoolFirst, fuzzPoolLast)
		if err != nil {
			t.Fatal(err)
		}
		s := New(book, time.Minute, rules.NewLog(MaxLog), netip.MustParseAddr("127.0.0.1"), nil)
		if len(raw) < 12 {
			return // the server reads no header, and answers nothing
		}
		req := new(mdns.Msg)
		if req.Unpack(raw) != nil || !direct && !handled(raw) {
			return // the server answers itself, or not at all
		}
		w := &fuzzWriter{remote: &net.UDPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 5353}}
		if tcp {
			w.remote = &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 5353}
		}
		s.handle(w, req)
		if w.err != nil || len(w.out) != 1 {
			t.Fatalf("the handler wrote %d responses (%v) to %x", len(w.out), w.err, raw)
		}
		checkAnswer(t, raw, w.out[0], book, allowed, true, true)
		log, _ := s.Log().Snapshot()
		if len(log) != 1 {
			t.Fatalf("%d decisions recorded for one query", len(log))
		}
		d := log[0]
		if labels, ok := wireName(raw, 12); len(req.Question) > 0 && ok {
			if _, allow := oracleAllowed(labels, allowed); !allow && d.Decision != rules.Denied {
				t.Fatalf("a denied name recorded as %+v", d)
			}
		}
		if !utf8.ValidString(d.Name) || textsafe.Line(d.Name) != d.Name {
			t.Fatalf("the record names %q: not one safe line", d.Name)
		}
	})
}

// handled reports a message miekg/dns's server hands to the handler: a
// header its accept function takes, and a message that unpacks.
func handled(raw []byte) bool {
	if len(raw) < 12 {
		return false
	}
	h := mdns.Header{Id: binary.BigEndian.Uint16(raw), Bits: binary.BigEndian.Uint16(raw[2:]),
		Qdcount: binary.BigEndian.Uint16(raw[4:]), Ancount: binary.BigEndian.Uint16(raw[6:]),
		Nscount: binary.BigEndian.Uint16(raw[8:]), Arcount: binary.BigEndian.Uint16(raw[10:])}
	return mdns.DefaultMsgAcceptFunc(h) == mdns.MsgAccept && new(mdns.Msg).Unpack(raw) == nil
}

// FuzzServeTCP sends arbitrary bytes as one DNS message over TCP to the
// server as the gateway runs it (Serve, miekg/dns's server, on a loopback
// listener this test opens), followed on the same connection by a query
// for an allowed name. Properties: the server neither panics nor stops
// (the second query is answered, with the address); at most one response
// comes for the first message, and when it comes it meets checkAnswer's
// properties (a denied name is never answered with an address, whatever
// the bytes).
func FuzzServeTCP(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	allowed := allowing(f, fuzzHosts...)
	book, err := NewAllowlist(allowed, fuzzPoolFirst, fuzzPoolLast)
	if err != nil {
		f.Fatal(err)
	}
	udp, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	// Its own port: only TCP is asked here, and the UDP socket's port may
	// be taken for TCP.
	tcp, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		udp.Close()
		f.Fatal(err)
	}
	s := New(book, time.Minute, rules.NewLog(MaxLog), netip.MustParseAddr("127.0.0.1"), nil)
	s.Serve(udp, tcp)
	var once sync.Once
	f.Cleanup(func() { once.Do(s.Shutdown) })
	addr := tcp.Addr().String()
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 0xffff {
			return
		}
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		var id uint16
		if len(raw) >= 2 {
			id = binary.BigEndian.Uint16(raw) + 1
		}
		probe := new(mdns.Msg)
		probe.SetQuestion("proxy.golang.org.", mdns.TypeA)
		probe.Id = id
		pb, err := probe.Pack()
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		for _, m := range [][]byte{raw, pb} {
			binary.Write(&out, binary.BigEndian, uint16(len(m)))
			out.Write(m)
		}
		if _, err := c.Write(out.Bytes()); err != nil {
			t.Fatalf("write: %v", err)
		}
		var first []byte
		for n := 0; ; n++ {
			var l uint16
			if err := binary.Read(c, binary.BigEndian, &l); err != nil {
				t.Fatalf("no answer to a good query after %x: %v", raw, err)
			}
			resp := make([]byte, l)
			if _, err := io.ReadFull(c, resp); err != nil {
				t.Fatalf("read: %v", err)
			}
			if n == 0 && len(raw) >= 2 && len(resp) >= 2 && binary.BigEndian.Uint16(resp) == id-1 {
				first = resp
				continue
			}
			r := new(mdns.Msg)
			if err := r.Unpack(resp); err != nil || r.Id != id {
				t.Fatalf("a response (%v) that is neither the first message's nor the probe's: %x", err, resp)
			}
			if r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1 {
				// The pool is never exhausted here: the server stopped
				// answering well.
				t.Fatalf("the probe after %x: %v", raw, r)
			}
			break
		}
		if first != nil {
			checkAnswer(t, raw, first, book, allowed, handled(raw), false)
		}
	})
	once.Do(s.Shutdown)
}
