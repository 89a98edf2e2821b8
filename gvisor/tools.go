package gvisor

import (
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// runTool runs one of the in-sandbox helper's small tools, for root
// filesystems without a shell (an image directory) and for tests that
// need a process of a known behaviour in a container:
//
//	cat FILE...       print files (exit 1 if one cannot be read)
//	ls DIR            print the names in a directory
//	write FILE TEXT   write TEXT to FILE
//	mmap FILE TEXT    write TEXT to FILE through a shared writable
//	                  mapping (no write(2), no msync)
//	exit N            exit with status N
//	env               print the environment
//	id                print the uid and gid ("uid=N gid=N")
//	serve ADDR TEXT   listen on TCP ADDR, print "listening", and answer
//	                  every connection with TEXT; runs until killed
//	fetch ADDR        connect to TCP ADDR (retrying for 10s) and print
//	                  what it answers
//
// ok is false when name is not a tool.
func runTool(name string, args []string) (code int, ok bool) {
	var err error
	switch {
	case name == "cat" && len(args) > 0:
		for _, f := range args {
			var b []byte
			if b, err = os.ReadFile(f); err != nil {
				break
			}
			os.Stdout.Write(b)
		}
	case name == "ls" && len(args) == 1:
		var ents []os.DirEntry
		ents, err = os.ReadDir(args[0])
		for _, e := range ents {
			fmt.Println(e.Name())
		}
	case name == "write" && len(args) == 2:
		err = os.WriteFile(args[0], []byte(args[1]), 0o644)
	case name == "mmap" && len(args) == 2 && args[1] != "":
		err = writeMapped(args[0], args[1])
	case name == "exit" && len(args) == 1:
		var n int
		if n, err = strconv.Atoi(args[0]); err == nil {
			return n, true
		}
	case name == "env" && len(args) == 0:
		for _, kv := range os.Environ() {
			fmt.Println(kv)
		}
	case name == "id" && len(args) == 0:
		fmt.Printf("uid=%d gid=%d\n", os.Getuid(), os.Getgid())
	case name == "serve" && len(args) == 2:
		err = serve(args[0], args[1])
	case name == "fetch" && len(args) == 1:
		err = fetch(args[0], 10*time.Second)
	default:
		return 0, false
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1, true
	}
	return 0, true
}

// writeMapped makes file hold text, written through a shared mapping of
// it and left to the kernel (the sentry) to write back.
func writeMapped(file, text string) error {
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(int64(len(text))); err != nil {
		return err
	}
	m, err := unix.Mmap(int(f.Fd()), 0, len(text), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	copy(m, text)
	return unix.Munmap(m)
}

func serve(addr, text string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer l.Close()
	fmt.Println("listening")
	for {
		conn, err := l.Accept()
		if err != nil {
			return err
		}
		io.WriteString(conn, text)
		conn.Close()
	}
}

func fetch(addr string, patience time.Duration) error {
	deadline := time.Now().Add(patience)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(patience))
			_, err = io.Copy(os.Stdout, conn)
			return err
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
