/* ZeRO++'s qgZ (cfg.quantized_gradients, issue 32 item 4): a unit's gradient
 * reduce-scatter at stages 2-3 as two int8 or int4 all-to-alls.
 *
 * N ranks (the shard group: the world, or hybrid's shard_group, whose exact
 * replica all-reduce follows as without qgZ) in G = N/K groups of K
 * consecutive ranks (a node); shard rank r = m K + l is member l of group m
 * and owns shard r (S elements) of the unit.
 *   1. Inside the group: rank (m, l) packs, for each member l' and each group
 *      m', shard m' K + l' of its gradient (kernels/wquant.h: int8 codes and a
 *      scale a block), laid out by member, and the all-to-all over the group
 *      hands member l' the G shards it will own or forward; each rank sums the
 *      K packed copies of each of its G shards in fp32 (in member order).
 *   2. Across the groups (the ranks of member index l, one per group): each
 *      rank packs its G node sums, the all-to-all hands shard m' K + l to group
 *      m', and the owner sums the G packed node sums in fp32 (in group order).
 * Bytes a rank sends: (K-1)/K of N packed shards inside the node, (G-1)/G of G
 * packed shards across: about (c + 4/B)(P (K-1)/K + (P/K)(G-1)/G), c = 1 byte
 * an element for int8 and 1/2 for int4 (two codes a byte), against the ring's
 * 4 P (N-1)/N in fp32. One group (K = N) skips step 2, groups of one
 * (K = 1) step 1's all-to-all.
 *
 * Error per element of the owner's sum (fp32 rounding aside): at most half a
 * scale of each rank's block holding it (step 1: K G = N quantizations) plus
 * half a scale of each node sum's block (step 2: G of them), a scale being the
 * block's absmax / 127 for int8, / 7 for int4 (test_engine_qg checks both
 * bounds against float64).
 * Every path sums in a fixed order, so a run is deterministic. */
#include "kernels/wquant.h"
#include "zero/engine_impl.h"

/* the packed bytes of a shard of S elements, at cfg.quantized_gradients bits */
size_t zs__eng_qg_bytes(const zs_config_t *c, size_t S) {
  size_t B = zs__eng_wq_block(c);
  return c->quantized_gradients == 4 ? zs_wq4_bytes(S, B) : zs_wq_bytes(S, B);
}

static zs_status_t qg_pack(zs_engine_t *zs, zs_stream_t *s, void *dst, const void *src, zs_dtype_t dt, size_t n,
                           size_t B) {
  if (zs->cfg.quantized_gradients == 4) return zs__wq4_pack(zs->dev, s, dst, src, dt, n, B);
  return zs__wq_pack(zs->dev, s, dst, src, dt, n, B);
}

static zs_status_t qg_sum(zs_engine_t *zs, zs_stream_t *s, float *dst, const void *src, size_t n, size_t B, int parts,
                          size_t stride) {
  if (zs->cfg.quantized_gradients == 4) return zs__wq4_unpack_sum(zs->dev, s, dst, src, n, B, parts, stride);
  return zs__wq_unpack_sum(zs->dev, s, dst, src, n, B, parts, stride);
}

zs_status_t zs__eng_qg_reduce(zs_engine_t *zs, zs_unit_t *u, const void *src, zs_dtype_t dt, float **out) {
  zs_stream_t *rs = zs->rs_stream;
  const size_t N = (size_t)zs->nshard, K = (size_t)zs->nqg, G = N / K, S = (size_t)u->shard;
  const size_t B = zs__eng_wq_block(&zs->cfg), Q = zs__eng_qg_bytes(&zs->cfg, S), eb = zs_dtype_size(dt);
  void *a = NULL, *b = NULL, *part = NULL;
  *out = NULL;
  ZS_CHECK(zs__eng_alloc_on(zs, N * Q, ZS_MEM_COMM, rs, &a));
  ZS_CHECK(zs__eng_alloc_on(zs, N * Q, ZS_MEM_COMM, rs, &b));
  ZS_CHECK(zs__eng_alloc_on(zs, G * S * 4, ZS_MEM_COMM, rs, &part));
  ZS_CHECK(zs__eng_alloc_on(zs, S * 4, ZS_MEM_COMM, rs, (void **)out));
  zs_status_t st = ZS_OK;
  /* 1. every shard packed, by the member that will hold it, then its group */
  for (size_t dl = 0; st == ZS_OK && dl < K; dl++)
    for (size_t m = 0; st == ZS_OK && m < G; m++)
      st = qg_pack(zs, rs, (char *)a + (dl * G + m) * Q, (const char *)src + (m * K + dl) * S * eb, dt, S, B);
  const void *got = a;
  if (st == ZS_OK && K > 1) {
    st = zs__eng_comm_order(zs, zs->qg_intra, rs);
    if (st == ZS_OK) st = zs_comm_all_to_all(zs->qg_intra, a, b, G * Q, ZS_UINT8, rs);
    if (st == ZS_OK) st = zs__eng_comm_mark(zs, zs->qg_intra, rs);
    got = b;
  }
  /* member j's block holds my G shards from j: shard m at j G Q + m Q */
  for (size_t m = 0; st == ZS_OK && m < G; m++)
    st = qg_sum(zs, rs, (float *)part + m * S, (const char *)got + m * Q, S, B, (int)K, G * Q);
  /* 2. the node sums across the groups */
  if (st == ZS_OK && G == 1) {
    st = zs_memcpy_async(zs->dev, *out, part, S * 4, ZS_COPY_D2D, rs);
  } else if (st == ZS_OK) {
    for (size_t m = 0; st == ZS_OK && m < G; m++)
      st = qg_pack(zs, rs, (char *)a + m * Q, (const float *)part + m * S, ZS_FP32, S, B);
    if (st == ZS_OK) st = zs__eng_comm_order(zs, zs->qg_inter, rs);
    if (st == ZS_OK) st = zs_comm_all_to_all(zs->qg_inter, a, b, Q, ZS_UINT8, rs);
    if (st == ZS_OK) st = zs__eng_comm_mark(zs, zs->qg_inter, rs);
    if (st == ZS_OK) st = qg_sum(zs, rs, *out, b, S, B, (int)G, Q);
  }
  zs__eng_free_on(zs, &a, N * Q, ZS_MEM_COMM, rs);
  zs__eng_free_on(zs, &b, N * Q, ZS_MEM_COMM, rs);
  zs__eng_free_on(zs, &part, G * S * 4, ZS_MEM_COMM, rs);
  if (st != ZS_OK) {
    zs__eng_free_on(zs, (void **)out, S * 4, ZS_MEM_COMM, rs);
    return ZS_FAIL(zs->err, st, "quantized gradient reduction of unit '%s' failed on rank %d: %s", u->name, zs->rank,
                   zs_last_error());
  }
  return ZS_OK;
}
