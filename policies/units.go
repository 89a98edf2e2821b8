package policies

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseSize reads a size as policies and flags write it: 1024, 512K,
// 512M, 4G, 1T, also with "i"/"B" (4GiB). Units are binary.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(strings.ToUpper(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	mult := int64(1)
	if t != "" {
		switch t[len(t)-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q: want a size such as 512M or 4G", s)
	}
	return n * mult, nil
}

// ParseDuration reads a duration such as "90s" or "30m"; "" is zero.
func ParseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("duration %q: want a duration such as 90s or 30m", s)
	}
	return d, nil
}

// HumanSize writes n for a reader (free space, what a job wrote): in GiB
// or MiB to a tenth (12.3 GiB, 512.0 MiB), under 1 MiB in bytes.
func HumanSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", n)
}

// FormatSize writes n as ParseSize reads it, in the largest binary unit
// that divides it (4G, 512M, 1000).
func FormatSize(n int64) string {
	switch {
	case n == 0:
		return "0"
	case n%(1<<30) == 0:
		return fmt.Sprintf("%dG", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	}
	return strconv.FormatInt(n, 10)
}

// SizeFlag is a size flag (512M, 4G) read as ParseSize reads it: a
// flag.Value, and a pflag.Value with its Type.
type SizeFlag struct{ n *int64 }

// NewSizeFlag sets *n to def and returns the flag that sets it.
func NewSizeFlag(n *int64, def int64) SizeFlag { *n = def; return SizeFlag{n} }

func (s SizeFlag) String() string { return FormatSize(*s.n) }

// Type names the value in a flag's help.
func (s SizeFlag) Type() string { return "size" }

func (s SizeFlag) Set(v string) (err error) {
	*s.n, err = ParseSize(v)
	return err
}
