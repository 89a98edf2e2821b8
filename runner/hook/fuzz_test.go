package hook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/paths"
	"github.com/airlock-ci/airlock/internal/runnersim"
	"github.com/airlock-ci/airlock/internal/shlex"
	"github.com/airlock-ci/airlock/policies"
)

// Fuzz targets for what the runner hands the hook (its payloads on
// standard input, the pieces of a command line, the mounts and the event
// they name) and what a step hands back through its file commands. The
// seeds are the runner's own payloads (internal/runnersim/payloads) and
// the cases of protocol_test.go, args_test.go and inputs_test.go, plus
// hostile ones.

// runnerPayloads are the runner's four calls as it writes them, with
// the cases of the package's tests and some that no runner sends.
func runnerPayloads(tb testing.TB) [][]byte {
	str := func(s string) *string { return &s }
	dirs := func(p payload) payload {
		p.Work, p.Externals, p.Temp = "/home/runner/_work", "/home/runner/externals", "/home/runner/_work/_temp"
		p.Actions, p.Tool = "/home/runner/_work/_actions", "/home/runner/_work/_tool"
		p.Home, p.Workflow = "/home/runner/_work/_temp/_github_home", "/home/runner/_work/_temp/_github_workflow"
		p.FileCommands, p.Repo = "/home/runner/_work/_temp/_runner_file_commands", "/home/runner/_work/app/app"
		p.Response = "/home/runner/_work/_temp/_runner_hook_responses/0b6f5c1e.json"
		return p
	}
	state := json.RawMessage(`{"container":"hook-0123456789abcdef","jobDir":"/run/airlock/hooks/hook-0123456789abcdef"}`)
	out := [][]byte{
		runnersim.Render(tb, PrepareJob, dirs(payload{Image: "node:20"})),
		runnersim.Render(tb, PrepareJob, dirs(payload{Image: "ghcr.io/acme/img:1", RegistryUser: "octocat", RegistryPassword: "registry-secret-bar", Options: str("--cpus 1 --user=1001:1002"),
			Services: []servicePayload{{Image: "redis:7", Args: []string{`"--save`, `60"`}, Env: map[string]string{"A": "<b>&"}, Ports: []string{"6379:6379"}}, {Image: "ghcr.io/acme/db:1", RegistryUser: "u", RegistryPassword: "p"}}})),
		runnersim.Render(tb, PrepareJob, dirs(payload{NoContainer: true, Services: []servicePayload{{Image: "redis"}}})),
		runnersim.Render(tb, RunScriptStep, dirs(payload{State: state, EntryPoint: "bash", Args: []string{"--noprofile", "--norc", "-e", "-o", "pipefail", "/__w/_temp/a.sh"},
			Env: map[string]string{"GITHUB_OUTPUT": "/__w/_temp/_runner_file_commands/set_output_1", "X": "\u2028<&>"}, PrependPath: []string{"/__w/_temp/bin"}})),
		runnersim.Render(tb, RunScriptStep, dirs(payload{State: state, EntryPoint: "pwsh", Args: []string{"-command", `".`, `'/__w/_temp/a.ps1'"`}, PrependPath: "/old/runner/path"})),
		runnersim.Render(tb, RunContainerStep, dirs(payload{State: state, Image: "alpine:3", Args: []string{`"hello`, `world"`, `"x"`, `""`}, EntryPoint: "/bin/sh", Env: map[string]string{"INPUT_WHO": "mona"}})),
		runnersim.Render(tb, RunContainerStep, dirs(payload{State: state, Dockerfile: str("/__w/_actions/acme/a/v1/Dockerfile")})),
		runnersim.Render(tb, CleanupJob, dirs(payload{State: state})),
	}
	for _, s := range []string{
		// protocol_test.go
		`{"command":"rm_rf","state":{},"args":{}}`,
		`not json`,
		`{"command":"cleanup_job","responseFile":null,"state":{"container":"x","jobDir":"/run/airlock/hooks/x"},"args":{}}`,
		// Hostile or odd.
		`{"command":"run_script_step","args":{"prependPath":5}}`,
		`{"command":"run_script_step","args":{"prependPath":[1,2]}}`,
		`{"command":"run_script_step","args":{"prependPath":""}}`,
		`{"command":"run_script_step","args":{"entryPointArgs":null,"environmentVariables":{"a":"1","a":"2","A":"3"}}}`,
		`{"command":"run_container_step","args":{"registry":"hunter2-password"}}`,
		`{"command":"run_container_step","args":{"registry":{"username":1,"password":"hunter2-password"}}}`,
		`{"command":"prepare_job","responseFile":"/x","args":{"container":{"registry":{"password":"hunter2-password"}},"services":[{},{}]}}`,
		`{"COMMAND":"cleanup_job","Command":"prepare_job","args":null,"state":null}`,
		"{\"command\":\"run_script_step\",\"args\":{\"entryPoint\":\"\xff\xfe\",\"environmentVariables\":{\"\xc0\":\"\\ud800\"}}}",
		`{"command":"prepare_job","args":{"container":{"systemMountVolumes":[{"sourceVolumePath":"/","targetVolumePath":"/__w"},{"targetVolumePath":"/__w/../etc"}]}}}`,
		`{"command":"cleanup_job","state":{"jobDir":5}}`,
		`[]`, `null`, ``, `{"command":"cleanup_job"} trailing`,
	} {
		out = append(out, []byte(s))
	}
	return out
}

