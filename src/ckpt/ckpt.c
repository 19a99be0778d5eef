/* Checkpoints: what the other checkpoint files share (see ckpt_impl.h for the
 * format): CRCs, the manifest's checksum, the collectives on the engine's comm,
 * engine-state helpers, file commits and names. */
#include <ctype.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#ifdef ZS_HAVE_ISAL
#include <isa-l/crc.h>
#endif

#include "ckpt/ckpt_impl.h"
#include "common/half.h"
#include "kernels/optim_state.h"

const char *const zs__ck_kind_names[K_COUNT] = {"master", "m", "v"};

/* CRC-32 (the gzip polynomial, zlib's crc32): ISA-L's carry-less-multiply
 * version where the build has it (the same value, chained alike), else zlib's. */
uint32_t zs__ck_crc_more(uint32_t c, const void *p, size_t n) {
#ifdef ZS_HAVE_ISAL
  return crc32_gzip_refl(c, (const unsigned char *)p, (uint64_t)n);
#else
  uLong r = c;
  const Bytef *b = p;
  while (n) { /* zlib takes uInt lengths */
    uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
    r = crc32(r, b, k);
    b += k;
    n -= k;
  }
  return (uint32_t)r;
#endif
}

void zs__ck_xfsz_hold(ck_xfsz_t *h) {
  sigset_t set, pend;
  sigemptyset(&set);
  sigaddset(&set, SIGXFSZ);
  pthread_sigmask(SIG_BLOCK, &set, &h->old);
  h->pending = sigpending(&pend) == 0 && sigismember(&pend, SIGXFSZ) == 1;
}

void zs__ck_xfsz_release(ck_xfsz_t *h) {
  if (!h->pending) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGXFSZ);
    const struct timespec none = {0, 0};
    while (sigtimedwait(&set, NULL, &none) == SIGXFSZ) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &h->old, NULL);
}

uint32_t zs__ck_crc(const void *p, size_t n) { return zs__ck_crc_more((uint32_t)crc32(0L, Z_NULL, 0), p, n); }

/* ---- the manifest's checksum ------------------------------------------------------ */

/* The checksum member replaces the object's closing brace, so the text before
 * it is the printed object minus that brace (and the white space before it). */
char *zs__ck_manifest_seal(const char *json, uint32_t *crc) {
  size_t n = strlen(json);
  while (n && json[n - 1] != '}') n--;
  if (n) n--;
  while (n && isspace((unsigned char)json[n - 1])) n--;
  char *t = malloc(n + CK_SEAL_LEN + 1);
  if (!t) return NULL;
  memcpy(t, json, n);
  *crc = zs__ck_crc(t, n);
  snprintf(t + n, CK_SEAL_LEN + 1, CK_SEAL_HEAD "%08" PRIx32 CK_SEAL_TAIL, *crc);
  return t;
}

int zs__ck_manifest_sealed(const char *text, size_t n, uint32_t *crc, size_t *body) {
  const size_t hl = sizeof CK_SEAL_HEAD - 1, tl = sizeof CK_SEAL_TAIL - 1;
  if (n < CK_SEAL_LEN) return 0;
  const char *s = text + n - CK_SEAL_LEN;
  if (memcmp(s, CK_SEAL_HEAD, hl) != 0 || memcmp(s + hl + 8, CK_SEAL_TAIL, tl) != 0) return 0;
  uint32_t v = 0;
  for (size_t i = hl; i < hl + 8; i++) {
    int d = s[i] >= '0' && s[i] <= '9' ? s[i] - '0' : s[i] >= 'a' && s[i] <= 'f' ? s[i] - 'a' + 10 : -1;
    if (d < 0) return 0;
    v = v << 4 | (uint32_t)d;
  }
  *crc = v;
  *body = n - CK_SEAL_LEN;
  return 1;
}

/* ---- collectives on the engine's comm (device buffers, as NCCL wants) -------------- */

/* v[0..n) = element-wise max over ranks, through the engine's scratch (no
 * allocation: see xdev in engine_impl.h). n <= zs->xcount. */
zs_status_t zs__ck_max_i64(zs_engine_t *zs, int64_t *v, int n) { return zs__ck_max_i64_in(zs, v, n, 1); }

zs_status_t zs__ck_max_i64_in(zs_engine_t *zs, int64_t *v, int n, int mesh) {
  if (n > zs->xcount) return ZS_FAIL(zs->err, ZS_ERR_INTERNAL, "checkpoint: %d values exceed the scratch", n);
  size_t bytes = (size_t)n * sizeof(int64_t);
  zs_status_t st;
  memcpy(zs->xhost, v, bytes);
  if ((st = zs_memcpy_async(zs->dev, zs->xdev, zs->xhost, bytes, ZS_COPY_H2D, zs->compute)) == ZS_OK &&
      (zs->world == 1 ||
       (st = zs_comm_all_reduce(zs->comm, zs->xdev, zs->xdev, (size_t)n, ZS_INT64, ZS_MAX, zs->compute)) == ZS_OK) &&
      /* with a model-parallel group every checkpoint agreement spans the mesh */
      (!mesh || !zs__ck_mp_size(zs) ||
       (st = zs_comm_all_reduce(zs->mp_comm, zs->xdev, zs->xdev, (size_t)n, ZS_INT64, ZS_MAX, zs->compute)) == ZS_OK) &&
      (st = zs_memcpy_async(zs->dev, zs->xhost, zs->xdev, bytes, ZS_COPY_D2H, zs->compute)) == ZS_OK &&
      (st = zs_stream_synchronize(zs->dev, zs->compute)) == ZS_OK)
    memcpy(v, zs->xhost, bytes);
  return st;
}

