// Package egress runs one job's egress gateway: the sandbox and gateway
// network namespaces (netns), the allowlist DNS server (dns) and the TCP
// gateway and explicit proxy (gateway), which all ask the one
// rules.Decider it makes of the compiled policy and the job's Actions
// service hosts (the credentials vault). It hands the sandbox its network
// namespace, its resolv.conf and its proxy variables, and at the end
// merges what the gateway decided with the runtime-monitoring connect
// events (attempts that never reached the gateway: direct IPs, UDP, IPv6)
// into one list of decisions.
//
// Nothing here outlives the job: the namespaces exist only through file
// descriptors (the sandbox's and ours), the listeners live in the gateway
// namespace, and Close ends every connection.
//
// Layer 4: it puts netns, dns, gateway and rules together and reads the
// sandbox's connect events (gvisor, gvisor/monitor); it must not import
// runner, policies (rules compiled the policy) or trust.
package egress

import (
	"crypto/x509"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-ci/airlock/gvisor"

	"github.com/airlock-ci/airlock/runner/credentials"
	"github.com/airlock-ci/airlock/runner/egress/dns"
	"github.com/airlock-ci/airlock/runner/egress/gateway"
	"github.com/airlock-ci/airlock/runner/egress/netns"
	"github.com/airlock-ci/airlock/runner/egress/rules"
	"github.com/airlock-ci/airlock/runner/egress/uploads"
)

// Config configures a job's egress.
type Config struct {
	Policy *rules.Policy
	// Link is the sandbox-gateway subnet; Pool the addresses handed out
	// for allowed names. Zero: netns.DefaultSubnet and netns.DefaultPool.
	Link, Pool netip.Prefix
	// ProxyPort is the explicit proxy's port on the gateway (3128).
	ProxyPort int
	// Resolver resolves allowed names on the host. Nil: the host's.
	Resolver gateway.Resolver
	// DNSTTL is the TTL of DNS answers (60 s).
	DNSTTL time.Duration
	// Dialer dials upstream (tests watch it). Nil: the gateway's default.
	Dialer *net.Dialer
	// UpstreamRoots verify upstream servers when the gateway terminates
	// TLS to add a secret. Nil: the host's roots.
	UpstreamRoots *x509.CertPool
	// CAValidity bounds the job CA's certificates (the job's timeout;
	// default 24 h).
	CAValidity time.Duration
	// LocalNames resolve to loopback inside the sandbox (the job's
	// services, through its /etc/hosts): exempt from the proxy.
	LocalNames []string
	// Credentials is the job's vault: its credentials are put back into
	// the requests where they belong, which the job CA must cover.
	Credentials *credentials.Vault
	// ModeNote says why the job is enforced although the organisation
	// asked for audit (agent work); recorded in the report.
	ModeNote string
	// UploadSpool is a directory (on a disk) in which the gateway keeps
	// the artifact blocks the job stages until it commits them
	// (uploads.Recorder), in a directory of the job's own that Close
	// removes. "": no upload is recorded.
	UploadSpool string
}

// maxNames bounds the pool addresses one job can use.
const maxNames = 4096

// Egress is a running gateway.
type Egress struct {
	pair  *netns.Pair
	book  *dns.Allowlist
	dns   *dns.Server
	gw    *gateway.Gateway
	log   *rules.Log // the gateway's and the proxy's decisions
	proxy netip.AddrPort
	udp   net.PacketConn
	ca    *gateway.CA
	local []string
	// uploads records the job's artifact uploads (nil: none recorded).
	uploads *uploads.Recorder
	// mode and modeNote are the report's (Report.Mode, ModeNote).
	mode, modeNote string
}

