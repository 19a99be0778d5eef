/* The engine's scratch (xdev/xhost, made at create so that no collective path
 * allocates; src/ckpt runs its own collectives on it too) and the small
 * collectives on it, on the caller's (NULL) stream: the bookkeeping
 * all-reduces and broadcasts of declaration, setup and the setters, and
 * zs__eng_agree, which gives every rank the same verdict on a local outcome. */
#include <stdio.h>
#include <string.h>

#include "zero/engine_impl.h"

uint64_t zs__eng_scratch_bytes(int world) {
  uint64_t b = ((uint64_t)world * 2 + 2) * 8; /* checkpoints: 2 * world + 2 int64 */
  if (b < 8 + ZS_ERRBUF) b = 8 + ZS_ERRBUF;      /* zs__eng_agree: status + message (> 64 int64) */
  return (b + 7) / 8 * 8;
}

/* The NULL stream: a stream the trainer broke must not keep a rank out of a
 * collective the others are in. */
static zs_status_t x_fail(zs_engine_t *zs, zs_status_t st, const char *what) {
  return ZS_FAIL(zs->err, st, "%s on rank %d failed: %s", what, zs->rank, zs_last_error());
}

zs_status_t zs__eng_xall_reduce(zs_engine_t *zs, int64_t *v, int n, zs_redop_t op) {
  return zs__eng_xall_reduce_on(zs, zs->comm, v, n, op);
}

zs_status_t zs__eng_alike_on(zs_engine_t *zs, zs_comm_t *comm, uint64_t h, int *alike) {
  int64_t v[2] = {(int64_t)(h >> 1), -(int64_t)(h >> 1)};
  *alike = 0;
  ZS_CHECK(zs__eng_xall_reduce_on(zs, comm, v, 2, ZS_MIN));
  *alike = v[0] == -v[1];
  return ZS_OK;
}

zs_status_t zs__eng_xall_reduce_on(zs_engine_t *zs, zs_comm_t *comm, int64_t *v, int n, zs_redop_t op) {
  size_t bytes = (size_t)n * 8;
  zs_status_t st;
  if (n > zs->xcount) return ZS_FAIL(zs->err, ZS_ERR_INTERNAL, "engine scratch: %d values exceed it", n);
  memcpy(zs->xhost, v, bytes);
  if ((st = zs_memcpy_async(zs->dev, zs->xdev, zs->xhost, bytes, ZS_COPY_H2D, NULL)) != ZS_OK ||
      (st = zs_comm_all_reduce(comm, zs->xdev, zs->xdev, (size_t)n, ZS_INT64, op, NULL)) != ZS_OK ||
      (st = zs_memcpy_async(zs->dev, zs->xhost, zs->xdev, bytes, ZS_COPY_D2H, NULL)) != ZS_OK ||
      (st = zs_stream_synchronize(zs->dev, NULL)) != ZS_OK)
    return x_fail(zs, st, "an all-reduce of the engine's bookkeeping");
  memcpy(v, zs->xhost, bytes);
  return ZS_OK;
}

zs_status_t zs__eng_xbroadcast(zs_engine_t *zs, void *buf, size_t bytes, int root) {
  return zs__eng_xbroadcast_on(zs, zs->comm, buf, bytes, root);
}

zs_status_t zs__eng_xbroadcast_on(zs_engine_t *zs, zs_comm_t *comm, void *buf, size_t bytes, int root) {
  zs_status_t st;
  if (bytes > (size_t)zs->xcount * 8) return ZS_FAIL(zs->err, ZS_ERR_INTERNAL, "engine scratch: %zu bytes exceed it", bytes);
  memcpy(zs->xhost, buf, bytes);
  if ((st = zs_memcpy_async(zs->dev, zs->xdev, zs->xhost, bytes, ZS_COPY_H2D, NULL)) != ZS_OK ||
      (st = zs_comm_broadcast(comm, zs->xdev, zs->xdev, bytes, ZS_UINT8, root, NULL)) != ZS_OK ||
      (st = zs_memcpy_async(zs->dev, zs->xhost, zs->xdev, bytes, ZS_COPY_D2H, NULL)) != ZS_OK ||
      (st = zs_stream_synchronize(zs->dev, NULL)) != ZS_OK)
    return x_fail(zs, st, "a broadcast of the engine's bookkeeping");
  memcpy(buf, zs->xhost, bytes);
  return ZS_OK;
}

zs_status_t zs__eng_agree(zs_engine_t *zs, zs_status_t st, const char *what) {
  return zs__eng_agree_on(zs, zs->comm, st, what);
}

zs_status_t zs__eng_agree_on(zs_engine_t *zs, zs_comm_t *comm, zs_status_t st, const char *what) {
  struct {
    int64_t status;
    char msg[ZS_ERRBUF];
  } m;
  memset(&m, 0, sizeof m);
  if (st != ZS_OK) snprintf(m.msg, sizeof m.msg, "%s", zs_last_error());
  const int rank = zs_comm_rank(comm), size = zs_comm_size(comm);
  int64_t r = st != ZS_OK ? rank : size; /* the lowest failing rank speaks */
  zs_status_t cst = zs__eng_xall_reduce_on(zs, comm, &r, 1, ZS_MIN);
  if (cst != ZS_OK) return st != ZS_OK ? ZS_FAIL(zs->err, st, "%s failed: %s", what, m.msg) : cst;
  if (r == size) return ZS_OK;
  m.status = st;
  if ((cst = zs__eng_xbroadcast_on(zs, comm, &m, sizeof m, (int)r)) != ZS_OK) return cst;
  m.msg[ZS_ERRBUF - 1] = 0;
  return ZS_FAIL(zs->err, (zs_status_t)m.status, "%s failed on %srank %d: %s", what,
                 comm == zs->comm ? "" : "model-parallel ", (int)r, m.msg);
}
