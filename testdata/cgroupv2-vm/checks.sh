#!/bin/busybox sh
# Stage 2, PID 1 of the VM: a pure cgroup v2 host. Runs airlock's jobs in
# each layout and prints one line per check:
#   VMCHECK <layout> <check> ok
#   VMCHECK <layout> <check> FAIL <why>
# then VMDONE, and powers the VM off.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
CG=/sys/fs/cgroup

# boot sets the VM up, once, as its PID 1.
boot() {
  /bin/busybox --install -s /bin
  mount -t proc proc /proc
  mount -t sysfs sysfs /sys
  mount -t devtmpfs devtmpfs /dev
  mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
  mount -t tmpfs -o size=512m tmpfs /tmp
  mount -t tmpfs tmpfs /run
  for m in veth xfrm_algo xfrm_user nfnetlink loop overlay crc16 mbcache jbd2 crc32c_generic ext4; do [ -f /lib/modules/$m.ko ] && insmod /lib/modules/$m.ko; done
  ip link set lo up
  hostname vm
  echo "VMINFO kernel $(uname -r), cgroup controllers: $(cat $CG/cgroup.controllers)"
}

say() { echo "VMCHECK $layout $1 $2"; }
check() { # check NAME: runs check_NAME, prints its line
  out=/tmp/check-$layout-$1.log
  if "check_$1" > "$out" 2>&1; then say "$1" ok; else say "$1" "FAIL $(tail -n 4 "$out" | tr '\n' ' ')"; fi
}
workspace() { d=$(mktemp -d /tmp/ws.XXXXXX); chown 1000:1000 "$d"; echo "$d"; }
# jobcg: the directory of a running job's cgroup (as this shell sees the
# hierarchy), waiting up to 60 s for it.
jobcg() {
  for i in $(seq 600); do
    d=$(find $CG -type d -name 'airlock-job-*' 2>/dev/null | head -n 1)
    [ -n "$d" ] && { echo "$d"; return 0; }
    sleep 0.1
  done
  return 1
}

check_true() {
  airlock run -w "$(workspace)" --json -- true > /tmp/r.json || return 1
  grep -q '"passed": true' /tmp/r.json
}

# A job writing past its workspace limit gets ENOSPC and the result names
# the limit; what it wrote within the limit is in the workspace, and
# nothing stays mounted on it.
check_workspace() {
  ws=$(workspace)
  airlock run -w "$ws" --workspace-size 32M --json -- sh -c 'echo kept > kept; head -c 100000000 /dev/zero > big' > /tmp/w.json 2>/tmp/w.err && { echo "the filler passed"; return 1; }
  grep -q '"limit": "workspace"' /tmp/w.json || { echo "no workspace limit in the result"; return 1; }
  size=$(wc -c < "$ws/big"); [ "$size" -le 33554432 ] || { echo "big is $size bytes, more than the limit"; return 1; }
  [ "$(cat "$ws/kept")" = kept ] || { echo "kept is not in the workspace"; return 1; }
  ! grep -q "$ws" /proc/self/mountinfo || { echo "still mounted on the workspace"; return 1; }
}

