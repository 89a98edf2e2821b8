package images

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/airlock-ci/airlock/policies"
)

// signedSubject is an image a case pushed: the reference to pull, the
// digest it resolves to (an index's for a multi-platform image), the
// platform's image manifest, and that image's own blobs (its config and
// layers), which a refused pull must not have fetched.
type signedSubject struct {
	repo  string
	ref   string
	index v1.Hash
	image v1.Hash
	blobs []v1.Hash
}

// imageBlobs are img's config and layers.
func imageBlobs(t *testing.T, img v1.Image) []v1.Hash {
	t.Helper()
	cfg, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	out := []v1.Hash{cfg}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// blobGETsIn is how often the registry served blobs of repo (any, with
// no digest given), or the blobs named.
func (tr *testRegistry) blobGETsIn(repo string, digests ...v1.Hash) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for path, c := range tr.blobs {
		if !strings.HasPrefix(path, "/v2/"+repo+"/blobs/") {
			continue
		}
		if len(digests) == 0 {
			n += c
			continue
		}
		for _, d := range digests {
			if strings.HasSuffix(path, "/"+d.String()) {
				n += c
			}
		}
	}
	return n
}

// otherArch is an architecture that is not the runner's.
func otherArch() string {
	if runtime.GOARCH == "arm64" {
		return "amd64"
	}
	return "arm64"
}

