#!/usr/bin/env python3
"""bench/exposed_link.py: the link time a layout does not hide behind compute.

Runs zs-train-gpt (or zs-membench, whose --compute-ms emulates an accelerator's
compute with the host idle) on scripts/cluster-sim's emulated hosts (network namespaces
joined by tbf-shaped veth links) at a slow and a fast link rate, and reports

  exposed = step time at the slow rate - step time at the fast rate

per binary and round, the runs interleaved (for each round: every binary at
the slow rate, then at the fast one), with the inter-host bytes per step the
links counted. Step time = tokens per step / the trainer's tokens_per_s
(its steady state: rank 0's steps after the first); zs-membench's own step_s
of its first run (--stages one stage). Two binaries (say the
current build and an older one) are compared on the same bed, the same flags
and the same inputs; their final losses must agree to --tol (they train the
same model), else the row is VOID and the exit is 1.

usage: bench/exposed_link.py [--zs LABEL=PATH ...] [--rates SLOW,FAST] [--rounds 3]
                             [--hosts 2] [--ranks-per-host 2] [--json] -- TRAINER FLAGS...
       (default trainer flags: the GPT L4 C256 H4 T128, batch 8, 8 steps, stage 3,
        shard group = ranks per host, i.e. HSDP)
Exit: 0 ok; 1 a run failed or losses disagree; 2 bad arguments; 77 cluster-sim
cannot run here (no network namespaces)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SIM = os.path.join(ROOT, "scripts", "cluster-sim")


def run_once(path, rate, a, flags, tmp):
    sim_json = os.path.join(tmp, "sim.json")
    cmd = [SIM, "--hosts", str(a.hosts), "--ranks-per-host", str(a.ranks_per_host), "--inter-mbps", str(rate),
           "--timeout", str(a.timeout), "--json", sim_json, "--", path] + flags + ["--json"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode == 77:
        print(p.stderr, file=sys.stderr)
        sys.exit(77)
    if p.returncode != 0:
        print(f"exposed_link: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}", file=sys.stderr)
        return None
    out = json.loads(p.stdout)
    with open(sim_json) as f:
        sim = json.load(f)
    if "results" in out:  # zs-membench: its first run's mean step after the first (max over ranks)
        return {"step_s": out["results"][0]["step_s"], "loss": None,
                "inter_bytes_per_step": sim["inter_host_bytes"] / out["steps"]}
    tokens = out["batch"] * out["model"]["seq"]
    return {"step_s": tokens / out["tokens_per_s"], "loss": out["losses"][-1],
            "inter_bytes_per_step": sim["inter_host_bytes"] / out["steps"], "inter_bytes": sim["inter_host_bytes"],
            "doc": out}


def spread(v):
    return {"median": statistics.median(v), "min": min(v), "max": max(v)}


def main():
    argv = sys.argv[1:]
    flags = []
    if "--" in argv:
        i = argv.index("--")
        argv, flags = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zs", action="append", default=[], help="LABEL=PATH of a zs-train-gpt (repeatable)")
    ap.add_argument("--rates", default="1000,40000", help="slow,fast link rates in Mbit/s")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--ranks-per-host", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--tol", type=float, default=1e-4, help="final losses of the binaries must agree this well")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        slow, fast = (int(x) for x in a.rates.split(","))
    except ValueError:
        ap.error("--rates wants SLOW,FAST in Mbit/s")
    bins = []
    for z in a.zs or ["current=" + os.path.join(ROOT, "build", "bin", "zs-train-gpt")]:
        label, _, path = z.partition("=")
        if not path or not os.access(path, os.X_OK):
            ap.error(f"--zs {z}: not LABEL=PATH of an executable")
        bins.append((label, path))
    if not flags:
        flags = ["--layers", "4", "--channels", "256", "--heads", "4", "--seq", "128", "--batch", "8", "--steps", "8",
                 "--stage", "3", "--shard-group", str(a.ranks_per_host), "--val-every", "0", "--val-seqs", "0",
                 "--lr-schedule", "constant"]
    rows = {label: {"slow": [], "fast": [], "exposed": [], "loss": [], "inter": []} for label, _ in bins}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for label, path in bins:
                got = {}
                for name, rate in (("slow", slow), ("fast", fast)):
                    res = run_once(path, rate, a, flags, tmp)
                    if res is None:
                        return 1
                    got[name] = res
                row = rows[label]
                row["slow"].append(got["slow"]["step_s"])
                row["fast"].append(got["fast"]["step_s"])
                row["exposed"].append(got["slow"]["step_s"] - got["fast"]["step_s"])
                row["loss"].append(got["slow"]["loss"])
                row["inter"].append(got["slow"]["inter_bytes_per_step"])
                print(f"round {r + 1}: {label}: step {got['slow']['step_s']:.3f} s at {slow} Mbit/s, "
                      f"{got['fast']['step_s']:.3f} s at {fast}: exposed {row['exposed'][-1]:.3f} s", file=sys.stderr)
    losses = [rows[label]["loss"][-1] for label, _ in bins if rows[label]["loss"][-1] is not None]
    void = bool(losses) and max(losses) - min(losses) > a.tol
    base = bins[0][0]
    out = {"hosts": a.hosts, "ranks_per_host": a.ranks_per_host, "rates_mbps": [slow, fast], "rounds": a.rounds,
           "flags": flags, "void": void, "rows": {}}
    print(f"| {a.hosts} hosts x {a.ranks_per_host} ranks | step at {slow} Mbit/s | step at {fast} Mbit/s | "
          f"exposed link time | vs {base} (per round) | inter-host MB/step | final loss |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for label, _ in bins:
        row = rows[label]
        ratio = [e / b if b > 0 else float("nan") for e, b in zip(row["exposed"], rows[base]["exposed"])]
        s, f, e, q = spread(row["slow"]), spread(row["fast"]), spread(row["exposed"]), spread(ratio)
        out["rows"][label] = {"step_slow_s": s, "step_fast_s": f, "exposed_s": e, "exposed_vs_first": q,
                              "inter_bytes_per_step": statistics.median(row["inter"]), "final_loss": row["loss"][-1]}
        print(f"| {label} | {s['median']:.3f} ({s['min']:.3f}-{s['max']:.3f}) s | {f['median']:.3f} "
              f"({f['min']:.3f}-{f['max']:.3f}) s | {e['median']:.3f} ({e['min']:.3f}-{e['max']:.3f}) s | "
              f"{q['median']:.2f} ({q['min']:.2f}-{q['max']:.2f}) | {statistics.median(row['inter']) / 1e6:.2f} | "
              f"{'-' if row['loss'][-1] is None else format(row['loss'][-1], '.5f')} |")
    if void:
        print(f"VOID: the final losses differ by more than {a.tol}: {losses}", file=sys.stderr)
    if a.json:
        json.dump(out, sys.stdout, indent=1)
        print()
    return 1 if void else 0


if __name__ == "__main__":
    sys.exit(main())
