#!/usr/bin/env python3
"""pp_bubble.py: the pipeline bubble of zs-train-gpt on CPU ranks, measured from
its traces, beside the theory (p-1)/(m+p-1)
((p-1)/(vm+p-1) interleaved, v 2 unless the trainer arguments say).

usage: bench/pp_bubble.py [--bin DIR] [--p 2] [--m 2,4,8] [--schedules 1f1b,gpipe]
                          [--steps 10] [--skip 2] [--seqs 4] [--out DIR]
                          [--check FRAC] [--json] [-- TRAINER ARGS...]

For each schedule and m it runs `mpiexec -n p zs-train-gpt --pp p --schedule S
--microbatches m --batch seqs*m --steps N --trace OUT/S_m` (default model:
--layers 4 --channels 256 --heads 8 --seq 64 --vocab 1024, whose two stages
take about the same time a micro-batch on CPU ranks), then `zs-trace bubble
--skip K` on the rank files. Columns: the theory; the measured bubble (mean
over the steps after the first K: the first steps of a run compute 5-10%
slower while the machine warms up, which is not the schedule's); the replayed
bubble (the same computes with their measured times, transfers instant: what
the stages' own times give, see tools/zs_trace.c); the runtime's share (the
difference); "stage means", the replay with every compute at its rank's mean
forward or backward time (the stages' imbalance alone: the theory exactly
when the stages are equal; replayed less it is what single computes' spread
in time adds); each rank's mean forward and backward time, ms. Unequal stage
times make a bubble larger than the theory, which assumes equal stages.

--check FRAC: exit 1 if a 1F1B row's measured bubble is more than FRAC over the
theory (e.g. 0.10). --json prints one JSON document on stdout:
  {"p":2,"steps":N,"skip":K,"seqs":4,"trainer_args":[...],"rows":[{"schedule",
   "m","theory","bubble","replayed","stage_means","runtime_share","over_theory",
   "stage_ms":[{"rank","fwd","bwd"}...]}]}
Exit 2 on bad arguments, a run that fails (its output's tail on stderr), or a
replayed bubble above the measured one (each compute starts no later in the
replay than it did, so that would be zs-trace's error).
"""
import json
import os
import re
import subprocess
import sys
import tempfile

DEFAULT_MODEL = ["--layers", "4", "--channels", "256", "--heads", "8", "--seq", "64", "--vocab", "1024"]


def usage(msg):
    sys.stderr.write("pp_bubble.py: %s\n%s" % (msg, __doc__.split("\n\n")[1] + "\n"))
    sys.exit(2)


def int_list(s, flag):
    try:
        v = [int(x) for x in s.split(",")]
    except ValueError:
        usage("%s wants comma-separated counts, not '%s'" % (flag, s))
    if not v or min(v) < 1:
        usage("%s wants counts of at least 1, not '%s'" % (flag, s))
    return v


def parse(argv):
    o = {"bin": "build/bin", "p": 2, "m": [2, 4, 8], "schedules": ["1f1b", "gpipe"], "steps": 10, "skip": 2,
         "seqs": 4, "out": None, "check": None, "json": False, "trainer": list(DEFAULT_MODEL)}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            o["trainer"] = argv[i + 1:]
            break
        if a == "--json":
            o["json"] = True
            i += 1
            continue
        if i + 1 >= len(argv):
            usage("%s wants a value" % a)
        v = argv[i + 1]
        if a == "--bin":
            o["bin"] = v
        elif a == "--out":
            o["out"] = v
        elif a == "--m":
            o["m"] = int_list(v, a)
        elif a in ("--p", "--steps", "--seqs"):
            o[a[2:]] = int_list(v, a)[0]
        elif a == "--skip":
            if not v.isdigit():
                usage("--skip wants a count of steps, not '%s'" % v)
            o["skip"] = int(v)
        elif a == "--schedules":
            o["schedules"] = v.split(",")
            for s in o["schedules"]:
                if s not in ("gpipe", "1f1b", "interleaved"):
                    usage("--schedules: '%s' is not gpipe, 1f1b or interleaved" % s)
        elif a == "--check":
            try:
                o["check"] = float(v)
            except ValueError:
                usage("--check wants a fraction like 0.10, not '%s'" % v)
        else:
            usage("unknown argument '%s'" % a)
        i += 2
    if o["p"] < 2:
        usage("--p wants 2 or more stages")
    if o["skip"] >= o["steps"]:
        usage("--skip %d leaves none of --steps %d" % (o["skip"], o["steps"]))
    return o


def stage_times(path, skip):
    """Mean forward and backward ms of a rank's computes inside its step ranges after the first `skip`."""
    steps, comp = [], []
    with open(path) as f:
        for line in f:
            line = line.strip().rstrip(",")
            if not line.startswith('{"name"'):
                continue
            e = json.loads(line)
            if e.get("cat") == "user" and re.fullmatch(r"step \d+", e["name"]):
                steps.append(e)
            elif e.get("cat") == "compute":
                comp.append(e)
    steps.sort(key=lambda e: int(e["name"][5:]))
    f_ms, b_ms = [], []
    for s in steps[skip:]:
        for c in comp:
            if s["ts"] <= c["ts"] < s["ts"] + s["dur"]:
                (f_ms if c["name"][0] == "F" else b_ms).append(c["dur"] / 1e3)
    mean = lambda v: sum(v) / len(v) if v else 0.0
    return mean(f_ms), mean(b_ms)


