/* Internal: the comm backend interface (a struct of function pointers plus a
 * context, one implementation per backend: mpi.c, nccl.c) and the handle the
 * public wrappers in comm.c work on.
 *
 * comm.c validates every argument, decides whether a call is in place, counts
 * calls and bytes, and only then calls `iface.coll`: a backend sees only calls
 * that are valid for the comm's size and rank. */
#ifndef ZS_COMM_COMM_IMPL_H
#define ZS_COMM_COMM_IMPL_H

#include <pthread.h>

#include "common/common.h"
#include "zeroshard/comm.h"

/* One call, as the public wrapper received it. `count` is the count argument of
 * the public call: count (broadcast, reduce, all_reduce, send, recv), sendcount
 * (gather, all_gather), recvcount (scatter, reduce_scatter), per-peer count
 * (all_to_all). */
typedef struct {
  zs_coll_kind_t kind;
  const void *send;
  void *recv; /* send / recv: the one buffer is in `send` or `recv` respectively */
  size_t count;
  zs_dtype_t dtype;
  zs_redop_t op;  /* reductions only */
  int root;       /* broadcast, scatter, reduce, gather: root; send, recv: peer */
  int in_place;   /* the documented in-place form (comm.c decided) */
} zs__coll_args_t;

typedef struct {
  const char *name; /* "mpi" or "nccl" */
  /* 1 if the backend can reduce dtype with op; NULL: everything is supported */
  int (*supports)(void *ctx, zs_dtype_t dt, zs_redop_t op);
  /* Queues the call on stream s (NULL: the caller's stream). May refuse it before
   * queuing (a limit of the backend) with ZS_ERR_INVALID or ZS_ERR_UNSUPPORTED. */
  zs_status_t (*coll)(void *ctx, const zs__coll_args_t *a, zs_stream_t *s);
  /* Collective over the comm; completes before returning; *out is a new comm of
   * the same backend and device (made with zs__comm_wrap). */
  zs_status_t (*split)(void *ctx, int color, int key, zs_comm_t **out);
  zs_status_t (*async_error)(void *ctx);
  zs_status_t (*abort)(void *ctx);
  /* Waits for queued work, frees everything the context holds. */
  void (*destroy)(void *ctx);
} zs_comm_i;

struct zs_comm {
  zs_comm_i iface;
  void *ctx;
  zs_device_t *dev;
  int rank, size;
  pthread_mutex_t stats_mu;
  zs_comm_stats_t stats;
  char err[ZS_ERRBUF]; /* last error of a call on this comm (zs_comm_last_error) */
};

/* Used by the backends' create functions: fills the common part and sets the
 * log's rank prefix. On failure the caller still owns ctx. */
zs_status_t zs__comm_wrap(zs_comm_t **out, const zs_comm_i *iface, void *ctx, zs_device_t *dev,
                          int rank, int size);

/* Bytes of the send and recv buffers this rank uses in call `a` (0: not used on
 * this rank), for a comm of `size` ranks where this one is `rank`. The caller
 * has checked that count * dtype size * size does not overflow. */
void zs__coll_bytes(const zs__coll_args_t *a, int rank, int size, size_t *send_bytes, size_t *recv_bytes);

/* Element-wise dst = dst op src for the formats MPI and the tests' references
 * share: bf16/fp16 combine in fp32 and round to nearest even (half.h). */
void zs__reduce_half(zs_dtype_t dt, zs_redop_t op, const uint16_t *src, uint16_t *dst, size_t n);
/* In place: x[i] /= n (floats: in fp32, bf16/fp16 rounded back; integers truncate). */
void zs__divide(zs_dtype_t dt, void *x, size_t count, int n);

#endif
