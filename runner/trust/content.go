package trust

import (
	"bufio"
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

// lifecycleScripts returns the lifecycle scripts of a package.json as
// "name: command" facts, sorted. Invalid JSON is a fact too.
func lifecycleScripts(data []byte) []string {
	var pkg struct {
		Scripts map[string]any `json:"scripts"`
	}
	if err := json.Unmarshal(data, &pkg); err != nil {
		return []string{"unparseable package.json: " + err.Error()}
	}
	out := []string{}
	for name, cmd := range pkg.Scripts {
		if slices.Contains(npmLifecycle, name) {
			out = append(out, fmt.Sprintf("scripts.%s: %v", name, cmd))
		}
	}
	slices.Sort(out)
	return out
}

// attributeDrivers returns the .gitattributes lines that name a filter,
// diff or merge driver (which git runs from config), in file order.
func attributeDrivers(data []byte) []string {
	out := []string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	line := 0
	for sc.Scan() {
		line++
		t := strings.TrimSpace(sc.Text())
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
