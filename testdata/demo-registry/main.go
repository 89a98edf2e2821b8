// Command demo-registry is the allowed destination of the README's sample
// job: a tiny server on loopback that stands in for a package registry.
// testdata/sample-org/org.cue allows it by name (registry.demo.test) and
// pins that name to this address.
//
// It serves /greeting.txt over HTTP, and over HTTPS (a certificate from a
// CA of its own, written to -ca-out for airlock to trust upstream) a
// private file that needs the registry's token, which it makes up and
// writes to -token-out: the sample passes it to the job as a workflow
// secret, which the sandbox sees as a placeholder and the gateway puts
// back for this host only.
//
// With -oci-listen it also serves an OCI registry (go-containerregistry's,
// with the referrers API) behind basic auth, the sample's attestation
// store: its credentials, made up, go to -auth-out as a Docker
// config.json, which airlock run takes with --attest-store-auth. The
// sample policies do not allow the job to reach it.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:18080", "address to serve HTTP on (loopback)")
	tlsAddr := flag.String("tls-listen", "127.0.0.1:18443", "address to serve HTTPS on (loopback)")
	caOut := flag.String("ca-out", "", "write the CA of the HTTPS certificate here")
	tokenOut := flag.String("token-out", "", "write the registry's token here")
	life := flag.Duration("exit-after", 10*time.Minute, "exit after this long, in case nobody stops it")
	ociAddr := flag.String("oci-listen", "", "address to serve the attestation store's OCI registry on (loopback)")
	authOut := flag.String("auth-out", "", "write the OCI registry's credentials here (Docker config.json)")
	flag.Parse()
	if *ociAddr != "" {
		if err := serveOCI(*ociAddr, *authOut); err != nil {
			log.Fatal(err)
		}
	}
	token := make([]byte, 20)
	rand.Read(token)
	secret := "demo_" + hex.EncodeToString(token)
	mux := http.NewServeMux()
	mux.HandleFunc("/greeting.txt", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from the demo registry (you asked for %s via %s)\n", r.URL.Path, r.Host)
	})
	mux.HandleFunc("/private/greeting.txt", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+secret {
			http.Error(w, "the demo registry wants its token", http.StatusUnauthorized)
			return
		}
		fmt.Fprintln(w, "hello from the demo registry's private area: the request carried the real token")
	})
	cert, caPEM, err := certificate("registry.demo.test")
	if err != nil {
		log.Fatal(err)
	}
	for path, data := range map[string][]byte{*caOut: caPEM, *tokenOut: []byte(secret)} {
		if path != "" {
			if err := os.WriteFile(path, data, 0o600); err != nil {
				log.Fatal(err)
			}
		}
	}
	time.AfterFunc(*life, func() { log.Fatal("demo-registry: exiting after ", *life) })
	tlsSrv := &http.Server{Addr: *tlsAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go func() { log.Fatal(tlsSrv.ListenAndServeTLS("", "")) }()
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// serveOCI serves an OCI registry on addr behind basic auth, writing its
// credentials to authOut, and returns once it listens.
func serveOCI(addr, authOut string) error {
	pw := make([]byte, 16)
	rand.Read(pw)
	user, password := "airlock", hex.EncodeToString(pw)
	config := fmt.Sprintf(`{"auths":{%q:{"username":%q,"password":%q}}}`, addr, user, password)
	if err := os.WriteFile(authOut, []byte(config), 0o600); err != nil {
		return err
	}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithReferrersSupport(true))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != password {
			w.Header().Set("WWW-Authenticate", `Basic realm="demo"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	})}
	go func() { log.Fatal(srv.Serve(ln)) }()
	return nil
}

// certificate makes a CA and a certificate it signs for name.
func certificate(name string) (tls.Certificate, []byte, error) {
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "demo registry CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	ca, _ = x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), nil
}