// recorder is a daemon's Handler that keeps what it was sent and answers
// with output and an exit code derived from it.
type recorder struct {
	mu    sync.Mutex
	step  *ScriptArgs
	cstep *ContainerStepArgs
}

// answer is what recorder says for a step's entry point and pieces: each
// piece on stdout, the entry point on stderr, the number of pieces as the
// exit code; an entry point that starts with "!" is a daemon error.
func answer(entry string, pieces []string, stdout, stderr io.Writer) (int, error) {
	if strings.HasPrefix(entry, "!") {
		return -1, errors.New("refused: " + entry)
	}
	for _, p := range pieces {
		stdout.Write([]byte(p))
	}
	stderr.Write([]byte(entry))
	return len(pieces) % 256, nil
}

func (r *recorder) Step(_ context.Context, a ScriptArgs, stdout, stderr io.Writer) (int, error) {
	r.mu.Lock()
	r.step = &a
	r.mu.Unlock()
	return answer(a.EntryPoint, a.EntryPointArgs, stdout, stderr)
}

func (r *recorder) ContainerStep(_ context.Context, a ContainerStepArgs, stdout, stderr io.Writer) (int, error) {
	r.mu.Lock()
	r.cstep = &a
	r.mu.Unlock()
	return answer(a.EntryPoint, a.EntryPointArgs, stdout, stderr)
}

func (r *recorder) Cleanup(context.Context, io.Writer, io.Writer) error { return nil }

// noRegistry is c without its registry credentials: what the stored
// payload and the daemon's request keep of a container.
func noRegistry(c Container) Container {
	c.Registry = nil
	return c
}

// noRegistries is a prepare_job's arguments without their registry
// credentials (a copy: a's own are left alone).
func noRegistries(a PrepareArgs) PrepareArgs {
	if a.Container != nil {
		c := noRegistry(*a.Container)
		a.Container = &c
	}
	a.Services = slices.Clone(a.Services)
	for i := range a.Services {
		a.Services[i] = noRegistry(a.Services[i])
	}
	return a
}

// sentinel stands for a registry password: it must never be written out.
const sentinel = "airlock-fuzz-password-\x01sentinel"

// checkRegistryHidden sets every registry password of the containers to
// the sentinel, and fails if the sentinel shows in their JSON or their
// printed forms.
func checkRegistryHidden(t *testing.T, what string, cs ...*Container) {
	t.Helper()
	for _, c := range cs {
		if c == nil || c.Registry == nil {
			continue
		}
		c.Registry.Password = sentinel
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("%s: marshal: %v", what, err)
		}
		printed := fmt.Sprintf("%v %+v %#v %s %v %+v", *c.Registry, c.Registry, *c.Registry, c.Registry, *c, c)
		if bytes.Contains(b, []byte(sentinel)) || strings.Contains(printed, sentinel) {
			t.Fatalf("%s: the registry password is written out: %s / %s", what, b, printed)
		}
	}
}

