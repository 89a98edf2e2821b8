// Command demo-registry is the allowed destination of the README's sample
// job: a tiny HTTP server on loopback that stands in for a package
// registry. testdata/sample-org/org.cue allows it by name
// (registry.demo.test) and pins that name to this address.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"time"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:18080", "address to serve on (loopback)")
	life := flag.Duration("exit-after", 10*time.Minute, "exit after this long, in case nobody stops it")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("/greeting.txt", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from the demo registry (you asked for %s via %s)\n", r.URL.Path, r.Host)
	})
	time.AfterFunc(*life, func() { log.Fatal("demo-registry: exiting after ", *life) })
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
