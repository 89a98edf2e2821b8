package hook

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"syscall"

	"github.com/airlock-ci/airlock/runner/images"
)

// Registry credentials: the runner sends, for the job container and each
// service, the workflow's credentials: for the image (HookContainer's
// registry). airlock pulls images on the host (runner.ImageSource), so it
// keeps them for that pull, and for nothing else:
//
//   - prepare_job reads them from the payload (standard input), and hands
//     them to the job's daemon through its standard input, a pipe
//     (startDaemon): the payload it stores in the job's directory for the
//     daemon (prepare.json) has every registry null (Registry marshals so),
//     as has every request to the daemon;
//   - the daemon reads the pipe to its end before anything else, puts
//     /dev/null in its place, and gives them to the job's ImageSource for
//     the job container's and the services' pulls (RefCredentials, each for
//     the reference it came with), then drops them: the runner sends none
//     for a Docker action;
//   - each goes only to the registry of the image it came with, as
//     images.ParseRef reads the image's name: never to the serverUrl the
//     payload says, which the runner derives from the name its own way
//     (acme/team/img is Docker Hub's, and serverUrl "acme");
//   - an error that could quote them (a registry's refusal) is redacted
//     before it is printed, stored or sent to the check run.
//
// Nothing of them enters the sandbox, whose environment is built from
// nothing, nor the attestation, which records images by reference and
// digest.

// maxCredentials bounds what the daemon reads from its pipe.
const maxCredentials = maxInput

// pullCredentials is one container's credentials as prepare_job hands
// them to the daemon: the image reference as written, and the
// credentials for its registry.
type pullCredentials struct {
	Ref         string             `json:"ref"`
	Credentials images.Credentials `json:"credentials"`
}

// String never shows the password.
func (p pullCredentials) String() string { return p.Credentials.String() + " (" + p.Ref + ")" }

// registryCredentials are the credentials of the job container and the
// services of a prepare_job payload, each for its image's own registry.
// A container without credentials (the runner sends registry only when
// the workflow gives a username), without a password (Docker's login
// needs both, and so does the runner's own docker login) or whose image
// does not parse (its pull fails saying so) has none.
func registryCredentials(args PrepareArgs) []pullCredentials {
	var out []pullCredentials
	add := func(c *Container) {
		if c == nil || c.Registry == nil || c.Registry.Username == "" || c.Registry.Password == "" {
			return
		}
		ref, err := images.ParseRef(c.Image)
		if err != nil {
			return
		}
		out = append(out, pullCredentials{Ref: c.Image, Credentials: images.Credentials{
			Registry: ref.Registry(), Username: c.Registry.Username, Password: c.Registry.Password,
		}})
	}
	add(args.Container)
	for i := range args.Services {
		add(&args.Services[i])
	}
	return out
}

// readCredentials reads what prepare_job wrote on the daemon's standard
// input, to its end, and leaves /dev/null in its place: nothing the
// daemon starts inherits the pipe, and nothing reads it again.
func readCredentials(f *os.File) ([]pullCredentials, error) {
	b, err := io.ReadAll(io.LimitReader(f, maxCredentials+1))
	if null, nerr := os.Open(os.DevNull); nerr == nil {
		syscall.Dup3(int(null.Fd()), int(f.Fd()), 0)
		null.Close()
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("registry credentials from prepare_job: %w", err)
	case len(b) > maxCredentials:
		return nil, errors.New("registry credentials from prepare_job: too large")
	case len(strings.TrimSpace(string(b))) == 0:
		return nil, nil
	}
	var creds []pullCredentials
	if err := json.Unmarshal(b, &creds); err != nil {
		// Never the bytes: they hold the passwords.
		return nil, errors.New("registry credentials from prepare_job: not the hook's JSON")
	}
	return creds, nil
}

// byRef is the credentials by the reference they came with (the first
// for a reference named twice), as runner.ImageSource takes them.
func byRef(creds []pullCredentials) map[string]images.Credentials {
	if len(creds) == 0 {
		return nil
	}
	m := map[string]images.Credentials{}
	for _, c := range creds {
		if _, ok := m[c.Ref]; !ok {
			m[c.Ref] = c.Credentials
		}
	}
	return m
}

// minRedacted is the shortest password redacted: a shorter one would
// blank out ordinary words of the message, and is no secret anyway.
const minRedacted = 4

// redact replaces the passwords in s, and the forms a registry could
// echo them in (Basic authorization, URL-encoded), with "***".
func redact(s string, creds []pullCredentials) string {
	for _, c := range creds {
		pw := c.Credentials.Password
		if len(pw) < minRedacted {
			continue
		}
		basic := base64.StdEncoding.EncodeToString([]byte(c.Credentials.Username + ":" + pw))
		for _, form := range []string{basic, pw, url.QueryEscape(pw), url.PathEscape(pw)} {
			s = strings.ReplaceAll(s, form, "***")
		}
	}
	return s
}

// redactedError is an error whose message had the passwords taken out.
type redactedError struct{ msg string }

func (e redactedError) Error() string { return e.msg }

// redactErr is err with the passwords taken out of its message.
func redactErr(err error, creds []pullCredentials) error {
	if err == nil || len(creds) == 0 {
		return err
	}
	msg := err.Error()
	if r := redact(msg, creds); r != msg {
		return redactedError{r}
	}
	return err
}
