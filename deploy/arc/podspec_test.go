package arc

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"sigs.k8s.io/yaml"
)

// values is the part of the chart's values that the test reads: the
// runner pod's template (a Kubernetes PodSpec), and containerMode.
type values struct {
	ContainerMode struct {
		Type string `json:"type"`
	} `json:"containerMode"`
	Template struct {
		Spec podSpec `json:"spec"`
	} `json:"template"`
}

type podSpec struct {
	SecurityContext *securityContext `json:"securityContext"`
	Containers      []container      `json:"containers"`
	Volumes         []volume         `json:"volumes"`
}

type container struct {
	Name            string           `json:"name"`
	Image           string           `json:"image"`
	Command         []string         `json:"command"`
	Env             []envVar         `json:"env"`
	SecurityContext *securityContext `json:"securityContext"`
	Resources       struct {
		Limits map[string]string `json:"limits"`
	} `json:"resources"`
	VolumeMounts []struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
		ReadOnly  bool   `json:"readOnly"`
	} `json:"volumeMounts"`
}

// envVar is a container's variable: a value, or a Secret's key.
type envVar struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	ValueFrom *struct {
		SecretKeyRef *struct {
			Name     string `json:"name"`
			Key      string `json:"key"`
			Optional bool   `json:"optional"`
		} `json:"secretKeyRef"`
	} `json:"valueFrom"`
}

type securityContext struct {
	Privileged               *bool  `json:"privileged"`
	RunAsUser                *int64 `json:"runAsUser"`
	AllowPrivilegeEscalation *bool  `json:"allowPrivilegeEscalation"`
	Capabilities             *struct {
		Add  []string `json:"add"`
		Drop []string `json:"drop"`
	} `json:"capabilities"`
	SeccompProfile *struct {
		Type             string `json:"type"`
		LocalhostProfile string `json:"localhostProfile"`
	} `json:"seccompProfile"`
}

type volume struct {
	Name   string `json:"name"`
	Secret *struct {
		SecretName string `json:"secretName"`
	} `json:"secret"`
	EmptyDir *struct {
		Medium string `json:"medium"`
	} `json:"emptyDir"`
}

// readValues reads deploy/arc/values.yaml.
func readValues(t testing.TB) values {
	t.Helper()
	b, err := os.ReadFile("values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v values
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Template.Spec.Containers) != 1 || v.Template.Spec.Containers[0].Name != "runner" {
		t.Fatalf("template.spec.containers: want the one runner container, got %+v", v.Template.Spec.Containers)
	}
	return v
}

// node is what a kubelet would have on its node for the pod: the seccomp
// profile directory, and a directory per volume.
type node struct {
	seccompRoot string
	volumes     map[string]string
}

// criContainer turns the runner container of the pod spec into the CRI
// ContainerConfig that the kubelet would give containerd, as crictl reads
// it (JSON of runtime.v1.ContainerConfig), for image (the test's build of
// the runner image) running command instead of the runner's run.sh. The
// pod's security context applies where the container's sets nothing,
// as in Kubernetes.
func criContainer(t testing.TB, spec podSpec, n node, image string, command []string, memory string) map[string]any {
	t.Helper()
	c := spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil {
		sc = &securityContext{}
	}
	if sc.SeccompProfile == nil && spec.SecurityContext != nil {
		sc.SeccompProfile = spec.SecurityContext.SeccompProfile
	}
	security := map[string]any{}
	if sc.Privileged != nil && *sc.Privileged {
		t.Fatal("the runner container is privileged")
	}
	if sc.RunAsUser != nil {
		security["run_as_user"] = map[string]any{"value": *sc.RunAsUser}
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		security["no_new_privs"] = true
	}
	if caps := sc.Capabilities; caps != nil {
		security["capabilities"] = map[string]any{"add_capabilities": caps.Add, "drop_capabilities": caps.Drop}
	}
	switch p := sc.SeccompProfile; {
	case p == nil || p.Type == "RuntimeDefault":
		security["seccomp"] = map[string]any{"profile_type": 0}
	case p.Type == "Unconfined":
		security["seccomp"] = map[string]any{"profile_type": 1}
	case p.Type == "Localhost":
		// The kubelet's <root>/seccomp/<localhostProfile>.
		security["seccomp"] = map[string]any{"profile_type": 2, "localhost_ref": filepath.Join(n.seccompRoot, p.LocalhostProfile)}
	default:
		t.Fatalf("seccompProfile type %q", p.Type)
	}
	resources := map[string]any{}
	if memory == "" {
		memory = c.Resources.Limits["memory"]
	}
	if memory != "" {
		resources["memory_limit_in_bytes"] = quantity(t, memory)
	}
	if cpu := c.Resources.Limits["cpu"]; cpu != "" {
		cores, err := strconv.ParseFloat(cpu, 64)
		if err != nil {
			t.Fatalf("cpu limit %q", cpu)
		}
		resources["cpu_period"], resources["cpu_quota"] = 100000, int64(cores*100000)
	}
	var envs []map[string]string
	for _, e := range c.Env {
		value, ok := envValue(t, spec, n, e)
		if ok {
			envs = append(envs, map[string]string{"key": e.Name, "value": value})
		}
	}
	var mounts []map[string]any
	for _, m := range c.VolumeMounts {
		host, ok := n.volumes[m.Name]
		if !ok {
			t.Fatalf("volume %s has no directory on the test's node", m.Name)
		}
		mounts = append(mounts, map[string]any{"container_path": m.MountPath, "host_path": host, "readonly": m.ReadOnly})
	}
	// The kubelet's namespaces for a pod without shareProcessNamespace:
	// the pod's network and IPC, a PID namespace of the container's own.
	security["namespace_options"] = map[string]any{"network": 0, "pid": 1, "ipc": 0}
	return map[string]any{
		"metadata": map[string]any{"name": c.Name},
		"image":    map[string]any{"image": image},
		"command":  command,
		"envs":     envs,
		"mounts":   mounts,
		"log_path": c.Name + ".log",
		"linux":    map[string]any{"resources": resources, "security_context": security},
	}
}

