#!/usr/bin/env python3
"""zs-ckpt export --hf (issue 29): a tp 2 x pp 2 run of zs-train-gpt saves a
checkpoint; its Hugging Face folder (config.json, the weights in shards with
model.safetensors.index.json) loads with transformers'
AutoModelForCausalLM.from_pretrained, and that model's loss on the trainer's
validation windows (the last tenth of the data, --val-seqs windows of --seq
byte tokens, targets shifted by one) equals the trainer's final validation
loss to 1e-6. Also the single-file folder of a larger shard size.

usage: hf_export_check.py MPIEXEC ZS_TRAIN_GPT ZS_CKPT
Exits 77 (skip) when transformers or torch cannot be imported."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import torch
    from transformers import AutoModelForCausalLM
except Exception as e:  # noqa: BLE001 - any import failure means skip
    print(f"skip: transformers/torch not importable: {e}")
    sys.exit(77)

mpiexec, trainer, zsckpt = sys.argv[1:4]
T, NVAL = 16, 8
work = tempfile.mkdtemp(prefix="zs-hf-")
try:
    data = os.path.join(work, "data.txt")
    src = "/usr/share/common-licenses/GPL-3"
    with open(src, "rb") as f:
        raw = f.read()[:60000]
    with open(data, "wb") as f:
        f.write(raw)
    ck = os.path.join(work, "ckpt")
    cmd = [mpiexec, "--allow-run-as-root", "--oversubscribe", "-n", "4", trainer, "--tp", "2", "--pp", "2",
           "--layers", "2", "--channels", "32", "--heads", "4", "--seq", str(T), "--batch", "8", "--steps", "3",
           "--val-seqs", str(NVAL), "--data", data, "--json", "--save", ck]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    val = json.loads(out)["val_loss"]
    n = len(raw)
    n_train = n * 9 // 10
    windows = min(NVAL, (n - n_train - 1) // T)
    x = torch.tensor([list(raw[n_train + i * T:n_train + i * T + T]) for i in range(windows)])
    y = torch.tensor([list(raw[n_train + i * T + 1:n_train + i * T + T + 1]) for i in range(windows)])
    worst = 0.0
    for shard, want_index in ((100000, True), (0, False)):  # 0: the default (2 GiB): one file
        hf = os.path.join(work, f"hf{shard}")
        args = [zsckpt, "export", "--hf", hf, ck] + (["--max-shard-bytes", str(shard)] if shard else [])
        subprocess.run(args, check=True, capture_output=True)
        has_index = os.path.exists(os.path.join(hf, "model.safetensors.index.json"))
        if has_index != want_index:
            print(f"FAIL: {hf}: index {'missing' if want_index else 'unexpected'}: {os.listdir(hf)}")
            sys.exit(1)
        model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float64)
        model.eval()
        with torch.no_grad():
            logits = model(x).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
        print(f"{'shards' if want_index else 'one file'}: transformers {loss:.9f}, zs-train-gpt {val:.9f}, "
              f"|diff| {abs(loss - val):.2e} ({len(os.listdir(hf))} files)")
        worst = max(worst, abs(loss - val))
    if worst > 1e-6:
        print(f"FAIL: the exported model's validation loss differs by {worst:.3g} (> 1e-6)")
        sys.exit(1)
    print("ok")
finally:
    shutil.rmtree(work, ignore_errors=True)