// Start creates the namespaces and starts the DNS server and the gateway.
func Start(cfg Config) (_ *Egress, err error) {
	if cfg.Policy == nil {
		return nil, fmt.Errorf("egress: no policy")
	}
	if !cfg.Link.IsValid() {
		cfg.Link = netns.DefaultSubnet
	}
	if !cfg.Pool.IsValid() {
		cfg.Pool = netns.DefaultPool
	}
	if cfg.ProxyPort == 0 {
		cfg.ProxyPort = 3128
	}
	if cfg.DNSTTL == 0 {
		cfg.DNSTTL = time.Minute
	}
	pair, err := netns.New(cfg.Link, cfg.Pool)
	if err != nil {
		return nil, err
	}
	e := &Egress{pair: pair, log: rules.NewLog(rules.MaxLog), proxy: netip.AddrPortFrom(pair.GatewayAddr, uint16(cfg.ProxyPort)), local: cfg.LocalNames, mode: "enforce", modeNote: cfg.ModeNote}
	if cfg.Policy.Audit {
		e.mode = "audit"
	}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	first, last := poolRange(cfg.Pool)
	hosts, services := caHosts(cfg)
	decider := rules.NewDecider(cfg.Policy, services)
	if e.book, err = dns.NewAllowlist(decider.NameAllowed, first, last); err != nil {
		return nil, err
	}
	if len(hosts) > 0 {
		if cfg.CAValidity == 0 {
			cfg.CAValidity = 24 * time.Hour
		}
		if e.ca, err = gateway.NewCA(hosts, cfg.CAValidity); err != nil {
			return nil, err
		}
	}
	dnsAddr := netip.AddrPortFrom(pair.GatewayAddr, 53)
	if cfg.Credentials != nil && cfg.UploadSpool != "" {
		spool, err := uploads.SpoolDir(cfg.UploadSpool)
		if err != nil {
			return nil, fmt.Errorf("egress: %w", err)
		}
		e.uploads = uploads.New(spool, 0)
	}
	e.gw = gateway.New(gateway.Config{
		Decider: decider, Names: e.book, Proxy: e.proxy, DNS: dnsAddr, Log: e.log, Resolver: cfg.Resolver, Dialer: cfg.Dialer,
		CA: e.ca, UpstreamRoots: cfg.UpstreamRoots, Credentials: cfg.Credentials, Uploads: e.uploads,
	})
	ports := append(decider.Ports(), 53, cfg.ProxyPort)
	var listeners []net.Listener
	err = pair.InGateway(func() error {
		var err error
		if e.udp, err = net.ListenPacket("udp4", dnsAddr.String()); err != nil {
			return fmt.Errorf("egress: DNS socket: %w", err)
		}
		seen := map[int]bool{}
		for _, p := range ports {
			if seen[p] {
				continue
			}
			seen[p] = true
			// One listener per port on every address of the gateway
			// namespace: the gateway address and the whole pool.
			ln, err := net.Listen("tcp4", net.JoinHostPort("0.0.0.0", strconv.Itoa(p)))
			if err != nil {
				return fmt.Errorf("egress: listen on port %d: %w", p, err)
			}
			listeners = append(listeners, ln)
		}
		return nil
	})
	for _, ln := range listeners {
		e.gw.Serve(ln)
	}
	if err != nil {
		return nil, err
	}
	e.dns = dns.New(e.book, cfg.DNSTTL, rules.NewLog(dns.MaxLog), pair.GatewayAddr, decider.NameWouldDeny)
	e.dns.Serve(e.udp, e.gw.DNSListener())
	return e, nil
}

// poolRange is the first and last address of the pool handed out for
// names (at most maxNames).
func poolRange(pool netip.Prefix) (first, last netip.Addr) {
	first = pool.Masked().Addr().Next()
	last = first
	for i := 1; i < maxNames && pool.Contains(last.Next()); i++ {
		last = last.Next()
	}
	return first, last
}

// caHosts are the domains the job CA must sign for (the secrets' hosts
// and, with a vault, its CA hosts), and the vault as the Decider's
// service hosts.
func caHosts(cfg Config) ([]string, rules.Services) {
	hosts := secretHosts(cfg.Policy)
	v := cfg.Credentials
	if v == nil {
		return hosts, nil
	}
	// The job's Actions service hosts resolve and are reached once a
	// step named them (each request then passes the credentials
	// policy). They lie in the domains of the vault's CA hosts, so the
	// job CA covers them and the gateway reads their requests.
	for _, h := range v.CAHosts() {
		if !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	return hosts, v
}

// NetNS is the sandbox's network namespace, for gvisor.Config.NetNS.
func (e *Egress) NetNS() string { return e.pair.SandboxPath() }

// GatewayAddr is the gateway's address as the sandbox sees it.
func (e *Egress) GatewayAddr() netip.Addr { return e.pair.GatewayAddr }

// ProxyURL is the explicit proxy's URL.
func (e *Egress) ProxyURL() string { return "http://" + e.proxy.String() }

// Env is what the sandbox's processes get: the explicit proxy, in both
// spellings, with loopback exempt.
func (e *Egress) Env() []string {
	u := e.ProxyURL()
	out := []string{}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		out = append(out, k+"="+u)
	}
	noProxy := strings.Join(append([]string{"localhost", "127.0.0.1"}, e.local...), ",")
	out = append(out, "NO_PROXY="+noProxy, "no_proxy="+noProxy)
	if e.ca != nil {
		// Tools that do not read the system bundle, or read their own.
		for _, k := range []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "PIP_CERT"} {
			out = append(out, k+"="+CABundlePath)
		}
		out = append(out, "NODE_EXTRA_CA_CERTS="+JobCAPath)
	}
	return out
}

