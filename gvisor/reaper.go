package gvisor

import (
	"encoding/binary"
	"runtime"
)

// The container's init has one job: reap the processes re-parented to
// it (a step's background processes, once their step is over), so that
// zombies do not pile up against the process limit. The airlock binary
// can do it (sandboxHelper), but starting a 100 MB Go program inside the
// sandbox costs the sandbox's start some tens of milliseconds of CPU,
// right when the first step starts. On amd64 the init is this program
// instead, a static ELF of a few instructions written out at each start:
//
//	loop:   mov  edi, -1           ; wait4(-1, NULL, 0, NULL): blocks
//	        xor  esi, esi          ; while the init has children
//	        xor  edx, edx
//	        xor  r10d, r10d
//	        mov  eax, 61           ; SYS_wait4
//	        syscall
//	        test rax, rax
//	        jg   loop              ; reaped one: look for the next
//	        lea  rdi, [rip+second] ; none (ECHILD): nanosleep(1 s)
//	        xor  esi, esi
//	        mov  eax, 35           ; SYS_nanosleep
//	        syscall
//	        jmp  loop
//	second: dq 1, 0                ; struct timespec {1, 0}
//
// It takes no signal (signals to a PID namespace's init without a
// handler are ignored), and the sandbox's destruction kills it.

// reaperPath is where the reaper is mounted inside the sandbox.
const reaperPath = "/.airlock/reaper"

// reaperCode is the machine code above.
var reaperCode = []byte{
	0xBF, 0xFF, 0xFF, 0xFF, 0xFF, // mov edi, -1
	0x31, 0xF6, // xor esi, esi
	0x31, 0xD2, // xor edx, edx
	0x45, 0x31, 0xD2, // xor r10d, r10d
	0xB8, 0x3D, 0x00, 0x00, 0x00, // mov eax, 61
	0x0F, 0x05, // syscall
	0x48, 0x85, 0xC0, // test rax, rax
	0x7F, 0xE8, // jg loop (-24)
	0x48, 0x8D, 0x3D, 0x11, 0x00, 0x00, 0x00, // lea rdi, [rip+17] (second)
	0x31, 0xF6, // xor esi, esi
	0xB8, 0x23, 0x00, 0x00, 0x00, // mov eax, 35
	0x0F, 0x05, // syscall
	0xEB, 0xD6, // jmp loop (-42)
	0xCC, 0xCC, 0xCC, 0xCC, 0xCC, 0xCC, // to an 8-byte boundary
	0x01, 0, 0, 0, 0, 0, 0, 0, // second: tv_sec 1
	0, 0, 0, 0, 0, 0, 0, 0, // tv_nsec 0
}

// reaperELF is the reaper as an ELF executable for this machine, or nil
// where there is none (the airlock binary is the init there).
func reaperELF() []byte {
	if runtime.GOARCH != "amd64" {
		return nil
	}
	return tinyELF(reaperCode)
}

// tinyELF is a static x86-64 executable of position-independent code:
// one read-and-execute segment holding the headers and the code, loaded
// at 0x400000, entered at the code's first byte.
func tinyELF(code []byte) []byte {
	const (
		base     = 0x400000
		ehsize   = 64
		phsize   = 56
		codeAddr = ehsize + phsize
	)
	size := uint64(codeAddr + len(code))
	b := make([]byte, 0, size)
	le := binary.LittleEndian
	// ELF header.
	b = append(b, 0x7F, 'E', 'L', 'F', 2 /* 64-bit */, 1 /* little-endian */, 1 /* version */, 0 /* System V */)
	b = append(b, make([]byte, 8)...)
	b = le.AppendUint16(b, 2)             // e_type: EXEC
	b = le.AppendUint16(b, 62)            // e_machine: x86-64
	b = le.AppendUint32(b, 1)             // e_version
	b = le.AppendUint64(b, base+codeAddr) // e_entry
	b = le.AppendUint64(b, ehsize)        // e_phoff
	b = le.AppendUint64(b, 0)             // e_shoff
	b = le.AppendUint32(b, 0)             // e_flags
	b = le.AppendUint16(b, ehsize)        // e_ehsize
	b = le.AppendUint16(b, phsize)        // e_phentsize
	b = le.AppendUint16(b, 1)             // e_phnum
	b = append(b, 0, 0, 0, 0, 0, 0)       // e_shentsize, e_shnum, e_shstrndx
	// Program header: PT_LOAD, read and execute, the whole file.
	b = le.AppendUint32(b, 1)      // p_type: LOAD
	b = le.AppendUint32(b, 5)      // p_flags: R+X
	b = le.AppendUint64(b, 0)      // p_offset
	b = le.AppendUint64(b, base)   // p_vaddr
	b = le.AppendUint64(b, base)   // p_paddr
	b = le.AppendUint64(b, size)   // p_filesz
	b = le.AppendUint64(b, size)   // p_memsz
	b = le.AppendUint64(b, 0x1000) // p_align
	return append(b, code...)
}
