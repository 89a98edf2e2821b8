package uploads

import (
	"bytes"
	"crypto/sha256"
	"encoding"
	"encoding/base64"
	"hash"
	"slices"
)

// Hashing ahead. The blob's digest is known only once the block list
// names the order of its blocks, and hashing 100 MiB then would hold up
// the client's Put Block List for as long as the hash takes. So while
// blocks are staged, the recorder hashes them in the order their ids
// sort in (decoded from base64): @azure/storage-blob's ids are a prefix
// and the block's index padded with zeros (generateBlockID), so that
// order is the list's. At the block list, what was hashed ahead is used
// if the list begins with it; any other order is hashed from the spool.

// ahead is an artifact's digest of its staged blocks so far, in id order.
type ahead struct {
	ids   []string // the blocks hashed, in order
	files []*block // and which staging of each
	state []byte   // the sha256 state after them
	n     int64    // their bytes
	gen   int      // bumped whenever the order breaks
	busy  bool     // a goroutine is hashing the next block
}

// start is where a digest of the blocks (ids, files) begins: a hash with
// the first done blocks in it (n bytes), or a new hash.
func (a *ahead) start(ids []string, files []*block) (hash.Hash, int, int64) {
	k := len(a.ids)
	if k == 0 || k > len(ids) || !slices.Equal(a.ids, ids[:k]) || !slices.Equal(a.files, files[:k]) {
		return sha256.New(), 0, 0
	}
	h, ok := hashFrom(a.state)
	if !ok {
		return sha256.New(), 0, 0
	}
	return h, k, a.n
}

// sortKey is a block id as its blocks sort: its decoded bytes.
func sortKey(id string) []byte {
	if b, err := base64.StdEncoding.DecodeString(id); err == nil {
		return b
	}
	return []byte(id)
}

// hashAheadLocked starts hashing the next block in id order, when no
// goroutine does (r.mu held).
func (r *Recorder) hashAheadLocked(a *artifact) {
	if a.ahead.busy || a.finalized || r.closed {
		return
	}
	next, ok := a.nextAhead()
	if !ok {
		return
	}
	a.ahead.busy = true
	r.hashing.Add(1)
	go r.hashNext(a, next)
}

// nextAhead is the block to hash next: the first in id order of those
// staged and those being staged, once it is staged (false until then,
// or when all are hashed). When the hashed prefix is no longer the start
// of that order (a block that sorts before the hashed ones came, or one
// of them was staged again) the digest starts over.
func (a *artifact) nextAhead() (string, bool) {
	ids := make([]string, 0, len(a.blocks)+len(a.staging))
	for id := range a.blocks {
		ids = append(ids, id)
	}
	for id := range a.staging {
		if a.blocks[id] == nil {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(x, y string) int { return bytes.Compare(sortKey(x), sortKey(y)) })
	k := len(a.ahead.ids)
	if k > len(ids) || !slices.Equal(a.ahead.ids, ids[:k]) || !slices.EqualFunc(a.ahead.ids, a.ahead.files, func(id string, b *block) bool { return a.blocks[id] == b }) {
		a.ahead = ahead{gen: a.ahead.gen + 1, busy: a.ahead.busy}
		k = 0
	}
	if k == len(ids) || a.blocks[ids[k]] == nil || a.staging[ids[k]] > 0 {
		return "", false
	}
	return ids[k], true
}

// hashNext adds block id to a copy of the hash so far, outside the
// lock, and keeps it if nothing changed meanwhile; then goes on.
func (r *Recorder) hashNext(a *artifact, id string) {
	defer r.hashing.Done()
	r.mu.Lock()
	b, gen, state, n := a.blocks[id], a.ahead.gen, a.ahead.state, a.ahead.n
	r.mu.Unlock()
	h, ok := hashFrom(state)
	var d digest
	if ok && b != nil {
		var err error
		d, err = digestBlocks(h, n, []*block{b})
		ok = err == nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	a.ahead.busy = false
	if ok && b != nil && a.ahead.gen == gen && a.blocks[id] == b {
		if st, err := h.(encoding.BinaryMarshaler).MarshalBinary(); err == nil {
			a.ahead.ids, a.ahead.files = append(a.ahead.ids, id), append(a.ahead.files, b)
			a.ahead.state, a.ahead.n = st, d.size
		}
	}
	if !ok && a.ahead.gen == gen && a.blocks[id] == b {
		// The spool failed for a block still staged: trying it again at
		// once would fail again, for ever. Hashing ahead resumes at the
		// next staged block; a block list hashes the rest from the spool.
		return
	}
	r.hashAheadLocked(a)
}

// hashFrom is a sha256 resumed from state (MarshalBinary's), or a new
// one for no state; false when state does not restore.
func hashFrom(state []byte) (hash.Hash, bool) {
	h := sha256.New()
	if state == nil {
		return h, true
	}
	return h, h.(encoding.BinaryUnmarshaler).UnmarshalBinary(state) == nil
}
