//go:build !amd64

package platform

import "errors"

// kvmSupportedCPUID: CPUID is x86's; elsewhere there is nothing to ask.
func kvmSupportedCPUID() ([]cpuidEntry, error) {
	return nil, errors.New("no CPUID on this architecture")
}
