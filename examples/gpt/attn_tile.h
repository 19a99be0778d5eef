/* attn_tile.h: the rules of the fused causal attention (attn_cuda.cu), in plain
 * C for the host and the device: the tiles, which of them a block visits, the
 * causal mask and the online softmax's two steps. The kernels use exactly these
 * functions; tests/test_gpt_attn_tile.c runs the same tiling on the CPU against
 * a float64 reference (so the arithmetic of the algorithm is checked without a
 * GPU; the kernels' indexing only on one, tests/test_gpt_attn_gpu.c).
 *
 * Layout (ops.h's op_attention_*): qkv [B,T,3C], head h's q, k, v at columns
 * h*hs, C + h*hs, 2C + h*hs of a row; out [B,T,C], head h at column h*hs;
 * scale 1/sqrt(hs); row t attends to keys 0..t. */
#ifndef ZS_EXAMPLES_GPT_ATTN_TILE_H
#define ZS_EXAMPLES_GPT_ATTN_TILE_H

#include <math.h>

#if defined(__CUDACC__)
#define ATTN_HD static __host__ __device__ __forceinline__
#else
#define ATTN_HD static inline
#endif

/* Query rows a block (forward, dQ), keys a block (dK/dV), and keys or rows a
 * tile; 4 threads share a row (ATTN_QUAD), so a block has 256 threads. */
#define ATTN_TILE 64
#define ATTN_QUAD 4

/* Head sizes the kernels are built for (a template each); others are refused. */
ATTN_HD int attn_head_supported(int hs) { return hs == 16 || hs == 32 || hs == 64 || hs == 128; }

/* Tiles of ATTN_TILE covering n rows (the last may be partial). */
ATTN_HD int attn_tiles(int n) { return (n + ATTN_TILE - 1) / ATTN_TILE; }

/* The key tiles a query tile qt visits: keys 0 .. its last row (min(T, (qt+1)
 * TILE) - 1); the tiles after that hold only keys above every row's diagonal
 * (fully masked) and are skipped. */
ATTN_HD int attn_key_tiles(int qt, int T) {
  int last = (qt + 1) * ATTN_TILE < T ? (qt + 1) * ATTN_TILE - 1 : T - 1;
  return last / ATTN_TILE + 1;
}

/* The first query tile a key tile kt meets (the rest up to attn_tiles(T)):
 * queries below kt * TILE see none of its keys. */
ATTN_HD int attn_first_query_tile(int kt) { return kt; }

/* Row i sees key j: causal, and both inside the sequence. */
ATTN_HD int attn_visible(int i, int j, int T) { return i < T && j <= i; }

/* The online softmax's rescale when a row's running max goes from m to mn:
 * exp(m - mn), 0 from the start (m = -inf), 1 while the row has seen nothing
 * (mn = -inf: a row past T). */
ATTN_HD float attn_rescale(float m, float mn) { return mn == -INFINITY ? 1.0f : expf(m - mn); }

/* A masked score (-inf) has probability 0; else exp(s - m). */
ATTN_HD float attn_prob(float s, float m) { return s == -INFINITY ? 0.0f : expf(s - m); }

#endif
