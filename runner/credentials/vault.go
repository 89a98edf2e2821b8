// Package credentials keeps a job's own credentials out of its sandbox.
// The runner hands a job's steps its most powerful secrets in their
// environment: the runtime token (cache, artifacts), the OIDC request
// token, the GitHub token (as GITHUB_TOKEN, or an action's token input);
// a workflow passes its secrets the same way. A Vault learns them from
// each step's environment before the step starts, gives the step a
// per-job placeholder in their place, and tells the egress gateway, for
// each request, whether it goes where a credential belongs: then the
// gateway puts the real value back, in whichever form the client wrote
// the placeholder (Bearer, token, basic x-access-token). A placeholder
// sent anywhere else goes out as it is, useless, and is counted. A
// credential is put back in one place: Vault.Request (routes.go), which
// the gateway asks for each request it forwards.
//
// What those requests may do is the policy's (credentials: cache, git
// push, artifacts, OIDC audiences): the Vault answers for them too, as
// the rule credentials.*. Egress itself is decided by rules.Decider,
// which weighs that answer with egress.allow and takes the Vault's
// Actions service hosts (ServiceHost) as names it may reach.
//
// Trust: nothing from the sandbox is trusted. Real values live only in
// the Vault (airlock's memory) and in the requests the gateway sends
// upstream; they are never logged, recorded or returned to the sandbox
// (the gateway blanks an upstream's echo of them).
//
// Layer 2: imports nothing of airlock's but policies (and internal
// helpers); the gateway calls it for each request, runner/egress hands
// it to rules.Decider as its rules.Services, runner wires the job's.
package credentials

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Kinds of credential.
const (
	RuntimeToken     = "runtime token"      // ACTIONS_RUNTIME_TOKEN
	OIDCRequestToken = "OIDC request token" // ACTIONS_ID_TOKEN_REQUEST_TOKEN
	GitHubToken      = "GitHub token"       // GITHUB_TOKEN, checkout's token input, ...
	Secret           = "secret"             // a workflow secret the policy names
)

// minSubstring is the shortest value replaced inside a longer one: a
// shorter secret is replaced only where it is the whole value (it could
// be a piece of any word).
const minSubstring = 8

// githubTokenShape is what GitHub's tokens look like (installation,
// personal, OAuth, user-to-server, refresh; fine-grained): a variable that
// holds one is withheld whatever its name (checkout's INPUT_TOKEN).
var githubTokenShape = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})$`)
})

// credential is one real value and its placeholder.
type credential struct {
	kinds []string
	real  string
	ph    string
	// vars are the variables it was withheld from.
	vars []string
	// forms are the encodings it can travel in, real and placeholder:
	// the value itself, and HTTP basic for user x-access-token (git).
	forms [][2]string
}

// Vault is one job's credentials. It is safe for concurrent use: the
// job's steps and the gateway's requests reach it at once.
type Vault struct {
	pol Policy

	mu     sync.Mutex
	creds  []*credential
	byReal map[string]*credential
	// byPh finds a credential by its placeholder: an environment that
	// already went through the vault (a step's, built on the job's) must
	// not have its placeholders learned as credentials of their own.
	byPh  map[string]*credential
	ends  endpoints
	masks []string
	rec   recorder
}

// NewVault returns the vault of a job under pol. serverURL and apiURL are
// the GitHub server's and API's (GITHUB_SERVER_URL, GITHUB_API_URL; empty
// when unknown): where the GitHub token may go.
func NewVault(pol Policy, serverURL, apiURL string) *Vault {
	v := &Vault{pol: pol, byReal: map[string]*credential{}, byPh: map[string]*credential{}}
	v.ends.learnGitHub(serverURL, apiURL)
	return v
}

// Withhold learns the credentials in a step's (or a container's)
// environment and returns it with every credential the vault knows
// replaced by its placeholder: whole values, and values inside others
// (a URL, a header, a basic-auth blob). The Actions service URLs in it
// tell the vault where the runtime and OIDC tokens go.
func (v *Vault) Withhold(env map[string]string) map[string]string {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, k := range sortedKeys(env) {
		val := env[k]
		if c := v.byPh[val]; c != nil && val != "" {
			c.addVar(k)
			continue
		}
		switch kind := v.kindOf(k, val); {
		case kind != "":
			v.add(k, kind, val)
		case v.byReal[val] != nil:
			v.byReal[val].addVar(k)
		}
	}
	v.learn(env)
	out := make(map[string]string, len(env))
	for k, val := range env {
		out[k] = v.replace(k, val)
	}
	return out
}

// gitBasicHeader is a git config extraheader with HTTP basic credentials,
// as actions/checkout persists its token (src/git-auth-helper.ts:
// "AUTHORIZATION: basic base64(x-access-token:<token>)").
var gitBasicHeader = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?i)(authorization:[ \t]*basic[ \t]+)([A-Za-z0-9+/]+=*)`)
})

