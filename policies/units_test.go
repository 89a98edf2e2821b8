package policies

import "testing"

// FormatSize writes what ParseSize reads back, in the unit a person
// would write.
func TestFormatSize(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{{0, "0"}, {4 << 30, "4G"}, {512 << 20, "512M"}, {1536 << 20, "1536M"}, {1000, "1000"}, {1 << 10, "1024"}} {
		got := FormatSize(tc.n)
		back, err := ParseSize(got)
		if got != tc.want || err != nil || back != tc.n {
			t.Errorf("FormatSize(%d) = %q, read back %d, %v; want %q", tc.n, got, back, err, tc.want)
		}
	}
}
