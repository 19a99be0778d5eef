// kernels/moe.cu: the compute of the mixture-of-experts layer (zeroshard/moe.h)
// on a CUDA stream, between the all-to-alls src/moe queues.
//
// Plain C version: src/moe/moe_cpu.c (the cpu device's, sums in double), which
// tests/test_moe.c checks against the float64 reference tests/test_moe_ref.h.
// Here the softmax and the gate sums are in double as there; the row sums of
// the combine and the gate gradient are fp32, so results differ from the cpu
// device's in the last bits.
//
// Layout: the router works one thread per token (E and k are small); the slot
// positions one block per expert, scanning the tokens in order in chunks of the
// block (a block-wide exclusive scan), so positions follow token order without
// atomics; row moves one block per row, threads over the columns.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "kernels/moe.h"

#define MOE_THREADS 256

namespace {

int launched(void) { return (int)cudaGetLastError(); }
unsigned blocks(long long n, int per) { return (unsigned)((n + per - 1) / per); }

// ---- routing -----------------------------------------------------------------------

// One thread per token: softmax (double sums), the k largest logits (ties to the
// lower index), their gates.
__global__ void k_softmax_topk(const float *logits, int T, int E, int k, int normalize, float *probs,
                               int32_t *topi, float *topw) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= T) return;
  const float *l = logits + (size_t)t * E;
  float *p = probs + (size_t)t * E;
  double mx = l[0], sum = 0;
  for (int e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
  for (int e = 0; e < E; e++) sum += exp((double)l[e] - mx);
  for (int e = 0; e < E; e++) p[e] = (float)(exp((double)l[e] - mx) / sum);
  int32_t *idx = topi + (size_t)t * k;
  double s = 0;
  for (int j = 0; j < k; j++) {
    int best = -1;
    for (int e = 0; e < E; e++) {
      bool taken = false;
      for (int q = 0; q < j && !taken; q++) taken = idx[q] == e;
      if (!taken && (best < 0 || l[e] > l[best])) best = e;
    }
    idx[j] = best;
    s += p[best];
  }
  for (int j = 0; j < k; j++) topw[(size_t)t * k + j] = normalize ? (float)(p[idx[j]] / s) : p[idx[j]];
}

// One block per expert: each slot choosing it gets its place among them in token
// order (into row, for now); routed[e], kept[e] = min(routed, cap).
__global__ void k_positions(const int32_t *topi, int T, int k, int64_t cap, int32_t *row, int64_t *counts,
                            int E) {
  __shared__ int scan[MOE_THREADS];
  const int e = blockIdx.x, tid = threadIdx.x;
  int64_t base = 0;
  for (int start = 0; start < T; start += MOE_THREADS) {
    int t = start + tid, slot = -1;
    if (t < T)
      for (int j = 0; j < k; j++)
        if (topi[(size_t)t * k + j] == e) slot = j;
    int flag = slot >= 0;
    scan[tid] = flag;
    __syncthreads();
    for (int o = 1; o < MOE_THREADS; o <<= 1) {  // inclusive Hillis-Steele scan
      int v = tid >= o ? scan[tid - o] : 0;
      __syncthreads();
      scan[tid] += v;
      __syncthreads();
    }
    if (flag) row[(size_t)t * k + slot] = (int32_t)(base + scan[tid] - 1);
    base += scan[MOE_THREADS - 1];
    __syncthreads();
  }
  if (tid == 0) {
    counts[E + e] = base;
    counts[e] = base < cap ? base : cap;
  }
}

