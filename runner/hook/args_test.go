package hook

import (
	"slices"
	"strings"
	"testing"
)

// The pieces the runner sends, and the argv a step gets from them (the
// runner's cut: actions/runner ContainerHookManager.cs RunScriptStepAsync,
// entryPointArgs.Split(' '); HookInput.cs HookContainer, the same with
// empty pieces dropped; ContainerActionHandler.cs writes args: as
// ` "a" "b"`).
func TestArgs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pieces []string
		want   []string
	}{
		// packages/docker/tests/run-script-step-test.ts
		{"Mona the Octocat", []string{`"Mona`, "the", `Octocat"`}, []string{"Mona the Octocat"}},
		// packages/docker/tests/utils-test.ts, fixArgs
		{"fixArgs: a quoted word", []string{`"Hello`, `World"`}, []string{"Hello World"}},
		{"fixArgs: a quoted script", []string{"sh", "-c", `'[ $(cat /etc/*release* | grep -i -e "^ID=*alpine*" -c) != 0 ] || exit 1'`},
			[]string{"sh", "-c", `[ $(cat /etc/*release* | grep -i -e "^ID=*alpine*" -c) != 0 ] || exit 1`}},
		{"fixArgs: quotes within quotes", []string{"sh", "-c", `'[ $(cat /etc/*release* | grep -i -e '\''^ID=*alpine*'\'' -c) != 0 ] || exit 1'`},
			[]string{"sh", "-c", `[ $(cat /etc/*release* | grep -i -e '^ID=*alpine*' -c) != 0 ] || exit 1`}},
		// The runner's shells (ScriptHandlerHelpers.cs), with {0} filled in.
		{"bash", []string{"--noprofile", "--norc", "-e", "-o", "pipefail", "/__w/_temp/a.sh"}, []string{"--noprofile", "--norc", "-e", "-o", "pipefail", "/__w/_temp/a.sh"}},
		{"pwsh", []string{"-command", `".`, `'/__w/_temp/a.ps1'"`}, []string{"-command", ". '/__w/_temp/a.ps1'"}},
		{"custom shell: python {0}", []string{"/__w/_temp/a.py"}, []string{"/__w/_temp/a.py"}},
		{"an empty piece (two spaces)", []string{"-e", "", "/__w/_temp/a.sh"}, []string{"-e", "/__w/_temp/a.sh"}},
		// A JavaScript action (NodeScriptActionHandler.cs): the script's
		// path, its quotes trimmed, and node24's flag.
		{"node24", []string{"--no-maglev", "/__w/_actions/o/a/v1/index.js"}, []string{"--no-maglev", "/__w/_actions/o/a/v1/index.js"}},
		// A Docker action's args: ` "hello world" "x" ""` cut and cleaned.
		{"Docker action args", []string{`"hello`, `world"`, `"x"`, `""`}, []string{"hello world", "x", ""}},
		{"Docker action args with quotes", []string{`"say`, `\"hi\""`}, []string{`say "hi"`}},
		{"no pieces", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Args(tc.pieces)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("Args(%q) = %q, %v; want %q", tc.pieces, got, err, tc.want)
			}
		})
	}
}

// A command line past the bound is refused before it is split.
func TestArgsTooLong(t *testing.T) {
	if _, err := Args([]string{strings.Repeat("a", maxArgs/2), strings.Repeat("b", maxArgs/2)}); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("Args of %d bytes: %v", maxArgs+1, err)
	}
}
