package buildinfo

import "debug/elf"

// Static reports whether the ELF executable at path is statically
// linked: it names no interpreter, so it runs where there is no C
// library (runsc's chroot, an image of its own).
func Static(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}