// One block: the experts' row offsets (counts[2E + e], serially: E is small) and
// the aux loss (each thread some experts' sum of probabilities, then a block sum).
__global__ void k_offsets_aux(const float *probs, int T, int E, int k, int64_t *counts, float *aux) {
  __shared__ double part[MOE_THREADS];
  const int tid = threadIdx.x;
  if (tid == 0) {
    int64_t off = 0;
    for (int e = 0; e < E; e++) counts[2 * E + e] = off, off += counts[e];
  }
  double a = 0;
  for (int e = tid; e < E; e += MOE_THREADS) {
    double P = 0;
    for (int t = 0; t < T; t++) P += probs[(size_t)t * E + e];
    a += (double)counts[E + e] * P;
  }
  part[tid] = a;
  __syncthreads();
  for (int o = MOE_THREADS / 2; o > 0; o >>= 1) {
    if (tid < o) part[tid] += part[tid + o];
    __syncthreads();
  }
  if (tid == 0) *aux = T ? (float)(part[0] * E / ((double)T * T * k)) : 0.0f;
}

// One thread per slot: its place becomes its row, or -1 past the capacity.
__global__ void k_rows(const int32_t *topi, int n, int64_t cap, const int64_t *off, int32_t *row) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t pos = row[i];
  row[i] = pos < cap ? (int32_t)(off[topi[i]] + pos) : -1;
}

// One thread per token: d logits through the gates and the softmax, plus aux.
__global__ void k_route_bwd(const float *probs, const int32_t *topi, const float *topw, const float *dgate,
                            const int64_t *routed, int T, int E, int k, int normalize, double c_scale,
                            float *dlogits) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= T) return;
  const float *p = probs + (size_t)t * E, *w = topw + (size_t)t * k, *dw = dgate + (size_t)t * k;
  const int32_t *idx = topi + (size_t)t * k;
  double s = 0, dot_w = 0, dot = 0;
  for (int j = 0; j < k; j++) s += p[idx[j]], dot_w += (double)dw[j] * w[j];
#define GP(j) (normalize ? ((double)dw[j] - dot_w) / s : (double)dw[j])
  for (int e = 0; e < E; e++) dot += (double)p[e] * c_scale * (double)routed[e];
  for (int j = 0; j < k; j++) dot += (double)p[idx[j]] * GP(j);
  for (int e = 0; e < E; e++) {
    double dp = c_scale * (double)routed[e];
    for (int j = 0; j < k; j++)
      if (idx[j] == e) dp += GP(j);
    dlogits[(size_t)t * E + e] = (float)((double)p[e] * (dp - dot));
  }
#undef GP
}

// ---- moving rows ---------------------------------------------------------------------

__global__ void k_permute(const int32_t *row, int k, int d, const float *x, float *tok) {
  const size_t i = blockIdx.x;
  const int32_t r = row[i];
  if (r < 0) return;
  for (int c = threadIdx.x; c < d; c += blockDim.x) tok[(size_t)r * d + c] = x[(i / k) * d + c];
}

__global__ void k_unpermute(const int32_t *row, const float *topw, int k, int d, const float *tok, float *out,
                            int weighted) {
  const size_t t = blockIdx.x;
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < k; j++) {
      int32_t r = row[t * k + j];
      if (r >= 0) acc += (weighted ? topw[t * k + j] : 1.0f) * tok[(size_t)r * d + c];
    }
    out[t * d + c] = acc;
  }
}

__global__ void k_combine_bwd(const int32_t *row, const float *topw, int k, int d, const float *dy,
                              const float *tok_b, float *tok_a, float *dgate) {
  __shared__ float part[MOE_THREADS];
  const size_t i = blockIdx.x;
  const int32_t r = row[i];
  const float w = topw[i], *g = dy + (i / k) * d;
  float dot = 0.0f;
  if (r >= 0)
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
      tok_a[(size_t)r * d + c] = w * g[c];
      dot += g[c] * tok_b[(size_t)r * d + c];
    }
  part[threadIdx.x] = dot;
  __syncthreads();
  for (int o = MOE_THREADS / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) part[threadIdx.x] += part[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) dgate[i] = r >= 0 ? part[0] : 0.0f;
}

