// Command wordcount prints the most frequent words of its standard input.
package main

import (
	"fmt"
	"io"
	"os"

	"example.com/sample"
)

func main() {
	b, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, c := range sample.TopWords(string(b), 10) {
		fmt.Printf("%6d %s\n", c.N, c.Word)
	}
}