// ResolvConf is the sandbox's /etc/resolv.conf: the gateway only. Short
// timeouts, since the gateway answers at once or not at all.
func (e *Egress) ResolvConf() []byte {
	return []byte(fmt.Sprintf("# written by airlock: the egress gateway answers for the names the policy allows\nnameserver %s\noptions timeout:2 attempts:2\n", e.pair.GatewayAddr))
}

// Where the sandbox finds the job CA (only when the policy has secrets):
// the CA alone, and the root's CA bundle with the CA added.
const (
	JobCAPath    = "/run/airlock-job-ca.pem"
	CABundlePath = "/run/airlock-ca-bundle.pem"
	systemBundle = "/etc/ssl/certs/ca-certificates.crt"
)

// Files are what the sandbox's root gets from the gateway: resolv.conf,
// and with a job CA, the CA and a CA bundle that includes it, also put
// over the system bundle of root (the sandbox's root filesystem on the
// host) when it has one.
func (e *Egress) Files(root string) ([]gvisor.File, error) {
	files := []gvisor.File{{Path: "/etc/resolv.conf", Data: e.ResolvConf()}}
	if e.ca == nil {
		return files, nil
	}
	bundle, regular, err := readSystemBundle(root)
	if err != nil {
		return nil, fmt.Errorf("egress: read the CA bundle: %w", err)
	}
	bundle = append(append(bundle, '\n'), e.ca.PEM()...)
	files = append(files, gvisor.File{Path: JobCAPath, Data: e.ca.PEM()}, gvisor.File{Path: CABundlePath, Data: bundle})
	if regular {
		files = append(files, gvisor.File{Path: systemBundle, Data: bundle})
	}
	return files, nil
}

// maxBundle bounds the system CA bundle read.
const maxBundle = 16 << 20

// readSystemBundle reads root's CA bundle inside root (an image's
// symlinks are followed only within it, never to the host's files),
// and says whether it is a regular file there (then it is replaced by
// one that includes the job CA). A root without one is no error.
func readSystemBundle(root string) (data []byte, regular bool, err error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, false, err
	}
	defer r.Close()
	rel := strings.TrimPrefix(systemBundle, "/")
	// Images link their bundle with absolute symlinks (to /etc/pki/...):
	// those are resolved against root here, a few hops at most.
	for range 8 {
		fi, err := r.Lstat(rel)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			break
		}
		target, err := r.Readlink(rel)
		if err != nil {
			break
		}
		if path.IsAbs(target) {
			rel = strings.TrimPrefix(path.Clean(target), "/")
		} else {
			rel = path.Join(path.Dir(rel), target)
		}
	}
	f, err := r.Open(rel)
	if err != nil {
		// Missing, or leaving the root: no system bundle to extend.
		return nil, false, nil
	}
	defer f.Close()
	data, err = io.ReadAll(io.LimitReader(f, maxBundle+1))
	if err != nil {
		return nil, false, err
	}
	if len(data) > maxBundle {
		return nil, false, fmt.Errorf("%s is larger than %d bytes", systemBundle, maxBundle)
	}
	fi, err := r.Lstat(strings.TrimPrefix(systemBundle, "/"))
	return data, err == nil && fi.Mode().IsRegular(), nil
}

func secretHosts(p *rules.Policy) []string {
	var out []string
	for _, s := range p.Secrets {
		if !slices.Contains(out, s.Host) {
			out = append(out, s.Host)
		}
	}
	return out
}

// Close stops the DNS server and the gateway, ends every connection and
// lets go of the namespaces.
func (e *Egress) Close() error {
	if e.dns != nil {
		e.dns.Shutdown()
	}
	if e.udp != nil {
		e.udp.Close()
	}
	if e.gw != nil {
		e.gw.Close()
	}
	if e.uploads != nil {
		if err := e.uploads.Close(); err != nil {
			slog.Warn("removing the artifact upload spool", "err", err)
		}
	}
	return e.pair.Close()
}