def run_one(o, sched, m, out):
    env = dict(os.environ)
    for k, v in (("OMPI_ALLOW_RUN_AS_ROOT", "1"), ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
                 ("OMPI_MCA_btl", "self,vader"), ("OMPI_MCA_btl_vader_single_copy_mechanism", "none")):
        env.setdefault(k, v)
    base = os.path.join(out, "%s_m%d" % (sched, m))
    for r in range(o["p"]):
        if os.path.exists("%s.rank%d" % (base, r)):
            os.remove("%s.rank%d" % (base, r))
    trainer = os.path.join(o["bin"], "zs-train-gpt")
    cmd = ["mpiexec", "-n", str(o["p"]), trainer, "--pp", str(o["p"]), "--schedule", sched, "--microbatches",
           str(m), "--batch", str(o["seqs"] * m), "--steps", str(o["steps"]), "--trace", base] + o["trainer"]
    v = 1
    if sched == "interleaved":
        if "--virtual" in o["trainer"]:
            v = int(o["trainer"][o["trainer"].index("--virtual") + 1])
        else:
            v = 2
            cmd += ["--virtual", "2"]
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.stderr.write("pp_bubble.py: %s failed (%d):\n%s\n" % (" ".join(cmd), r.returncode, r.stdout[-3000:]))
        sys.exit(2)
    files = ["%s.rank%d" % (base, k) for k in range(o["p"])]
    t = subprocess.run([os.path.join(o["bin"], "zs-trace"), "bubble", "--skip", str(o["skip"])] + files,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    mb = re.search(r"^bubble ([0-9.]+) \(mean", t.stdout, re.M)
    mr = re.search(r"^replayed ([0-9.]+)", t.stdout, re.M)
    mm = re.search(r"^stage means ([0-9.]+)", t.stdout, re.M)
    if t.returncode != 0 or not mb or not mr or not mm:
        sys.stderr.write("pp_bubble.py: zs-trace bubble on %s failed:\n%s%s\n" % (base, t.stdout, t.stderr))
        sys.exit(2)
    theory = (o["p"] - 1) / (v * m + o["p"] - 1)
    bub, rep = float(mb.group(1)), float(mr.group(1))
    if rep > bub + 1e-3:  # each compute starts no later replayed than it did: the replay cannot be slower
        sys.stderr.write("pp_bubble.py: %s: replayed %.4f > measured %.4f: zs-trace's replay is wrong\n%s" %
                         (base, rep, bub, t.stdout))
        sys.exit(2)
    st = [stage_times(f, o["skip"]) for f in files]
    return {"schedule": sched, "m": m, "theory": round(theory, 4), "bubble": bub, "replayed": rep,
            "stage_means": float(mm.group(1)), "runtime_share": round(bub - rep, 4), "over_theory": round(bub / theory - 1, 4),
            "stage_ms": [{"rank": k, "fwd": round(f, 2), "bwd": round(b, 2)} for k, (f, b) in enumerate(st)]}


def main():
    o = parse(sys.argv[1:])
    out = o["out"] or tempfile.mkdtemp(prefix="zs-pp-bubble-")
    os.makedirs(out, exist_ok=True)
    rows = [run_one(o, s, m, out) for s in o["schedules"] for m in o["m"]]
    if o["json"]:
        print(json.dumps({"p": o["p"], "steps": o["steps"], "skip": o["skip"], "seqs": o["seqs"],
                          "trainer_args": o["trainer"], "rows": rows}))
    else:
        print("zs-train-gpt --pp %d %s, %d sequences a micro-batch, steps %d-%d of %d (traces in %s)" %
              (o["p"], " ".join(o["trainer"]), o["seqs"], o["skip"], o["steps"] - 1, o["steps"], out))
        print("| schedule | m | theory | bubble | over | stage means | replayed | runtime | fwd / bwd ms per rank |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
        for r in rows:
            times = ", ".join("%.1f / %.1f" % (s["fwd"], s["bwd"]) for s in r["stage_ms"])
            print("| %s | %d | %.4f | %.4f | %+.1f%% | %.4f | %.4f | %+.4f | %s |" %
                  (r["schedule"], r["m"], r["theory"], r["bubble"], 100 * r["over_theory"], r["stage_means"],
                   r["replayed"], r["runtime_share"], times))
    if o["check"] is not None:
        bad = [r for r in rows if r["schedule"] == "1f1b" and r["over_theory"] > o["check"]]
        for r in bad:
            sys.stderr.write("pp_bubble.py: 1f1b m=%d measured %.4f, %.1f%% over the theory %.4f (--check %g)\n" %
                             (r["m"], r["bubble"], 100 * r["over_theory"], r["theory"], o["check"]))
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