// quantity reads a Kubernetes memory quantity (8Gi, 512Mi, 1G, bytes).
// envValue is the value the kubelet gives a container's variable: its
// value, or its Secret's key (read here from the directory of the pod's
// volume of that Secret, the test's store of it); a missing optional
// key leaves the variable unset (ok false), as Kubernetes does.
func envValue(t testing.TB, spec podSpec, n node, e envVar) (value string, ok bool) {
	t.Helper()
	if e.ValueFrom == nil {
		return e.Value, true
	}
	ref := e.ValueFrom.SecretKeyRef
	if ref == nil {
		t.Fatalf("env %s: only value and valueFrom.secretKeyRef are translated", e.Name)
	}
	for _, v := range spec.Volumes {
		if v.Secret == nil || v.Secret.SecretName != ref.Name {
			continue
		}
		b, err := os.ReadFile(filepath.Join(n.volumes[v.Name], ref.Key))
		switch {
		case err == nil:
			return string(b), true
		case os.IsNotExist(err) && ref.Optional:
			return "", false
		}
		t.Fatalf("env %s: key %s of Secret %s: %v", e.Name, ref.Key, ref.Name, err)
	}
	t.Fatalf("env %s: Secret %s is not a volume of the pod: the test keeps a Secret as its volume's directory", e.Name, ref.Name)
	return "", false
}

func quantity(t testing.TB, q string) int64 {
	t.Helper()
	units := []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(q, u.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Fatalf("quantity %q: %v", q, err)
			}
			return v * u.mult
		}
	}
	v, err := strconv.ParseInt(q, 10, 64)
	if err != nil {
		t.Fatalf("quantity %q: %v", q, err)
	}
	return v
}

// TestValuesMeetBaselineButForTheNamedControls reads the shipped values
// as Kubernetes' Pod Security Standards would: baseline allows no
// privileged container, no hostPath, no Unconfined seccomp, and only its
// list of added capabilities. The runner container asks for two more,
// SYS_ADMIN and NET_ADMIN, each named in values.yaml with its reason;
// anything else beyond baseline fails this test.
func TestValuesMeetBaselineButForTheNamedControls(t *testing.T) {
	v := readValues(t)
	if v.ContainerMode.Type != "" {
		t.Errorf("containerMode.type %q: want empty (the runner container runs the job through airlock's hook)", v.ContainerMode.Type)
	}
	baseline := map[string]bool{"AUDIT_WRITE": true, "CHOWN": true, "DAC_OVERRIDE": true, "FOWNER": true, "FSETID": true, "KILL": true, "MKNOD": true, "NET_BIND_SERVICE": true, "SETFCAP": true, "SETGID": true, "SETPCAP": true, "SETUID": true, "SYS_CHROOT": true}
	named := map[string]bool{"SYS_ADMIN": true, "NET_ADMIN": true}
	c := v.Template.Spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged {
		t.Fatal("the runner container must say privileged: false")
	}
	for _, capability := range sc.Capabilities.Add {
		if !baseline[capability] && !named[capability] {
			t.Errorf("capability %s is beyond baseline and not one of the named ones", capability)
		}
	}
	text, err := os.ReadFile("values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for capability := range named {
		if !strings.Contains(string(text), capability+": ") {
			t.Errorf("values.yaml does not say why it adds %s", capability)
		}
	}
	if p := sc.SeccompProfile; p == nil || p.Type != "Localhost" {
		t.Errorf("seccompProfile %+v: want Localhost (airlock's)", p)
	} else if _, err := os.Stat(strings.TrimPrefix(p.LocalhostProfile, "airlock/")); err != nil {
		t.Errorf("localhostProfile %s: the profile is not shipped here: %v", p.LocalhostProfile, err)
	}
	for _, vol := range v.Template.Spec.Volumes {
		if vol.Secret == nil && vol.EmptyDir == nil {
			t.Errorf("volume %s: only secrets and emptyDirs (no hostPath)", vol.Name)
		}
	}
	if c.Resources.Limits["memory"] == "" || c.Resources.Limits["cpu"] == "" {
		t.Errorf("resources.limits %v: the pod's limits bound the job; give memory and cpu", c.Resources.Limits)
	}
}

