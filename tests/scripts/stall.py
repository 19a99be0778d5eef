#!/usr/bin/env python3
"""Runs test_stall under mpiexec on 3 ranks with a short ZS_COMM_TIMEOUT_S: the
last rank stops itself (SIGSTOP) mid-run. Checks that each other rank reports
ZS_ERR_TIMEOUT, that the ranks get through their teardown within 10 s of the
error (mpiexec ends the job when the first of them exits, so a slower one may be
killed instead), that mpiexec returns within the timeout + 25 s of the start,
and that no process of the job is left (any found is killed, and the test
fails).

usage: stall.py MPIEXEC BINARY MODE
"""
import os
import re
import signal
import subprocess
import sys
import time
import uuid

TIMEOUT_S = 1.5
RANKS = 3


def job_pids(tag):
    """Processes whose environment carries this run's tag."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                if f"ZS_STALL_TAG={tag}".encode() in f.read().split(b"\0"):
                    pids.append(int(d))
        except OSError:
            pass
    return pids


def main():
    mpiexec, binary, mode = sys.argv[1:4]
    tag = uuid.uuid4().hex
    env = dict(os.environ, ZS_COMM_TIMEOUT_S=str(TIMEOUT_S), ZS_STALL_TAG=tag, ZS_LOG="error")
    cmd = [mpiexec, "-n", str(RANKS), "--oversubscribe", binary, mode]
    t0 = time.monotonic()
    failures = []
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        failures.append("mpiexec did not return within 90 s")
    wall = time.monotonic() - t0
    print(out)
    # every rank but the stopped one: the timeout error, then an exit soon after
    for r in range(RANKS - 1):
        m = re.search(rf"zs-stall rank {r}: (\w+) after ([0-9.]+) s: (.*)", out)
        if not m:
            failures.append(f"rank {r} reported no error")
            continue
        if m.group(1) != "ZS_ERR_TIMEOUT":
            failures.append(f"rank {r} reported {m.group(1)}, not ZS_ERR_TIMEOUT")
        if f"ZS_COMM_TIMEOUT_S={TIMEOUT_S}" not in out:
            failures.append("no message names ZS_COMM_TIMEOUT_S")
        # mpiexec ends the whole job as soon as one rank exits with an error, so
        # a rank still tearing down may be killed instead of exiting itself
        e = re.search(rf"zs-stall rank {r}: exiting ([0-9.]+) s after the error", out)
        if e and float(e.group(1)) > 10:
            failures.append(f"rank {r} took {e.group(1)} s from the error to its exit (> 10 s)")
    if not re.search(r"zs-stall rank \d+: exiting", out):
        failures.append("no rank got through zs_engine_destroy / zs_comm_destroy to its exit")
    if "zs-stall rank %d: stopping" % (RANKS - 1) not in out:
        failures.append("the last rank never stopped")
    # startup (~2 s), two steps, the timeout, 10 s to exit
    if wall > TIMEOUT_S + 25:
        failures.append(f"the job took {wall:.1f} s")
    time.sleep(0.5)
    left = job_pids(tag)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if left:
        failures.append(f"processes left running after mpiexec returned: {left}")
    print(f"mpiexec returned {proc.returncode} after {wall:.1f} s")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
