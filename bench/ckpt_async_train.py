#!/usr/bin/env python3
"""ckpt_async_train.py: what saving in the background buys a training run:
zs-train-gpt with --save-every, its saves synchronous (zs_checkpoint_save) and
in the background (--save-async: zs_checkpoint_save_async), interleaved.

usage: bench/ckpt_async_train.py [--bin DIR] [--np 2] [--rounds 3] [--steps 10]
                                 [--every 2] [--dir DIR] [--json] [-- TRAINER ARGS...]

Each round runs both modes on the same model and data (default model: GPT-2
124M, --layers 12 --channels 768 --heads 12 --vocab 50257, --seq 64 --batch 2,
stage 1), `mpiexec -n NP zs-train-gpt ... --steps N --save DIR --save-every E`,
alternating which goes first. Per run: save_s, the seconds the periodic saves
held the run (the trainer's JSON; the final save, synchronous in both, is not
in it); tokens/s over the training steps (saves excluded); the run's wall time
(launch to exit, final save included); its final loss, which must be the same
in both modes (the save does not touch training: exit 2 if it differs);
ZS_CKPT_KEEP_COPY and ZS_CKPT_DIRECT, when set, are named in the output. The
table gives each mode's median over the rounds and the spread (min-max), and
the ratios sync/async of save_s and of wall time. --json prints one document:
  {"np","rounds","steps","every","trainer_args":[...],"env":{ZS_CKPT_* set},"runs":[{"mode","round",
   "save_s","tokens_per_s","wall_s","final_loss"}],"median":{"sync":{...},
   "async":{...}},"held_ratio","wall_ratio"}
Exit 2 on bad arguments or a run that fails (its output's tail on stderr).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

DEFAULT_MODEL = ["--layers", "12", "--channels", "768", "--heads", "12", "--vocab", "50257", "--seq", "64",
                 "--batch", "2", "--stage", "1"]


def usage(msg):
    sys.stderr.write("ckpt_async_train.py: %s\n%s" % (msg, __doc__.split("\n\n")[1] + "\n"))
    sys.exit(2)


def positive(v):
    try:
        n = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError("wants a count, not '%s'" % v)
    if n < 1:
        raise argparse.ArgumentTypeError("wants at least 1, not %d" % n)
    return n


def parse(argv):
    ap = argparse.ArgumentParser(prog="ckpt_async_train.py", usage=__doc__.split("\n\n")[1].replace("usage: ", ""))
    ap.add_argument("--bin", default="build/bin")
    for name, default in (("np", 2), ("rounds", 3), ("steps", 10), ("every", 2)):
        ap.add_argument("--" + name, type=positive, default=default)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("trainer", nargs="*", help="after --: the trainer's own arguments")
    o = vars(ap.parse_args(argv))  # exits 2 on bad arguments
    o["trainer"] = o["trainer"] or list(DEFAULT_MODEL)
    if o["every"] >= o["steps"]:
        usage("--every must be below --steps (the periodic saves are the ones before the last step)")
    return o


def run(o, mode, ckdir):
    exe = os.path.join(o["bin"], "zs-train-gpt")
    if not os.path.exists(exe):
        usage("%s is not there (build first, or give --bin)" % exe)
    shutil.rmtree(ckdir, ignore_errors=True)
    cmd = ["mpiexec", "--oversubscribe", "--bind-to", "none", "-n", str(o["np"]), exe] + o["trainer"] + [
        "--steps", str(o["steps"]), "--save", ckdir, "--save-every", str(o["every"]), "--val-seqs", "0",
        "--json", "--quiet"]
    if mode == "async":
        cmd.append("--save-async")
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        sys.stderr.write("ckpt_async_train.py: %s failed (exit %d):\n%s\n" %
                         (" ".join(cmd), p.returncode, (p.stderr or "")[-3000:]))
        sys.exit(2)
    d = json.loads(p.stdout)
    return {"mode": mode, "save_s": d["save_s"], "tokens_per_s": d["tokens_per_s"], "wall_s": wall,
            "final_loss": d["losses"][-1]}


def spread(vals):
    return "%.3g-%.3g" % (min(vals), max(vals))


def main():
    o = parse(sys.argv[1:])
    base = o["dir"] or tempfile.mkdtemp(prefix="zs-ckpt-async-")
    runs = []
    try:
        for r in range(o["rounds"]):
            for mode in (("sync", "async") if r % 2 == 0 else ("async", "sync")):
                x = run(o, mode, os.path.join(base, "ck"))
                x["round"] = r
                runs.append(x)
    finally:
        if not o["dir"]:
            shutil.rmtree(base, ignore_errors=True)
    losses = {x["final_loss"] for x in runs}
    if len(losses) != 1:
        sys.stderr.write("ckpt_async_train.py: final losses differ between runs: %s\n" % sorted(losses))
        sys.exit(2)
    med = {}
    for mode in ("sync", "async"):
        rs = [x for x in runs if x["mode"] == mode]
        med[mode] = {k: statistics.median(x[k] for x in rs) for k in ("save_s", "tokens_per_s", "wall_s")}
        med[mode]["spread"] = {k: [min(x[k] for x in rs), max(x[k] for x in rs)]
                               for k in ("save_s", "tokens_per_s", "wall_s")}
    held = med["sync"]["save_s"] / med["async"]["save_s"] if med["async"]["save_s"] > 0 else float("inf")
    wall = med["sync"]["wall_s"] / med["async"]["wall_s"]
    out = sys.stderr if o["json"] else sys.stdout
    saves = (o["steps"] - 1) // o["every"]
    env = {k: os.environ[k] for k in ("ZS_CKPT_KEEP_COPY", "ZS_CKPT_DIRECT") if k in os.environ}
    if env:
        out.write("# with %s\n" % " ".join("%s=%s" % kv for kv in sorted(env.items())))
    out.write("# zs-train-gpt on %d ranks, %d steps, %d periodic saves, %d rounds interleaved; final loss %.9g in "
              "every run\n" % (o["np"], o["steps"], saves, o["rounds"], runs[0]["final_loss"]))
    out.write("%-6s %22s %22s %22s\n" % ("mode", "held by saves, s", "tokens/s (steps)", "wall, s"))
    for mode in ("sync", "async"):
        m, s = med[mode], med[mode]["spread"]
        out.write("%-6s %10.3f (%9s) %10.1f (%9s) %10.2f (%9s)\n" %
                  (mode, m["save_s"], spread(s["save_s"]), m["tokens_per_s"], spread(s["tokens_per_s"]),
                   m["wall_s"], spread(s["wall_s"])))
    out.write("held: sync/async %.1fx; wall: sync/async %.3f\n" % (held, wall))
    if o["json"]:
        print(json.dumps({"np": o["np"], "rounds": o["rounds"], "steps": o["steps"], "every": o["every"],
                          "trainer_args": o["trainer"], "env": env, "runs": runs, "median": med, "held_ratio": held,
                          "wall_ratio": wall}))


if __name__ == "__main__":
    main()