// TestPullVerifiesSignatures pulls through Puller.Pull, under a policy
// rule with signedBy (Decide on an images section), from a registry on
// loopback, images the real cosign CLI signed in both of its formats:
// what a key of the policy signed is pulled and the record names the
// signature; what is unsigned or signed by another key is refused in
// mode enforce before a byte of the image is fetched, and nothing of it
// is cached; mode warn pulls it with a warning that says why; a
// multi-platform image signed by its tag (cosign signs the index) or at
// its platform's manifest verifies.
func TestPullVerifiesSignatures(t *testing.T) {
	c := newCosign(t)
	policyKey, otherKey := c.key(t, "policy"), c.key(t, "other")
	// The policy's Sigstore identity, under its own authority's root.
	const issuer, workflow = "https://token.actions.githubusercontent.com", "https://github.com/acme/app/.github/workflows/release.yml@refs/heads/main"
	ca := newAuthority(t, c, "ca")
	root := trustedRoot(t, c, "root.json", []*authority{ca})
	ca.issue(t, c, "release", workflow, issuer, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	ca.issue(t, c, "fork", strings.Replace(workflow, "acme", "mallory", 1), issuer, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	reg := newTestRegistry(t)
	repoOf := func(t *testing.T, path string) name.Repository {
		t.Helper()
		r, err := name.NewRepository(reg.host+"/"+path, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// single pushes an image of the runner's platform at signed/<case>:1.
	single := func(t *testing.T) signedSubject {
		repo := "signed/" + repoName(t.Name()[strings.LastIndex(t.Name(), "/")+1:])
		img := testImage(t, runtime.GOARCH, tarLayer(t, map[string]string{"etc/": "", "etc/case": t.Name()}))
		d := push(t, reg.host, repo+":1", img)
		return signedSubject{repo: repo, ref: reg.host + "/" + repo + ":1", index: d, image: d, blobs: imageBlobs(t, img)}
	}
	// multi pushes an index of the runner's platform and another one.
	multi := func(t *testing.T) signedSubject {
		repo := "signed/" + repoName(t.Name()[strings.LastIndex(t.Name(), "/")+1:])
		mine := testImage(t, runtime.GOARCH, tarLayer(t, map[string]string{"arch": runtime.GOARCH, "case": t.Name()}))
		theirs := testImage(t, otherArch(), tarLayer(t, map[string]string{"arch": otherArch(), "case": t.Name()}))
		idx := pushIndex(t, reg.host, repo+":1", map[string]v1.Image{runtime.GOARCH: mine, otherArch(): theirs})
		d, err := mine.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return signedSubject{repo: repo, ref: reg.host + "/" + repo + ":1", index: idx, image: d, blobs: imageBlobs(t, mine)}
	}
	signAt := func(prefix string, bundle bool, at func(s signedSubject) v1.Hash) func(t *testing.T, s signedSubject) {
		return func(t *testing.T, s signedSubject) { c.sign(t, prefix, repoOf(t, s.repo), at(s), bundle) }
	}
	atImage := func(s signedSubject) v1.Hash { return s.image }
	keyless := func(prefix string) func(t *testing.T, s signedSubject) {
		return func(t *testing.T, s signedSubject) { c.signKeyless(t, prefix, ca, repoOf(t, s.repo), s.image, false) }
	}
	// byTag signs the reference as written, as `cosign sign REF` does,
	// and checks that cosign signed what the tag resolves to.
	byTag := func(bundle bool) func(t *testing.T, s signedSubject) {
		return func(t *testing.T, s signedSubject) {
			c.signRef(t, "policy", s.ref, bundle)
			tag := legacyTagOf(s.index) // the referrers tag, without the API, is sha256-<hex>
			if bundle {
				tag = strings.TrimSuffix(tag, ".sig")
			}
			if _, err := remote.Head(repoOf(t, s.repo).Tag(tag)); err != nil {
				t.Fatalf("cosign sign %s did not sign the index %s (no %s tag): %v", s.ref, s.index, tag, err)
			}
		}
	}

	for _, tc := range []struct {
		name  string
		mode  string
		image func(t *testing.T) signedSubject
		sign  func(t *testing.T, s signedSubject)
		// want is the signature that verified it; nil with wantErr: the
		// pull is refused, saying those; nil without: pulled with a
		// warning saying wantWarn.
		want     *Signature
		wantErr  []string
		wantWarn []string
	}{
		{name: "legacy, policy's key", mode: "enforce", image: single, sign: signAt("policy", false, atImage),
			want: &Signature{Format: FormatCosignLegacy, KeyID: policyKey.KeyID}},
		{name: "bundle, policy's key", mode: "enforce", image: single, sign: signAt("policy", true, atImage),
			want: &Signature{Format: FormatSigstoreBundle, KeyID: policyKey.KeyID}},
		{name: "unsigned", mode: "enforce", image: single,
			wantErr: []string{"no signature found", policyKey.KeyID}},
		{name: "legacy, other key", mode: "enforce", image: single, sign: signAt("other", false, atImage),
			wantErr: []string{"1 signature found", FormatCosignLegacy, "does not verify with an accepted key", policyKey.KeyID}},
		{name: "bundle, other key", mode: "enforce", image: single, sign: signAt("other", true, atImage),
			wantErr: []string{"1 signature found", FormatSigstoreBundle, otherKey.KeyID + " (not an accepted key)", policyKey.KeyID}},
		{name: "unsigned, mode warn", mode: "warn", image: single,
			wantWarn: []string{ErrNotSigned.Error(), "no signature found", "mode warn: pulled all the same"}},
		{name: "bundle, other key, mode warn", mode: "warn", image: single, sign: signAt("other", true, atImage),
			wantWarn: []string{ErrNotSigned.Error(), otherKey.KeyID + " (not an accepted key)", "mode warn: pulled all the same"}},
		{name: "index signed by its tag, legacy", mode: "enforce", image: multi, sign: byTag(false),
			want: &Signature{Format: FormatCosignLegacy, KeyID: policyKey.KeyID}},
		{name: "index signed by its tag, bundle", mode: "enforce", image: multi, sign: byTag(true),
			want: &Signature{Format: FormatSigstoreBundle, KeyID: policyKey.KeyID}},
		{name: "index, the platform's manifest signed", mode: "enforce", image: multi, sign: signAt("policy", false, atImage),
			want: &Signature{Format: FormatCosignLegacy, KeyID: policyKey.KeyID}},
		{name: "index unsigned", mode: "enforce", image: multi,
			wantErr: []string{"no signature found", policyKey.KeyID}},
		{name: "keyless, the policy's identity", mode: "enforce", image: single, sign: keyless("release"),
			want: &Signature{Format: FormatCosignLegacy, Identity: &Identity{Subject: workflow, Issuer: issuer}}},
		{name: "keyless, another identity", mode: "enforce", image: single, sign: keyless("fork"),
			wantErr: []string{"1 signature found", "it names https://github.com/mallory/", "accepted signers: key " + policyKey.KeyID + ", " + workflow}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := tc.image(t)
			if tc.sign != nil {
				tc.sign(t, s)
			}
			section := &policies.Images{Pull: true, Allow: []policies.ImageRule{{
				Name: reg.host + "/signed/**", Digest: "never", Mode: tc.mode,
				SignedBy:         []string{filepath.Join(c.dir, "policy.pub")},
				SignedByIdentity: []policies.SigstoreIdentity{{Issuer: issuer, Subject: workflow, TrustedRoot: root}},
			}}}
			ref := mustRef(t, s.ref)
			d := Decide(ref, section, false)
			if !d.Allowed || len(d.Signers) != 1 || len(d.Identities) != 1 || d.Warn != (tc.mode == "warn") {
				t.Fatalf("decision %+v", d)
			}
			store := newStore(t, 0)
			before := reg.blobGETsIn(s.repo, s.blobs...)
			img, res, lease, err := testPuller(t, store).Pull(bg, ref, d)
			list, lerr := store.List()
			if lerr != nil {
				t.Fatal(lerr)
			}

			if tc.wantErr != nil {
				if err == nil {
					lease.Close()
					t.Fatalf("pulled %+v; want refused", res)
				}
				t.Logf("refused: %v", err)
				if !errors.Is(err, ErrNotSigned) {
					t.Errorf("the error does not match ErrNotSigned")
				}
				for _, want := range append([]string{ref.Written, d.Rule, ErrNotSigned.Error()}, tc.wantErr...) {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("the error does not say %q", want)
					}
				}
				if lease != nil || img.RootFS != "" || res.Signature != nil {
					t.Errorf("a refused pull returned image %+v, record %+v, lease %v", img, res, lease)
				}
				blobs, _ := os.ReadDir(filepath.Join(store.Dir(), "blobs", "sha256"))
				if len(list) != 0 || len(blobs) != 0 {
					t.Errorf("cached after a refusal: images %v, %d blobs", list, len(blobs))
				}
				// Refused before the image's config and layers were
				// asked for; unsigned, not a blob of the repository.
				if n := reg.blobGETsIn(s.repo, s.blobs...) - before; n != 0 {
					t.Errorf("%d GETs of the image's config and layers: the signature must be checked before they are fetched", n)
				}
				if tc.sign == nil {
					if n := reg.blobGETsIn(s.repo); n != 0 {
						t.Errorf("%d blob GETs of an unsigned image's repository, want none", n)
					}
				}
				return
			}

			if err != nil {
				t.Fatal(err)
			}
			defer lease.Close()
			if res.Digest != s.index.String() || res.ImageDigest != s.image.String() || res.Platform != "linux/"+runtime.GOARCH || !res.Pulled || res.Rule != d.Rule {
				t.Errorf("record %+v; want %s resolved to %s (image %s) by %s", res, s.ref, s.index, s.image, d.Rule)
			}
			if len(list) != 1 || list[0].Digest != s.image.String() {
				t.Errorf("cache %+v, want the one image %s", list, s.image)
			}
			if b, err := os.ReadFile(filepath.Join(img.RootFS, "case")); s.index != s.image && (err != nil || string(b) != t.Name()) {
				t.Errorf("unpacked the wrong platform's image: %q, %v", b, err)
			}
			if tc.want != nil {
				if res.Signature == nil || res.Signature.Format != tc.want.Format || res.Signature.signer() != tc.want.signer() || len(res.Warnings) != 0 {
					t.Fatalf("signature %+v, warnings %q; want %s by %s", res.Signature, res.Warnings, tc.want.Format, tc.want.signer())
				}
				if !strings.HasPrefix(res.Signature.Ref, reg.host+"/"+s.repo) {
					t.Errorf("signature ref %q, not in %s", res.Signature.Ref, s.repo)
				}
				t.Logf("verified: %+v", *res.Signature)
				return
			}
			if res.Signature != nil || len(res.Warnings) != 1 {
				t.Fatalf("signature %+v, warnings %q; want no signature and one warning", res.Signature, res.Warnings)
			}
			t.Logf("warning: %s", res.Warnings[0])
			for _, want := range append([]string{d.Rule}, tc.wantWarn...) {
				if !strings.Contains(res.Warnings[0], want) {
					t.Errorf("the warning does not say %q", want)
				}
			}
		})
	}

	// An image the cache already holds (a job without the rule pulled
	// it) is still refused unsigned: the cache is no signature.
	t.Run("cached, unsigned", func(t *testing.T) {
		s := single(t)
		store := newStore(t, 0)
		ref := mustRef(t, s.ref)
		_, _, lease, err := testPuller(t, store).Pull(bg, ref, human(t, ref))
		if err != nil {
			t.Fatal(err)
		}
		lease.Close()
		section := &policies.Images{Pull: true, Allow: []policies.ImageRule{{Name: reg.host + "/signed/**", Digest: "never", Mode: "enforce", SignedBy: []string{filepath.Join(c.dir, "policy.pub")}}}}
		_, _, lease, err = testPuller(t, store).Pull(bg, ref, Decide(ref, section, false))
		if err == nil {
			lease.Close()
			t.Fatal("an unsigned image in the cache was given to a job whose rule requires a signature")
		}
		if !errors.Is(err, ErrNotSigned) {
			t.Errorf("%v: want ErrNotSigned", err)
		}
	})

	// A key file the rule names that cannot be read fails the pull,
	// naming the file; it is not an unsigned image.
	t.Run("signedBy names a missing key file", func(t *testing.T) {
		s := single(t)
		missing := filepath.Join(t.TempDir(), "gone.pub")
		section := &policies.Images{Pull: true, Allow: []policies.ImageRule{{Name: reg.host + "/signed/**", Digest: "never", Mode: "enforce", SignedBy: []string{missing}}}}
		ref := mustRef(t, s.ref)
		_, _, _, err := testPuller(t, newStore(t, 0)).Pull(bg, ref, Decide(ref, section, false))
		if err == nil || errors.Is(err, ErrNotSigned) || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "signedBy") {
			t.Fatalf("%v: want an error naming the key file", err)
		}
	})
}
