package runner

import (
	"strings"

	"github.com/airlock-ci/airlock/internal/input"
)

// PassEnv turns `airlock run -e` entries into the job's environment:
// KEY=VALUE as given, KEY alone with the host's value (lookup) when it
// has one. Host variables reach the sandbox only by being named.
func PassEnv(entries []string, lookup func(string) (string, bool)) ([]string, error) {
	var out []string
	for _, e := range entries {
		if k, _, ok := strings.Cut(e, "="); ok {
			if k == "" {
				return nil, input.Errorf(input.Env, "%q: missing variable name", e)
			}
			out = append(out, e)
			continue
		}
		if v, ok := lookup(e); ok {
			out = append(out, e+"="+v)
		}
	}
	return out, nil
}
