/* The cpu device's tensor-parallel compute: plain C loops run by the stream's
 * worker in stream order (zs__device_enqueue_work_copy: each call's arguments
 * travel as a heap copy), between the collectives that tp_vocab.c queues on the
 * same stream; the NULL stream runs them at once. Sums are in double, so the
 * results are the float64 reference's rounded to fp32. The ids were checked on
 * the host before (host_checks_ids). */
#include <math.h>
#include <string.h>

#include "device/device_impl.h"
#include "tp/tp_impl.h"

typedef enum { OP_LOOKUP, OP_ACCUMULATE, OP_MAX, OP_SUMS, OP_OUT } op_t;

typedef struct {
  op_t op;
  int64_t start, count, ld; /* the slice and the rows (or columns) per rank */
  size_t dim, n;
  const float *src;     /* lookup: w; accumulate: dout; xent: logits */
  float *dst;           /* lookup: out; accumulate: dw; xent: dlogits */
  const int32_t *ids;   /* ids or targets */
  float *buf;           /* xent scratch (3n) */
  float scale, inv_n;
  float *row_loss, *loss;
} task_t;

static void lookup(const task_t *t) {
  for (size_t i = 0; i < t->n; i++) {
    int64_t r = (int64_t)t->ids[i] - t->start;
    float *o = t->dst + i * t->dim;
    if (r >= 0 && r < t->count)
      memcpy(o, t->src + (size_t)r * t->dim, t->dim * sizeof(float));
    else
      memset(o, 0, t->dim * sizeof(float));
  }
}

static void accumulate(const task_t *t) {
  for (size_t i = 0; i < t->n; i++) {
    int64_t r = (int64_t)t->ids[i] - t->start;
    if (r < 0 || r >= t->count) continue;
    float *d = t->dst + (size_t)r * t->dim;
    const float *g = t->src + i * t->dim;
    for (size_t c = 0; c < t->dim; c++) d[c] += g[c];
  }
}

static void xent_max(const task_t *t) {
  for (size_t i = 0; i < t->n; i++) {
    const float *l = t->src + i * (size_t)t->ld;
    float m = -INFINITY;
    for (int64_t j = 0; j < t->count; j++) m = l[j] > m ? l[j] : m;
    t->buf[i] = m;
  }
}

static void xent_sums(const task_t *t) {
  const size_t n = t->n;
  for (size_t i = 0; i < n; i++) {
    const float *l = t->src + i * (size_t)t->ld;
    const double m = t->buf[i];
    double sum = 0;
    for (int64_t j = 0; j < t->count; j++) sum += exp((double)l[j] - m);
    int64_t c = (int64_t)t->ids[i] - t->start;
    t->buf[n + i] = (float)sum;
    t->buf[2 * n + i] = c >= 0 && c < t->count ? (float)((double)l[c] - m) : 0.0f;
  }
}

static void xent_out(const task_t *t) {
  const size_t n = t->n;
  double total = 0;
  for (size_t i = 0; i < n; i++) {
    const double m = t->buf[i], sum = t->buf[n + i], z = t->buf[2 * n + i];
    const double lse = log(sum);
    total += lse - z;
    if (t->row_loss) t->row_loss[i] = (float)(lse - z);
    if (!t->dst) continue;
    const float *l = t->src + i * (size_t)t->ld;
    float *d = t->dst + i * (size_t)t->ld; /* may be l: each element is read before it is written */
    int64_t c = (int64_t)t->ids[i] - t->start;
    for (int64_t j = 0; j < t->count; j++) {
      double p = exp((double)l[j] - m - lse);
      d[j] = (float)((p - (j == c ? 1.0 : 0.0)) * (double)t->scale);
    }
    for (int64_t j = t->count; j < t->ld; j++) d[j] = 0.0f;
  }
  if (t->loss) *t->loss = (float)(total * (double)t->inv_n);
}

static void task_run(void *arg) {
  task_t *t = arg;
  switch (t->op) {
    case OP_LOOKUP: lookup(t); break;
    case OP_ACCUMULATE: accumulate(t); break;
    case OP_MAX: xent_max(t); break;
    case OP_SUMS: xent_sums(t); break;
    case OP_OUT: xent_out(t); break;
  }
}

static zs_status_t submit(zs_tp_t *tp, zs_stream_t *s, const task_t *t) {
  return zs__device_enqueue_work_copy(tp->dev, s, task_run, t, sizeof *t, tp->err, "zs_tp");
}

/* ---- the backend ------------------------------------------------------------------ */

static zs_status_t cpu_lookup(zs_tp_t *tp, zs_stream_t *s, const zs_tp_vocab_t *p, const float *w, size_t dim,
                              const int32_t *ids, size_t n, float *out) {
  task_t t = {.op = OP_LOOKUP, .start = p->start, .count = p->count, .dim = dim, .n = n, .src = w, .dst = out,
              .ids = ids};
  return submit(tp, s, &t);
}

static zs_status_t cpu_accumulate(zs_tp_t *tp, zs_stream_t *s, const zs_tp_vocab_t *p, float *dw, size_t dim,
                                  const int32_t *ids, size_t n, const float *dout) {
  task_t t = {.op = OP_ACCUMULATE, .start = p->start, .count = p->count, .dim = dim, .n = n, .src = dout,
              .dst = dw, .ids = ids};
  return submit(tp, s, &t);
}

static zs_status_t cpu_xent_max(zs_tp_t *tp, zs_stream_t *s, const zs_tp_vocab_t *p, const float *logits,
                                size_t n, float *buf) {
  task_t t = {.op = OP_MAX, .count = p->count, .ld = p->rows, .n = n, .src = logits, .buf = buf};
  return submit(tp, s, &t);
}

static zs_status_t cpu_xent_sums(zs_tp_t *tp, zs_stream_t *s, const zs_tp_vocab_t *p, const float *logits,
                                 const int32_t *targets, size_t n, float *buf) {
  task_t t = {.op = OP_SUMS, .start = p->start, .count = p->count, .ld = p->rows, .n = n, .src = logits,
              .ids = targets, .buf = buf};
  return submit(tp, s, &t);
}

static zs_status_t cpu_xent_out(zs_tp_t *tp, zs_stream_t *s, const zs_tp_vocab_t *p, const float *logits,
                                const int32_t *targets, size_t n, const float *buf, float scale, float inv_n,
                                float *row_loss, float *loss, float *dlogits) {
  task_t t = {.op = OP_OUT, .start = p->start, .count = p->count, .ld = p->rows, .n = n, .src = logits,
              .dst = dlogits, .ids = targets, .buf = (float *)buf, .scale = scale, .inv_n = inv_n,
              .row_loss = row_loss, .loss = loss};
  return submit(tp, s, &t);
}

const zs__tp_backend_t zs__tp_cpu = {
    .name = "cpu",
    .host_checks_ids = 1,
    .check_ids = NULL,
    .lookup = cpu_lookup,
    .accumulate = cpu_accumulate,
    .xent_max = cpu_xent_max,
    .xent_sums = cpu_xent_sums,
    .xent_out = cpu_xent_out,
};
