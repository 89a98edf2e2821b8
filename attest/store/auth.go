package store

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"

	"github.com/docker/cli/cli/config"
	"github.com/docker/cli/cli/config/configfile"
	"github.com/docker/cli/cli/config/types"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/airlock-ci/airlock/internal/files"
)

// maxAuthFile bounds the credentials file.
const maxAuthFile = 1 << 20

// fileKeychain resolves a registry's credentials from one Docker
// config.json, read by Docker's own loader (auths, with the base64 auth
// or username and password, identity and registry tokens; credential
// helpers where the file names them), as go-containerregistry's default
// keychain reads ~/.docker/config.json. Only that file: airlock's own
// home directory and environment are never searched, so what a store
// uses is what the runner's configuration names.
type fileKeychain struct{ cf *configfile.ConfigFile }

// loadKeychain reads the credentials file at path (empty, or a file
// that is not there: anonymous, as for a registry that takes pushes
// without credentials; a 401 then says the file is missing). Its errors
// name the file, never its content.
func loadKeychain(path string) (authn.Keychain, error) {
	if path == "" {
		return authn.NewMultiKeychain(), nil
	}
	b, err := files.ReadCapped(path, maxAuthFile)
	if errors.Is(err, fs.ErrNotExist) {
		return authn.NewMultiKeychain(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("attestation store credentials: %w (the file the runner's configuration names, in Docker's config.json format)", err)
	}
	cf, err := config.LoadFromReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("attestation store credentials %s: not a Docker config.json: %s", path, firstLine(err.Error()))
	}
	return fileKeychain{cf}, nil
}

// Resolve finds the credentials of the registry r names, by its
// repository first, then its host (index.docker.io by Docker's key).
func (k fileKeychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	for _, key := range []string{r.String(), r.RegistryStr()} {
		if key == name.DefaultRegistry {
			key = authn.DefaultAuthKey
		}
		cfg, err := k.cf.GetAuthConfig(key)
		if err != nil {
			return nil, fmt.Errorf("attestation store credentials for %s: %s", r.RegistryStr(), firstLine(err.Error()))
		}
		cfg.ServerAddress = ""
		if cfg != (types.AuthConfig{}) {
			return authn.FromConfig(authn.AuthConfig{Username: cfg.Username, Password: cfg.Password, Auth: cfg.Auth, IdentityToken: cfg.IdentityToken, RegistryToken: cfg.RegistryToken}), nil
		}
	}
	return authn.Anonymous, nil
}

func firstLine(s string) string {
	if i := bytes.IndexByte([]byte(s), '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
