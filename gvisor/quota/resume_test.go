package quota

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// mergeChildEnv makes the test binary a merge that the test kills.
const mergeChildEnv = "AIRLOCK_TEST_MERGE_CHILD"

// TestMergeChild is the merge of TestKilledMergeResumes, in a process of
// its own so that it can be SIGKILLed at any moment. It marks the volume
// as Release does, then merges upper into lower.
func TestMergeChild(t *testing.T) {
	dirs := os.Getenv(mergeChildEnv)
	if dirs == "" {
		t.Skip("the child of TestKilledMergeResumes")
	}
	upper, lower, _ := strings.Cut(dirs, ":")
	os.Stdout.WriteString("merging\n")
	if _, err := merge(upper, lower, "test", false, func() {}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	os.Exit(0)
}

// A merge SIGKILLed at any moment and resumed (as Abandon resumes it)
// leaves the workspace exactly as an uninterrupted merge does: every
// write of the job, no temporary name, nothing of the lower directories
// that opaque ones hid, and nothing the job deleted. The kill lands at a
// different moment in each round; the test fails if none landed midway.
func TestKilledMergeResumes(t *testing.T) {
	requireRoot(t)
	// The reference: an uninterrupted merge of the same job.
	refUpper, want := t.TempDir(), t.TempDir()
	buildJob(t, refUpper, want)
	start := time.Now()
	if _, err := Merge(refUpper, want); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	wantTree := snapshot(t, want)

	midway := 0
	for round := range 6 {
		// From the merge's start to past its end, in fifths of the time
		// an uninterrupted one took.
		delay := took * time.Duration(round) / 5
		upper, lower := t.TempDir(), t.TempDir()
		buildJob(t, upper, lower)
		before := countFiles(t, upper)
		cmd := exec.Command(os.Args[0], "-test.run=^TestMergeChild$")
		cmd.Env = append(os.Environ(), mergeChildEnv+"="+upper+":"+lower)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line := make([]byte, len("merging\n"))
		if _, err := io.ReadFull(out, line); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the merging child never started: %v", err)
		}
		time.Sleep(delay)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		if left := countFiles(t, upper); left > 0 && left < before {
			midway++
		}
		if _, err := merge(upper, lower, "test", true, func() {}); err != nil {
			t.Fatalf("round %d: resumed merge: %v", round, err)
		}
		if got := snapshot(t, lower); got != wantTree {
			t.Errorf("round %d (killed after %s): the resumed merge differs from an uninterrupted one:\n%s", round, delay, diffLines(wantTree, got))
		}
	}
	if midway == 0 {
		t.Fatal("no kill landed in the middle of a merge: the test proved nothing (make the job bigger)")
	}
	t.Logf("%d kills landed midway", midway)
}

// buildJob makes a lower workspace and the upper layer of a job over it:
// many files (so that a kill lands midway), a file named like a merge's
// temporary file, a directory the job removed
// and made again (opaque: its old files must not come back), a removed
// file (a whiteout), a file that replaced a directory and a directory
// that replaced a file, a symlink and a hard link.
func buildJob(t *testing.T, upper, lower string) {
	t.Helper()
	write := func(root, rel, data string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 200 {
		write(lower, fmt.Sprintf("out/old-%03d", i), "old")
		write(lower, fmt.Sprintf("src/f-%03d", i), "lower")
	}
	// A file of the repository's that looks like a merge's temporary
	// name: a resumed merge removes only its own.
	write(lower, "out-of-the-way/.airlock-merge-1234-1", "committed")
	write(upper, "out-of-the-way/new", "new")
	write(lower, "deleted", "x")
	write(lower, "was-dir/a", "a")
	write(lower, "was-file", "f")
	for i := range 1000 {
		write(upper, fmt.Sprintf("out/new-%04d", i), strings.Repeat("n", i%512))
	}
	for i := range 100 {
		write(upper, fmt.Sprintf("src/f-%03d", i), "upper")
	}
	if err := unix.Setxattr(filepath.Join(upper, "out"), opaqueXattr, []byte("y"), 0); err != nil {
		t.Skipf("cannot mark an opaque directory here: %v", err)
	}
	if err := unix.Mknod(filepath.Join(upper, "deleted"), unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	write(upper, "was-dir", "now a file")
	write(upper, "was-file/b", "now a directory")
	os.Symlink("../src/f-000", filepath.Join(upper, "out", "link"))
	os.Link(filepath.Join(upper, "out", "new-0001"), filepath.Join(upper, "src", "hard"))
}

func countFiles(t *testing.T, root string) int {
	n := 0
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return nil
	})
	return n
}

// snapshot lists a tree as lines of path, type, mode and content (or
// link target), in order.
func snapshot(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, p)
		fi, _ := d.Info()
		line := rel + " " + fi.Mode().String()
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			line += " -> " + target
		case d.Type().IsRegular():
			data, _ := os.ReadFile(p)
			line += " " + strconv.Quote(string(data))
		}
		b.WriteString(line + "\n")
		return nil
	})
	return b.String()
}

// diffLines lists the lines only one of a and b has.
func diffLines(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ia, ib := in(a), in(b)
	var out []string
	short := func(l string) string {
		if len(l) > 80 {
			return l[:80] + "..."
		}
		return l
	}
	for l := range ia {
		if !ib[l] {
			out = append(out, "- "+short(l))
		}
	}
	for l := range ib {
		if !ia[l] {
			out = append(out, "+ "+short(l))
		}
	}
	if len(out) > 20 {
		out = append(out[:20], fmt.Sprintf("... %d more", len(out)-20))
	}
	return strings.Join(out, "\n")
}
