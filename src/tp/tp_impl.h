/* Internal: the tp handle and the compute backends behind it. tp.c checks every
 * argument and orders compute and collectives on the caller's stream; a backend
 * only queues the compute pieces: tp_cpu.c (functions run by the cpu device's
 * stream worker) or tp_cuda.c (the kernels of kernels/tp.cu; tp_cuda_none.c in
 * a build without CUDA, where no cuda device can exist). */
#ifndef ZS_TP_TP_IMPL_H
#define ZS_TP_TP_IMPL_H

#include "common/common.h"
#include "zeroshard/tp.h"

enum { TP_REC_INTS = 8 }; /* the error record, as kernels/tp.h describes it */
enum { TP_CALL_LOOKUP = 1, TP_CALL_ACCUMULATE = 2, TP_CALL_XENT = 3 };

/* Each entry queues work on s; arguments are valid, n > 0. On the cpu device ids
 * were checked on the host before (host_checks_ids); a cuda backend checks them
 * on the device into rec (kernels/tp.h). */
typedef struct {
  const char *name;
  int host_checks_ids; /* ids are host memory, checked at the call */
  zs_status_t (*check_ids)(zs_tp_t *tp, zs_stream_t *s, const int32_t *ids, size_t n, int64_t vocab,
                           int call);
  zs_status_t (*lookup)(zs_tp_t *tp, zs_stream_t *s, const zs_tp_vocab_t *p, const float *w, size_t dim,
                        const int32_t *ids, size_t n, float *out);
  zs_status_t (*accumulate)(zs_tp_t *tp, zs_stream_t *s, const zs_tp_vocab_t *p, float *dw, size_t dim,
                            const int32_t *ids, size_t n, const float *dout);
  /* buf: 3n floats; max into buf[0, n) */
  zs_status_t (*xent_max)(zs_tp_t *tp, zs_stream_t *s, const zs_tp_vocab_t *p, const float *logits,
                          size_t n, float *buf);
  /* sums into buf[n, 3n) */
  zs_status_t (*xent_sums)(zs_tp_t *tp, zs_stream_t *s, const zs_tp_vocab_t *p, const float *logits,
                           const int32_t *targets, size_t n, float *buf);
  zs_status_t (*xent_out)(zs_tp_t *tp, zs_stream_t *s, const zs_tp_vocab_t *p, const float *logits,
                          const int32_t *targets, size_t n, const float *buf, float scale, float inv_n,
                          float *row_loss, float *loss, float *dlogits);
} zs__tp_backend_t;

extern const zs__tp_backend_t zs__tp_cpu;
/* NULL in a build without CUDA */
extern const zs__tp_backend_t *const zs__tp_cuda;

struct zs_tp {
  zs_comm_t *comm; /* borrowed */
  zs_device_t *dev;
  int rank, size;
  const zs__tp_backend_t *be;
  int32_t *rec; /* device memory, TP_REC_INTS */
  char err[ZS_ERRBUF];
};

/* Keeps the thread's last error (set by a lower layer) as the handle's too. */
zs_status_t zs__tp_keep(zs_tp_t *tp, zs_status_t st);

#endif
