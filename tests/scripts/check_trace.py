"""tests/trace.cmake's test_trace_pp: ZS_TRACE from a 2-rank pipeline run
(tests/test_trace.c) checked against the schedule and the comm's stats, zs-trace
merge, and the bubble zs-trace measures against (p-1)/(m+p-1).

check_trace.py MPIEXEC NPFLAG TEST_TRACE ZS_TRACE_TOOL OUTDIR"""
import json
import os
import shutil
import subprocess
import sys

mpiexec, npflag, prog, tool, out = sys.argv[1:6]
P = 2
shutil.rmtree(out, ignore_errors=True)
os.makedirs(out)
fails = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        fails.append(what)


def run(kind, m, fwd, bwd, prefix):
    env = dict(os.environ)
    env.pop("ZS_TRACE", None)
    if prefix:
        env["ZS_TRACE"] = prefix
    cmd = [mpiexec, npflag, str(P), "--oversubscribe", prog, kind, str(m), str(fwd), str(bwd)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=90)
    if r.returncode != 0:
        print(r.stdout, r.stderr)
    check(r.returncode == 0, f"{kind} m={m} runs (ZS_TRACE={prefix})")


def tool_run(*args):
    r = subprocess.run([tool, *args], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        print(r.stdout, r.stderr)
    return r


# 1. tracing off: nothing written
run("1f1b", 4, 1, 2, None)
check(os.listdir(out) == [], "without ZS_TRACE no file is written")

# 2. every rank's file against its schedule and its comm stats
for kind in ("1f1b", "gpipe"):
    m = 4
    prefix = os.path.join(out, f"t_{kind}")
    run(kind, m, 2, 4, prefix)
    total = 0
    for r in range(P):
        with open(f"{prefix}.rank{r}") as f:
            doc = json.load(f)  # valid JSON, or this raises
        with open(f"{prefix}.stats.rank{r}") as f:
            stats = json.load(f)
        evs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
        total += len(doc["traceEvents"])
        check(all(e["pid"] == r and e["dur"] >= 0 and "ts" in e for e in evs), f"{kind} rank {r}: pid, ts, dur")
        comp = [e for e in evs if e["cat"] == "compute"]
        for op in ("F", "B"):
            n = sum(1 for e in comp if e["name"].split()[0] == op)
            check(n == stats["schedule"][op] == m, f"{kind} rank {r}: {n} '{op}' events, schedule {m}")
        comm = [e for e in evs if e["cat"] == "comm"]
        # a fused pair is one sendrecv event named "send_act 2.0 + recv_grad 1.0"
        parts = [part.split()[0] for e in comm for part in e["name"].split(" + ")]
        for op in ("send_act", "recv_act", "send_grad", "recv_grad"):
            n = parts.count(op)
            check(n == stats["schedule"][op], f"{kind} rank {r}: {n} {op} events, schedule {stats['schedule'][op]}")
        for kname, (calls, sent, recv) in stats["comm"].items():
            ks = [e for e in comm if e["args"]["kind"] == kname]
            s = sum(e["args"]["bytes_sent"] for e in ks)
            v = sum(e["args"]["bytes_recv"] for e in ks)
            check(len(ks) == calls and s == sent and v == recv,
                  f"{kind} rank {r} {kname}: events {len(ks)}/{calls} calls, sent {s}/{sent}, recv {v}/{recv}")
        user = [e["name"] for e in evs if e["cat"] == "user"]
        check(user == ["step", "step (range)"], f"{kind} rank {r}: the trainer's ranges {user}")
    merged = os.path.join(out, f"merged_{kind}.json")
    r = tool_run("merge", merged, *[f"{prefix}.rank{i}" for i in range(P)])
    check(r.returncode == 0, "zs-trace merge")
    with open(merged) as f:
        doc = json.load(f)
    check(len(doc["traceEvents"]) == total and {e["pid"] for e in doc["traceEvents"]} == set(range(P)),
          f"merged {kind}: {len(doc['traceEvents'])} events of {total}, both ranks")

# 3. the measured bubble of 1F1B at p = 2 against the theory. The machine may be
# shared (2 cores, other jobs): a late wake-up of a sleeping callback only adds
# idle time to the other rank, so a run outside the tolerance is tried again,
# up to 5 runs, every one printed. CTest runs this test alone (RUN_SERIAL):
# one other busy process on the 2 cores adds 5-15% at m = 8. A sleep that
# overruns (0.2-1.5% on a 2-vCPU Xeon VM, 2026-12-06) is compute on its rank
# and idle on the other, so the excess grows with the computes and does not
# fall with longer ones: at m = 8 that VM read 0.124-0.143 against 0.111 with
# 20 / 40 ms computes (0.114 an hour before), 0.119-0.124 with 100 / 200 ms.
# So 100 / 200 ms (the transfers' own latency a smaller part) and 15% at m = 8;
# a schedule that lost its overlap would be far outside (GPipe's bubble at the
# same m is the same; a serialized one 0.5).
# In a sanitized build (TRACE_TIMING=0) the instrumented progress threads and
# waits add latency to every transfer: the bubbles are printed, not checked.
timing = os.environ.get("TRACE_TIMING", "1") != "0"
if not timing:
    print("\nTRACE_TIMING=0 (sanitized build): the bubbles below are printed, not checked")
print("\nm  measured  theory (p-1)/(m+p-1)  rel.err")
for m in (2, 4, 8):
    prefix = os.path.join(out, f"b{m}")
    files = [f"{prefix}.rank{i}" for i in range(P)]
    theory = (P - 1) / (m + P - 1)
    for attempt in range(5):
        run("1f1b", m, 100, 200, prefix)
        r = tool_run("bubble", *files)
        line = [l for l in r.stdout.splitlines() if l.startswith("bubble ")]
        meas = float(line[0].split()[1]) if r.returncode == 0 and line else -1.0
        err = abs(meas - theory) / theory
        tol = 0.15 if m == 8 else 0.10
        print(f"{m}  {meas:.4f}    {theory:.4f}               {100 * err:.1f}%   (run {attempt + 1})")
        if err <= tol or not timing:
            break
    check(err <= tol or (not timing and meas >= 0),
          f"m={m}: measured bubble {meas:.4f} within {100 * tol:.0f}% of {theory:.4f}")
    if m == 8 and shutil.which("gnuplot"):
        png = os.path.join(out, "timeline_1f1b_p2_m8.png")
        r = tool_run("plot", png, *files)
        check(r.returncode == 0 and os.path.getsize(png) > 1000, f"zs-trace plot -> {png}")

print("FAILED: " + "; ".join(fails) if fails else "all passed")
sys.exit(1 if fails else 0)