// WithholdGitConfig learns the tokens a git config file carries in an
// extraheader (actions/checkout's persisted credentials, in .git/config
// or in the credentials file it includes) as the GitHub token, and
// returns the text with every credential the vault knows replaced by
// its placeholder. what names the file, for the record.
func (v *Vault) WithholdGitConfig(text, what string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	text = gitBasicHeader().ReplaceAllStringFunc(text, func(h string) string {
		m := gitBasicHeader().FindStringSubmatch(h)
		b, err := base64.StdEncoding.DecodeString(m[2])
		user, token, ok := strings.Cut(string(b), ":")
		if err != nil || !ok || len(token) < minSubstring || v.byPh[token] != nil {
			return h
		}
		v.add(what, GitHubToken, token)
		// Whatever the user name (git takes any with a token).
		return m[1] + base64.StdEncoding.EncodeToString([]byte(user+":"+v.byReal[token].ph))
	})
	return v.replace(what, text)
}

// kindOf says which credential a variable holds, if any.
func (v *Vault) kindOf(name, val string) string {
	switch {
	case val == "":
		return ""
	case name == "ACTIONS_RUNTIME_TOKEN":
		return RuntimeToken
	case name == "ACTIONS_ID_TOKEN_REQUEST_TOKEN":
		return OIDCRequestToken
	case githubTokenShape().MatchString(val):
		// GITHUB_TOKEN, GH_TOKEN, checkout's token input: by its shape,
		// never by the variable's name alone (a step could name any
		// value so through $GITHUB_ENV, and have it blanked from the
		// record).
		return GitHubToken
	case v.pol.Secrets[name] != nil && len(val) >= minSubstring:
		return Secret
	}
	return ""
}

// add records a credential (or a new kind of one already known, as the
// OIDC request token that is the runtime token).
func (v *Vault) add(name, kind, real string) {
	c := v.byReal[real]
	if c == nil {
		c = &credential{real: real, ph: placeholder(real, kind)}
		c.forms = [][2]string{{real, c.ph}, {basicAuth(real), basicAuth(c.ph)}}
		v.creds = append(v.creds, c)
		v.byReal[real] = c
		v.byPh[c.ph] = c
	}
	if !slices.Contains(c.kinds, kind) {
		c.kinds = append(c.kinds, kind)
	}
	if kind == Secret && !slices.Contains(c.kinds, Secret+" "+name) {
		c.kinds = append(c.kinds, Secret+" "+name)
	}
	c.addVar(name)
}

// label names a credential in records: by its strongest kind (the
// runtime token is also the OIDC request token), or the secret's name.
func (c *credential) label() string {
	for _, k := range []string{RuntimeToken, OIDCRequestToken, GitHubToken} {
		if slices.Contains(c.kinds, k) {
			return k
		}
	}
	for _, k := range c.kinds {
		if strings.HasPrefix(k, Secret+" ") {
			return k
		}
	}
	return Secret
}

func (c *credential) addVar(name string) {
	if !slices.Contains(c.vars, name) {
		c.vars = append(c.vars, name)
	}
}

// replace puts placeholders in a value.
func (v *Vault) replace(name, val string) string {
	if c := v.byReal[val]; c != nil {
		c.addVar(name)
		return c.ph
	}
	out := val
	for _, c := range v.creds {
		if len(c.real) < minSubstring {
			continue
		}
		for _, f := range c.forms {
			if strings.Contains(out, f[0]) {
				out = strings.ReplaceAll(out, f[0], f[1])
				c.addVar(name)
			}
		}
	}
	return out
}

