package main

import "gvisor.dev/gvisor/runsc/cli/maincli"

func main() { maincli.Main() }
