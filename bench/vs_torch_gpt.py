#!/usr/bin/env python3
"""vs_torch_gpt.py: the PyTorch side of bench/vs_torch. A reference of exactly
the GPT examples/gpt/gpt.c computes, trained the way zs-train-gpt trains it, on
R CPU ranks (gloo on 127.0.0.1) under DDP, FSDP2 (fully_shard), tensor
parallelism (torch.distributed.tensor.parallel) or a 2-stage pipeline
(torch.distributed.pipelining, 1F1B): the layouts, below.

What it mirrors, and where that is written down in the C code:
  model      gpt.h / gpt.c / ops.c: GPT-2 blocks (pre-LayerNorm, eps 1e-5), causal
             attention with scale 1/sqrt(head size), GELU tanh approximation, the
             LM head tied to wte (logits = x wte^T), every linear weight stored
             [in, out] (y = x W + b, GPT-2's Conv1D layout), qkv columns q | k | v.
  tokens     data.c: the bytes of the license texts in a fixed file order (or
             --data FILE), 90/10 train/validation split; sequence i of step s
             starts at splitmix64-hashed offset (seed, s, i) of the train split;
             rank r takes sequences [r B/R, (r+1) B/R) of the global batch.
  loss       trainer.c / trainer_round.c: each rank's micro-batch mean token loss;
             gradients averaged over ranks; the reported loss is the mean of the
             ranks' losses (the loss BEFORE that step's update).
  optimizer  opts.c / src/optim: AdamW, betas (0.9, 0.95), eps 1e-8, decoupled
             weight decay on the matrices only (LayerNorm weights and biases are
             ZS_PARAM_NO_DECAY), global-norm clipping max/(norm+1e-6) (torch's own
             rule), and zeroshard/config.h's schedules (cosine: linear warmup to
             --lr over W steps (--warmup; the trainer's default steps/20), step
             counted from 0, then cosine decay
             to --min-lr at step == steps), the rate rounded to fp32 as the engine
             hands it to the optimizer.
  init       the trainer's own --export file (safetensors, fp32, gpt.h's names),
             read here without the safetensors package.

Run by bench/vs_torch, which launches it as
  vs_torch_gpt.py --world R --mode ddp|fsdp2|tp|pp --dtype fp32|bf16 [--compile] --init FILE --out RESULT.json ...
and reads RESULT.json (rank 0 writes it: losses, grad norms, rates, per-step
seconds, every rank's peak RSS). Progress goes to stderr."""
import argparse
import json
import math
import os
import resource
import socket
import struct
import sys
import time

# ============================================================================
# data: data.c in Python
# ============================================================================

# data.c's k_files, in its order (aliases left out as there)
LICENSE_FILES = ["GPL-3", "Apache-2.0", "GPL-2", "LGPL-2.1", "LGPL-3", "LGPL-2", "GPL-1", "MPL-2.0",
                 "MPL-1.1", "GFDL-1.3", "GFDL-1.2", "Artistic", "CC0-1.0", "BSD"]
LICENSE_DIR = "/usr/share/common-licenses"
M64 = (1 << 64) - 1


def load_corpus(data=None):
    """The corpus bytes and n_train, as gpt_data_load_licenses / _load_file."""
    if data:
        with open(data, "rb") as f:
            tok = f.read()
    else:
        parts = []
        for name in LICENSE_FILES:
            try:
                with open(os.path.join(LICENSE_DIR, name), "rb") as f:
                    parts.append(f.read())
            except OSError:
                pass
        tok = b"".join(parts)
    if not tok:
        raise SystemExit(f"vs_torch_gpt: no corpus ({data or LICENSE_DIR})")
    return tok, len(tok) * 9 // 10


def mix64(z):
    """splitmix64's finaliser (data.c's mix64) on Python ints."""
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def train_offset(n_train, seed, step, index, T):
    """gpt_data_train_offset."""
    h = mix64(mix64(mix64((seed ^ 0x6461746164617461) & M64) ^ (step & M64)) ^ (index & M64))
    return h % (n_train - T)