# The job's cgroup is below airlock's own where the layout allows it, and
# the limits are written there.
check_limits() {
  airlock run -w "$(workspace)" --memory 200M --pids 100 --cpus 1 -- sleep 4 > /tmp/l.log 2>&1 &
  pid=$!
  d=$(jobcg) || { echo "no job cgroup appeared"; cat /tmp/l.log; return 1; }
  echo "job cgroup $d, expected below $expect"
  case "$d" in "$expect"/*) ;; *) echo "not below $expect"; return 1;; esac
  mem=$(cat "$d/memory.max"); pids=$(cat "$d/pids.max"); cpu=$(cat "$d/cpu.max")
  echo "memory.max $mem pids.max $pids cpu.max $cpu"
  # The job's sandbox runs from the runsc sidecar beside airlock.
  for i in $(seq 50); do
    exes=$(for p in $(cat "$d/cgroup.procs" 2>/dev/null); do readlink "/proc/$p/exe"; done | sort -u | tr '\n' ' ')
    case "$exes" in *airlock-runsc*) break;; esac
    sleep 0.1
  done
  echo "the job's processes run: $exes"
  case "$exes" in *airlock-runsc*) ;; *) echo "the job's sandbox does not run from /bin/airlock-runsc"; return 1;; esac
  wait $pid || { cat /tmp/l.log; return 1; }
  [ "$mem" = 209715200 ] && [ "$cpu" = "100000 100000" ] && [ "$pids" != max ]
}

check_oom() {
  airlock run -w "$(workspace)" --memory 128M --json -- sh -c 'head -c 1500000000 /dev/zero | tail -c 1400000000 > /dev/null' > /tmp/o.json 2>/tmp/o.err
  cat /tmp/o.err | tail -n 3
  grep -q '"limit": "oom"' /tmp/o.json
}

check_pids() {
  airlock run -w "$(workspace)" --pids 48 --json -- sh -c 'bomb() { bomb | bomb & }; bomb; sleep 5' > /tmp/p.json 2>/tmp/p.err
  tail -n 3 /tmp/p.err
  grep -q '"limit": "pids"' /tmp/p.json
}

# A job through the egress gateway: an allowed name (a local server the
# policy pins) answers, anything else is refused.
check_egress() {
  mkdir -p /tmp/www && echo "hello from the registry" > /tmp/www/hello.txt
  httpd -p 127.0.0.1:18080 -h /tmp/www
  mkdir -p /tmp/org
  cat > /tmp/org/org.cue <<'CUE'
package airlock
egress: {
	allow: [{host: "registry.test", ports: [18080]}]
	resolve: "registry.test": "127.0.0.1"
	allowCIDRs: ["127.0.0.1/32"]
}
CUE
  airlock run -w "$(workspace)" --org /tmp/org --json -- sh -c 'wget -q -O - http://registry.test:18080/hello.txt; if wget -q -T 5 -O - http://example.com/ 2>/dev/null; then echo LEAK; fi' > /tmp/e.json 2>/tmp/e.err
  rc=$?
  killall httpd
  tail -n 5 /tmp/e.err
  [ $rc = 0 ] && grep -q 'hello from the registry' /tmp/e.err && ! grep -q LEAK /tmp/e.err
}

# airlock killed mid-job: the next run reaps the sandbox, its processes
# and its cgroup.
check_sigkill() {
  airlock run -w "$(workspace)" -- sleep 300 > /tmp/k.log 2>&1 &
  pid=$!
  d=$(jobcg) || { echo "no job cgroup appeared"; cat /tmp/k.log; return 1; }
  sleep 1
  kill -9 $pid; wait $pid 2>/dev/null
  airlock run -w "$(workspace)" --json -- true > /tmp/k.json || return 1
  grep -q '"reaped"' /tmp/k.json || { echo "nothing reaped"; return 1; }
  [ ! -d "$d" ] || { echo "$d is still there"; return 1; }
}

# The runner hook: prepare_job, a script step, cleanup_job, with the
# payloads' shape from actions/runner (see runner/hook's tests); the
# state comes back from the response file, as the runner passes it on.
check_hook() {
  work=$(workspace); mkdir -p "$work/_temp"; : > "$work/_temp/response.json"
  org=$(mktemp -d)
  # The job's image (debian) is not mapped, and nothing is pulled: the
  # job runs on the VM's root, and no registry is asked (docs/images.md).
  printf 'package airlock\nimages: pull: false\n' > "$org/org.cue"
  export AIRLOCK_HOOK_DIR=/run/airlock-hooks AIRLOCK_ORG_DIR=$org AIRLOCK_ATTEST_KEY=
  echo '{"command":"prepare_job","responseFile":"'"$work"'/_temp/response.json","state":null,"args":{"container":{"image":"debian","workingDirectory":"/__w","systemMountVolumes":[{"userProvidedValue":null,"sourceVolumePath":"'"$work"'","targetVolumePath":"/__w","readOnly":false}]},"services":[]}}' | airlock hook || { echo "prepare_job failed"; return 1; }
  state=$(sed -n 's/^{"state":\({[^}]*}\).*/\1/p' "$work/_temp/response.json")
  [ -n "$state" ] || { echo "no state in the response: $(cat "$work/_temp/response.json")"; return 1; }
  echo '{"command":"run_script_step","state":'"$state"',"args":{"entryPoint":"sh","entryPointArgs":["-c","'"'"'echo","hello-from-the-hook;","exit","3'"'"'"],"workingDirectory":"/__w","environmentVariables":{},"prependPath":[]}}' | airlock hook > /tmp/h.out 2>&1
  rc=$?
  cat /tmp/h.out | tail -n 3
  echo '{"command":"cleanup_job","state":'"$state"',"args":{}}' | airlock hook > /tmp/h2.out 2>&1 || { echo "cleanup_job failed"; tail -n 3 /tmp/h2.out; return 1; }
  [ $rc = 3 ] && grep -q hello-from-the-hook /tmp/h.out
}

