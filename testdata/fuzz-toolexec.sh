#!/bin/bash
# go test -toolexec: compile gVisor's own packages without the fuzzer's
# instrumentation (-d=libfuzzer), which pushes its KVM platform's
# //go:nosplit functions over the linker's stack limit. The packages
# under test keep theirs. The tool's version line is marked so that the
# go command does not reuse objects built without this wrapper.
tool="$1"; shift
if [ "$1" = "-V=full" ] && [ "$(basename "$tool")" = "compile" ]; then
  line=$("$tool" "$@") || exit $?
  echo "$line airlock-fuzz-gvisor-uninstrumented"
  exit 0
fi
case "$(basename "$tool")" in
compile)
  pkg=""
  prev=""
  for a in "$@"; do
    if [ "$prev" = "-p" ]; then pkg="$a"; fi
    prev="$a"
  done
  case "$pkg" in
  gvisor.dev/gvisor/*)
    args=()
    for a in "$@"; do [ "$a" = "-d=libfuzzer" ] || args+=("$a"); done
    exec "$tool" "${args[@]}"
    ;;
  esac
  ;;
esac
exec "$tool" "$@"
