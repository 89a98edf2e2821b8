package hook

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/airlock-ci/airlock/internal/files"
	"github.com/airlock-ci/airlock/runner/github"
	"github.com/airlock-ci/airlock/runner/report"
)

// Environment of the runner host that configures the hook.
const (
	JobsRootEnv  = "AIRLOCK_HOOK_DIR" // where job directories go (default /run/airlock/hooks)
	OrgDirEnv    = "AIRLOCK_ORG_DIR"  // organisation policy (default /etc/airlock)
	AttestKeyEnv = "AIRLOCK_ATTEST_KEY"
	// AttestStoreEnv adds attestation stores beside the organisation
	// policy's attest.store (names separated by spaces or commas), and
	// AttestStoreAuthEnv names the Docker config.json with their
	// credentials (on ARC, a key of a Secret mounted as a file).
	AttestStoreEnv     = "AIRLOCK_ATTEST_STORE"
	AttestStoreAuthEnv = "AIRLOCK_ATTEST_STORE_AUTH"
	// ImageCacheEnv is the directory of the image cache the jobs' pulls
	// share (default images.DefaultStoreDir).
	ImageCacheEnv = "AIRLOCK_IMAGE_CACHE"
	// How many jobs' attestations the jobs root keeps, and for how long
	// (report.DefaultRetention unless set; 0: no bound).
	KeepAttestationsEnv  = "AIRLOCK_KEEP_ATTESTATIONS"
	AttestationMaxAgeEnv = "AIRLOCK_ATTESTATION_MAX_AGE"
	// The GitHub API, optional: a token, or a GitHub App (id,
	// installation, private key file); the API root for GHES and tests.
	GitHubTokenEnv        = "AIRLOCK_GITHUB_TOKEN"
	GitHubAppIDEnv        = "AIRLOCK_GITHUB_APP_ID"
	GitHubInstallationEnv = "AIRLOCK_GITHUB_APP_INSTALLATION_ID"
	GitHubAppKeyEnv       = "AIRLOCK_GITHUB_APP_KEY"
	GitHubAPIEnv          = "AIRLOCK_GITHUB_API_URL"
)

// defaultJobsRoot is where job directories go unless AIRLOCK_HOOK_DIR
// says otherwise.
const defaultJobsRoot = "/run/airlock/hooks"

// Build identifies the airlock binary, for the attestations it signs.
type Build struct {
	Version, Commit string
	// Runtime names the embedded sandbox runtime and its version.
	Runtime string
	// RunscBuildID is the Go build ID of the runsc sidecar the binary
	// was built with (runner.Inputs.RunscBuildID).
	RunscBuildID string
}

// Config is how the runner host set up the hook: its environment, read
// by the hook process and again by each job's daemon (which inherits it).
type Config struct {
	Build
	// JobsRoot holds one directory per job, and the final attestations.
	JobsRoot string
	// OrgDir is the organisation policy's directory; empty: the host's
	// default (policies.DefaultOrgDir) when it has one.
	OrgDir string
	// AttestKey is the signing key; empty: the organisation policy's.
	AttestKey string
	// AttestStores are the host's attestation stores (unparsed: a job
	// is refused at prepare_job when they do not parse), AttestStoreAuth
	// the file with their credentials.
	AttestStores, AttestStoreAuth string
	// ImageCache is the image cache's directory; empty: the default.
	ImageCache string
	// Retention bounds the attestations kept in JobsRoot/attestations.
	Retention report.Retention
}

// ConfigFromEnv reads the hook's configuration from the environment.
func ConfigFromEnv(b Build) Config {
	c := Config{Build: b, JobsRoot: os.Getenv(JobsRootEnv), OrgDir: os.Getenv(OrgDirEnv), AttestKey: os.Getenv(AttestKeyEnv), ImageCache: os.Getenv(ImageCacheEnv),
		AttestStores: os.Getenv(AttestStoreEnv), AttestStoreAuth: os.Getenv(AttestStoreAuthEnv)}
	if c.JobsRoot == "" {
		c.JobsRoot = defaultJobsRoot
	}
	c.Retention = report.DefaultRetention
	if n, err := strconv.Atoi(os.Getenv(KeepAttestationsEnv)); err == nil {
		c.Retention.Keep = n
	}
	if d, err := time.ParseDuration(os.Getenv(AttestationMaxAgeEnv)); err == nil {
		c.Retention.MaxAge = d
	}
	return c
}

// githubFromEnv returns the GitHub client the runner host configured, or
// nil when none is.
func githubFromEnv() (*github.Client, error) {
	o := github.Options{BaseURL: os.Getenv(GitHubAPIEnv), Token: os.Getenv(GitHubTokenEnv)}
	if id := os.Getenv(GitHubAppIDEnv); id != "" {
		var app github.App
		if _, err := fmt.Sscan(id, &app.ID); err != nil {
			return nil, fmt.Errorf("%s: %v", GitHubAppIDEnv, err)
		}
		if _, err := fmt.Sscan(os.Getenv(GitHubInstallationEnv), &app.InstallationID); err != nil {
			return nil, fmt.Errorf("%s: %v", GitHubInstallationEnv, err)
		}
		key, err := files.ReadCapped(os.Getenv(GitHubAppKeyEnv), 64<<10)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", GitHubAppKeyEnv, err)
		}
		app.PrivateKey = key
		o.App, o.Token = &app, ""
	}
	if o.Token == "" && o.App == nil {
		return nil, nil
	}
	return github.New(o)
}
