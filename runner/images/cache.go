package images

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/airlock-ci/airlock/policies"
)

// Listing is what `airlock images ls` shows of a cache.
type Listing struct {
	Dir    string  `json:"dir"`
	Images []Entry `json:"images"`
	// Size is what the cache holds in all: blobs, and the unpacked
	// snapshots the images share.
	Size int64 `json:"size"`
}

// notMade says that no cache was made in dir (nothing pulled yet): the
// commands that read it make none.
func notMade(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, "roots"))
	return errors.Is(err, fs.ErrNotExist)
}

// ListCache lists the cache in dir without making it: a directory that
// does not exist is an empty cache (nothing pulled yet).
func ListCache(dir string) (Listing, error) {
	l := Listing{Dir: dir, Images: []Entry{}}
	if notMade(dir) {
		return l, nil
	}
	s, err := OpenStore(dir, 0)
	if err != nil {
		return l, err
	}
	if l.Images, err = s.List(); err != nil {
		return l, err
	}
	l.Size = s.Size()
	return l, nil
}

// WriteListing prints the cache in dir (Listing.Write).
func WriteListing(w io.Writer, dir string, asJSON bool) error {
	l, err := ListCache(dir)
	if err != nil {
		return err
	}
	return l.Write(w, asJSON)
}

// Write prints the listing as a table, the most recently used first, or
// as JSON.
func (l Listing) Write(w io.Writer, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(l)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REFERENCE\tDIGEST\tPLATFORM\tSIZE\tLAST USED\tIN USE")
	for _, e := range l.Images {
		ref := e.Ref
		if ref == "" {
			ref = "-"
		}
		inUse := ""
		if e.InUse {
			inUse = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", ref, shortDigest(e.Digest), e.Platform, policies.HumanSize(e.Size), e.LastUsed.Format(time.DateTime), inUse)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d image(s) in %s, %s on disk (layers shared by images counted once)\n", len(l.Images), l.Dir, policies.HumanSize(l.Size))
	return err
}

// shortDigest is "sha256:" and the first 12 hex digits, as docker
// images shows an ID.
func shortDigest(d string) string {
	const n = len("sha256:") + 12
	if len(d) > n {
		return d[:n]
	}
	return d
}

// PruneCache removes from the cache in dir the images no job runs on,
// least recently used first, until it holds at most keep bytes, and says
// what it removed.
func PruneCache(w io.Writer, dir string, keep int64) error {
	if notMade(dir) {
		_, err := fmt.Fprintf(w, "no image cache in %s: nothing to prune\n", dir)
		return err
	}
	s, err := OpenStore(dir, 0)
	if err != nil {
		return err
	}
	removed, err := s.Prune(keep)
	if err != nil {
		return fmt.Errorf("prune %s: %w", dir, err)
	}
	for _, e := range removed {
		fmt.Fprintf(w, "removed %s %s (%s)\n", e.Digest, e.Ref, policies.HumanSize(e.Size))
	}
	left, err := s.List()
	if err != nil {
		return err
	}
	inUse := 0
	for _, e := range left {
		if e.InUse {
			inUse++
		}
	}
	_, err = fmt.Fprintf(w, "%d image(s) removed; %d left (%d in use by a job), %s on disk\n", len(removed), len(left), inUse, policies.HumanSize(s.Size()))
	return err
}
