package dns

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
)

// Allowlist is a Book over a predicate (the policy's allowed names): each
// allowed name gets the next address of the pool on first lookup, and
// keeps it. The pool bounds how many names a job can use, so a wildcard
// cannot be used to mint unbounded addresses.
type Allowlist struct {
	allowed func(name string) bool

	mu    sync.Mutex
	next  netip.Addr
	last  netip.Addr
	names map[string]netip.Addr
	addrs map[netip.Addr]string
}

// NewAllowlist returns a book for the names allowed reports true for,
// handing out the addresses first..last.
func NewAllowlist(allowed func(name string) bool, first, last netip.Addr) (*Allowlist, error) {
	if !first.IsValid() || !last.IsValid() || last.Less(first) || first.Is4() != last.Is4() {
		return nil, fmt.Errorf("dns: address pool %s-%s is empty", first, last)
	}
	return &Allowlist{allowed: allowed, next: first, last: last, names: map[string]netip.Addr{}, addrs: map[netip.Addr]string{}}, nil
}

// Lookup implements Book.
func (a *Allowlist) Lookup(name string) (netip.Addr, bool) {
	if !validName(name) || !a.allowed(name) {
		return netip.Addr{}, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if addr, ok := a.names[name]; ok {
		return addr, true
	}
	if !a.next.IsValid() || a.last.Less(a.next) {
		return netip.Addr{}, false // pool exhausted
	}
	addr := a.next
	a.names[name] = addr
	a.addrs[addr] = name
	a.next = a.next.Next()
	return addr, true
}

// Name returns the name an address stands for.
func (a *Allowlist) Name(addr netip.Addr) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n, ok := a.addrs[addr]
	return n, ok
}

// validName accepts host names of letters, digits and hyphens in labels of
// 1-63 bytes, 253 bytes in all.
func validName(name string) bool {
	if name == "" || len(name) > 253 {
		return false
	}
	// A numeric last label is an address ("10.0.0.1"), not a name:
	// egress is by name only.
	last := name[strings.LastIndexByte(name, '.')+1:]
	if strings.Trim(last, "0123456789") == "" {
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