// sameJSON reports whether two JSON documents are the same value (nil is
// null).
func sameJSON(a, b []byte) bool {
	var va, vb any
	if len(a) == 0 {
		a = []byte("null")
	}
	if len(b) == 0 {
		b = []byte("null")
	}
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// FuzzReadInput feeds the runner's standard input to ReadInput and the
// arguments to the decoding Handle and prepare do. Properties:
//   - a refused input's error says what was wrong, as the JSON decoder
//     does (not JSON, with the decoder's own error) or the command it
//     did not know (quoted): the runner's log is where an operator finds
//     it;
//   - an accepted input written out again reads back as the same call
//     (the command, response file, state and arguments);
//   - its arguments, decoded as the hook does, written out as prepare
//     stores them (prepare.json, read back by the daemon and
//     endStaleJobs) or as Call sends them to the daemon, read back to the
//     same value but for the registry credentials, which are never
//     written out (nor printed); what is written fits the bound its
//     reader applies (maxInput), or is refused saying so
//     (TestEncodeBounded has the large cases);
//   - a decoding error that is not the JSON decoder's names the field
//     (prependPath, registry);
//   - a step sent through the real wire (Call to a Server on a Unix
//     socket of the test's) reaches the daemon's handler as decoded, and
//     its output, exit code and error reach the caller unchanged.
func FuzzReadInput(f *testing.F) {
	for _, s := range runnerPayloads(f) {
		f.Add(s)
	}
	rec := &recorder{}
	sock := filepath.Join(f.TempDir(), "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		f.Fatal(err)
	}
	srv := NewServer(rec)
	go srv.Serve(ln)
	f.Cleanup(func() { ln.Close() })

	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := ReadInput(bytes.NewReader(data))
		if err != nil {
			msg := err.Error()
			var probe Input
			switch derr := json.Unmarshal(data, &probe); {
			case len(data) > maxInput:
				if !strings.Contains(msg, "larger than") {
					t.Fatalf("an input of %d bytes: %v", len(data), err)
				}
			case derr != nil:
				if !strings.HasPrefix(msg, "hook: the input is not the runner's JSON: ") || !strings.HasSuffix(msg, derr.Error()) {
					t.Fatalf("err = %q, want the decoder's %q", msg, derr)
				}
			default:
				if !strings.Contains(msg, fmt.Sprintf("unknown command %q", probe.Command)) {
					t.Fatalf("err = %q for command %q", msg, probe.Command)
				}
			}
			return
		}
		switch in.Command {
		case PrepareJob, RunScriptStep, RunContainerStep, CleanupJob:
		default:
			t.Fatalf("accepted command %q", in.Command)
		}
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatalf("marshal %+v: %v", in, err)
		}
		again, err := ReadInput(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("written out, the input is refused: %v\n%s", err, b)
		}
		if again.Command != in.Command || again.State != in.State || (again.ResponseFile == nil) != (in.ResponseFile == nil) ||
			(in.ResponseFile != nil && *again.ResponseFile != *in.ResponseFile) || !sameJSON(again.Args, in.Args) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", again, in)
		}

		switch in.Command {
		case PrepareJob:
			var args PrepareArgs
			if err := json.Unmarshal(in.Args, &args); err != nil {
				checkFieldError(t, in.Args, err)
				return
			}
			roundTrip(t, args, noRegistries)
			cs := []*Container{args.Container}
			for i := range args.Services {
				cs = append(cs, &args.Services[i])
			}
			checkRegistryHidden(t, "prepare_job", cs...)
		case RunScriptStep:
			var args ScriptArgs
			if err := json.Unmarshal(in.Args, &args); err != nil {
				checkFieldError(t, in.Args, err)
				return
			}
			roundTrip(t, args, func(a ScriptArgs) ScriptArgs { return a })
			wire(t, sock, rec, Request{Op: "step", Step: &args}, args.EntryPoint, args.EntryPointArgs, func() any { return rec.step })
		case RunContainerStep:
			var args ContainerStepArgs
			if err := json.Unmarshal(in.Args, &args); err != nil {
				checkFieldError(t, in.Args, err)
				return
			}
			roundTrip(t, args, noRegistry)
			sent := args
			wire(t, sock, rec, Request{Op: "container-step", Container: &sent}, args.EntryPoint, args.EntryPointArgs, func() any { return rec.cstep })
			checkRegistryHidden(t, "run_container_step", &args)
		}
	})
}

