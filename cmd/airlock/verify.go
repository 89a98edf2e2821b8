package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/internal/files"
	"github.com/airlock-ci/airlock/internal/textsafe"
	"github.com/airlock-ci/airlock/runner/report"
)

func newVerifyCmd(code *int) *cobra.Command {
	var keyFile, commitSHA, policyFile, htmlFile string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "verify --key PUB [--commit SHA] [--policy compliance.cue] BUNDLE",
		Short: "Verify an airlock attestation bundle offline and check it against a compliance policy",
		Long: `verify checks the bundle's signature with the public key, then its payload:
an in-toto statement with airlock's predicate, the subject (--commit), the
predicate's shape, and a CUE compliance policy (--policy) over the field
"predicate". It prints what ran, the egress table and the trust findings,
or --json. Exit status 0: verified; 1: not verified (the reason is printed).`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if keyFile == "" {
				return usagef("--key is required: the public key (PEM) the bundle must be signed with")
			}
			pub, err := files.ReadCapped(keyFile, 64<<10)
			if err != nil {
				return usageError{err}
			}
			v, err := attest.LoadVerifier(pub)
			if err != nil {
				return usageError{err}
			}
			bundle, err := files.ReadCapped(args[0], attest.MaxBundleSize)
			if err != nil {
				*code = 1
				fmt.Fprintf(c.ErrOrStderr(), "NOT VERIFIED: %v\n", err)
				return nil
			}
			opts := attest.VerifyOptions{Commit: commitSHA}
			if policyFile != "" {
				if opts.Compliance, err = files.ReadCapped(policyFile, 1<<20); err != nil {
					return usageError{err}
				}
				opts.ComplianceName = policyFile
			}
			res, err := attest.Verify(bundle, v, opts)
			if err != nil {
				*code = 1
				fmt.Fprintf(c.ErrOrStderr(), "NOT VERIFIED: %v\n", err)
				return nil
			}
			if htmlFile != "" {
				if err := writeHTMLFile(htmlFile, res, true, "signature verified with "+keyFile); err != nil {
					return err
				}
			}
			if asJSON {
				enc := json.NewEncoder(c.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			printVerified(c.OutOrStdout(), res)
			return nil
		},
	}
	cmd.Flags().StringVar(&keyFile, "key", "", "public key (PEM) of the signer")
	cmd.Flags().StringVar(&commitSHA, "commit", "", "the subject must be this commit")
	cmd.Flags().StringVar(&policyFile, "policy", "", "CUE compliance policy over the field predicate")
	cmd.Flags().StringVar(&htmlFile, "html", "", "also write the HTML report to this file")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the verified subject and predicate as JSON")
	return cmd
}