def train_batch(tok, n_train, seed, step, first, count, T):
    """gpt_data_train_batch: (inputs, targets) as lists of count rows of T ints."""
    xs, ys = [], []
    for i in range(count):
        off = train_offset(n_train, seed, step, first + i, T)
        xs.append(tok[off:off + T])
        ys.append(tok[off + 1:off + T + 1])
    return xs, ys


# ============================================================================
# the learning rate: zs_schedule_lr (src/zero/schedule.c) for the trainer's kinds
# ============================================================================

def schedule_lr(kind, lr, step, warmup, total, min_lr):
    if kind == "constant":
        v = lr
    elif step < warmup:
        v = lr * (step + 1) / warmup
    elif step >= total:
        v = min_lr
    else:
        r = (step - warmup) / (total - warmup)
        v = min_lr + 0.5 * (1.0 + math.cos(math.pi * r)) * (lr - min_lr) if kind == "cosine" else lr - r * (lr - min_lr)
    return struct.unpack("f", struct.pack("f", v))[0]  # zs_engine_lr returns a float


def schedule_warmup(kind, steps, warmup):
    """trainer_schedule's warmup: --warmup, else 5% of the schedule's length."""
    return warmup if warmup is not None and warmup >= 0 else steps // 20


# ============================================================================
# safetensors (F32 only: what zs_export_safetensors writes)
# ============================================================================

def read_safetensors(path):
    import torch
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    base = 8 + hlen
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        if d["dtype"] != "F32":
            raise SystemExit(f"vs_torch_gpt: {path}: tensor {name} is {d['dtype']}, expected F32")
        a, b = d["data_offsets"]
        t = torch.frombuffer(bytearray(raw[base + a:base + b]), dtype=torch.float32)
        out[name] = t.reshape(d["shape"]).clone()
    return out


# ============================================================================
# the model: gpt.c's units
# ============================================================================

# gpt.c's k_block table order, the export's names -> this module's attributes
BLOCK_PARAMS = [("ln1.w", "ln1_w"), ("ln1.b", "ln1_b"), ("attn.qkv.w", "qkv_w"), ("attn.qkv.b", "qkv_b"),
                ("attn.proj.w", "proj_w"), ("attn.proj.b", "proj_b"), ("ln2.w", "ln2_w"), ("ln2.b", "ln2_b"),
                ("mlp.fc.w", "fc_w"), ("mlp.fc.b", "fc_b"), ("mlp.proj.w", "mproj_w"), ("mlp.proj.b", "mproj_b")]


