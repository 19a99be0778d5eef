#!/usr/bin/env python3
"""The trainer's --export file read by the safetensors library itself (the format
Python tools load): every tensor float32 and finite, the GPT's names and shapes,
as many elements as the trainer reports, wte shaped [vocab, channels], and the
step in the metadata. Exits 77 (skip) when safetensors/numpy are not installed.

usage: check_safetensors.py MPIEXEC ZS_TRAIN_GPT RANKS
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import load_file
except ImportError:
    print("skipped: python3 safetensors/numpy not installed (pip install safetensors numpy)")
    sys.exit(77)

mpiexec, trainer, ranks = sys.argv[1], sys.argv[2], sys.argv[3]
L, C, H, V, T, STEPS = 2, 32, 2, 256, 16, 3
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "model.safetensors")
    out = subprocess.run([mpiexec, "-n", ranks, "--oversubscribe", trainer, "--stage", "3", "--dtype", "bf16",
                          "--layers", str(L), "--channels", str(C), "--heads", str(H), "--vocab", str(V),
                          "--seq", str(T), "--batch", "4", "--steps", str(STEPS), "--val-seqs", "0", "--quiet",
                          "--json", "--export", path], check=True, capture_output=True, text=True).stdout
    doc = json.loads(out)
    tensors = load_file(path)
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
    total = 0
    for name, a in tensors.items():
        assert a.dtype == np.float32, (name, a.dtype)
        assert np.isfinite(a).all(), name
        total += a.size
    assert total == doc["params"], (total, doc["params"])
    assert tensors["wte"].shape == (V, C), tensors["wte"].shape
    assert tensors["wpe"].shape == (T, C), tensors["wpe"].shape
    assert tensors["lnf.w"].shape == (C,)
    assert sum(1 for n in tensors if n.startswith("h.0.")) == sum(1 for n in tensors if n.startswith("h.1."))
    assert meta["producer"] == "zeroshard" and meta["step"] == str(STEPS), meta
    print(f"ok: {len(tensors)} tensors, {total} float32 values, metadata {meta}")
