package trust

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// lifecycleScripts are npm scripts that run on their own (install, pack,
// publish) or around the common ones.
var npmLifecycle = []string{
	"preinstall", "install", "postinstall", "prepare", "preprepare", "postprepare",
	"prepublish", "prepublishOnly", "prepack", "postpack", "dependencies",
	"pretest", "posttest", "prestart", "poststart", "prebuild", "postbuild",
}

// lifecycleScripts returns the scripts of a package.json as "name:
// command" facts, sorted: the lifecycle ones run by themselves, and CI
// runs the others (test, build). Keys are matched exactly, as npm does
// (Go's decoder would also take "Scripts"). Invalid JSON is a fact too.
func lifecycleScripts(data []byte) []string {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return []string{"unparseable package.json: " + err.Error()}
	}
	out := []string{}
	raw, ok := top["scripts"]
	if !ok {
		return out
	}
	var scripts map[string]json.RawMessage
	if err := json.Unmarshal(raw, &scripts); err != nil {
		return []string{"scripts is not an object: " + string(raw)}
	}
	for name, cmd := range scripts {
		tag := "scripts."
		if slices.Contains(npmLifecycle, name) {
			tag = "scripts (lifecycle)."
		}
		out = append(out, fmt.Sprintf("%s%s: %s", tag, name, cmd))
	}
	slices.Sort(out)
	return out
}

// attributeDrivers returns the .gitattributes lines that name a filter,
// diff or merge driver (which git runs from config), in file order. Every
// line is read, however long: a scanner that stopped at a long line
// would miss the driver lines after it, which git still reads (it skips
// only the long line itself).
func attributeDrivers(data []byte) []string {
	out := []string{}
	for _, l := range bytes.Split(data, []byte("\n")) {
		t := strings.TrimSpace(string(l))
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		for _, f := range strings.Fields(t)[1:] {
			if strings.HasPrefix(f, "filter=") || strings.HasPrefix(f, "diff=") || strings.HasPrefix(f, "merge=") {
				out = append(out, t)
				break
			}
		}
	}
	return out
}
