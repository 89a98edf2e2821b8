package policies

import "testing"

func TestImageRoot(t *testing.T) {
	images := map[string]string{
		"node:20":                      "/srv/images/node20",
		"postgres":                     "/srv/images/postgres",
		"ghcr.io/acme/tool:1":          "/srv/images/tool",
		"localhost:5000/build:2":       "/srv/images/build",
		"alpine@sha256:0123456789abcd": "/srv/images/alpine-pinned",
	}
	for _, tc := range []struct {
		ref, want string
	}{
		{"node:20", "/srv/images/node20"},
		{"docker.io/library/node:20", "/srv/images/node20"},
		{"library/node:20", "/srv/images/node20"},
		{"docker://node:20", "/srv/images/node20"},
		{"node:18", ""},
		{"node", ""},
		{"postgres:latest", "/srv/images/postgres"},
		{"docker.io/postgres", "/srv/images/postgres"},
		{"index.docker.io/library/postgres:latest", "/srv/images/postgres"},
		{"GHCR.IO/acme/tool:1", "/srv/images/tool"},
		{"ghcr.io/acme/tool:2", ""},
		{"acme/tool:1", ""},
		{"localhost:5000/build:2", "/srv/images/build"},
		{"build:2", ""},
		{"alpine@sha256:0123456789abcd", "/srv/images/alpine-pinned"},
		{"alpine", ""},
		{"", ""},
		{"node:20 ", ""},
	} {
		got, ok := ImageRoot(images, tc.ref)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("ImageRoot(%q) = %q, %v; want %q", tc.ref, got, ok, tc.want)
		}
	}
}
