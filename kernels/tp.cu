// kernels/tp.cu: the compute of the vocab-parallel embedding and cross-entropy
// (zeroshard/tp.h) on a CUDA stream, between the collectives src/tp queues.
//
// Plain C versions: src/tp/tp_cpu.c (the cpu device's, sums in double); the
// tests compare both with float64 references (tests/test_tp_checks.h). Here
// the row sums are fp32 tree reductions over a block, so results differ from
// the cpu device's in the last bits, never in stability: every exponent is of
// l - max <= 0.
//
// Layout: one block per row for the row-wise pieces (lookup, max, sums, out);
// the backward scatter-add gives each thread one column of one group of local
// vocabulary rows and walks the ids in order, so each gradient element is
// summed in index order (deterministic, no atomics).
#include <cuda_runtime.h>
#include <math.h>

#include "kernels/tp.h"

#define TP_THREADS 256
#define TP_GROUPS 64 /* vocabulary row groups of the scatter-add */

namespace {

__device__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The block's max or sum of v, returned to every thread.
template <bool MAX>
__device__ float block_reduce(float v) {
  __shared__ float part[TP_THREADS / 32];
  __shared__ float result;
  v = MAX ? warp_max(v) : warp_sum(v);
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  if (l == 0) part[w] = v;
  __syncthreads();
  if (w == 0) {
    float x = l < TP_THREADS / 32 ? part[l] : (MAX ? -INFINITY : 0.0f);
    x = MAX ? warp_max(x) : warp_sum(x);
    if (l == 0) result = x;
  }
  __syncthreads();
  return result;
}

// Every bad row sets the flag and lowers rec[5] to the first of them (rows
// fit in int32: too_many_rows); record_first_kernel then writes that row,
// so the report names the first bad id, not whichever thread came first.
__global__ void check_ids_kernel(const int32_t *ids, size_t n, int64_t vocab, int32_t *rec) {
  const size_t T = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += T) {
    const int32_t id = ids[i];
    if (id >= 0 && id < vocab) continue;
    rec[4] = 1;
    atomicMin((unsigned int *)&rec[5], (unsigned int)i);
  }
}

// One thread, after check_ids_kernel: the first call's first bad row wins.
__global__ void record_first_kernel(const int32_t *ids, int call, int32_t *rec) {
  if (!rec[4] || rec[0]) return;
  const int32_t i = rec[5];
  rec[0] = 1;
  rec[1] = call;
  rec[2] = i;
  rec[3] = ids[i];
}

__global__ void lookup_kernel(const float *w, int64_t start, int64_t count, size_t dim, const int32_t *ids,
                              float *out, const int32_t *rec) {
  const size_t i = blockIdx.x;
  const int64_t r = (int64_t)ids[i] - start;
  const bool take = !rec[4] && r >= 0 && r < count;
  float *o = out + i * dim;
  const float *src = take ? w + (size_t)r * dim : nullptr;
  for (size_t c = threadIdx.x; c < dim; c += blockDim.x) o[c] = take ? src[c] : 0.0f;
}

// Thread (column c, group g) adds the rows of the ids whose local row r has
// r % groups == g, in index order.
__global__ void accumulate_kernel(float *dw, int64_t start, int64_t count, size_t dim, const int32_t *ids, size_t n,
                                  const float *dout, unsigned groups, const int32_t *rec) {
  if (rec[4]) return;
  const size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned g = blockIdx.y;
  if (c >= dim) return;
  for (size_t i = 0; i < n; i++) {
    const int64_t r = (int64_t)ids[i] - start;
    if (r < 0 || r >= count || (unsigned)(r % groups) != g) continue;
    dw[(size_t)r * dim + c] += dout[i * dim + c];
  }
}

__global__ void xent_max_kernel(const float *logits, size_t ld, int64_t count, float *mx) {
  const float *l = logits + (size_t)blockIdx.x * ld;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) m = fmaxf(m, l[j]);
  m = block_reduce<true>(m);
  if (threadIdx.x == 0) mx[blockIdx.x] = m;
}

__global__ void xent_sums_kernel(const float *logits, size_t ld, int64_t start, int64_t count,
                                 const int32_t *targets, size_t n, const float *mx, float *sums) {
  const size_t i = blockIdx.x;
  const float *l = logits + i * ld;
  const float m = mx[i];
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) s += expf(l[j] - m);
  s = block_reduce<false>(s);
  if (threadIdx.x == 0) {
    const int64_t t = (int64_t)targets[i] - start;
    sums[i] = s;
    sums[n + i] = t >= 0 && t < count ? l[t] - m : 0.0f;
  }
}

__global__ void xent_out_kernel(const float *logits, size_t ld, int64_t start, int64_t count, const int32_t *targets,
                                size_t n, const float *mx, float *sums, float scale, float *row_loss,
                                float *dlogits, const int32_t *rec) {
  if (rec[4]) return;
  const size_t i = blockIdx.x;
  const float m = mx[i], S = sums[i], z = sums[n + i];
  const float lse = logf(S), li = lse - z;
  __syncthreads(); // every thread has read sums[n + i] before it is overwritten
  if (threadIdx.x == 0) {
    sums[n + i] = li;
    if (row_loss) row_loss[i] = li;
  }
  if (!dlogits) return;
  const float *l = logits + i * ld;
  float *d = dlogits + i * ld; // may be l: each element is read before it is written
  const int64_t t = (int64_t)targets[i] - start;
  const float inv = 1.0f / S;
  for (int64_t j = threadIdx.x; j < (int64_t)ld; j += blockDim.x) {
    float g = 0.0f;
    if (j < count) g = (expf(l[j] - m) * inv - (j == t ? 1.0f : 0.0f)) * scale;
    d[j] = g;
  }
}

// *loss = inv_n * sum of x[0, n), summed in double in a fixed order.
__global__ void loss_sum_kernel(const float *x, size_t n, float inv_n, float *loss, const int32_t *rec) {
  if (rec[4]) return;
  __shared__ double part[TP_THREADS];
  double s = 0.0;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) s += (double)x[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = TP_THREADS / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = (float)(part[0] * (double)inv_n);
}

unsigned blocks_for(size_t n) {
  size_t b = (n + TP_THREADS - 1) / TP_THREADS;
  return (unsigned)(b < 4096 ? b : 4096);
}

int launched(void) { return (int)cudaGetLastError(); }

// One block per row: the grid's x dimension holds up to 2^31 - 1.
bool too_many_rows(size_t n) { return n > 0x7fffffffu; }

} // namespace

extern "C" int zs_k_tp_check_ids(const int32_t *ids, size_t n, int64_t vocab, int call, int32_t *rec, void *stream) {
  cudaStream_t st = (cudaStream_t)stream;
  cudaError_t e = cudaMemsetAsync(rec + 4, 0, sizeof(int32_t), st);
  if (e == cudaSuccess) e = cudaMemsetAsync(rec + 5, 0xff, sizeof(int32_t), st); /* no bad row yet */
  if (e != cudaSuccess) {
    (void)cudaGetLastError(); /* returned here, not again by the next launch's check */
    return (int)e;
  }
  if (!n) return 0;
  check_ids_kernel<<<blocks_for(n), TP_THREADS, 0, st>>>(ids, n, vocab, rec);
  record_first_kernel<<<1, 1, 0, st>>>(ids, call, rec);
  return launched();
}

extern "C" int zs_k_tp_lookup(const float *w, int64_t start, int64_t count, size_t dim, const int32_t *ids, size_t n,
                              float *out, const int32_t *rec, void *stream) {
  if (!n || !dim) return 0;
  if (too_many_rows(n)) return (int)cudaErrorInvalidValue;
  lookup_kernel<<<(unsigned)n, TP_THREADS, 0, (cudaStream_t)stream>>>(w, start, count, dim, ids, out, rec);
  return launched();
}

extern "C" int zs_k_tp_accumulate(float *dw, int64_t start, int64_t count, size_t dim, const int32_t *ids, size_t n,
                                  const float *dout, const int32_t *rec, void *stream) {
  if (!n || !dim || count <= 0) return 0;
  const unsigned groups = (unsigned)(count < TP_GROUPS ? count : TP_GROUPS);
  dim3 grid((unsigned)((dim + TP_THREADS - 1) / TP_THREADS), groups);
  accumulate_kernel<<<grid, TP_THREADS, 0, (cudaStream_t)stream>>>(dw, start, count, dim, ids, n, dout, groups, rec);
  return launched();
}

extern "C" int zs_k_tp_xent_max(const float *logits, size_t ld, int64_t count, size_t n, float *mx, void *stream) {
  if (!n) return 0;
  if (too_many_rows(n)) return (int)cudaErrorInvalidValue;
  xent_max_kernel<<<(unsigned)n, TP_THREADS, 0, (cudaStream_t)stream>>>(logits, ld, count, mx);
  return launched();
}

extern "C" int zs_k_tp_xent_sums(const float *logits, size_t ld, int64_t start, int64_t count, const int32_t *targets,
                                 size_t n, const float *mx, float *sums, void *stream) {
  if (!n) return 0;
  if (too_many_rows(n)) return (int)cudaErrorInvalidValue;
  xent_sums_kernel<<<(unsigned)n, TP_THREADS, 0, (cudaStream_t)stream>>>(logits, ld, start, count, targets, n, mx,
                                                                        sums);
  return launched();
}

extern "C" int zs_k_tp_xent_out(const float *logits, size_t ld, int64_t start, int64_t count, const int32_t *targets,
                                size_t n, const float *mx, float *sums, float scale, float inv_n, float *row_loss,
                                float *loss, float *dlogits, const int32_t *rec, void *stream) {
  if (!n) return 0;
  if (too_many_rows(n)) return (int)cudaErrorInvalidValue;
  cudaStream_t st = (cudaStream_t)stream;
  xent_out_kernel<<<(unsigned)n, TP_THREADS, 0, st>>>(logits, ld, start, count, targets, n, mx, sums, scale, row_loss,
                                                     dlogits, rec);
  int e = launched();
  if (e || !loss) return e;
  loss_sum_kernel<<<1, TP_THREADS, 0, st>>>(sums + n, n, inv_n, loss, rec);
  return launched();
}