check_leftovers() {
  left=$(find $CG -type d -name 'airlock-job-*'; ps -o pid,args | grep -E 'runsc-(sandbox|gofer)' | grep -v grep; grep -E 'airlock|runsc' /proc/mounts | grep -v ' /run/runsc/null-netns '; ls /sys/block/loop*/loop/backing_file /var/lib/airlock/volumes/* 2>/dev/null)
  [ -z "$left" ] || { echo "left: $left"; return 1; }
}

# bench: the cold start of `airlock run -- true` against the embedded
# runsc's `runsc do true`, interleaved, medians of 9 (wall clock from
# /proc/uptime, in ms).
now() { awk '{printf "%d", $1 * 1000}' /proc/uptime; }
median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
bench() {
  ws=$(workspace); : > /tmp/b.airlock; : > /tmp/b.runsc
  for i in 1 2 3 4 5 6 7 8 9; do
    t=$(now); airlock run -w "$ws" -- true > /dev/null 2>&1 || echo "VMBENCH airlock run failed"; echo $(( $(now) - t )) >> /tmp/b.airlock
    t=$(now); (cd / && exec -a runsc /bin/airlock --root=/run/bench-runsc --network=none --host-settings=ignore do true) > /tmp/b.err 2>&1 || echo "VMBENCH runsc do failed: $(tail -n 2 /tmp/b.err | tr '\n' ' ')"; echo $(( $(now) - t )) >> /tmp/b.runsc
  done
  a=$(median < /tmp/b.airlock); r=$(median < /tmp/b.runsc)
  echo "VMBENCH cold start (medians of 9, ms): airlock run $a, runsc do $r, ratio $(awk -v a=$a -v r=$r 'BEGIN {printf "%.2f", a / r}')"
}

run_checks() {
  for c in ${AIRLOCK_VM_CHECKS_LIST:-true limits workspace oom pids egress sigkill hook leftovers}; do [ "$c" = bench ] || check "$c"; done
}

# reset puts this shell back in the root cgroup, removes what a layout
# made (deepest first) and disables the root's controllers again.
reset() {
  echo $$ > $CG/cgroup.procs
  for d in $(find $CG -mindepth 1 -type d | sort -r); do
    for p in $(cat "$d/cgroup.procs" 2>/dev/null); do echo "$p" > $CG/cgroup.procs 2>/dev/null; done
    rmdir "$d" 2>/dev/null
  done
  for c in $(cat $CG/cgroup.subtree_control); do echo "-$c" > $CG/cgroup.subtree_control; done
}

# AIRLOCK_VM_CHECKS (from the kernel's command line, which hands unknown
# KEY=VALUE words to init as its environment): the checks to run, comma
# separated, or all.
export AIRLOCK_VM_CHECKS_LIST=$(echo "${AIRLOCK_VM_CHECKS:-all}" | /bin/busybox tr , ' ')
[ "$AIRLOCK_VM_CHECKS_LIST" = all ] && AIRLOCK_VM_CHECKS_LIST=""

if [ "${1:-}" = --in-namespace ]; then
  layout=namespace expect=$CG
  run_checks
  exit 0
fi
/bin/busybox --install -s /bin
boot

# 1. airlock in the root cgroup (a minimal init).
layout=root expect=$CG
reset; run_checks
case " ${AIRLOCK_VM_CHECKS_LIST:-bench} " in *" bench "*) bench;; esac

# 2. A service cgroup, the root enabling a few controllers and none
# delegated below: airlock enables what it needs down its own path.
layout=service-few expect=$CG/system.slice/runner.service
reset
echo "+cpu +memory +pids" > $CG/cgroup.subtree_control
mkdir -p $expect && echo $$ > $expect/cgroup.procs
run_checks

# 3. A service cgroup with everything delegated, as systemd's
# Delegate=yes does.
layout=service-all
reset
echo "+cpuset +cpu +io +memory +pids" > $CG/cgroup.subtree_control
mkdir -p $CG/system.slice && echo "+cpuset +cpu +io +memory +pids" > $CG/system.slice/cgroup.subtree_control
mkdir -p $expect && echo $$ > $expect/cgroup.procs
run_checks

# 4. The root of a cgroup namespace, as in a container (an ARC runner
# pod): the namespace's root holds processes; airlock moves into a leaf.
layout=namespace expect=$CG
reset
# kubelet delegates these to every pod.
echo "+cpuset +cpu +io +memory +hugetlb +pids" > $CG/cgroup.subtree_control
mkdir -p $CG/kubepods/pod1 && echo "+cpuset +cpu +io +memory +hugetlb +pids" > $CG/kubepods/cgroup.subtree_control
echo $$ > $CG/kubepods/pod1/cgroup.procs
/usr/bin/unshare -C -m --propagation private /bin/sh -c '
  umount /sys/fs/cgroup && mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup || echo "VMCHECK namespace setup FAIL cannot mount the namespace'"'"'s cgroup2"
  echo "VMINFO namespace: $(cat /proc/self/cgroup)"
  exec /checks.sh --in-namespace' || echo "VMCHECK namespace setup FAIL unshare -C failed"
reset

# 5. A container whose namespace lacks a controller a job needs (io):
# airlock refuses in one line that names it and says how to delegate it,
# and leaves nothing behind.
layout=namespace-without-io
reset
echo "+cpuset +cpu +io +memory +pids" > $CG/cgroup.subtree_control
mkdir -p $CG/pods/pod2 && echo "+cpuset +cpu +memory +pids" > $CG/pods/cgroup.subtree_control
echo $$ > $CG/pods/pod2/cgroup.procs
/usr/bin/unshare -C -m --propagation private /bin/sh -c '
  umount /sys/fs/cgroup && mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
  ws=$(mktemp -d /tmp/ws.XXXXXX); chown 1000:1000 "$ws"
  airlock run -w "$ws" -- true > /tmp/refusal.log 2>&1; rc=$?
  lines=$(grep -c . /tmp/refusal.log)
  if [ $rc = 69 ] && [ "$lines" = 1 ] && grep -q "the io controller" /tmp/refusal.log && grep -q "Delegate=yes" /tmp/refusal.log && [ -z "$(find /sys/fs/cgroup -name "airlock-job-*")" ]; then
    echo "VMCHECK namespace-without-io refusal ok"
  else
    echo "VMCHECK namespace-without-io refusal FAIL exit $rc: $(cat /tmp/refusal.log | tr "\n" " ")"
  fi' || echo "VMCHECK namespace-without-io setup FAIL unshare -C failed"
reset

# 6. A pod's container that is not privileged: a cgroup namespace of its
# own with the cgroup file system read-only, and a memory limit on the
# pod's cgroup. airlock makes no cgroup: the pod's bounds the job, the
# record says so with the pod's limit, and a memory bomb is reported
# against it.
layout=pod
reset
echo "+cpuset +cpu +io +memory +pids" > $CG/cgroup.subtree_control
mkdir -p $CG/kubepods/pod3 && echo "+cpuset +cpu +io +memory +pids" > $CG/kubepods/cgroup.subtree_control
echo 536870912 > $CG/kubepods/pod3/memory.max
echo $$ > $CG/kubepods/pod3/cgroup.procs
/usr/bin/unshare -C -m --propagation private /bin/sh -c '
  umount /sys/fs/cgroup && mount -t cgroup2 -o ro,nsdelegate cgroup2 /sys/fs/cgroup || echo "VMCHECK pod setup FAIL cannot mount the namespace'"'"'s cgroup2 read-only"
  ws=$(mktemp -d /tmp/ws.XXXXXX); chown 1000:1000 "$ws"
  if airlock run -w "$ws" --json -- true > /tmp/pod.json 2>/tmp/pod.err && grep -q "\"limitsEnforcedBy\": \"the enclosing cgroup" /tmp/pod.json && grep -q "\"memory\": 536870912" /tmp/pod.json; then
    echo "VMCHECK pod job ok"
  else
    echo "VMCHECK pod job FAIL $(tail -n 3 /tmp/pod.err | tr "\n" " ")"
  fi
  ws=$(mktemp -d /tmp/ws.XXXXXX); chown 1000:1000 "$ws"
  airlock run -w "$ws" --json -- sh -c "head -c 1500000000 /dev/zero | tail -c 1400000000 > /dev/null" > /tmp/pod-oom.json 2>/tmp/pod-oom.err
  if grep -q "\"limit\": \"oom\"" /tmp/pod-oom.json && grep -q "cgroup enclosing airlock (512 MiB" /tmp/pod-oom.json; then
    echo "VMCHECK pod oom ok"
  else
    echo "VMCHECK pod oom FAIL $(tail -n 3 /tmp/pod-oom.err | tr "\n" " ")"
  fi
  if [ -z "$(find /sys/fs/cgroup -name "airlock-*")" ] && ! grep -q -e /run/airlock/jobs -e airlock-workspace /proc/self/mountinfo; then
    echo "VMCHECK pod leftovers ok"
  else
    echo "VMCHECK pod leftovers FAIL a cgroup or mount of a job is left"
  fi' || echo "VMCHECK pod setup FAIL unshare -C failed"
reset
echo VMDONE
poweroff -f