// maxMasks bounds the values a job may mask.
const maxMasks = 1024

// Mask adds a value the job asked to mask (::add-mask::): it is not a
// credential the gateway injects, but it is redacted from what airlock
// records and signs.
func (v *Vault) Mask(val string) {
	if val == "" {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if !slices.Contains(v.masks, val) && len(v.masks) < maxMasks {
		v.masks = append(v.masks, val)
	}
}

// Redact blanks every withheld or masked value in s (and the encoded
// forms of the withheld ones), for what airlock records and signs: where
// it stands inside s when it is at least minSubstring long, else only
// when it is the whole of s (a short value could be a piece of any word,
// and a job could mask one to blank what it likes from its record).
func (v *Vault) Redact(s string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	blank := func(val string) {
		switch {
		case val == "":
		case len(val) >= minSubstring:
			s = strings.ReplaceAll(s, val, redacted)
		case s == val:
			s = redacted
		}
	}
	for _, c := range v.creds {
		for _, f := range c.forms {
			blank(f[0])
		}
	}
	for _, m := range v.masks {
		blank(m)
	}
	return s
}

// RedactCut is Redact for a string the record cut at its end: the start
// of a withheld or masked value left at the cut is blanked too.
func (v *Vault) RedactCut(s string) string {
	s = v.Redact(s)
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, val := range v.secretsLocked() {
		if len(val) < minSubstring {
			continue
		}
		for n := min(len(val)-1, len(s)); n >= 4; n-- {
			if strings.HasSuffix(s, val[:n]) {
				s = s[:len(s)-n] + redacted
				break
			}
		}
	}
	return s
}

// Hide replaces every credential the vault knows, in every form, with
// its placeholder, wherever it stands in text (a script the runner
// wrote, a container's arguments). Nothing is learned.
func (v *Vault) Hide(text string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, c := range v.creds {
		if len(c.real) < minSubstring && text != c.real {
			continue
		}
		for _, f := range c.forms {
			text = strings.ReplaceAll(text, f[0], f[1])
		}
	}
	return text
}

// secretsLocked are the values Redact blanks; v.mu is held.
func (v *Vault) secretsLocked() []string {
	var out []string
	for _, c := range v.creds {
		for _, f := range c.forms {
			out = append(out, f[0])
		}
	}
	return append(out, v.masks...)
}

// redacted stands for a value airlock will not record.
const redacted = "***"

// placeholder makes a value's stand-in, random per job and never the
// value: the runtime (or OIDC request) token, a JWT, keeps its header and
// claims (clients read them: the artifact client takes its scope from
// the scp claim) with a signature that does not verify; a GitHub token
// keeps its prefix; anything else becomes random letters and digits of
// its length.
func placeholder(real, kind string) string {
	if parts := strings.Split(real, "."); (kind == RuntimeToken || kind == OIDCRequestToken) && len(parts) == 3 && len(parts[2]) > 0 && jsonPart(parts[0]) && jsonPart(parts[1]) {
		sig := randomFrom(base64URL, len(parts[2]))
		for sig == parts[2] {
			sig = randomFrom(base64URL, len(parts[2]))
		}
		return parts[0] + "." + parts[1] + "." + sig
	}
	prefix := ""
	if m := regexp.MustCompile(`^(gh[pousr]_|github_pat_)`).FindString(real); m != "" {
		prefix = m
	}
	for {
		ph := prefix + randomFrom(alnum, max(len(real)-len(prefix), 16))
		if ph != real {
			return ph
		}
	}
}

// jsonPart reports a JWT part that decodes to a JSON object.
func jsonPart(p string) bool {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(p, "="))
	return err == nil && json.Valid(b) && strings.HasPrefix(strings.TrimSpace(string(b)), "{")
}

const (
	alnum     = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	base64URL = alnum + "-_"
)

func randomFrom(chars string, n int) string {
	b := make([]byte, n)
	for i := range b {
		k, _ := rand.Int(rand.Reader, big.NewInt(int64(len(chars))))
		b[i] = chars[k.Int64()]
	}
	return string(b)
}

// basicAuth is how git and actions/checkout send a token: HTTP basic for
// the user x-access-token.
func basicAuth(token string) string {
	return base64.StdEncoding.EncodeToString([]byte("x-access-token:" + token))
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
