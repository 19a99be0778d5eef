#!/usr/bin/env python3
"""bench/vs_torch's summary of a row whose rounds partly failed (no torch, no
run): the good rounds are reported with the row's figures from them alone, the
failed ones named and marked PARTIAL with the first error; a row with no good
round is FAILED; every row prints. Exits 0 when all hold, 1 otherwise."""
import argparse
import contextlib
import importlib.machinery
import importlib.util
import io
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
path = os.path.join(HERE, "..", "bench", "vs_torch")
spec = importlib.util.spec_from_loader("vs_torch", importlib.machinery.SourceFileLoader("vs_torch", path))
vt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(vt)

fails = []


def check(cond, what):
    if not cond:
        fails.append(what)


def side(tok_s, loss):
    return {"tok_s": tok_s, "final_loss": loss, "losses": [loss + 1, loss], "peak_rss_bytes": [1 << 20],
            "threads": 2, "matmul_engine": "openblas"}


def row(rounds):
    return {"config": "fsdp2-fp32-2", "dtype": "fp32", "threads": 2, "ranks": 2, "zs_system": "zs stage 3",
            "torch_system": "torch FSDP2", "rounds": rounds}


a = argparse.Namespace(tol=1e-4, steps=20, rounds=3, skip=2)
good = [{"round": 0, "zs": side(1500.0, 5.0), "torch": side(1000.0, 5.0)},
        {"round": 1, "zs": {"error": "zs: exit 1: boom"}, "torch": side(900.0, 5.0)},
        {"round": 2, "zs": side(1800.0, 5.0), "torch": side(1000.0, 5.00001)}]
partial = row(good)
vt.summarise(a, partial)
check("PARTIAL: 1 of 3 rounds failed" in partial["status"], f"partial row status: {partial['status']!r}")
check(partial["status"].startswith("ok"), f"the good rounds' fp32 losses agree: {partial['status']!r}")
check(partial.get("failed_rounds") == [1], f"failed rounds: {partial.get('failed_rounds')}")
check(partial.get("ratio") and abs(partial["ratio"]["median"] - 1.65) < 1e-9 and
      abs(partial["ratio"]["min"] - 1.5) < 1e-9 and abs(partial["ratio"]["max"] - 1.8) < 1e-9,
      f"ratio from rounds 0 and 2: {partial.get('ratio')}")
check("boom" in partial["status"], "the first error is in the status")

none = row([{"round": 0, "zs": {"error": "zs: exit 1: boom"}, "torch": side(900.0, 5.0)}])
vt.summarise(a, none)
check(none["status"] == "FAILED", f"no good round: {none['status']!r}")

whole = row([dict(r) for r in good if "error" not in r["zs"]])
vt.summarise(a, whole)
check(whole["status"] == "ok" and "failed_rounds" not in whole, f"all good: {whole['status']!r}")

doc = {"shape": {"name": "tiny", "model": {"layers": 2, "channels": 64, "heads": 4, "vocab": 256, "seq": 32, "batch": 8}},
       "cores": 2, "threads_per_rank": {2: 1}, "torch_version": "x", "zs_flags": [],
       "optimizer": {"lr": 1e-3, "weight_decay": 0.1, "clip": 1.0, "lr_schedule": "cosine", "min_lr": 0, "warmup": 5},
       "loadavg_start": [0, 0, 0], "loadavg_end": [0, 0, 0], "zs": "zs-train-gpt", "zs_mtime": "now",
       "rows": [partial, none, whole]}
out = io.StringIO()
with contextlib.redirect_stdout(out):
    vt.print_table(a, doc)
text = out.getvalue()
line = next((ln for ln in text.splitlines() if "PARTIAL" in ln), "")
check("1.50 x 1.80" in line and "1650" in line, f"the partial row's line: {line!r}")
check("FAILED: zs: exit 1: boom" in text, "the failed row's line")

for f in fails:
    print("FAIL:", f)
print(f"vs_torch_summary: 3 rows checked, {len(fails)} failure(s)")
sys.exit(1 if fails else 0)
