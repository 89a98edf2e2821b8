package policies

import (
	"maps"
	"slices"
	"strings"
)

// ImageRoot returns the rootfs directory the policy maps an image to. A
// reference matches a key naming the same image the way Docker reads it:
// "node:20", "library/node:20" and "docker.io/library/node:20" are one
// image, and a name without a tag is ":latest". A digest must match as
// written.
func ImageRoot(images map[string]string, ref string) (string, bool) {
	want := normalizeImage(ref)
	if want == "" {
		return "", false
	}
	if dir, ok := images[ref]; ok {
		return dir, true
	}
	// Several keys can name one image: the first in order decides.
	for _, k := range slices.Sorted(maps.Keys(images)) {
		if normalizeImage(k) == want {
			return images[k], true
		}
	}
	return "", false
}

// normalizeImage spells an image reference out in full, or "" when it is
// empty or has spaces.
func normalizeImage(ref string) string {
	if ref == "" || strings.ContainsAny(ref, " \t\n") {
		return ""
	}
	ref = strings.TrimPrefix(ref, "docker://")
	name, digest, _ := strings.Cut(ref, "@")
	// The first component is a registry when it looks like a host.
	first, rest, ok := strings.Cut(name, "/")
	if !ok || !(strings.ContainsAny(first, ".:") || first == "localhost") {
		first, rest = "docker.io", name
	}
	if first == "index.docker.io" || first == "registry-1.docker.io" {
		first = "docker.io"
	}
	if first == "docker.io" && !strings.Contains(rest, "/") {
		rest = "library/" + rest
	}
	if digest == "" && !strings.Contains(rest[strings.LastIndex(rest, "/")+1:], ":") {
		rest += ":latest"
	}
	out := strings.ToLower(first) + "/" + rest
	if digest != "" {
		out += "@" + digest
	}
	return out
}