// roundTrip writes v out as the hook stores and sends it
// (encodeBounded), reads it back, and fails unless it is strip(v) (v
// without what is never written out), within the bound its reader
// applies; or unless it was refused for that bound, saying so.
func roundTrip[T any](t *testing.T, v T, strip func(T) T) {
	t.Helper()
	b, err := encodeBounded(v)
	if err != nil {
		if !strings.Contains(err.Error(), fmt.Sprintf("more than the %d the hook reads back", maxInput)) {
			t.Fatalf("%T not written out: %v", v, err)
		}
		return
	}
	if len(b) > maxInput {
		t.Fatalf("%T written out in %d bytes: its reader takes %d", v, len(b), maxInput)
	}
	var back T
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("written out, %T does not read back: %v\n%s", v, err, b)
	}
	if want := strip(v); !reflect.DeepEqual(back, want) {
		t.Fatalf("round trip of %T:\n got %+v\nwant %+v", v, back, want)
	}
}

// checkFieldError: an error of the arguments' decoding is the JSON
// decoder's (it names the field and the type), or one of the hook's own
// decoders', which must name their field.
func checkFieldError(t *testing.T, args []byte, err error) {
	t.Helper()
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if errors.As(err, &syn) || errors.As(err, &typ) {
		return
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "prependPath: ") && !strings.HasPrefix(msg, "registry: ") {
		t.Fatalf("decoding %s: %q names no field", args, msg)
	}
}

