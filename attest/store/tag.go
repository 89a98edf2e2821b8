package store

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"regexp"
	"strings"
	"sync"
)

// A job's tag reads, and lists by prefix, in the order a reviewer
// narrows: repository, pull request, commit, run and attempt, job, then
// airlock's job id (which makes it the job's own) and the kind:
//
//	octo-org_widgets.pr42.9a3bb6bc09af.r8812345-1.build.efbb8c29c09a.att
//
// Each part keeps only [A-Za-z0-9_-] (anything else becomes _), so the
// dots separate parts; a part too long for the tag's 128 characters is
// cut and ends with a hash of the whole. A commit's subject manifest is
// tagged REPO.commit.SHA.HASH. Tags are for people and prefixes: the labels
// (annotations) decide what a query selects.
const (
	maxTag       = 128
	maxRepoPart  = 36 // 36 + pr 12 + commit 12 + run 24 + job 20 + id 12 + kind 4 + 6 dots = 126
	maxRunPart   = 24
	maxJobPart   = 20
	maxIDPart    = 12
	tagSeparator = "."
)

// tagKinds are the kinds' last parts.
var tagKinds = map[string]string{KindAttestation: "att", KindProvenance: "prov"}

// validTag is the distribution spec's tag grammar.
var validTag = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`) })

// Tag is the job's tag of the record labelled l.
func (l Labels) Tag() string {
	commit := "nocommit"
	if l.Commit != "" {
		commit = commitPart(l.Commit)
	}
	run := "local"
	if l.RunID != "" {
		attempt := l.RunAttempt
		if attempt == "" {
			attempt = "1"
		}
		run = part("r"+l.RunID+"-"+attempt, maxRunPart)
	}
	job := "job"
	if l.Job != "" {
		job = part(l.Job, maxJobPart)
	}
	return strings.Join([]string{RepoPrefix(l.Repository), prPart(l.PullRequest), commit, run, job, part(strings.TrimPrefix(l.JobID, "job-"), maxIDPart), tagKinds[l.Kind]}, tagSeparator)
}

// CommitTag is the tag of the subject manifest of repository's commit.
// It ends with a hash of the repository as the record names it: two
// repositories whose prefixes are alike (a.b and a_b) keep tags apart.
func CommitTag(repository, commit string) string {
	if commit == "" {
		commit = "nocommit"
	}
	sum := sha256.Sum256([]byte(repository))
	return RepoPrefix(repository) + ".commit." + part(commit, 40) + "." + hex.EncodeToString(sum[:3])
}

// RepoPrefix is a repository's first part of every tag: owner_name of a
// GitHub repository, "local" for none.
func RepoPrefix(repository string) string {
	on := ownerName(repository)
	if on == "" {
		return "local"
	}
	p := part(strings.ReplaceAll(on, "/", "_"), maxRepoPart)
	if p[0] == '-' {
		p = "_" + p[1:] // a tag starts with [A-Za-z0-9_]
	}
	return p
}

// PullRequestPrefix is the prefix of the tags of a pull request's jobs.
func PullRequestPrefix(repository string, pr int) string {
	return RepoPrefix(repository) + tagSeparator + prPart(pr) + tagSeparator
}

// commitPart is a tag's commit part: the commit id's first 12
// characters (a prefix, as git abbreviates).
func commitPart(commit string) string {
	p := part(commit, len(commit))
	if len(p) > 12 {
		p = p[:12]
	}
	return p
}

// prPart is a tag's pull request part.
func prPart(pr int) string {
	if pr <= 0 {
		return "nopr"
	}
	return part("pr"+itoa(pr), 12)
}

// jobTagShape is a job's tag: 7 parts, the last a kind.
var jobTagShape = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+){5}\.(att|prov)$`) })

// commitTagShape is a commit subject's tag.
var commitTagShape = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^([A-Za-z0-9_-]+)\.commit\.([A-Za-z0-9_-]+)\.[0-9a-f]{6}$`)
})

// isJobTag says whether t has the shape of a job's tag.
func isJobTag(t string) bool { return jobTagShape().MatchString(t) }

// tagParts splits a job's tag: repository part, pull request part,
// commit part.
func tagParts(t string) (repo, pr, commit string) {
	p := strings.SplitN(t, tagSeparator, 4)
	if len(p) < 4 {
		return "", "", ""
	}
	return p[0], p[1], p[2]
}

// ownerName is owner/name of a repository named by URL
// (https://github.com/o/n, .git or not) or as owner/name; else the name
// as given. Empty stays empty.
func ownerName(repo string) string {
	s := repo
	if u, err := url.Parse(repo); err == nil && u.Scheme != "" && u.Host != "" {
		s = u.Path
	}
	s = strings.Trim(strings.TrimSuffix(strings.Trim(s, "/"), ".git"), "/")
	p := strings.Split(s, "/")
	if len(p) >= 2 {
		return p[len(p)-2] + "/" + p[len(p)-1]
	}
	return s
}

// part keeps s's characters that a tag part may hold (others become _)
// and cuts it to max, ending a cut one with a hash of all of s.
func part(s string, max int) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "_"
	}
	if len(b) <= max {
		return string(b)
	}
	sum := sha256.Sum256([]byte(s))
	h := hex.EncodeToString(sum[:])[:6]
	return string(b[:max-7]) + "-" + h
}