// A variable from a Secret's key is the key's content; an optional key
// the Secret lacks leaves the variable unset, as the kubelet does (the
// values' GitHub App), and a required one fails the pod.
func TestEnvFromSecret(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "github-app-id"), []byte("12345"), 0o400)
	spec := podSpec{Volumes: []volume{{Name: "airlock-config", Secret: &struct {
		SecretName string `json:"secretName"`
	}{SecretName: "airlock-config"}}}}
	n := node{volumes: map[string]string{"airlock-config": dir}}
	ref := func(key string, optional bool) envVar {
		var e envVar
		if err := yaml.Unmarshal([]byte(fmt.Sprintf("name: X\nvalueFrom: {secretKeyRef: {name: airlock-config, key: %s, optional: %v}}", key, optional)), &e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	for _, tc := range []struct {
		name  string
		env   envVar
		value string
		set   bool
	}{
		{"a value", envVar{Name: "X", Value: "v"}, "v", true},
		{"a Secret's key", ref("github-app-id", true), "12345", true},
		{"an optional key the Secret lacks", ref("github-app-installation-id", true), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			value, set := envValue(t, spec, n, tc.env)
			if value != tc.value || set != tc.set {
				t.Errorf("got %q (set %v), want %q (set %v)", value, set, tc.value, tc.set)
			}
		})
	}
	// The values' own: every Secret key they name is optional or there.
	v := readValues(t)
	for _, e := range v.Template.Spec.Containers[0].Env {
		if e.ValueFrom != nil && (e.ValueFrom.SecretKeyRef == nil || !e.ValueFrom.SecretKeyRef.Optional) {
			t.Errorf("env %s: a value from anything but an optional Secret key: a Secret without it would keep the pod from starting", e.Name)
		}
	}
}

// The Dockerfile builds the image the values and the pod test assume: a
// base of actions-runner named by digest only (a build without one, or
// with a tag in its place, is an invalid reference), the files it copies
// taken from what make build and the repository have, put where the
// values' environment and the pod test look for them.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	// Instructions, with their continuation lines joined.
	var instructions [][]string
	for _, line := range strings.Split(strings.ReplaceAll(string(b), "\\\n", " "), "\n") {
		if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(f[0], "#") {
			instructions = append(instructions, f)
		}
	}
	env := map[string]string{}
	copies := map[string]string{} // destination -> source
	var from string
	for _, in := range instructions {
		switch in[0] {
		case "FROM":
			from = in[1]
		case "COPY":
			args := slices.DeleteFunc(slices.Clone(in[1:]), func(a string) bool { return strings.HasPrefix(a, "--") })
			copies[args[len(args)-1]] = args[0]
		case "ENV":
			for _, kv := range in[1:] {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
		}
	}
	for _, tc := range []struct {
		digest string
		valid  bool
	}{
		{"sha256:" + strings.Repeat("ab", 32), true},
		{"", false},
		{"2.321.0", false},
		{"latest", false},
	} {
		ref := strings.ReplaceAll(from, "${RUNNER_DIGEST}", tc.digest)
		d, err := name.NewDigest(ref)
		if (err == nil) != tc.valid || (err == nil && d.Context().Name() != "ghcr.io/actions/actions-runner") {
			t.Errorf("FROM %s with RUNNER_DIGEST=%q: %v, want valid %v (actions-runner by digest)", from, tc.digest, err, tc.valid)
		}
	}
	for _, src := range copies {
		if bin, ok := strings.CutPrefix(src, "bin/"); ok {
			mk, _ := os.ReadFile("../../Makefile")
			if !strings.Contains(string(mk), "-o $(BIN)/"+bin+" ./cmd/"+bin) {
				t.Errorf("COPY %s: make build does not make it", src)
			}
		} else if _, err := os.Stat(filepath.Join("../..", src)); err != nil {
			t.Errorf("COPY %s: not in the repository: %v", src, err)
		}
	}
	// airlock and its runsc sidecar side by side (gvisor.FindRunsc).
	if copies[podHook] != "runner/hook/index.js" || copies["/usr/local/bin/airlock"] != "bin/airlock" || copies["/usr/local/bin/airlock-runsc"] != "bin/airlock-runsc" {
		t.Errorf("the Dockerfile copies %v: want the hook at %s, and airlock and airlock-runsc in /usr/local/bin", copies, podHook)
	}
	// The values set the same: the image works with or without them.
	v := readValues(t)
	for _, e := range v.Template.Spec.Containers[0].Env {
		if want, ok := env[e.Name]; ok && e.Value != want {
			t.Errorf("%s is %q in the Dockerfile and %q in the values", e.Name, want, e.Value)
		}
	}
	if env["ACTIONS_RUNNER_CONTAINER_HOOKS"] != podHook || env["AIRLOCK_BIN"] != "/usr/local/bin/airlock" {
		t.Errorf("the Dockerfile's environment %v: want ACTIONS_RUNNER_CONTAINER_HOOKS=%s and AIRLOCK_BIN=/usr/local/bin/airlock", env, podHook)
	}
}
