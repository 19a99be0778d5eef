#!/usr/bin/env bash
# Runs `MPIEXEC -n 2 ... BINARY room-cgroup` inside a memory cgroup of its own
# (512 MiB), made here and removed on exit, failure included: cgroup v1
# (/sys/fs/cgroup/memory/<name>, memory.limit_in_bytes) or v2 (memory.max).
# Exits 77 (skipped) where no memory cgroup can be made (not root, read-only).
# usage: room_cgroup.sh MPIEXEC BINARY
set -u
mpiexec=$1 bin=$2
name=zs_room_$$
if [ -w /sys/fs/cgroup/memory ] && [ -e /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
  cg=/sys/fs/cgroup/memory/$name limit=memory.limit_in_bytes
elif [ -w /sys/fs/cgroup ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  cg=/sys/fs/cgroup/$name limit=memory.max
else
  echo "no writable memory cgroup here: skipped" >&2
  exit 77
fi
mkdir "$cg" 2>/dev/null || { echo "cannot make $cg: skipped" >&2; exit 77; }
cleanup() {
  # the processes are gone when the job returns; wait briefly for the kernel
  for _ in 1 2 3 4 5 6 7 8 9 10; do rmdir "$cg" 2>/dev/null && return; sleep 0.2; done
  echo "could not remove $cg" >&2
}
trap cleanup EXIT
if ! echo $((512 << 20)) >"$cg/$limit"; then
  echo "cannot set $cg/$limit: skipped" >&2
  exit 77
fi
( echo "$BASHPID" >"$cg/cgroup.procs" && exec timeout 100 "$mpiexec" -n 2 --oversubscribe "$bin" room-cgroup )
