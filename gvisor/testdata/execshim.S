.intel_syntax noprefix
.globl _start
# /.airlock/exec FILE ARG...: execvp(FILE, [FILE ARG...]) with the
# environment it was given, so that the program a step runs is started
# by execve(2) inside the sandbox (and seen by its trace point). FILE
# with a '/' is run as it is; else each element of PATH (the
# environment's, or the default below; an empty one is the working
# directory) is tried in turn. Not found: exit 127; found but EACCES or
# ENOEXEC: exit 126; each with a line on stderr, as a shell says it.
# Unlike a shell it runs no file as a script that has no "#!".
_start:
	mov r12, [rsp]              # argc
	cmp r12, 2
	jl notfound0
	lea r13, [rsp+16]           # argv for the program: &argv[1]
	lea r14, [rsp+r12*8+16]     # envp: &argv[argc+1]
	mov rbx, [r13]              # FILE
	sub rsp, 8192               # path buffer
	xor r9d, r9d                # EACCES seen
	mov rdi, rbx                # FILE holds a '/': run it as it is
slash:
	mov al, [rdi]
	test al, al
	jz search
	cmp al, 0x2f
	je direct
	inc rdi
	jmp slash
direct:
	mov rdi, rbx
	mov rsi, r13
	mov rdx, r14
	mov eax, 59                 # execve
	syscall
	cmp eax, -2                 # ENOENT
	je notfound
	cmp eax, -20                # ENOTDIR
	je notfound
	jmp denied                  # there, but not to be run
search:
	mov r15, r14                # find PATH= in envp
env:
	mov rsi, [r15]
	test rsi, rsi
	jz defpath
	cmp dword ptr [rsi], 0x48544150  # "PATH"
	jne nextenv
	cmp byte ptr [rsi+4], 0x3d       # '='
	jne nextenv
	lea rbp, [rsi+5]
	jmp element
nextenv:
	add r15, 8
	jmp env
defpath:
	lea rbp, [rip+dflt]
element:                        # rbp: the start of a PATH element
	xor ecx, ecx
copydir:
	mov al, [rbp+rcx]
	test al, al
	jz direntd
	cmp al, 0x3a                # ':'
	je direntd
	cmp ecx, 4000
	jae skip
	mov [rsp+rcx], al
	inc ecx
	jmp copydir
direntd:
	lea r8, [rbp+rcx]           # the ':' or NUL after the element
	mov edx, ecx
	test ecx, ecx               # an empty element is the working directory
	jz copyfile0
	mov byte ptr [rsp+rdx], 0x2f
	inc edx
copyfile0:
	xor ecx, ecx
copyfile:
	cmp edx, 8000
	jae next
	mov al, [rbx+rcx]
	mov [rsp+rdx], al
	inc ecx
	inc edx
	test al, al
	jnz copyfile
	mov rdi, rsp
	mov rsi, r13
	mov rdx, r14
	mov eax, 59                 # execve
	syscall
	cmp eax, -13                # EACCES, ENOEXEC: remember, try the next
	je found
	cmp eax, -8
	jne next
found:
	mov r9d, 1
	jmp next
skip:                           # an element too long: find its end
	mov al, [rbp+rcx]
	test al, al
	jz skipend
	cmp al, 0x3a
	je skipend
	inc ecx
	jmp skip
skipend:
	lea r8, [rbp+rcx]
next:
	cmp byte ptr [r8], 0
	je done
	lea rbp, [r8+1]
	jmp element
done:
	test r9d, r9d
	jnz denied
notfound:
	lea rsi, [rip+msgnf]
	mov edx, msgnfend-msgnf
	mov r15d, 127
	jmp report
denied:
	lea rsi, [rip+msgpd]
	mov edx, msgpdend-msgpd
	mov r15d, 126
report:                         # "airlock: FILE: <what>\n" on stderr
	mov r12, rsi
	mov r13, rdx
	mov edi, 2
	lea rsi, [rip+msgpre]
	mov edx, msgpreend-msgpre
	mov eax, 1                  # write
	syscall
	xor edx, edx                # strlen(FILE)
len:
	cmp byte ptr [rbx+rdx], 0
	je lenend
	inc edx
	jmp len
lenend:
	mov edi, 2
	mov rsi, rbx
	mov eax, 1
	syscall
	mov edi, 2
	mov rsi, r12
	mov rdx, r13
	mov eax, 1
	syscall
	mov edi, r15d
	mov eax, 231                # exit_group
	syscall
notfound0:
	mov edi, 127
	mov eax, 231
	syscall
dflt:
	.asciz "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
msgpre:
	.ascii "airlock: "
msgpreend:
msgnf:
	.ascii ": command not found in the sandbox\n"
msgnfend:
msgpd:
	.ascii ": cannot be executed (permission denied or not a program)\n"
msgpdend:
