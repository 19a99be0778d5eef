// zs-bench-adam-torch: zeroshard's CPU AdamW with fp32, bf16 and int8 states
// against PyTorch's fused CPU AdamW (at::_fused_adamw_, what
// torch.optim.AdamW(fused=True) runs; fp32 states), in one process, on the same
// number of parameters and threads, interleaved: every round times torch, then
// each zeroshard state dtype, best of --iters steps each.
//
//   zs-bench-adam-torch [--n N] [--rounds R] [--iters I] [--threads T] [--block B] [--json]
//
// Prints params/s per system and round, bytes per parameter, and per state dtype
// the ratio zeroshard / torch per round (median, min, max). --json: one document
//   {"n","threads","simd","torch":{"params_per_s":[..]},"zeroshard":[{"state",
//    "bytes_per_param","params_per_s":[..],"ratio":{"median","min","max","rounds":[..]}}]}
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/ops/_fused_adamw.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "adam_zs_shim.h"

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t k = v.size();
  return k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
}

}  // namespace

int main(int argc, char **argv) {
  size_t n = size_t(32) << 20;
  int rounds = 5, iters = 5, threads = 0, block = 256, json = 0;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--json") { json = 1; continue; }
    if (a == "--help" || a == "-h") {
      std::printf("usage: zs-bench-adam-torch [--n N] [--rounds R] [--iters I] [--threads T] [--block B] [--json]\n");
      return 0;
    }
    if (!v) { std::fprintf(stderr, "zs-bench-adam-torch: %s needs a value\n", a.c_str()); return 2; }
    i++;
    if (a == "--n") n = size_t(std::strtod(v, nullptr));
    else if (a == "--rounds") rounds = std::atoi(v);
    else if (a == "--iters") iters = std::atoi(v);
    else if (a == "--threads") threads = std::atoi(v);
    else if (a == "--block") block = std::atoi(v);
    else { std::fprintf(stderr, "usage: zs-bench-adam-torch [--n N] [--rounds R] [--iters I] [--threads T] [--block B] [--json]\n"); return 2; }
  }
  if (n == 0 || rounds < 1 || iters < 1) return 2;
  if (threads <= 0) threads = at::get_num_threads();
  at::set_num_threads(threads);

  // torch: fp32 parameter, gradient, exp_avg, exp_avg_sq (28 bytes per parameter)
  auto opt = at::TensorOptions().dtype(at::kFloat);
  at::Tensor w = at::rand({int64_t(n)}, opt), g = at::rand({int64_t(n)}, opt) * 0.1 - 0.05;
  at::Tensor m = at::zeros({int64_t(n)}, opt), v = at::zeros({int64_t(n)}, opt);
  at::Tensor steps = at::ones({}, opt);
  auto torch_step = [&] {
    steps.add_(1.0);
    double t0 = now();
    at::_fused_adamw_({w}, {g}, {m}, {v}, {}, {steps}, 1e-3, 0.9, 0.999, 0.01, 1e-8, false, false);
    return now() - t0;
  };
  zsb_t *zs[3];
  for (int s = 0; s < 3; s++)
    if (!(zs[s] = zsb_create(n, s, block, threads))) { std::fprintf(stderr, "zs-bench-adam-torch: out of memory\n"); return 1; }
  torch_step(); // page in, wake the threads
  for (int s = 0; s < 3; s++) zsb_step(zs[s]);

  std::vector<double> tp, zp[3];
  for (int r = 0; r < rounds; r++) {
    double best = 1e30;
    for (int i = 0; i < iters; i++) best = std::min(best, torch_step());
    tp.push_back(double(n) / best);
    for (int s = 0; s < 3; s++) {
      double b = 1e30;
      for (int i = 0; i < iters; i++) {
        double t = zsb_step(zs[s]);
        if (t < 0) { std::fprintf(stderr, "zs-bench-adam-torch: the zeroshard step failed\n"); return 1; }
        b = std::min(b, t);
      }
      zp[s].push_back(double(n) / b);
    }
  }
  if (json) std::printf("{\"n\": %zu, \"threads\": %d, \"simd\": \"%s\", \"torch\": {\"impl\": \"at::_fused_adamw_\", \"bytes_per_param\": 28, \"params_per_s\": [", n, threads, zsb_simd());
  else std::printf("AdamW on %zu parameters, %d threads (zeroshard path %s), %d rounds x best of %d, interleaved\n"
                   "  torch at::_fused_adamw_ (fp32 states, 28 B/param): median %.1f Mparam/s\n",
                   n, threads, zsb_simd(), rounds, iters, median(tp) / 1e6);
  if (json) for (int r = 0; r < rounds; r++) std::printf("%s%.6g", r ? ", " : "", tp[r]);
  if (json) std::printf("]}, \"zeroshard\": [");
  for (int s = 0; s < 3; s++) {
    std::vector<double> ratio;
    for (int r = 0; r < rounds; r++) ratio.push_back(zp[s][r] / tp[r]);
    double mn = *std::min_element(ratio.begin(), ratio.end()), mx = *std::max_element(ratio.begin(), ratio.end());
    if (json) {
      std::printf("%s{\"state\": \"%s\", \"bytes_per_param\": %.4g, \"params_per_s\": [", s ? ", " : "", zsb_state_name(zs[s]),
                  zsb_bytes_per_param(zs[s]));
      for (int r = 0; r < rounds; r++) std::printf("%s%.6g", r ? ", " : "", zp[s][r]);
      std::printf("], \"ratio\": {\"median\": %.4f, \"min\": %.4f, \"max\": %.4f, \"rounds\": [", median(ratio), mn, mx);
      for (int r = 0; r < rounds; r++) std::printf("%s%.4f", r ? ", " : "", ratio[r]);
      std::printf("]}}");
    } else {
      std::printf("  zeroshard, m/v %-4s (%5.2f B/param): median %.1f Mparam/s, / torch %.3f (%.3f-%.3f)\n",
                  zsb_state_name(zs[s]), zsb_bytes_per_param(zs[s]), median(zp[s]) / 1e6, median(ratio), mn, mx);
    }
  }
  if (json) std::printf("]}\n");
  for (int s = 0; s < 3; s++) zsb_destroy(zs[s]);
  return 0;
}