/* The failing rank's message on every rank: it packs its text (own) 7 bytes to
 * an int64 (top byte 0, so never negative), every other rank (own NULL) zeros,
 * and a max over the mesh leaves its text. Only on the failure path. */
static void share_message(zs_engine_t *zs, const char *own, char *out, size_t cap) {
  enum { N = ZS_ERRBUF / 7 };
  int n = zs->xcount < N ? zs->xcount : N;
  int64_t w[N];
  memset(w, 0, sizeof w);
  for (int i = 0; own && i < n * 7 - 1 && own[i]; i++) w[i / 7] |= (int64_t)(unsigned char)own[i] << (8 * (i % 7));
  size_t k = 0;
  if (zs__ck_max_i64(zs, w, n) == ZS_OK)
    for (int i = 0; i < n * 7 && k + 1 < cap; i++) {
      char c = (char)((w[i / 7] >> (8 * (i % 7))) & 0xff);
      if (!c) break;
      out[k++] = c;
    }
  out[k] = 0;
}

/* Every rank learns whether every rank succeeded. A failing rank keeps its own
 * status and message; the others report the failing rank (of those that
 * failed: the largest status, then model-parallel rank, then rank) and its
 * message. */
zs_status_t zs__ck_agree(zs_engine_t *zs, zs_status_t mine, const char *what) {
  int64_t me = ((int64_t)mine << 40) | ((int64_t)zs->mp_rank << 20) | (int64_t)zs->rank;
  int64_t v = mine == ZS_OK ? 0 : me;
  char own[ZS_ERRBUF] = "", theirs[ZS_ERRBUF];
  if (mine != ZS_OK) snprintf(own, sizeof own, "%s", zs_last_error());
  zs_status_t st = zs__ck_max_i64(zs, &v, 1);
  if (st != ZS_OK) return ZS_FAIL(zs->err, st, "%s: exchanging the outcome between ranks failed: %s", what, zs_last_error());
  if (v == 0) return ZS_OK;
  share_message(zs, v == me ? own : NULL, theirs, sizeof theirs);
  if (mine != ZS_OK) return mine; /* its own message stands */
  zs_status_t other = (zs_status_t)(v >> 40);
  int rank = (int)(v & 0xfffff), mp = (int)((v >> 20) & 0xfffff);
  const char *why = theirs[0] ? theirs : "see that rank's message";
  if (zs__ck_mp_size(zs))
    return ZS_FAIL(zs->err, other, "%s failed on data-parallel rank %d of model-parallel rank %d (%s): %s", what, rank,
                   mp, zs_status_name(other), why);
  return ZS_FAIL(zs->err, other, "%s failed on rank %d (%s): %s", what, rank, zs_status_name(other), why);
}

int zs__ck_mp_size(const zs_engine_t *zs) {
  int n = zs_engine_mp_size(zs, NULL);
  return n > 1 ? n : 0;
}

void zs__ck_own(zs_engine_t *zs, const char *dir) {
  char real[PATH_MAX];
  if (realpath(dir, real)) snprintf(zs->ck_own, sizeof zs->ck_own, "%s", real);
}

char *zs__ck_dir(const zs_engine_t *zs, const char *dir) {
  size_t n = strlen(dir) + 32;
  char *out = malloc(n);
  if (!out) return NULL;
  if (zs__ck_mp_size(zs)) snprintf(out, n, "%s/mp%d", dir, zs->mp_rank);
  else snprintf(out, n, "%s", dir);
  return out;
}

/* ---- the layout ------------------------------------------------------------------ */

_Static_assert(sizeof(((zs_engine_t *)0)->ck_layout) == ZS_CKPT_LAYOUT_MAX, "the engine holds a whole layout");

int zs__ck_layout_ok(const char *s) {
  size_t n = 0;
  for (; s[n] && n < ZS_CKPT_LAYOUT_MAX; n++)
    if ((unsigned char)s[n] < 0x20 || (unsigned char)s[n] > 0x7e) return 0;
  return n < ZS_CKPT_LAYOUT_MAX;
}

zs_status_t zs_checkpoint_set_layout(zs_engine_t *zs, const char *layout) {
  if (!zs) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_checkpoint_set_layout: engine is NULL");
  if (layout && !zs__ck_layout_ok(layout))
    return ZS_FAIL(zs->err, ZS_ERR_INVALID,
                   "zs_checkpoint_set_layout: the layout '%.64s' is longer than %d bytes or holds a byte that is not "
                   "printable ASCII: name it in fewer, plain words (\"tp=2 pp=1\")", layout, ZS_CKPT_LAYOUT_MAX - 1);
  snprintf(zs->ck_layout, sizeof zs->ck_layout, "%s", layout ? layout : "");
  return ZS_OK;
}