// wire sends req to the daemon's Server through Call and checks what the
// handler got (got, under rec's lock) and what came back.
func wire(t *testing.T, sock string, rec *recorder, req Request, entry string, pieces []string, got func() any) {
	t.Helper()
	var stdout, stderr, wantOut, wantErr bytes.Buffer
	wantCode, wantE := answer(entry, pieces, &wantOut, &wantErr)
	code, err := Call(context.Background(), sock, req, &stdout, &stderr)
	if wantE != nil {
		var de *DaemonError
		if !errors.As(err, &de) || de.Msg != wantE.Error() || code != wantCode {
			t.Fatalf("Call = %d, %v; want the daemon's error %q", code, err, wantE)
		}
	} else if err != nil || code != wantCode || !bytes.Equal(stdout.Bytes(), wantOut.Bytes()) || !bytes.Equal(stderr.Bytes(), wantErr.Bytes()) {
		t.Fatalf("Call = %d, %v, stdout %q, stderr %q; want %d, %q, %q", code, err, stdout.Bytes(), stderr.Bytes(), wantCode, wantOut.Bytes(), wantErr.Bytes())
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := reflect.ValueOf(req.Step)
	if req.Container != nil {
		c := *req.Container
		c.Registry = nil
		want = reflect.ValueOf(&c)
	}
	if g := got(); !reflect.DeepEqual(g, want.Interface()) {
		t.Fatalf("the daemon got\n %+v\nwant %+v", g, want.Interface())
	}
}

// FuzzArgs checks Args against the runner's ways of writing a command
// line. Properties:
//   - a step's line, cut at single spaces with empty pieces kept (the
//     runner's arguments.Split(' ')), gives what splitting the whole line
//     gives (shlex), and fails where it fails;
//   - any argv (valid UTF-8, no NUL: what a process can be given), each
//     word single-quoted shell-style, cut the same way, comes back as
//     that argv;
//   - a Docker action's args: as the runner writes them (` "a" "b"`,
//     each " escaped as \"), cut at single spaces with empty pieces
//     dropped, come back as those args (for args without a backslash,
//     which the runner does not escape, nor a run of spaces, which its
//     cut loses).
func FuzzArgs(f *testing.F) {
	// args_test.go's cases, as the line and the argv.
	f.Add(`"Mona the Octocat"`, "Mona the Octocat")
	f.Add(`sh -c '[ $(cat /etc/*release* | grep -i -e "^ID=*alpine*" -c) != 0 ] || exit 1'`, "sh\x00-c\x00[ $(cat /etc/*release* | grep -i -e \"^ID=*alpine*\" -c) != 0 ] || exit 1")
	f.Add(`sh -c '[ $(cat /etc/*release* | grep -i -e '\''^ID=*alpine*'\'' -c) != 0 ] || exit 1'`, "x\x00'\x00\"")
	f.Add("--noprofile --norc -e -o pipefail /__w/_temp/a.sh", "--noprofile\x00--norc")
	f.Add(`-command ". '/__w/_temp/a.ps1'"`, "-command\x00. '/__w/_temp/a.ps1'")
	f.Add("-e  /__w/_temp/a.sh", "")
	f.Add(`"hello world" "x" ""`, "hello world\x00x\x00")
	f.Add(`"say \"hi\""`, `say "hi"`)
	// Hostile.
	f.Add(`$'\x41\u263a\c@' $"a" '\\'"x"`, "$'\x00\\\x00 lead\x00trail \x00$\"")
	f.Add("a\\\nb 'unclosed", "\t\r\n\x00\xff\x00  ")
	f.Add(`x\`, "")
	f.Fuzz(func(t *testing.T, line, argv string) {
		if len(line) <= maxArgs {
			got, err := Args(strings.Split(line, " "))
			want, werr := shlex.Split(line)
			if (err == nil) != (werr == nil) || !slices.Equal(got, want) {
				t.Fatalf("Args(cut %q) = %q, %v; shlex.Split = %q, %v", line, got, err, want, werr)
			}
		}
		words := strings.Split(strings.ToValidUTF8(argv, "\uFFFD"), "\x00")
		var quoted []string
		for _, w := range words {
			quoted = append(quoted, "'"+strings.ReplaceAll(w, "'", `'\''`)+"'")
		}
		if got, err := Args(strings.Split(strings.Join(quoted, " "), " ")); err != nil || !slices.Equal(got, words) {
			t.Fatalf("single-quoted %q: Args = %q, %v", words, got, err)
		}
		var runner strings.Builder
		docker := true
		for _, w := range words {
			if strings.Contains(w, `\`) || strings.Contains(w, "  ") {
				docker = false
			}
			runner.WriteString(` "` + strings.ReplaceAll(w, `"`, `\"`) + `"`)
		}
		if docker {
			var pieces []string
			for _, p := range strings.Split(runner.String(), " ") {
				if p != "" {
					pieces = append(pieces, p)
				}
			}
			if got, err := Args(pieces); err != nil || !slices.Equal(got, words) {
				t.Fatalf("a Docker action's args %q (pieces %q): Args = %q, %v", words, pieces, got, err)
			}
		}
	})
}

// mountsOf reads mounts from a fuzzer's string: one a line, "source
// target", a trailing " ro" for read-only.
func mountsOf(spec string) Mounts {
	var m Mounts
	for _, line := range strings.Split(spec, "\n") {
		src, tgt, _ := strings.Cut(line, " ")
		tgt, ro := strings.CutSuffix(tgt, " ro")
		m = append(m, Mount{Source: src, Target: tgt, ReadOnly: ro})
	}
	return m
}

// FuzzMountsHost checks where Mounts.Host puts a container path, against
// a model. Properties:
//   - an absolute path is found through the first mount of the longest
//     absolute target that holds it, as that mount's source joined with
//     the rest of the path; one that no target holds is not found;
//   - what is found is always an absolute host path at or below the
//     source of a mount: never outside it (the hook reads, writes and
//     hands to the sandbox what Host finds), whatever the path.
func FuzzMountsHost(f *testing.F) {
	// protocol_test.go's mounts and paths.
	runnerMounts := "/home/runner/_work /__w\n/home/runner/_work/_temp /__w/_temp\n/srv/tmp-elsewhere /__w/_tool\n/home/runner/externals /__e ro"
	for _, p := range []string{"/__w/repo/repo", "/__w/_temp/x.sh", "/__w/_tool/go", "/__w/../etc/passwd", "/__wx/y", "/__e", "/github/home"} {
		f.Add(runnerMounts, p)
	}
	f.Add("/ /\n/a /a/b/..", "/a/x")
	f.Add("/src ", ".hidden")
	f.Add(" /__w", "/__w/x")
	f.Add("rel /__w", "/__w/../__w/x")
	f.Add("/s .", "../x")
	f.Fuzz(func(t *testing.T, spec, p string) {
		m := mountsOf(spec)
		got, ok := m.Host(p)
		// The model: the first mount of the longest target holding p.
		best := -1
		cp := path.Clean(p)
		for i, mt := range m {
			tgt := path.Clean(mt.Target)
			if !path.IsAbs(tgt) || !path.IsAbs(mt.Source) || !path.IsAbs(cp) {
				continue
			}
			if (cp == tgt || strings.HasPrefix(cp, strings.TrimSuffix(tgt, "/")+"/")) && (best < 0 || len(tgt) > len(path.Clean(m[best].Target))) {
				best = i
			}
		}
		if ok {
			within := false
			for _, mt := range m {
				within = within || paths.Within(got, path.Clean(mt.Source))
			}
			if !path.IsAbs(got) || !within {
				t.Fatalf("Host(%q) = %q, outside every mount's source (mounts %+v)", p, got, m)
			}
		}
		if best < 0 {
			if ok {
				t.Fatalf("Host(%q) = %q through no mount that holds it (mounts %+v)", p, got, m)
			}
			return
		}
		want := path.Join(m[best].Source, strings.TrimPrefix(cp, path.Clean(m[best].Target)))
		if !ok || got != want || !paths.Within(got, path.Clean(m[best].Source)) {
			t.Fatalf("Host(%q) = %q, %v; want %q through %+v (mounts %+v)", p, got, ok, want, m[best], m)
		}
	})
}

// FuzzPlanInputs feeds planInputs the runner's prepare_job payload and
// an event file. Properties (inputs.go's promises, each a way out of the
// sandbox if broken):
//   - never the Docker socket, nor a workflow's own volume: every mount
//     is one of the runner's system mounts (or the job's own
//     file-command directory);
//   - nothing from the payload overlays the workspace: the only mounts
//     at or below /__w are the temp, actions, tool and file-command
//     mounts; the actions are read-only, the tool cache is the job's own;
//   - every mount whose source is below the work directory is resolved
//     beneath it (Beneath = the work directory);
//   - the workspace is the host path of /__w; the daemon's directory is
//     masked; mounts are sorted parents first;
//   - the pull request is what policies.ParsePullRequest reads of the
//     event (none for another event or no file; an error for one that
//     does not parse).
func FuzzPlanInputs(f *testing.F) {
	for _, s := range runnerPayloads(f) {
		var in Input
		if json.Unmarshal(s, &in) == nil && in.Command == PrepareJob {
			f.Add([]byte(in.Args), testEvent(`"acme/app"`).data, uint8(1))
		}
	}
	f.Add([]byte(`{"container":{"systemMountVolumes":[{"sourceVolumePath":"/w","targetVolumePath":"/__w"},{"sourceVolumePath":"/w/x","targetVolumePath":"/__w/x"},{"sourceVolumePath":"/srv","targetVolumePath":"/__w/./_tool/"}]}}`), []byte(`{}`), uint8(0))
	f.Add([]byte(`{"container":{"systemMountVolumes":[{"sourceVolumePath":"/w","targetVolumePath":"/__w"},{"sourceVolumePath":"/var/run/docker.sock","targetVolumePath":"/x"},{"sourceVolumePath":"/w/../etc","targetVolumePath":"/etc2"}],"userMountVolumes":[{"sourceVolumePath":"/etc","targetVolumePath":"/host-etc"}]}}`), []byte(`{"pull_request":{}}`), uint8(1))
	f.Add([]byte(`{"container":{"systemMountVolumes":[{"sourceVolumePath":"/w","targetVolumePath":"/__w"}]}}`), []byte(`{"ref":"refs/heads/main"}`), uint8(2))
	f.Fuzz(func(t *testing.T, payload, event []byte, kind uint8) {
		var args PrepareArgs
		if json.Unmarshal(payload, &args) != nil {
			return
		}
		ev := eventFile{data: event}
		switch kind % 3 {
		case 0:
			ev = eventFile{err: fs.ErrNotExist}
		case 2:
			ev = eventFile{err: errors.New("unreadable")}
		}
		in, err := planInputs(args, ev, testHost)
		if err != nil {
			return
		}
		sys := map[string]bool{fileCommandsInJob: true}
		for _, mt := range args.Container.SystemMountVolumes {
			sys[path.Clean(mt.Target)] = true
		}
		work, _ := in.mounts.Host(containerWork)
		if in.inputs.Workspace != work || work == "" {
			t.Fatalf("workspace %q, /__w is %q", in.inputs.Workspace, work)
		}
		if !slices.Contains(in.inputs.Masks, testHost.dir) {
			t.Fatalf("the daemon's directory is not masked: %q", in.inputs.Masks)
		}
		for i, m := range in.inputs.Mounts {
			switch {
			case strings.Contains(m.Source, "docker.sock") || strings.Contains(m.Destination, "docker.sock"):
				t.Fatalf("the Docker socket is mounted: %+v", m)
			case !sys[m.Destination]:
				t.Fatalf("%+v is none of the runner's system mounts", m)
			case paths.Within(m.Destination, containerWork) && !slices.Contains([]string{containerTemp, containerActions, containerTool, fileCommandsInJob}, m.Destination):
				t.Fatalf("%+v overlays the workspace", m)
			case m.Destination == containerActions && !m.ReadOnly:
				t.Fatalf("the actions are writable: %+v", m)
			case m.Destination == containerTool && m.Source != in.toolCache:
				t.Fatalf("the tool cache is the runner's: %+v", m)
			// (The job's own file-command directory is the daemon's, never
			// in the workspace but for a runner whose work directory
			// holds the hooks' jobs root, which airlock does not support.)
			case m.Destination != fileCommandsInJob && path.IsAbs(m.Source) && path.IsAbs(work) && paths.Below(m.Source, work) && m.Beneath != work:
				t.Fatalf("%+v is below the work directory %s but not resolved beneath it", m, work)
			case i > 0 && in.inputs.Mounts[i-1].Destination > m.Destination:
				t.Fatalf("mounts out of order: %+v", in.inputs.Mounts)
			}
		}
		p, perr := policies.ParsePullRequest(event)
		switch {
		case kind%3 == 0 || (kind%3 == 1 && errors.Is(perr, policies.ErrNotPullRequest)):
			if in.pr.Event != nil {
				t.Fatalf("a pull request from no pull request event: %+v", in.pr)
			}
		case kind%3 == 2 || perr != nil:
			t.Fatalf("an event that does not read or parse was taken (%v)", perr)
		default:
			if in.pr.Event == nil || !reflect.DeepEqual(*in.pr.Event, p) || in.pr.Base != p.BaseSHA || in.pr.Head != p.HeadSHA || in.pr.commits[0] != p.HeadSHA {
				t.Fatalf("pull request %+v, the event says %+v", in.pr, p)
			}
		}
	})
}

// FuzzFileCommands stages a step's file commands from the step's
// environment, has the step write its bytes (or put a symlink in place of
// the file), and copies them back to the runner's files. The hook does
// not parse the files (the runner does, after); what it promises is
// where it reads and writes. Properties:
//   - a staged file is made directly in the job's own file-command
//     directory, for a variable naming a file directly in the directory
//     the step sees, and nowhere else;
//   - what the step wrote reaches the runner's file of that name byte
//     for byte, and nothing else changes in the runner's directory; the
//     job's directory is empty afterwards;
//   - a symlink the step puts in place of its file is never followed:
//     the runner's file stays as the runner made it.
func FuzzFileCommands(f *testing.F) {
	f.Add("/__w/_temp/_runner_file_commands/set_output_1", "/__w/_temp/_runner_file_commands/set_env_1", "", "", "", []byte("greeting=hi\n"), false)
	f.Add("/__w/_temp/_runner_file_commands/set_output_js", "/__w/_temp/_runner_file_commands/../set_env", "/__w/_temp/_runner_file_commands/.", "/__w/_temp/_runner_file_commands//x/", "/__w/_temp/_runner_file_commands/x", []byte("a<<EOF\nb\nEOF\n"), false)
	f.Add("/__w/_temp/_runner_file_commands/same", "/__w/_temp/_runner_file_commands/same", "/__w/_temp/x", "relative", "/__w/_temp/_runner_file_commands/..", []byte("NODE_OPTIONS=--require /tmp/x\n"), true)
	f.Fuzz(func(t *testing.T, output, env, pathVar, state, summary string, content []byte, symlink bool) {
		root := t.TempDir()
		work := filepath.Join(root, "work")
		runnerDir := filepath.Join(work, "_temp", fileCommandsDir)
		jobDir := filepath.Join(root, "job", "file-commands")
		secret := filepath.Join(root, "secret")
		for _, d := range []string{runnerDir, jobDir} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		os.WriteFile(secret, []byte("host secret"), 0o600)
		d := &job{mounts: Mounts{{Source: work, Target: containerWork}}, fileCommands: jobDir, runnerFileCommands: runnerDir,
			user: gvisor.User{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}}
		stepEnv := map[string]string{"GITHUB_OUTPUT": output, "GITHUB_ENV": env, "GITHUB_PATH": pathVar, "GITHUB_STATE": state, "GITHUB_STEP_SUMMARY": summary}
		// The runner makes each file command's file before the step.
		want := map[string]string{}
		for _, v := range fileCommandVars {
			p := stepEnv[v]
			if p != "" && path.Dir(path.Clean(p)) == fileCommandsInJob {
				want[path.Base(p)] = ""
			}
		}
		for name := range want {
			if name == "." || name == ".." || strings.Contains(name, "/") {
				t.Fatalf("the model names %q", name)
			}
			// A name no file can have (a NUL, too long): the runner
			// makes none, nor does the hook stage one.
			if err := os.WriteFile(filepath.Join(runnerDir, name), nil, 0o644); err != nil {
				delete(want, name)
			}
		}
		staged := d.stageFileCommands(stepEnv, fileCommandsInJob)
		for _, s := range staged {
			if _, ok := want[s.name]; !ok || s.runner != filepath.Join(runnerDir, s.name) {
				t.Fatalf("staged %+v for %q", s, stepEnv)
			}
			if _, err := os.Lstat(filepath.Join(jobDir, s.name)); err != nil {
				t.Fatalf("staged %s is not in the job's directory: %v", s.name, err)
			}
			// The step writes.
			p := filepath.Join(jobDir, s.name)
			if symlink {
				os.Remove(p)
				os.Symlink(secret, p)
			} else {
				want[s.name] = string(content)
				os.WriteFile(p, content, 0o644)
			}
		}
		var log bytes.Buffer
		d.copyBack(staged, &log)
		if symlink && len(staged) > 0 && !strings.Contains(log.String(), "was not passed to the runner") {
			t.Fatalf("a symlink went unreported: %q", log.String())
		}
		left, _ := os.ReadDir(jobDir)
		if len(left) != 0 {
			t.Fatalf("left in the job's directory: %v", left)
		}
		ents, _ := os.ReadDir(runnerDir)
		if len(ents) != len(want) {
			t.Fatalf("the runner's directory holds %v, want %v", ents, want)
		}
		for name, w := range want {
			b, err := os.ReadFile(filepath.Join(runnerDir, name))
			if err != nil || string(b) != w {
				t.Fatalf("the runner's %s holds %q (%v), want %q", name, b, err, w)
			}
		}
		// Nothing else was made anywhere under the test's root.
		filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
			if err == nil && !e.IsDir() && filepath.Dir(p) != runnerDir && p != secret {
				t.Fatalf("made %s", p)
			}
			return nil
		})
		if b, _ := os.ReadFile(secret); string(b) != "host secret" {
			t.Fatalf("the host file was written: %q", b)
		}
	})
}
