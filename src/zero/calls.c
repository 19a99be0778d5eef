/* The ranks' calls compared (docs/design.md 2.11). Stage 3's gathers of units
 * gathered on demand and every zs_reduce that issues a collective are
 * collectives the ranks match by their order: each is hashed and logged here
 * as it is made; zs_step carries the hash in the norm's own all-reduces
 * (step.c, grad_sumsq) and, when the ranks' hashes differ, names the ranks
 * and the first call that differs (the failure path alone). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zero/engine_impl.h"

/* One call: kind 0 a forward gather, 1 a backward gather, 2 a reduce's
 * collective. */
void zs__eng_call_note(zs_engine_t *zs, int unit, int kind) {
  const int32_t code = unit * 4 + kind;
  zs->call_hash = (zs->call_hash ^ ((uint64_t)code + 1)) * 1099511628211ull;
  if (zs->call_n < ZS_CALL_LOG) zs->call_log[zs->call_cur][zs->call_n] = code;
  zs->call_n++;
}

/* ---- the verdict in the norm's buffer ---------------------------------------
 * For each model-parallel position m the slots [1 + 2m] and [2 + 2m] hold h
 * and h * h of this rank's hash (cut to b bits), zeros elsewhere. Summed over
 * a position's n data-parallel ranks they give S1 and S2, and the hashes were
 * all equal exactly when n * S2 = S1 * S1 (the sum of the squared deviations
 * from the mean, n * S2 - S1 * S1, is 0 only then). Each rank reads every
 * position's, so all of them agree on the verdict. */

/* Bits of the hash at n ranks: n * (2^b)^2 stays below 2^53. */
static int calls_bits(int n) {
  int lg = 0;
  while (lg < 30 && (1 << lg) < n) lg++;
  return (53 - lg) / 2;
}

void zs__eng_calls_close(zs_engine_t *zs) {
  const uint64_t h = zs->call_hash;
  zs->call_prev_hash = h, zs->call_prev_n = zs->call_n;
  zs->call_cur ^= 1; /* the log just closed stays for zs__eng_calls_name */
  zs->call_hash = 0, zs->call_n = 0;
  if (zs->nslots <= 1) return;
  const int b = calls_bits(zs->world);
  const uint64_t x = (h ^ (h >> 29) ^ (h >> 47)) & ((1ull << b) - 1);
  const int m = zs->mp_comm ? zs_comm_rank(zs->mp_comm) : 0;
  for (int k = 1; k < zs->nslots; k++) zs->hscalar[k] = 0.0;
  zs->hscalar[1 + 2 * m] = (double)x;
  zs->hscalar[2 + 2 * m] = (double)x * (double)x;
}

int zs__eng_calls_agree(const zs_engine_t *zs) {
  const unsigned __int128 n = (unsigned)zs->world;
  for (int k = 1; k + 1 < zs->nslots; k += 2) {
    const unsigned __int128 s1 = (uint64_t)zs->hscalar[k], s2 = (uint64_t)zs->hscalar[k + 1];
    if (n * s2 != s1 * s1) return 0;
  }
  return 1;
}

/* ---- naming the ranks (a refused step) ------------------------------------- */

/* A logged call in words; code -1: none (the rank made no more). */
static void call_words(const zs_engine_t *zs, int32_t code, char *out, size_t n) {
  if (code < 0) {
    snprintf(out, n, "none (it made no more)");
    return;
  }
  const int unit = code / 4, kind = code % 4;
  const char *name = unit < zs->nunits ? zs->units[unit].name : "?";
  snprintf(out, n, "%s(%d) '%.16s'%s", kind == 2 ? "zs_reduce" : "zs_gather", unit, name,
           kind == 0 ? " in forward" : kind == 1 ? " in backward" : "");
}

/* root's logged calls [off, off + CHUNK) from it to every rank, -1 past its
 * count */
enum { CHUNK = 64 };
static zs_status_t log_chunk(zs_engine_t *zs, int root, int off, int32_t *out) {
  const int32_t *log = zs->call_log[zs->call_cur ^ 1];
  const int64_t count = zs->call_prev_n;
  for (int j = 0; j < CHUNK; j++) out[j] = off + j < count && off + j < ZS_CALL_LOG ? log[off + j] : -1;
  return zs__eng_xbroadcast(zs, out, CHUNK * sizeof *out, root);
}

/* The first call at which rank d's log and rank q's differ, into *at and
 * their codes (-1: none); *at -1 where their first ZS_CALL_LOG alike. */
