"""torch.optim.AdamW(fused=True) on the same tensors zs-bench-adam uses: the
comparison issue 3 asks for. Prints one JSON document (params/s, GB/s at 28
bytes per parameter). Run by scripts/gpu-check where PyTorch sees a GPU."""
import argparse, json, time
import torch

ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int, default=1 << 26)
ap.add_argument("--iters", type=int, default=20)
a = ap.parse_args()
p = torch.nn.Parameter(torch.randn(a.n, device="cuda"))
p.grad = torch.randn(a.n, device="cuda")
opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01, fused=True)
for _ in range(3):
    opt.step()
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(a.iters):
    opt.step()
torch.cuda.synchronize()
dt = (time.perf_counter() - t0) / a.iters
print(json.dumps({"impl": "torch.optim.AdamW(fused=True)", "n": a.n, "step_s": dt,
                  "params_per_s": a.n / dt, "gb_per_s": 28.0 * a.n / dt / 1e9}))
