// examples/gpt/ops_tp_cuda.cu: the few layers the tensor-parallel GPT (and the
// mixture of experts: opc_scale) needs on a CUDA device beyond ops_cuda.cu's
// (ops_cuda.h, "tensor-parallel pieces", "mixture-of-experts pieces").
//
// Plain C reference: examples/gpt/gpt_tp.c's loops, named beside each kernel.
// With sequence parallelism a rank keeps the token rows row0 .. row0 + rows - 1
// of the micro-batch's B*T rows (row0 = rank * rows), so a row's position is
// (row0 + r) % T, not r % T as in the dense embedding. One thread per element
// (or per output element where it sums), grid-stride loops, as ops_cuda.cu.
#include <cuda_runtime.h>
#include <stdint.h>

#include "ops_cuda.h"

namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b > 65536) b = 65536;
  return (unsigned)(b < 1 ? 1 : b);
}

int launched(void) { return (int)cudaGetLastError(); }

// x[r, c] += wpe[(row0 + r) % T, c] (gpt_tp_embed_forward's position loop)
__global__ void pos_add_rows_kernel(float *x, const float *wpe, int64_t row0, int64_t rows, int T, int C) {
  const int64_t total = rows * C;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / C;
    const int c = (int)(i % C);
    x[i] += wpe[((row0 + r) % T) * C + c];
  }
}

// dwpe[t, c] += dx[r, c] over this rank's rows r with (row0 + r) % T == t, r
// ascending: thread (t, c) walks them T rows apart from the first, adding into
// the gradient as it goes, so each element gets gpt_tp_embed_backward's adds in
// its order (the same bits).
__global__ void pos_backward_rows_kernel(float *dwpe, const float *dx, int64_t row0, int64_t rows, int T, int C) {
  const int64_t total = (int64_t)T * C;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int t = (int)(i / C), c = (int)(i % C);
    const int64_t first = ((int64_t)t - row0 % T + T) % T; // the first r with (row0 + r) % T == t
    float acc = dwpe[i];
    for (int64_t r = first; r < rows; r += T) acc += dx[r * C + c];
    dwpe[i] = acc;
  }
}

// out[r, c] = x[r, c] + (p[r, c] + b[c]) (gpt_tp.c's add_bias_resid: the
// row-parallel layer's sum, its bias, the residual); out may be x.
__global__ void bias_resid_kernel(float *out, const float *x, const float *p, const float *b, int64_t rows, int C) {
  const int64_t total = rows * C;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = x[i] + (p[i] + b[i % C]);
}

// x[i] *= s (gpt_moe.c's scale loop for the expert rows' gradients: the same
// float product, the same bits)
__global__ void scale_kernel(float *x, float s, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    x[i] *= s;
}

} // namespace

extern "C" int opc_scale(float *x, float s, int64_t n, cudaStream_t stream) {
  if (n == 0) return 0;
  scale_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, s, n);
  return launched();
}

extern "C" int opc_pos_add_rows(float *x, const float *wpe, int64_t row0, int64_t rows, int T, int C, cudaStream_t s) {
  if (rows * C == 0) return 0;
  pos_add_rows_kernel<<<grid_for(rows * C), kThreads, 0, s>>>(x, wpe, row0, rows, T, C);
  return launched();
}

extern "C" int opc_pos_backward_rows(float *dwpe, const float *dx, int64_t row0, int64_t rows, int T, int C,
                                     cudaStream_t s) {
  if (rows * C == 0) return 0;
  pos_backward_rows_kernel<<<grid_for((int64_t)T * C), kThreads, 0, s>>>(dwpe, dx, row0, rows, T, C);
  return launched();
}

extern "C" int opc_bias_resid(float *out, const float *x, const float *p, const float *b, int64_t rows, int C,
                              cudaStream_t s) {
  if (rows * C == 0) return 0;
  bias_resid_kernel<<<grid_for(rows * C), kThreads, 0, s>>>(out, x, p, b, rows, C);
  return launched();
}