static zs_status_t first_difference(zs_engine_t *zs, int q, int64_t nq, int d, int64_t nd, int64_t *at,
                                    int32_t *cq, int32_t *cd) {
  *at = -1;
  const int64_t longest = nq > nd ? nq : nd, end = longest < ZS_CALL_LOG ? longest : ZS_CALL_LOG;
  for (int off = 0; off < end; off += CHUNK) {
    int32_t a[CHUNK], b[CHUNK];
    ZS_CHECK(log_chunk(zs, q, off, a));
    ZS_CHECK(log_chunk(zs, d, off, b));
    for (int j = 0; j < CHUNK && off + j < end; j++)
      if (a[j] != b[j]) {
        *at = off + j, *cq = a[j], *cd = b[j];
        return ZS_OK;
      }
  }
  return ZS_OK;
}

/* ranks[0..n) as "the calls of ranks 1, 3 and 5" (at most 6 named) */
static void rank_list(const int *r, int n, const char *dp, char *out, size_t len) {
  int o = snprintf(out, len, "the calls of %s%s %d", dp, n > 1 ? "ranks" : "rank", r[0]);
  for (int i = 1; i < n && i < 6 && o > 0 && (size_t)o < len; i++)
    o += snprintf(out + o, len - (size_t)o, i + 1 == n ? " and %d" : ", %d", r[i]);
  if (n > 6 && o > 0 && (size_t)o < len) snprintf(out + o, len - (size_t)o, " and %d more", n - 6);
}

zs_status_t zs__eng_calls_name(zs_engine_t *zs, int *found, char *out, size_t len) {
  const int W = zs->world;
  *found = 0;
  const char *dp = zs->mp_comm ? "data-parallel " : "";
  out[0] = 0;
  if (W < 2) return ZS_OK;
  /* every rank's hash and count, by one all-reduce of 2W int64 (each rank
   * fills its own pair) */
  int64_t *v = calloc((size_t)W * 2, sizeof *v);
  int *dev = malloc((size_t)W * sizeof *dev);
  /* whether every rank has the memory, agreed first: a rank without it must
   * not leave the others waiting in the all-reduce below */
  int64_t ok = v && dev;
  zs_status_t st = zs__eng_xall_reduce(zs, &ok, 1, ZS_MIN);
  if (st == ZS_OK && !ok) st = ZS_FAIL(zs->err, ZS_ERR_NOMEM, "no host memory on a rank to name the ranks");
  if (st != ZS_OK) goto done;
  memcpy(&v[2 * zs->rank], &zs->call_prev_hash, sizeof(int64_t));
  v[2 * zs->rank + 1] = zs->call_prev_n;
  if ((st = zs__eng_xall_reduce(zs, v, 2 * W, ZS_SUM)) != ZS_OK) goto done;
  /* the calls most ranks made (a tie: the lowest rank's) */
  int q = 0, best = 0, nd = 0;
  for (int i = 0; i < W; i++) {
    int c = 0;
    for (int j = 0; j < W; j++) c += v[2 * j] == v[2 * i];
    if (c > best) best = c, q = i;
  }
  for (int i = 0; i < W; i++)
    if (v[2 * i] != v[2 * q]) dev[nd++] = i;
  if (nd == 0) {
    if (zs->mp_comm)
      snprintf(out, len, "this engine's data-parallel ranks (model-parallel rank %d) made the same calls; those of "
               "another model-parallel position or engine did not", zs_comm_rank(zs->mp_comm));
    else
      snprintf(out, len, "this engine's ranks made the same calls; those of another engine of the group did not");
    goto done;
  }
  *found = 1;
  const int d = dev[0];
  int64_t at;
  int32_t cq = -1, cd = -1;
  if ((st = first_difference(zs, q, v[2 * q + 1], d, v[2 * d + 1], &at, &cq, &cd)) != ZS_OK) goto done;
  /* as many ranks made d's calls as the reference's: which side is odd
   * cannot be told (a trial's 2 ranks: rank 0 reordered, rank 1 was named) */
  int same_d = 0;
  for (int j = 0; j < W; j++) same_d += v[2 * j] == v[2 * d];
  const int tie = same_d == best;
  char who[160], wq[64], wd[64];
  rank_list(dev, nd, dp, who, sizeof who);
  if (zs->mp_comm) { /* which position's data-parallel group this is */
    const size_t o = strlen(who);
    snprintf(who + o, sizeof who - o, " (model-parallel rank %d)", zs_comm_rank(zs->mp_comm));
  }
  if (at < 0) {
    snprintf(out, len, "%s differ from rank %d's (%d of %d alike with it%s) after their first %d calls", who, q, best, W,
             tie ? ", as many with the other" : "", ZS_CALL_LOG);
    goto done;
  }
  call_words(zs, cq, wq, sizeof wq);
  call_words(zs, cd, wd, sizeof wd);
  snprintf(out, len, "%s differ from rank %d's (%d of %d alike with it%s): rank %d's call %lld was %s, rank %d's %s",
           who, q, best, W, tie ? ", as many with the other: either side may be the odd one" : "", d,
           (long long)at + 1, wd, q, wq);
done:
  free(v);
  free(dev);
  return st;
}
