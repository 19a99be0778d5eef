#!/usr/bin/env python3
"""check_parity.py RUN.json REF.json [--rtol X]: a parallel layout against the
single-rank run of the same global batch, from zs-train-gpt's --json.

Compares every step's loss and gradient norm and the final validation loss,
each relative to the reference's, with the tolerance the parity tests use
(tests/gpt_parity.h: 1e-5). Prints the largest difference of each and exits 1
if any is over the tolerance, or if the runs do not match in shape (steps,
model, batch, seed), which would make the comparison meaningless."""
import argparse
import json
import sys


def rel(a, b):
    return abs(a - b) / abs(b) if b else abs(a - b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("ref")
    ap.add_argument("--rtol", type=float, default=1e-5)
    a = ap.parse_args()
    with open(a.run) as f:
        run = json.load(f)
    with open(a.ref) as f:
        ref = json.load(f)
    for key in ("model", "batch", "seed", "steps", "dtype"):
        if run.get(key) != ref.get(key):
            print(f"check_parity: {key} differs ({run.get(key)} vs {ref.get(key)}): not the same run", file=sys.stderr)
            return 1
    if not run["losses"]:
        print("check_parity: no steps to compare", file=sys.stderr)
        return 1
    worst = {}
    for what in ("losses", "grad_norms"):
        d = [rel(x, y) for x, y in zip(run[what], ref[what])]
        i = max(range(len(d)), key=d.__getitem__)
        worst[what] = (d[i], i)
    worst["val_loss"] = (rel(run["val_loss"], ref["val_loss"]), None)
    ok = all(d <= a.rtol for d, _ in worst.values())
    (dl, il), (dn, in_) = worst["losses"], worst["grad_norms"]
    print(f"largest relative difference over {len(run['losses'])} steps, against the single-rank run: "
          f"loss {dl:.2g} (step {il}), grad norm {dn:.2g} (step {in_}), final val loss {worst['val_loss'][0]:.2g}; "
          f"tolerance {a.rtol:g}: {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
