package credentials

import (
	"fmt"
	"slices"
	"strings"

	"github.com/airlock-ci/airlock/policies"
)

// Policy is what requests carrying the job's credentials may do.
type Policy struct {
	// Cache and API are "readwrite", "read" or "none".
	Cache, API    string
	GitPush       bool
	Artifacts     bool
	OIDCAudiences []string
	// Secrets maps a workflow secret's variable to the hosts it may go to.
	Secrets map[string][]string
}

// PolicyFor is the policy's credentials section for a job; agent work
// gets the stricter defaults (cache and API read only, no git push).
func PolicyFor(c policies.Credentials, agent bool) Policy {
	p := Policy{Cache: c.Cache, API: c.API, Artifacts: c.Artifacts, OIDCAudiences: c.OIDC.Audiences, Secrets: map[string][]string{}}
	for _, f := range []*string{&p.Cache, &p.API} {
		if *f == "" {
			*f = "readwrite"
			if agent {
				*f = "read"
			}
		}
	}
	p.GitPush = !agent
	if c.GitPush != nil {
		p.GitPush = *c.GitPush
	}
	for name, s := range c.Secrets {
		for _, h := range s.Hosts {
			p.Secrets[name] = append(p.Secrets[name], strings.ToLower(h))
		}
	}
	return p
}

// modeRank orders the cache and API modes from the strictest.
var modeRank = map[string]int{"none": 0, "read": 1, "readwrite": 2}

// Loosens lists what p allows that org does not: where a repository's
// policy would loosen the organisation's (each for the same job, its
// defaults applied). A repository may only narrow.
func (p Policy) Loosens(org Policy) []string {
	var out []string
	for _, m := range []struct{ name, p, org string }{{"cache", p.Cache, org.Cache}, {"api", p.API, org.API}} {
		if modeRank[m.p] > modeRank[m.org] {
			out = append(out, fmt.Sprintf("credentials.%s: %q where the organisation's is %q", m.name, m.p, m.org))
		}
	}
	if p.GitPush && !org.GitPush {
		out = append(out, "credentials.gitPush: true where the organisation's is false")
	}
	if p.Artifacts && !org.Artifacts {
		out = append(out, "credentials.artifacts: true where the organisation's is false")
	}
	for _, a := range p.OIDCAudiences {
		if !slices.Contains(org.OIDCAudiences, a) {
			out = append(out, fmt.Sprintf("credentials.oidc.audiences: %q, which the organisation's does not list", a))
		}
	}
	for name, hosts := range p.Secrets {
		if orgHosts, ok := org.Secrets[name]; ok {
			for _, h := range hosts {
				if !slices.Contains(orgHosts, h) {
					out = append(out, fmt.Sprintf("credentials.secrets.%s: host %q, which the organisation's does not list", name, h))
				}
			}
		}
	}
	return out
}