/* ---- common ------------------------------------------------------------------------ */

int zs__ck_owned_range(const zs_engine_t *zs, const zs_param_t *p, int64_t *a, int64_t *b) {
  const zs_unit_t *u = &zs->units[p->unit];
  int64_t lo = u->opt_off, hi = lo + u->opt_n;
  int64_t fa = p->flat_off > lo ? p->flat_off : lo, fb = p->flat_off + p->numel < hi ? p->flat_off + p->numel : hi;
  *a = fa - p->flat_off;
  *b = fb - p->flat_off;
  return fa < fb;
}

const char *zs__ck_shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
  size_t at = (size_t)snprintf(buf, n, "[");
  for (int d = 0; d < ndim && at < n; d++)
    at += (size_t)snprintf(buf + at, n - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (at < n) snprintf(buf + at, n - at, "]");
  return buf;
}

zs_status_t zs__ck_check_call(zs_engine_t *zs, const char *path, const char *fn) {
  if (!zs) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: engine is NULL", fn);
  if (!path || !*path) return ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: the path is NULL or empty", fn);
  if (strlen(path) > CK_PATH - 64) return ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: the path is too long", fn);
  if (!zs->setup_done) return ZS_FAIL(zs->err, ZS_ERR_STATE, "%s before zs_engine_setup", fn);
  if (zs->phase != ZS_PH_IDLE)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "%s during a step: call it between zs_step and the next zs_forward_begin",
                   fn);
  return ZS_OK;
}


/* Whether a unit keeps state of kind k (a frozen unit keeps none: its master
 * values are its parameters, zs__eng_read_params). */
int zs__ck_unit_keeps(const zs_engine_t *zs, const zs_unit_t *u, int kind) {
  return zs__eng_unit_keeps(zs, u, kind);
}

/* The kinds the engine's optimizer keeps (as unit_alloc makes them): the
 * master always, m for Adam, Lion or SGD with momentum, v for Adam. Frozen units
 * write the master only. */
int zs__ck_kind_present(const zs_engine_t *zs, int kind) {
  return zs->nunits > 0 && (kind == K_MASTER || (kind == K_M && zs__optim_has_m(&zs->cfg.optim)) ||
                            (kind == K_V && zs__optim_has_v(&zs->cfg.optim)));
}

/* ---- block encodings ------------------------------------------------------------- */

int64_t zs__ck_block_bytes(uint32_t enc, int64_t count, int blk) {
  if (enc == CK_ENC_BF16) return count * 2;
  if (enc == CK_ENC_Q8) return (count + blk - 1) / blk * 4 + count;
  return count * 4;
}

uint32_t zs__ck_kind_enc(const zs_engine_t *zs, int k) {
  if (k == K_MASTER) return CK_ENC_F32;
  switch (zs->cfg.optim.state_dtype) {
  case ZS_STATE_BF16: return CK_ENC_BF16;
  case ZS_STATE_INT8: return CK_ENC_Q8;
  default: return CK_ENC_F32;
  }
}

void zs__ck_decode(uint32_t enc, int k, int blk, const void *raw, int64_t count, float *out) {
  if (enc == CK_ENC_BF16) {
    const uint16_t *h = raw;
    for (int64_t i = 0; i < count; i++) out[i] = zs_bf16_to_f32(h[i]);
    return;
  }
  const int64_t nb = (count + blk - 1) / blk;
  const uint8_t *codes = (const uint8_t *)raw + nb * 4;
  for (int64_t b = 0; b < nb; b++) {
    float sc;
    memcpy(&sc, (const char *)raw + b * 4, 4); /* the scales are not aligned for a float read in general */
    int64_t e1 = (b + 1) * blk < count ? (b + 1) * blk : count;
    for (int64_t i = b * blk; i < e1; i++) out[i] = k == K_M ? zs_q8_dec_m(codes[i], sc) : zs_q8_dec_v(codes[i], sc);
  }
}

/* Closes f after flushing and fsyncing it, then renames tmp to final. */
zs_status_t zs__ck_commit_file(char *err_buf, FILE *f, const char *tmp, const char *final) {
  int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
  int err = errno;
  if (fclose(f) != 0 && !bad) bad = 1, err = errno;
  if (bad) {
    unlink(tmp);
    return ZS_FAIL(err_buf, ZS_ERR_IO, "writing %s failed: %s", tmp, strerror(err));
  }
  if (rename(tmp, final) != 0) {
    err = errno;
    unlink(tmp);
    return ZS_FAIL(err_buf, ZS_ERR_IO, "renaming %s to %s failed: %s", tmp, final, strerror(err));
  }
  return ZS_OK;
}

void zs__ck_rank_file_name(char *buf, size_t n, uint64_t id, int rank) {
  snprintf(buf, n, "%016" PRIx64 ".rank%05d.zsr", id, rank);
}

