#!/usr/bin/env python3
"""bench/zeropp_gpt.py: ZeRO++'s options in zs-train-gpt on emulated hosts.

For flat stage 3, HSDP (shard group = ranks per host), HSDP with
--replica-overlap on, and each ZeRO++ option (qwZ: --quantized-weights, hpZ:
--hpz K, qgZ: --quantized-grads 8, and all three), on scripts/cluster-sim's
hosts, the same GPT, seed and batches:

  slow run   --slow-steps steps at the slow link rate, no validation: the step
             time and the inter-host bytes a step (the links' counters over the
             whole job, setup included, / steps)
  fast run   --steps steps at the fast rate with validation every --val-every:
             the step time and the validation curve
  exposed    slow step - fast step

with zs-plan's prediction of the inter-host bytes (its busiest link one way,
framing included, x hosts: every link carries as much each way here) beside
the measurement, the speedup over the first config at the slow rate, and the
final validation loss against the first config's (flat stage 3 by default: the
exact run). Configs run one after another, each slow then fast; --rounds R
repeats that R times (the configs interleaved in each round) and reports the
medians with the exposed time's min-max over the rounds. --configs picks rows
by key: flat, hsdp, hsdp-overlap, qwz, hpz, qgz, all3 (and torch-fsdp2,
torch-hsdp with --torch); default every zs row, then torch's.

With --torch also PyTorch FSDP2, flat and HSDP (FSDP2 on a (replicate, shard)
mesh, the shard a host), on the same hosts from zs's exported initial weights
(bench/vs_torch_gpt.py --mpi: one process a rank, gloo over the links); its
step is the mean of its steps after the first, its loss the training loss
(it runs no validation), which must match zs flat stage 3's, the same model on
the same batches.

usage: bench/zeropp_gpt.py [--zs PATH] [--plan PATH] [--rates 1000,40000] [--steps 200]
                           [--slow-steps 20] [--hosts 2] [--ranks-per-host 2] [--torch]
                           [--configs KEY,...] [--rounds 1] [--json]
Exit: 0 ok; 1 a run failed; 77 cluster-sim cannot run here."""
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
sys.path.insert(0, HERE)
import exposed_link  # noqa: E402  (its run_once runs a job on the hosts)

MODEL = ["--layers", "4", "--channels", "256", "--heads", "4", "--seq", "128"]


def trainer(a, rate, flags, tmp):
    """zs-train-gpt on the hosts: exposed_link.py's run_once, the trainer's JSON
    with step_s and the job's inter-host bytes added."""
    a.timeout = 1200
    r = exposed_link.run_once(a.zs, rate, a, flags, tmp)
    if r is None:
        sys.exit(1)
    return dict(r["doc"], step_s=r["step_s"], inter_bytes=r["inter_bytes"])