def build_model(L, C, H, V, T):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def p(*shape):
        return nn.Parameter(torch.zeros(*shape))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1_w, self.ln1_b = p(C), p(C)
            self.qkv_w, self.qkv_b = p(C, 3 * C), p(3 * C)  # [in, out]
            self.proj_w, self.proj_b = p(C, C), p(C)
            self.ln2_w, self.ln2_b = p(C), p(C)
            self.fc_w, self.fc_b = p(C, 4 * C), p(4 * C)
            self.mproj_w, self.mproj_b = p(4 * C, C), p(C)

        def forward(self, x):
            B_, T_, _ = x.shape
            h = F.layer_norm(x, (C,), self.ln1_w, self.ln1_b, 1e-5)
            qkv = torch.addmm(self.qkv_b, h.reshape(-1, C), self.qkv_w).view(B_, T_, 3, H, C // H)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # [B, H, T, hs] each
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # scale 1/sqrt(hs)
            y = y.transpose(1, 2).reshape(-1, C)
            x = x + torch.addmm(self.proj_b, y, self.proj_w).view(B_, T_, C)
            h = F.layer_norm(x, (C,), self.ln2_w, self.ln2_b, 1e-5).reshape(-1, C)
            h = F.gelu(torch.addmm(self.fc_b, h, self.fc_w), approximate="tanh")
            return x + torch.addmm(self.mproj_b, h, self.mproj_w).view(B_, T_, C)

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = p(V, C), p(T, C)
            self.h = nn.ModuleList(Block() for _ in range(L))
            self.lnf_w, self.lnf_b = p(C), p(C)

        def forward(self, idx, targets):
            x = self.wte[idx] + self.wpe[: idx.shape[1]]
            for blk in self.h:
                x = blk(x)
            x = F.layer_norm(x, (C,), self.lnf_w, self.lnf_b, 1e-5)
            logits = F.linear(x, self.wte)  # tied head: x wte^T
            return F.cross_entropy(logits.reshape(-1, V).float(), targets.reshape(-1))

    return GPT()


def load_export(model, tensors, L):
    """The trainer's --export tensors into the model (names of gpt.h's table)."""
    import torch
    sd = {"wte": tensors["wte"], "wpe": tensors["wpe"], "lnf_w": tensors["lnf.w"], "lnf_b": tensors["lnf.b"]}
    for l in range(L):
        for zs_name, attr in BLOCK_PARAMS:
            sd[f"h.{l}.{attr}"] = tensors[f"h.{l}.{zs_name}"]
    with torch.no_grad():
        model.load_state_dict(sd, strict=True)


# ============================================================================
# the layouts: each sets up its model and says how a step runs on this rank
# ============================================================================

def clip_coef(clip, norm):
    """zs__clip_coef (src/optim/clip.c), torch's clip_grad_norm_ rule, in fp32."""
    if not clip > 0:
        return 1.0
    f = lambda v: struct.unpack("f", struct.pack("f", v))[0]
    return min(1.0, f(f(clip) / f(f(norm) + f(1e-6))))


class Layout:
    """One rank's part of a layout: params (decay, no_decay lists for AdamW), the
    sequences it takes of each step's global batch (first, count), and a step's
    forward and backward (returning the global mean loss) and clipping (returning
    the global norm)."""
    bf16 = False

    def loss_of(self, x, y):
        import torch
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
            return self.net(x, y)


class DataParallel(Layout):
    """ddp: DistributedDataParallel; fsdp2: fully_shard on every block and the root
    (the root holds the embedding and the final LayerNorm: zs's units)."""

    def __init__(self, mode, model, rank, world, B, shard_group=0, compiled=False):
        import torch
        self.model, self.world, self.first, self.count = model, world, rank * (B // world), B // world
        if mode == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP
            self.net = DDP(model)
        else:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard
            if mode == "hsdp":  # FSDP2's HYBRID_SHARD: replicate across groups of shard_group ranks, shard inside
                mesh = init_device_mesh("cpu", (world // shard_group, shard_group),
                                        mesh_dim_names=("replicate", "shard"))
            else:
                mesh = init_device_mesh("cpu", (world,))
            for blk in model.h:
                fully_shard(blk, mesh=mesh)
            fully_shard(model, mesh=mesh)
            self.net = model
        if compiled:  # torch.compile's inductor over the forward (and its backward); the optimizer stays eager
            self.net = torch.compile(self.net)
        self.params = list(model.parameters())
        self.decay = [q for q in self.params if q.ndim == 2]  # wte, wpe and the matrices
        self.no_decay = [q for q in self.params if q.ndim != 2]
        self.torch = torch

    def step(self, x, y):
        loss = self.loss_of(x, y)
        loss.backward()
        return loss.detach().float().clone()

    def report(self, loss):
        import torch.distributed as dist
        dist.all_reduce(loss)
        return loss.item() / self.world

    def clip(self, clip):
        norm = self.torch.nn.utils.clip_grad_norm_(self.params, clip if clip > 0 else float("inf"))
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)


def build_tp_blocks(model, tp, H):
    """Each block's matrices as nn.Linear ([out, in]: the transposes of gpt.h's
    [in, out]), q, k and v apart so ColwiseParallel gives a rank whole heads; the
    attention on this rank's H / tp heads."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def lin(w, b):
        m = nn.Linear(w.shape[0], w.shape[1])
        with torch.no_grad():
            m.weight.copy_(w.t())
            m.bias.copy_(b)
        return m

    class TPBlock(nn.Module):
        def __init__(self, b):
            super().__init__()
            C = b.ln1_w.shape[0]
            self.C, self.Hl = C, H // tp
            self.ln1_w, self.ln1_b, self.ln2_w, self.ln2_b = b.ln1_w, b.ln1_b, b.ln2_w, b.ln2_b
            self.q = lin(b.qkv_w[:, :C], b.qkv_b[:C])
            self.k = lin(b.qkv_w[:, C:2 * C], b.qkv_b[C:2 * C])
            self.v = lin(b.qkv_w[:, 2 * C:], b.qkv_b[2 * C:])
            self.proj = lin(b.proj_w, b.proj_b)
            self.fc = lin(b.fc_w, b.fc_b)
            self.mproj = lin(b.mproj_w, b.mproj_b)

        def forward(self, x):
            B_, T_, C = x.shape
            h = F.layer_norm(x, (C,), self.ln1_w, self.ln1_b, 1e-5)
            q, k, v = (m(h).view(B_, T_, self.Hl, C // H).transpose(1, 2) for m in (self.q, self.k, self.v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B_, T_, -1)
            x = x + self.proj(y)
            h = F.layer_norm(x, (C,), self.ln2_w, self.ln2_b, 1e-5)
            return x + self.mproj(F.gelu(self.fc(h), approximate="tanh"))

    model.h = nn.ModuleList(TPBlock(b) for b in model.h)
    return model


class TensorParallel(Layout):
    """tp: every rank one tp group (dp 1): the blocks split Megatron-style by
    torch.distributed.tensor.parallel (q, k, v and fc column-wise, proj and mlp
    proj row-wise); embedding, LayerNorms and the tied head replicated (zs splits
    the vocabulary of those too: same numbers, other traffic)."""

    def __init__(self, model, rank, world, B, H):
        import torch
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
        if H % world:
            raise SystemExit(f"vs_torch_gpt: --mode tp: {H} heads do not split over {world} ranks")
        self.mesh = init_device_mesh("cpu", (world,))
        model = build_tp_blocks(model, world, H)
        plan = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(), "proj": RowwiseParallel(),
                "fc": ColwiseParallel(), "mproj": RowwiseParallel()}
        for blk in model.h:
            parallelize_module(blk, self.mesh, plan)
        self.net = self.model = model
        self.first, self.count = 0, B  # one data-parallel rank: every rank the whole batch
        self.params = list(model.parameters())
        self.decay = [q for q in self.params if q.ndim == 2]
        self.no_decay = [q for q in self.params if q.ndim != 2]
        self.torch = torch

    def step(self, x, y):
        loss = self.loss_of(x, y)
        loss.backward()
        return loss.detach()

    def report(self, loss):
        return loss.item()  # the same on every rank

    def clip(self, clip):
        import torch.distributed as dist
        from torch.distributed.tensor import DTensor
        torch = self.torch
        split = torch.zeros((), dtype=torch.float64)
        whole = torch.zeros((), dtype=torch.float64)
        for q in self.params:
            g = q.grad
            if isinstance(g, DTensor) and any(p.is_shard() for p in g.placements):
                split += g.to_local().double().pow(2).sum()
            else:  # replicated (a row-wise bias is a Replicate DTensor): the same on every rank, counted once
                whole += (g.to_local() if isinstance(g, DTensor) else g).double().pow(2).sum()
        dist.all_reduce(split)
        norm = math.sqrt(split.item() + whole.item())
        c = clip_coef(clip, norm)
        if c < 1.0:
            for q in self.params:
                q.grad.mul_(c)
        return norm


class Pipeline(Layout):
    """pp: two stages (dp 1), torch.distributed.pipelining's 1F1B over 2 micro-
    batches (zs's default --microbatches = --pp): stage 0 the embedding and the
    first L/2 blocks, stage 1 the rest, the final LayerNorm and the head with a
    copy of wte whose gradient the two stages sum after every step (zs's tied
    copy, Megatron's embedding group); the norm counts wte once."""

    def __init__(self, model, rank, world, B, L, C, V):
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B
        if world != 2 or L % 2:
            raise SystemExit("vs_torch_gpt: --mode pp: 2 ranks and an even --layers")
        k = L // 2

        class First(nn.Module):
            def __init__(self):
                super().__init__()
                self.wte, self.wpe, self.h = model.wte, model.wpe, nn.ModuleList(model.h[:k])

            def forward(self, idx):
                x = self.wte[idx] + self.wpe[: idx.shape[1]]
                for b in self.h:
                    x = b(x)
                return x

        class Last(nn.Module):
            def __init__(self):
                super().__init__()
                self.h, self.lnf_w, self.lnf_b = nn.ModuleList(model.h[k:]), model.lnf_w, model.lnf_b
                self.wte = nn.Parameter(model.wte.detach().clone())  # the tied copy

            def forward(self, x):
                for b in self.h:
                    x = b(x)
                x = F.layer_norm(x, (C,), self.lnf_w, self.lnf_b, 1e-5)
                return F.linear(x, self.wte)

        def loss_fn(logits, target):
            return F.cross_entropy(logits.reshape(-1, V).float(), target.reshape(-1))

        self.rank, self.torch = rank, torch
        self.mod = First() if rank == 0 else Last()
        stage = PipelineStage(self.mod, rank, 2, torch.device("cpu"))
        self.sched = Schedule1F1B(stage, n_microbatches=2, loss_fn=loss_fn)
        self.first, self.count = 0, B
        self.params = list(self.mod.parameters())
        self.decay = [q for q in self.params if q.ndim == 2]
        self.no_decay = [q for q in self.params if q.ndim != 2]

    def step(self, x, y):
        import torch.distributed as dist
        torch = self.torch
        losses = []
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
            if self.rank == 0:
                self.sched.step(x)
            else:
                self.sched.step(target=y, losses=losses)
        dist.all_reduce(self.mod.wte.grad)  # the tied pair: both hold the sum
        return torch.tensor(sum(float(v.detach()) for v in losses) / len(losses) if losses else 0.0)

    def report(self, mean):
        import torch.distributed as dist
        dist.all_reduce(mean)  # the last stage's micro-batch mean losses, to every rank
        return mean.item()

    def clip(self, clip):
        import torch.distributed as dist
        torch = self.torch
        sq = torch.zeros((), dtype=torch.float64)
        for n, q in self.mod.named_parameters():
            if not (self.rank == 1 and n == "wte"):
                sq += q.grad.double().pow(2).sum()
        dist.all_reduce(sq)
        norm = math.sqrt(sq.item())
        c = clip_coef(clip, norm)
        if c < 1.0:
            for q in self.params:
                q.grad.mul_(c)
        return norm


# ============================================================================
# one rank
# ============================================================================

def rank_main(rank, a, port):
    os.environ.update(MASTER_ADDR=a.master, MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    world = a.world
    L, C, H, V, T, B = a.layers, a.channels, a.heads, a.vocab, a.seq, a.batch
    if B % world:
        raise SystemExit(f"vs_torch_gpt: --batch {B} is not a multiple of {world} ranks")
    model = build_model(L, C, H, V, T)
    load_export(model, read_safetensors(a.init), L)
    if a.mode in ("ddp", "fsdp2", "hsdp"):
        lay = DataParallel(a.mode, model, rank, world, B, a.shard_group, a.compile)
    elif a.compile:
        raise SystemExit("vs_torch_gpt: --compile is built for ddp, fsdp2 and hsdp only")
    elif a.mode == "tp":
        lay = TensorParallel(model, rank, world, B, H)
    else:
        lay = Pipeline(model, rank, world, B, L, C, V)
    lay.bf16 = a.dtype == "bf16"
    opt = torch.optim.AdamW([{"params": lay.decay, "weight_decay": a.weight_decay},
                             {"params": lay.no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    tok, n_train = load_corpus(a.data)
    tok_t = torch.frombuffer(bytearray(tok), dtype=torch.uint8)
    total = a.lr_steps if a.lr_steps > 0 else a.steps  # trainer_schedule's length
    warm = schedule_warmup(a.lr_schedule, total, a.warmup)
    losses, norms, lrs, secs = [], [], [], []
    for step in range(a.steps):
        t0 = time.perf_counter()
        offs = [train_offset(n_train, a.seed, step, lay.first + i, T) for i in range(lay.count)]
        xy = torch.stack([tok_t[o:o + T + 1] for o in offs]).long()
        x, y = xy[:, :-1], xy[:, 1:]
        lr = schedule_lr(a.lr_schedule, a.lr, step, warm, total, a.min_lr)
        for g in opt.param_groups:
            g["lr"] = lr
        pending = lay.step(x, y)
        norm = lay.clip(a.clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        secs.append(time.perf_counter() - t0)  # zs's step times leave the loss's all-gather out too
        losses.append(lay.report(pending))
        norms.append(norm)
        lrs.append(lr)
        if rank == 0 and not a.quiet:
            print(f"torch step {step + 1:5d}/{a.steps} | loss {losses[-1]:.6f} | lr {lr:.3e} | grad norm "
                  f"{norms[-1]:.4f} | {B * T / secs[-1]:8.0f} tok/s", file=sys.stderr)
    if a.dump and rank == 0 and a.mode == "ddp":  # the final parameters, for diagnosing a disagreement
        torch.save({n: q.detach().clone() for n, q in model.named_parameters()}, a.dump)
    rss = [None] * world
    dist.all_gather_object(rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    if rank == 0:
        doc = {"mode": a.mode, "compile": a.compile, "dtype": a.dtype, "world": world, "threads": torch.get_num_threads(),
               "torch": torch.__version__, "losses": losses, "grad_norms": norms, "lrs": lrs,
               "step_seconds": secs, "peak_rss_bytes": rss, "batch": B, "seq": T}
        with open(a.out, "w") as f:
            json.dump(doc, f)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description="the PyTorch side of bench/vs_torch")
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--mode", default="ddp", choices=["ddp", "fsdp2", "hsdp", "tp", "pp"])
    ap.add_argument("--shard-group", type=int, default=0, help="hsdp: ranks a shard group (a node)")
    ap.add_argument("--mpi", action="store_true",
                    help="one rank per process as mpiexec starts them (rank and world from Open MPI's "
                         "environment) instead of spawning --world processes here")
    ap.add_argument("--master", default="127.0.0.1", help="rank 0's address (--mpi across hosts)")
    ap.add_argument("--port", type=int, default=0, help="rank 0's port (--mpi: the same on every rank)")
    ap.add_argument("--ifname", default="lo", help="gloo's interface (GLOO_SOCKET_IFNAME)")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--channels", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr", type=float, default=0.0)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--lr-schedule", default="cosine", choices=["constant", "cosine", "linear"])
    ap.add_argument("--warmup", type=int, default=-1)
    ap.add_argument("--lr-steps", type=int, default=0, help="the schedule's length (0: --steps)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data", default=None)
    ap.add_argument("--init", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (ddp, fsdp2, hsdp)")
    ap.add_argument("--dump", default=None, help="(ddp) rank 0 saves the final parameters here (torch.save)")
    a = ap.parse_args()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", a.ifname)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    if a.mpi:  # scripts/cluster-sim's hosts: every rank its own process, started by mpiexec
        a.world = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    if a.mode == "hsdp" and (a.shard_group < 1 or a.world % a.shard_group):
        raise SystemExit("vs_torch_gpt: --mode hsdp needs --shard-group dividing --world")
    if a.mpi:
        rank_main(int(os.environ["OMPI_COMM_WORLD_RANK"]), a, a.port or 29517)
        return 0
    port = free_port()
    if a.world == 1:
        rank_main(0, a, port)
        return 0
    import torch.multiprocessing as mp
    mp.spawn(rank_main, args=(a, port), nprocs=a.world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
