package credentials

import (
	"slices"
	"strings"
)

// Record says which credentials a job's sandbox never saw and where each
// went: names, kinds, hosts and counts, never a value.
type Record struct {
	// Withheld are the credentials replaced by placeholders.
	Withheld []Withheld `json:"withheld"`
	// Uses count, per credential and host, the requests that
	// carried it back out (injected), the ones the credentials policy
	// refused, and placeholders sent where the credential does not
	// belong (elsewhere: they went out as they were, useless).
	Uses []Use `json:"uses"`
	// UsesDropped counts the requests not counted in Uses: it holds at
	// most maxUses entries (a job could make one per host it invents).
	UsesDropped int `json:"usesDropped,omitempty"`
	// Masked counts the values the job masked (::add-mask::), redacted
	// from what airlock records.
	Masked int `json:"masked"`
}

// Withheld is one credential the sandbox saw only as a placeholder.
type Withheld struct {
	Name      string   `json:"name"`
	Kinds     []string `json:"kinds"`
	Variables []string `json:"variables"`
}

// Use counts one credential's requests to one host ("none": refused
// requests that carried no credential of the job's).
type Use struct {
	Credential string `json:"credential"`
	Host       string `json:"host"`
	Route      string `json:"route,omitempty"`
	Injected   int    `json:"injected"`
	Refused    int    `json:"refused"`
	Elsewhere  int    `json:"elsewhere"`
	// Rule is the credentials policy's rule that refused, when one did.
	Rule string `json:"rule,omitempty"`
}

// maxUses bounds the record's Uses.
const maxUses = 256

// recorder counts uses; the vault's mutex guards it.
type recorder struct {
	uses    []Use
	dropped int
}

// use is the entry that counts one credential's requests to one host on
// one route, or a throwaway one once the record is full.
func (r *recorder) use(cred, host, route, rule string) *Use {
	for i := range r.uses {
		u := &r.uses[i]
		if u.Credential == cred && u.Host == host && u.Route == route && u.Rule == rule {
			return u
		}
	}
	if len(r.uses) >= maxUses {
		r.dropped++
		return &Use{}
	}
	r.uses = append(r.uses, Use{Credential: cred, Host: host, Route: route, Rule: rule})
	return &r.uses[len(r.uses)-1]
}

func (r *recorder) injected(cred, host, route string) { r.use(cred, host, route, "").Injected++ }
func (r *recorder) elsewhere(cred, host string)       { r.use(cred, host, "", "").Elsewhere++ }
func (r *recorder) refused(cred, host, route, rule string) {
	r.use(cred, host, route, rule).Refused++
}

// Record returns what the vault withheld and how each credential was
// used so far.
func (v *Vault) Record() Record {
	v.mu.Lock()
	defer v.mu.Unlock()
	rec := Record{Withheld: []Withheld{}, Uses: slices.Clone(v.rec.uses), UsesDropped: v.rec.dropped, Masked: len(v.masks)}
	if rec.Uses == nil {
		rec.Uses = []Use{}
	}
	for _, c := range v.creds {
		rec.Withheld = append(rec.Withheld, Withheld{Name: c.label(), Kinds: slices.Clone(c.kinds), Variables: slices.Clone(c.vars)})
	}
	slices.SortFunc(rec.Uses, func(a, b Use) int {
		return strings.Compare(a.Credential+"\x00"+a.Host+"\x00"+a.Route, b.Credential+"\x00"+b.Host+"\x00"+b.Route)
	})
	return rec
}