// One block per (source, local expert) chunk: its offsets in both orders (by a
// serial walk over the counts, E entries), then the rows.
__global__ void k_reorder(const int64_t *recv, int nranks, int El, int d, const float *src, float *dst,
                          int to_expert_major) {
  __shared__ int64_t off[2];
  const int b = blockIdx.x, s = b / El, e = b % El;
  if (threadIdx.x == 0) {
    int64_t a = 0, x = 0;
    for (int q = 0; q < b; q++) a += recv[q];
    for (int f = 0; f < e; f++)
      for (int q = 0; q < nranks; q++) x += recv[q * El + f];
    for (int q = 0; q < s; q++) x += recv[q * El + e];
    off[0] = a, off[1] = x;
  }
  __syncthreads();
  const size_t n = (size_t)recv[b] * d;
  const size_t from = (size_t)off[to_expert_major ? 0 : 1] * d, to = (size_t)off[to_expert_major ? 1 : 0] * d;
  for (size_t c = threadIdx.x; c < n; c += blockDim.x) dst[to + c] = src[from + c];
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------

extern "C" int zs_k_moe_route(const float *logits, int T, int E, int k, int normalize, int64_t cap, float *probs,
                              int32_t *topi, float *topw, int32_t *row, int64_t *counts, float *aux, void *stream) {
  cudaStream_t s = (cudaStream_t)stream;
  cudaError_t e = cudaMemsetAsync(counts, 0, sizeof(int64_t) * 3 * (size_t)E, s);
  if (e != cudaSuccess) {
    (void)cudaGetLastError(); /* returned here, not again by the next launch's check */
    return (int)e;
  }
  if (T > 0) {
    k_softmax_topk<<<blocks(T, 128), 128, 0, s>>>(logits, T, E, k, normalize, probs, topi, topw);
    k_positions<<<E, MOE_THREADS, 0, s>>>(topi, T, k, cap, row, counts, E);
  }
  k_offsets_aux<<<1, MOE_THREADS, 0, s>>>(probs, T, E, k, counts, aux);
  if (T > 0)
    k_rows<<<blocks((long long)T * k, MOE_THREADS), MOE_THREADS, 0, s>>>(topi, T * k, cap, counts + 2 * E, row);
  return launched();
}

extern "C" int zs_k_moe_permute(const int32_t *row, int T, int k, int d, const float *x, float *tok, void *stream) {
  if (T > 0) k_permute<<<(unsigned)T * k, MOE_THREADS, 0, (cudaStream_t)stream>>>(row, k, d, x, tok);
  return launched();
}

extern "C" int zs_k_moe_unpermute(const int32_t *row, const float *topw, int T, int k, int d, const float *tok,
                                  float *out, int weighted, void *stream) {
  if (T > 0) k_unpermute<<<(unsigned)T, MOE_THREADS, 0, (cudaStream_t)stream>>>(row, topw, k, d, tok, out, weighted);
  return launched();
}

extern "C" int zs_k_moe_combine_bwd(const int32_t *row, const float *topw, int T, int k, int d, const float *dy,
                                    const float *tok_b, float *tok_a, float *dgate, void *stream) {
  if (T > 0)
    k_combine_bwd<<<(unsigned)T * k, MOE_THREADS, 0, (cudaStream_t)stream>>>(row, topw, k, d, dy, tok_b, tok_a, dgate);
  return launched();
}

extern "C" int zs_k_moe_reorder(const int64_t *recv, int nranks, int El, int d, const float *src, float *dst,
                                int to_expert_major, void *stream) {
  k_reorder<<<(unsigned)(nranks * El), MOE_THREADS, 0, (cudaStream_t)stream>>>(recv, nranks, El, d, src, dst,
                                                                             to_expert_major);
  return launched();
}

extern "C" int zs_k_moe_route_bwd(const float *probs, const int32_t *topi, const float *topw, const float *dgate,
                                  const int64_t *routed, int T, int E, int k, int normalize, float aux_weight,
                                  float *dlogits, void *stream) {
  double c_scale = T ? (double)aux_weight * E / ((double)T * T * k) : 0.0;
  if (T > 0)
    k_route_bwd<<<blocks(T, 128), 128, 0, (cudaStream_t)stream>>>(probs, topi, topw, dgate, routed, T, E, k,
                                                                   normalize, c_scale, dlogits);
  return launched();
}