def torch_run(a, rate, mode, steps, init, tmp):
    """PyTorch FSDP2 (flat or HSDP) on the same hosts: bench/vs_torch_gpt.py, one
    process a rank, gloo over the hosts' links, from zs's exported initial weights."""
    sim_json, out = os.path.join(tmp, "sim.json"), os.path.join(tmp, "torch.json")
    cmd = [SIM, "--hosts", str(a.hosts), "--ranks-per-host", str(a.ranks_per_host), "--inter-mbps", str(rate),
           "--timeout", "1200", "--json", sim_json, "--", sys.executable, os.path.join(HERE, "vs_torch_gpt.py"),
           "--mpi", "--mode", mode, "--master", "10.77.0.1", "--ifname", "zs0"] + MODEL + \
          ["--vocab", "256", "--batch", "8", "--steps", str(steps), "--lr-schedule", "constant", "--seed", "1337",
           "--init", init, "--out", out, "--threads", "1", "--quiet"]
    if mode == "hsdp":
        cmd += ["--shard-group", str(a.ranks_per_host)]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        print(f"zeropp_gpt: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}", file=sys.stderr)
        sys.exit(1)
    with open(out) as f:
        doc = json.load(f)
    with open(sim_json) as f:
        sim = json.load(f)
    secs = doc["step_seconds"][1:] or doc["step_seconds"]  # the first step's setup left out
    return {"step_s": sum(secs) / len(secs), "inter_bytes": sim["inter_host_bytes"], "losses": doc["losses"]}


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
    ap.add_argument("--torch", action="store_true", help="also PyTorch FSDP2 flat and HSDP (bench/vs_torch_gpt.py)")
    ap.add_argument("--configs", default="", help="comma-separated row keys (see above); default all")
    ap.add_argument("--rounds", type=int, default=1, help="rounds, the configs interleaved in each")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    slow, fast = (int(x) for x in a.rates.split(","))
    world, k = a.hosts * a.ranks_per_host, str(a.ranks_per_host)
    zs_configs = [("flat", "flat stage 3", []), ("hsdp", "HSDP", ["--shard-group", k]),
                  ("hsdp-overlap", "HSDP, replica overlap on", ["--shard-group", k, "--replica-overlap", "on"]),
                  ("qwz", "qwZ", ["--quantized-weights"]), ("hpz", "hpZ", ["--hpz", k]),
                  ("qgz", "qgZ", ["--quantized-grads", "8"]),
                  ("all3", "qwZ + hpZ + qgZ", ["--quantized-weights", "--hpz", k, "--quantized-grads", "8"])]
    torch_configs = [("torch-fsdp2", "torch FSDP2", "fsdp2"), ("torch-hsdp", "torch FSDP2 HSDP", "hsdp")]
    keys = [c[0] for c in zs_configs] + [c[0] for c in torch_configs]
    want = [w for w in a.configs.split(",") if w] or [c[0] for c in zs_configs] + (
        [c[0] for c in torch_configs] if a.torch else [])
    bad = [w for w in want if w not in keys or (w.startswith("torch") and not a.torch)]
    if bad or a.rounds < 1:
        print(f"zeropp_gpt: unknown --configs {','.join(bad)} (keys: {', '.join(keys)}; torch ones need --torch), "
              f"or --rounds below 1", file=sys.stderr)
        return 2
    runs = [c for c in zs_configs if c[0] in want] + [c for c in torch_configs if c[0] in want]
    base = MODEL + ["--batch", "8", "--stage", "3", "--seed", "1337", "--lr-schedule", "constant", "--quiet"]
    per = {c[1]: [] for c in runs}  # label -> [(slow run, fast run)] a round
    with tempfile.TemporaryDirectory() as tmp:
        init = None
        if any(len(c) == 3 and isinstance(c[2], str) for c in runs):
            init = os.path.join(tmp, "init.safetensors")
            subprocess.run([a.zs] + MODEL + ["--seed", "1337", "--steps", "0", "--export", init, "--quiet"], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for rnd in range(a.rounds):
            for key, label, extra in runs:
                if isinstance(extra, str):  # torch
                    s = torch_run(a, slow, extra, a.slow_steps, init, tmp)
                    f = torch_run(a, fast, extra, a.steps, init, tmp)
                    msg = f"train loss {f['losses'][-1]:.5f}"
                else:
                    s = trainer(a, slow, base + extra + ["--steps", str(a.slow_steps), "--val-every", "0",
                                                         "--val-seqs", "0"], tmp)
                    f = trainer(a, fast, base + extra + ["--steps", str(a.steps), "--val-every", str(a.val_every)],
                                tmp)
                    msg = f"val {f['val_loss']:.5f}"
                per[label].append((s, f))
                print(f"round {rnd + 1}, {label}: step {s['step_s']:.3f} s at {slow} Mbit/s, {f['step_s']:.3f} s at "
                      f"{fast}; {s['inter_bytes'] / a.slow_steps / 1e6:.2f} MB a step; {msg}", file=sys.stderr)
    rows = []
    for key, label, extra in runs:
        rs = per[label]
        slows, fasts = [s["step_s"] for s, _ in rs], [f["step_s"] for _, f in rs]
        exposed = [s - f for s, f in zip(slows, fasts)]
        s0, f0 = rs[0]
        torch = isinstance(extra, str)
        row = {"config": label, "flags": [extra] if torch else extra, "step_slow_s": statistics.median(slows),
               "step_fast_s": statistics.median(fasts), "exposed_s": statistics.median(exposed),
               "exposed_min_s": min(exposed), "exposed_max_s": max(exposed), "rounds_slow_s": slows,
               "rounds_fast_s": fasts, "inter_bytes_per_step": s0["inter_bytes"] / a.slow_steps,
               "planned_inter_bytes_per_step": None if torch else planned(a, world, extra),
               "val_loss": None if torch else f0["val_loss"], "val_history": [] if torch else f0["val_history"],
               "train_loss": f0["losses"][-1]}
        rows.append(row)
    ref = rows[0]
    print(f"| {a.hosts} hosts x {a.ranks_per_host} ranks, {slow / 1000:g} Gbit/s | inter-host MB a step (zs-plan) | "
          f"of flat | exposed link time | step | speedup | val loss after {a.steps} | vs flat | train loss at {a.steps} |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        p, v = r["planned_inter_bytes_per_step"], r["val_loss"]
        vs = "-" if v is None or ref["val_loss"] is None else f"{(v - ref['val_loss']) / ref['val_loss'] * 100:+.2f}%"
        ex = f"{r['exposed_s']:.3f} s" + (f" ({r['exposed_min_s']:.3f} to {r['exposed_max_s']:.3f})"
                                          if a.rounds > 1 else "")
        print(f"| {r['config']} | {r['inter_bytes_per_step'] / 1e6:.2f} ({'-' if p is None else format(p / 1e6, '.2f')})"
              f" | {r['inter_bytes_per_step'] / ref['inter_bytes_per_step']:.2f} | {ex} | "
              f"{r['step_slow_s']:.3f} s | {ref['step_slow_s'] / r['step_slow_s']:.2f}x | "
              f"{'-' if v is None else format(v, '.4f')} | {vs} | {r['train_loss']:.4f} |")
    if a.json:
        json.dump({"hosts": a.hosts, "ranks_per_host": a.ranks_per_host, "rates_mbps": [slow, fast],
                   "steps": a.steps, "slow_steps": a.slow_steps, "rounds": a.rounds, "model": MODEL,
                   "load_avg": os.getloadavg(), "rows": rows}, sys.stdout, indent=1)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