func writeHTMLFile(path string, v *attest.Verified, verified bool, status string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := attest.WriteHTML(f, v, verified, status); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// printVerified is the readable report of a verified bundle. Everything
// from the job is shown through safe(): no control character reaches the
// terminal.
func printVerified(out io.Writer, v *attest.Verified) {
	w := safeWriter{out}
	p := v.Predicate
	verdict := "PASSED"
	if !p.Verdict.Passed {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "VERIFIED: %s %v\n", v.Subject.Name, v.Subject.Digest)
	for _, a := range v.Artifacts {
		fmt.Fprintf(w, "  artifact %s sha256:%s\n", a.Name, a.Digest["sha256"])
	}
	fmt.Fprintf(w, "job %s %s (exit %d) on airlock %s, gVisor %s, host %s\n", p.Job.Name, verdict, p.Verdict.ExitCode, p.Runner.AirlockVersion, p.Runner.GVisorVersion, p.Runner.Hostname)
	report.WritePlatform(w, p.Runner.Platform, p.Runner.PlatformReason, p.Runner.PlatformAttempts)
	for _, r := range p.Verdict.Reasons {
		fmt.Fprintf(w, "  reason: %s\n", r)
	}
	fmt.Fprintf(w, "policy %s (%d sources)\n", p.Policy.EffectiveSHA256, len(p.Policy.Sources))
	fmt.Fprintln(w, "steps:")
	for _, s := range p.Steps {
		fmt.Fprintf(w, "  %-12s %-7s exit %d %s\n", s.Name, s.Status, s.ExitCode, s.Limit)
	}
	fmt.Fprintf(w, "processes: %d recorded, %d dropped, %d lost by the sentry\n", len(p.Processes.Execs), p.Processes.Dropped, p.Processes.DroppedBySentry)
	fmt.Fprintf(w, "egress: %d decisions recorded, %d not", len(p.Egress.Decisions), p.Egress.Dropped)
	if p.Egress.Mode == "audit" {
		fmt.Fprint(w, "; AUDIT: what the rules deny was let through (would-deny)")
	}
	fmt.Fprintln(w)
	if p.Egress.ModeNote != "" {
		fmt.Fprintf(w, "  %s\n", p.Egress.ModeNote)
	}
	for _, e := range p.Egress.Summary {
		would := ""
		if e.WouldDeny > 0 {
			would = fmt.Sprintf(" would-deny %d", e.WouldDeny)
		}
		fmt.Fprintf(w, "  %-40s allowed %d denied %d%s (%d B out, %d B in)\n", e.Destination, e.Allowed, e.Denied, would, e.BytesOut, e.BytesIn)
	}
	if c := p.Credentials; len(c.Withheld) > 0 || c.Masked > 0 {
		fmt.Fprintf(w, "credentials: %d withheld from the sandbox, %d masked value(s) redacted\n", len(c.Withheld), c.Masked)
		for _, h := range c.Withheld {
			fmt.Fprintf(w, "  withheld %s (%s)\n", h.Name, strings.Join(h.Variables, ", "))
		}
		for _, u := range c.Uses {
			fmt.Fprintf(w, "  %s to %s %s: injected %d, refused %d, elsewhere %d %s\n", u.Credential, u.Host, u.Route, u.Injected, u.Refused, u.Elsewhere, u.Rule)
		}
	}
	fmt.Fprintf(w, "trust: %d finding(s), %d not recorded\n", len(p.Trust.Findings), p.Trust.Dropped)
	if p.Trust.Error != "" {
		fmt.Fprintf(w, "  incomplete: %s\n", p.Trust.Error)
	}
	for _, f := range p.Trust.Findings {
		fmt.Fprintf(w, "  %s %s %s %s [%s] %s\n", f.Phase, f.Category, f.Path, f.Kind, f.Action, f.Reason)
	}
}

// safeWriter replaces control characters (terminal escapes, bidi
// overrides) in what it writes, keeping newlines and tabs.
type safeWriter struct{ w io.Writer }

func (s safeWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(s.w, textsafe.Lines(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

func newReportCmd() *cobra.Command {
	var keyFile, out string
	cmd := &cobra.Command{
		Use:   "report [--key PUB] [-o FILE] BUNDLE",
		Short: "Render an attestation bundle as a self-contained HTML page",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			bundle, err := files.ReadCapped(args[0], attest.MaxBundleSize)
			if err != nil {
				return usageError{err}
			}
			var v *attest.Verified
			status := "SIGNATURE NOT CHECKED (give --key)"
			if keyFile != "" {
				pub, err := files.ReadCapped(keyFile, 64<<10)
				if err != nil {
					return usageError{err}
				}
				ver, err := attest.LoadVerifier(pub)
				if err != nil {
					return usageError{err}
				}
				if v, err = attest.Verify(bundle, ver, attest.VerifyOptions{}); err != nil {
					return usageError{err}
				}
				status = "signature verified with " + keyFile
			} else if v, err = attest.Inspect(bundle); err != nil {
				return usageError{err}
			}
			if out == "" {
				out = strings.TrimSuffix(args[0], ".json") + ".html"
			}
			if err := writeHTMLFile(out, v, keyFile != "", status); err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), out)
			return nil
		},
	}
	cmd.Flags().StringVar(&keyFile, "key", "", "public key to verify the bundle with first")
	cmd.Flags().StringVarP(&out, "output", "o", "", "HTML file (default: the bundle's name with .html)")
	return cmd
}

func newKeysCmd() *cobra.Command {
	keys := &cobra.Command{Use: "keys", Short: "Signing keys for attestations"}
	var prefix, passwordFile string
	gen := &cobra.Command{
		Use:   "generate --out PREFIX",
		Short: "Write an ECDSA P-256 key pair: PREFIX.key (0600; encrypted when " + report.PasswordEnv + " or --password-file gives a password) and PREFIX.pub",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if prefix == "" {
				return usagef("--out PREFIX is required")
			}
			var password []byte
			if v, ok := os.LookupEnv(report.PasswordEnv); ok {
				if v == "" {
					return usagef("%s is set but empty: unset it for an unencrypted key, or give a password", report.PasswordEnv)
				}
				password = []byte(v)
			} else if passwordFile != "" {
				p, err := attest.PasswordFromEnv(report.PasswordEnv, passwordFile)()
				if err != nil {
					return usageError{err}
				}
				password = p
			}
			if err := attest.WriteKeyPair(prefix, password); err != nil {
				var pathErr *fs.PathError
				if errors.As(err, &pathErr) {
					return usageError{err} // where the files go, not the key
				}
				return err
			}
			state := "not encrypted"
			if len(password) > 0 {
				state = "encrypted"
			}
			fmt.Fprintf(c.OutOrStdout(), "wrote %s.key (%s) and %s.pub\n", prefix, state, prefix)
			return nil
		},
	}
	gen.Flags().StringVar(&prefix, "out", "", "path prefix of the two files")
	gen.Flags().StringVar(&passwordFile, "password-file", "", "file holding the password (when "+report.PasswordEnv+" is not set)")
	keys.AddCommand(gen)
	return keys
}
