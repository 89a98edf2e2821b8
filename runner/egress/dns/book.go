package dns

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
)

// Allowlist is a Book built from the policy's allowed hosts: exact names
// and "*.suffix" wildcards (any name below the suffix, not the suffix
// itself). Each name gets the next address of the pool on first lookup,
// and keeps it.
type Allowlist struct {
	exact    map[string]bool
	suffixes []string

	mu    sync.Mutex
	next  netip.Addr
	last  netip.Addr
	names map[string]netip.Addr
}

// NewAllowlist returns a book for hosts, handing out addresses first..last.
func NewAllowlist(hosts []string, first, last netip.Addr) (*Allowlist, error) {
	if !first.IsValid() || !last.IsValid() || last.Less(first) {
		return nil, fmt.Errorf("dns: address pool %s-%s is empty", first, last)
	}
	a := &Allowlist{exact: map[string]bool{}, next: first, last: last, names: map[string]netip.Addr{}}
	for _, h := range hosts {
		h = strings.TrimSuffix(strings.ToLower(h), ".")
		if s, ok := strings.CutPrefix(h, "*."); ok {
			a.suffixes = append(a.suffixes, "."+s)
		} else {
			a.exact[h] = true
		}
	}
	return a, nil
}

// Allowed reports whether the policy allows name.
func (a *Allowlist) Allowed(name string) bool {
	if a.exact[name] {
		return true
	}
	for _, s := range a.suffixes {
		if strings.HasSuffix(name, s) && len(name) > len(s) {
			return true
		}
	}
	return false
}

// Lookup implements Book.
func (a *Allowlist) Lookup(name string) (netip.Addr, bool) {
	if !validName(name) || !a.Allowed(name) {
		return netip.Addr{}, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if addr, ok := a.names[name]; ok {
		return addr, true
	}
	if a.last.Less(a.next) {
		// Pool exhausted: a wildcard cannot be used to mint unbounded
		// addresses.
		return netip.Addr{}, false
	}
	addr := a.next
	a.names[name] = addr
	a.next = a.next.Next()
	return addr, true
}

// Name returns the name an address stands for.
func (a *Allowlist) Name(addr netip.Addr) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for n, x := range a.names {
		if x == addr {
			return n, true
		}
	}
	return "", false
}

// validName accepts host names of letters, digits and hyphens in labels of
// 1-63 bytes, 253 bytes in all.
func validName(name string) bool {
	if name == "" || len(name) > 253 {
		return false
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}
