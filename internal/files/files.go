// Package files reads files whose size is not trusted.
package files

import (
	"fmt"
	"io"
	"os"
)

// ReadCapped reads path whole, refusing a file larger than limit bytes
// without reading past it.
func ReadCapped(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}
