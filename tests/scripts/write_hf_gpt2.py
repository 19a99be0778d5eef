#!/usr/bin/env python3
"""Writes a GPT-2 model the way Hugging Face stores one, with Python's own
safetensors library, for test_import (zs_import_safetensors through
zs_import_name_hf_gpt2):

  OUT/single/model.safetensors   the gpt2 repository's layout: names without
                                 "transformer.", float32, h.L.attn.bias masks
  OUT/sharded/                   save_pretrained's sharded layout: "transformer."
                                 names in two shards (bfloat16, then float16 and
                                 float32) and model.safetensors.index.json

Tensor k (examples/gpt's parameter order) element i holds
((7 i + 13 k) mod 251 - 125) / 64, exact in every dtype (tests/import_files.h).
Exits 77 (skip) when safetensors/numpy are not installed.

usage: write_hf_gpt2.py OUT LAYERS CHANNELS VOCAB SEQ
"""
import json
import os
import sys

try:
    import numpy as np
    import safetensors
    from safetensors.numpy import save_file
except ImportError:
    print("skipped: python3 safetensors/numpy not installed (pip install safetensors numpy)")
    sys.exit(77)

out, L, C, V, T = sys.argv[1], *map(int, sys.argv[2:6])
BLOCK = [("ln_1.weight", (C,)), ("ln_1.bias", (C,)), ("attn.c_attn.weight", (C, 3 * C)),
         ("attn.c_attn.bias", (3 * C,)), ("attn.c_proj.weight", (C, C)), ("attn.c_proj.bias", (C,)),
         ("ln_2.weight", (C,)), ("ln_2.bias", (C,)), ("mlp.c_fc.weight", (C, 4 * C)), ("mlp.c_fc.bias", (4 * C,)),
         ("mlp.c_proj.weight", (4 * C, C)), ("mlp.c_proj.bias", (C,))]


def tensors():
    """(name without prefix, shape) in examples/gpt's order."""
    yield "wte.weight", (V, C)
    yield "wpe.weight", (T, C)
    for layer in range(L):
        for name, shape in BLOCK:
            yield f"h.{layer}.{name}", shape
    yield "ln_f.weight", (C,)
    yield "ln_f.bias", (C,)


def values(k, shape):
    i = np.arange(int(np.prod(shape)), dtype=np.int64)
    return (((i * 7 + k * 13) % 251 - 125) / 64.0).astype(np.float32).reshape(shape)


def save_bf16(arrays, path):
    """Every float32 array as bfloat16, which numpy lacks: its bits (exact here:
    the top half of each float32) go through the library's serialize_file."""
    keep, specs = [], {}
    for name, a in arrays.items():
        if a.dtype == np.float32:
            bits = np.ascontiguousarray((a.view(np.uint32) >> 16).astype(np.uint16))
            dtype = "bfloat16"
        else:
            bits, dtype = np.ascontiguousarray(a), a.dtype.name
        keep.append(bits)
        if hasattr(safetensors, "TensorSpec"):  # safetensors >= 0.8
            specs[name] = safetensors.TensorSpec(dtype=dtype, shape=list(a.shape), data_ptr=bits.ctypes.data,
                                                   data_len=bits.nbytes)
        else:
            specs[name] = {"dtype": dtype, "shape": list(a.shape), "data": bits.tobytes()}
    safetensors.serialize_file(specs, path, metadata={"format": "pt"})


os.makedirs(f"{out}/single", exist_ok=True)
os.makedirs(f"{out}/sharded", exist_ok=True)
single = {name: values(k, shape) for k, (name, shape) in enumerate(tensors())}
for layer in range(L):
    single[f"h.{layer}.attn.bias"] = np.tril(np.ones((T, T), np.float32)).reshape(1, 1, T, T)
save_file(single, f"{out}/single/model.safetensors", metadata={"format": "pt"})

cut = 2 + len(BLOCK)  # shard 1: the embeddings and block 0, in bfloat16
first, second, weight_map = {}, {}, {}
files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
for k, (name, shape) in enumerate(tensors()):
    a = values(k, shape)
    if k < cut:
        first["transformer." + name] = a
    else:
        second["transformer." + name] = a.astype(np.float16) if k % 2 else a
    weight_map["transformer." + name] = files[k >= cut]
for layer in range(L):
    name = f"transformer.h.{layer}.attn.bias"
    (first if layer == 0 else second)[name] = np.tril(np.ones((T, T), np.float32)).reshape(1, 1, T, T)
    weight_map[name] = files[layer != 0]
save_bf16(first, f"{out}/sharded/{files[0]}")
save_file(second, f"{out}/sharded/{files[1]}", metadata={"format": "pt"})
total = sum(a.size * 2 for a in first.values()) + sum(a.nbytes for a in second.values())
with open(f"{out}/sharded/model.safetensors.index.json", "w") as f:
    json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
print(f"wrote {len(single)} tensors to {out}/single and {len(weight_map)} in two shards to {out}/sharded")
