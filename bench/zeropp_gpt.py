#!/usr/bin/env python3
"""bench/zeropp_gpt.py: ZeRO++'s options in zs-train-gpt on emulated hosts.

For flat stage 3, HSDP (shard group = ranks per host) and each ZeRO++ option
(qwZ: --quantized-weights, hpZ: --hpz K, qgZ: --quantized-grads 8, and all
three), on scripts/cluster-sim's
hosts, the same GPT, seed and batches:

  slow run   --slow-steps steps at the slow link rate, no validation: the step
             time and the inter-host bytes a step (the links' counters over the
             whole job, setup included, / steps)
  fast run   --steps steps at the fast rate with validation every --val-every:
             the step time and the validation curve
  exposed    slow step - fast step

with zs-plan's prediction of the inter-host bytes (its busiest link one way,
framing included, x hosts: every link carries as much each way here) beside
the measurement, the speedup over flat stage 3 at the slow rate, and the final
validation loss against flat stage 3's (the exact run). Configs run one after
another, each slow then fast; one round.

usage: bench/zeropp_gpt.py [--zs PATH] [--plan PATH] [--rates 1000,40000] [--steps 200]
                           [--slow-steps 20] [--hosts 2] [--ranks-per-host 2] [--json]
Exit: 0 ok; 1 a run failed; 77 cluster-sim cannot run here."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SIM = os.path.join(ROOT, "scripts", "cluster-sim")
MODEL = ["--layers", "4", "--channels", "256", "--heads", "4", "--seq", "128"]


def trainer(a, rate, flags, tmp):
    sim_json = os.path.join(tmp, "sim.json")
    cmd = [SIM, "--hosts", str(a.hosts), "--ranks-per-host", str(a.ranks_per_host), "--inter-mbps", str(rate),
           "--timeout", "1200", "--json", sim_json, "--", a.zs] + flags + ["--json"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode == 77:
        print(p.stderr, file=sys.stderr)
        sys.exit(77)
    if p.returncode != 0:
        print(f"zeropp_gpt: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}", file=sys.stderr)
        sys.exit(1)
    out = json.loads(p.stdout)
    with open(sim_json) as f:
        sim = json.load(f)
    out["step_s"] = out["batch"] * out["model"]["seq"] / out["tokens_per_s"]
    out["inter_bytes"] = sim["inter_host_bytes"]
    return out


def planned(a, world, extra):
    """zs-plan's inter-host bytes a step for the option extra describes, or None."""
    if not a.plan or not os.access(a.plan, os.X_OK):
        return None
    want_sg = int(extra[extra.index("--shard-group") + 1]) if "--shard-group" in extra else world
    want_qw = "--quantized-weights" in extra
    want_hpz = int(extra[extra.index("--hpz") + 1]) if "--hpz" in extra else 0
    want_qg = "--quantized-grads" in extra
    cmd = [a.plan, "--model", "gpt"] + MODEL + ["--world", str(world), "--ranks-per-node", str(a.ranks_per_host),
                                                 "--inter-gbps", "1", "--json", "--quantized-weights",
                                                 "--quantized-grads"]
    if want_hpz:
        cmd += ["--hpz", str(want_hpz)]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if p.returncode not in (0, 3):
        return None
    for o in json.loads(p.stdout)["options"]:
        if (o["stage"] == 3 and not o["offload"] and o["shard_group"] == want_sg and o["quantized_weights"] == want_qw
                and o.get("hpz_partition_size", 0) == want_hpz and o.get("quantized_gradients", False) == want_qg):
            return o["inter_link_wire_bytes_per_step"] * a.hosts
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zs", default=os.path.join(ROOT, "build", "bin", "zs-train-gpt"))
    ap.add_argument("--plan", default=os.path.join(ROOT, "build", "bin", "zs-plan"))
    ap.add_argument("--rates", default="1000,40000")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--slow-steps", type=int, default=20)
    ap.add_argument("--val-every", type=int, default=50)
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--ranks-per-host", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    slow, fast = (int(x) for x in a.rates.split(","))
    world, k = a.hosts * a.ranks_per_host, str(a.ranks_per_host)
    configs = [("flat stage 3", []), ("HSDP", ["--shard-group", k]), ("qwZ", ["--quantized-weights"]),
               ("hpZ", ["--hpz", k]), ("qgZ", ["--quantized-grads", "8"]),
               ("qwZ + hpZ + qgZ", ["--quantized-weights", "--hpz", k, "--quantized-grads", "8"])]
    base = MODEL + ["--batch", "8", "--stage", "3", "--seed", "1337", "--lr-schedule", "constant", "--quiet"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, extra in configs:
            s = trainer(a, slow, base + extra + ["--steps", str(a.slow_steps), "--val-every", "0", "--val-seqs", "0"],
                        tmp)
            f = trainer(a, fast, base + extra + ["--steps", str(a.steps), "--val-every", str(a.val_every)], tmp)
            row = {"config": label, "flags": extra, "step_slow_s": s["step_s"], "step_fast_s": f["step_s"],
                   "exposed_s": s["step_s"] - f["step_s"], "inter_bytes_per_step": s["inter_bytes"] / a.slow_steps,
                   "planned_inter_bytes_per_step": planned(a, world, extra), "val_loss": f["val_loss"],
                   "val_history": f["val_history"]}
            rows.append(row)
            print(f"{label}: step {s['step_s']:.3f} s at {slow} Mbit/s, {f['step_s']:.3f} s at {fast}; "
                  f"{row['inter_bytes_per_step'] / 1e6:.2f} MB a step; val {f['val_loss']:.5f}", file=sys.stderr)
    ref = rows[0]
    print(f"| {a.hosts} hosts x {a.ranks_per_host} ranks, {slow / 1000:g} Gbit/s | inter-host MB a step (zs-plan) | "
          f"of flat | exposed link time | step | speedup | val loss after {a.steps} | vs flat |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        p = r["planned_inter_bytes_per_step"]
        print(f"| {r['config']} | {r['inter_bytes_per_step'] / 1e6:.2f} ({'-' if p is None else format(p / 1e6, '.2f')})"
              f" | {r['inter_bytes_per_step'] / ref['inter_bytes_per_step']:.2f} | {r['exposed_s']:.3f} s | "
              f"{r['step_slow_s']:.3f} s | {ref['step_slow_s'] / r['step_slow_s']:.2f}x | {r['val_loss']:.4f} | "
              f"{(r['val_loss'] - ref['val_loss']) / ref['val_loss'] * 100:+.2f}% |")
    if a.json:
        json.dump({"hosts": a.hosts, "ranks_per_host": a.ranks_per_host, "rates_mbps": [slow, fast],
                   "steps": a.steps, "slow_steps": a.slow_steps, "model": MODEL, "rows": rows}, sys.stdout, indent=1)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
