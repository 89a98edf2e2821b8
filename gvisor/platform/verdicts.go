package platform

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-ci/airlock/internal/files"
)

// HostDir is where the host's verdict is kept when the host allows it:
// the default state root's platform directory, on /run, which is a tmpfs
// cleared at boot on the hosts airlock runs on. Every state directory
// shares it, so an ephemeral runner whose state directory is new for
// each job still finds the verdict of the boot.
const HostDir = "/run/airlock/platform"

// Dir returns the directory that keeps the verdict and the probes' work:
// HostDir where it and its parent are (or can be made) directories that
// root owns and alone may write, else fallback (a state root's platform directory: a
// host whose /run cannot hold it).
func Dir(fallback string) string {
	return dirOr(HostDir, fallback)
}

func dirOr(host, fallback string) string {
	if os.MkdirAll(host, 0o700) == nil && rootOnly(filepath.Dir(host), true) == nil && rootOnly(host, true) == nil {
		return host
	}
	return fallback
}

// Verdict is what the probe found, as kept on disk.
type Verdict struct {
	Key    string `json:"key"`
	Usable bool   `json:"usable"`
	Reason string `json:"reason"`
	// Until, when set, is when the verdict stops holding: a probe that
	// got no answer may have met a host too busy to boot one in time, so
	// its verdict is tried again later rather than kept for the boot.
	Until time.Time `json:"until,omitzero"`
}

// ErrNoAnswer: the probe sandbox did not answer within its timeout.
var ErrNoAnswer = errors.New("no answer")

// noAnswerHolds is how long a verdict of no answer holds.
const noAnswerHolds = time.Hour

// verdictOf is the verdict for key of a probe that returned err.
func verdictOf(key string, err error, gaps func() string) Verdict {
	usable, why := Worded(err, gaps)
	v := Verdict{Key: key, Usable: usable, Reason: why}
	if errors.Is(err, ErrNoAnswer) {
		v.Until = time.Now().Add(noAnswerHolds).UTC()
		v.Reason += " (probed again after " + v.Until.Format(time.RFC3339) + ")"
	}
	return v
}

// Verdicts keeps the KVM verdict in kvm.json in its directory. Only
// root writes there: a file that root does not own, that others may
// read or write, that is a symlink or that does not decode is ignored
// (and replaced by the next probe), as is one for another key.
type Verdicts struct {
	dir string
}

// NewVerdicts keeps verdicts in dir.
func NewVerdicts(dir string) *Verdicts { return &Verdicts{dir: dir} }

// Dir is the directory the verdicts are kept in.
func (v *Verdicts) Dir() string { return v.dir }

// Path is the verdict file.
func (v *Verdicts) Path() string { return filepath.Join(v.dir, "kvm.json") }

// MaxVerdict bounds the verdict file.
const MaxVerdict = 64 << 10

// Read returns the verdict kept for key, if there is a trustworthy one.
func (v *Verdicts) Read(key string) (Verdict, bool) {
	got, err := v.load()
	if err != nil || got.Key != key || (!got.Until.IsZero() && time.Now().After(got.Until)) {
		return Verdict{}, false
	}
	return got, true
}

// load reads the kept verdict, or says why there is none to trust.
func (v *Verdicts) load() (Verdict, error) {
	var got Verdict
	if err := rootOnly(v.dir, true); err != nil {
		return got, err
	}
	f, err := os.OpenFile(v.Path(), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return got, err
	}
	defer f.Close()
	if err := rootOnly(f.Name(), false, f); err != nil {
		return got, err
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxVerdict+1))
	if err != nil {
		return got, err
	}
	if len(b) > MaxVerdict {
		return got, fmt.Errorf("%s: larger than %d bytes", v.Path(), MaxVerdict)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		return got, fmt.Errorf("%s: %w", v.Path(), err)
	}
	if got.Key == "" || got.Reason == "" {
		return got, fmt.Errorf("%s: no key or reason", v.Path())
	}
	return got, nil
}

// Write keeps got (best effort: without it the next job probes again).
func (v *Verdicts) Write(got Verdict) {
	if os.MkdirAll(v.dir, 0o700) != nil || rootOnly(v.dir, true) != nil {
		return
	}
	b, err := json.Marshal(got)
	if err != nil {
		return
	}
	files.WriteAtomic(v.Path(), append(b, '\n'))
}

// Lock takes the probe lock, waiting until ctx ends, so that one probe
// runs while the others wait for its verdict. It returns the unlock.
func (v *Verdicts) Lock(ctx context.Context) (func(), error) {
	if err := v.lockDir(); err != nil {
		return nil, err
	}
	f, err := files.LockWait(ctx, v.lockPath(), unix.LOCK_EX)
	if err != nil {
		return nil, err
	}
	return func() { f.Close() }, nil
}

// errBusy: another process holds the probe lock.
var errBusy = fmt.Errorf("a probe is running")

// TryLock takes the probe lock if no other process holds it; errBusy if
// one does.
func (v *Verdicts) TryLock() (func(), error) {
	if err := v.lockDir(); err != nil {
		return nil, err
	}
	f, err := files.Lock(v.lockPath(), unix.LOCK_EX|unix.LOCK_NB)
	if err == unix.EWOULDBLOCK {
		return nil, errBusy
	}
	if err != nil {
		return nil, err
	}
	return func() { f.Close() }, nil
}

// lockDir makes the verdicts' directory, root's alone, for the lock.
func (v *Verdicts) lockDir() error {
	if err := os.MkdirAll(v.dir, 0o700); err != nil {
		return err
	}
	return rootOnly(v.dir, true)
}

func (v *Verdicts) lockPath() string { return filepath.Join(v.dir, "kvm.lock") }

// Busy reports whether a probe holds the lock now.
func (v *Verdicts) Busy() bool {
	unlock, err := v.TryLock()
	if err == nil {
		unlock()
	}
	return err == errBusy
}

// rootOnly checks that path (or the open f) belongs to this process's
// user (root) and that nobody else may write it, or, for a file, read
// it; dir says which kind it must be.
func rootOnly(path string, dir bool, f ...*os.File) error {
	var st unix.Stat_t
	var err error
	if len(f) > 0 {
		err = unix.Fstat(int(f[0].Fd()), &st)
	} else {
		err = unix.Lstat(path, &st)
	}
	if err != nil {
		return err
	}
	kind := uint32(unix.S_IFREG)
	if dir {
		kind = unix.S_IFDIR
	}
	switch {
	case st.Mode&unix.S_IFMT != kind:
		return fmt.Errorf("%s: not a regular %s", path, map[bool]string{true: "directory", false: "file"}[dir])
	case st.Uid != uint32(os.Geteuid()):
		return fmt.Errorf("%s: owned by uid %d, not by airlock's user", path, st.Uid)
	case dir && st.Mode&0o022 != 0, !dir && st.Mode&0o077 != 0:
		return fmt.Errorf("%s: mode %#o: others may change it", path, st.Mode&0o777)
	}
	return nil
}
