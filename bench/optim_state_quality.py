#!/usr/bin/env python3
"""Training quality of the compact optimizer states (issue 27): zs-train-gpt with
AdamW's m and v in fp32, bf16 and int8, for fp32 and bf16 parameters, the same
model, data, seed and schedule; validation loss every --val-every steps.

Prints a table (final validation loss, its ratio to the fp32-state run of the
same parameter dtype, the curve) and, with --json, one JSON document. The goal:
bf16 and int8 states within 1% of fp32 states.

  bench/optim_state_quality.py [--bin build/bin/zs-train-gpt] [--ranks 2]
      [--steps 300] [--val-every 50] [--stage 3] [--json] [-- extra trainer flags]
"""
import argparse
import json
import os
import subprocess
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--bin", default="build/bin/zs-train-gpt")
ap.add_argument("--ranks", type=int, default=2)
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--val-every", type=int, default=50)
ap.add_argument("--stage", type=int, default=3)
ap.add_argument("--model", default="--layers 4 --channels 128 --heads 4 --seq 128 --batch 16")
ap.add_argument("--dtypes", default="fp32,bf16")
ap.add_argument("--states", default="fp32,bf16,int8")
ap.add_argument("--json", action="store_true")
ap.add_argument("extra", nargs="*")
a = ap.parse_args()

env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
rows = []
for dt in a.dtypes.split(","):
    for sd in a.states.split(","):
        cmd = ["mpiexec", "--allow-run-as-root", "--oversubscribe", "-n", str(a.ranks), a.bin, "--steps",
               str(a.steps), "--val-every", str(a.val_every), "--stage", str(a.stage), "--dtype", dt,
               "--optim-state", sd, "--json", "--quiet"] + a.model.split() + a.extra
        t0 = time.time()
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"optim_state_quality: {' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
        r = json.loads(p.stdout)
        rows.append({"dtype": dt, "optim_state": sd, "val_loss": r["val_loss"], "val_history": r["val_history"],
                     "train_loss_last": r["losses"][-1], "tokens_per_s": r["tokens_per_s"],
                     "wall_s": round(time.time() - t0, 1)})
for r in rows:
    ref = next(x for x in rows if x["dtype"] == r["dtype"] and x["optim_state"] == "fp32")
    r["ratio_to_fp32_states"] = r["val_loss"] / ref["val_loss"]
if a.json:
    print(json.dumps({"model": a.model, "ranks": a.ranks, "stage": a.stage, "steps": a.steps, "runs": rows},
                     indent=1))
    sys.exit(0)
steps = [h["step"] for h in rows[0]["val_history"]]
print(f"zs-train-gpt {a.model}, {a.ranks} ranks, stage {a.stage}, {a.steps} steps: validation loss")
print("| params | m, v | " + " | ".join(f"step {s}" for s in steps) + " | final / fp32 states |")
print("| --- | --- | " + " | ".join("---" for _ in steps) + " | --- |")
for r in rows:
    curve = " | ".join(f"{h['loss']:.4f}" for h in r["val_history"])
    print(f"| {r['dtype']} | {r['optim_state']} | {curve} | {r['ratio_to_fp32_states']:.4f} |")
