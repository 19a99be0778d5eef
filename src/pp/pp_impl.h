/* Internal: the pipeline layer's schedule handle and what its files share.
 *   schedule.c  validation, each kind's compute order, the ideal timeline, the
 *               transfer placement and the buffer plan
 *   simulate.c  the simulator (zs_pp_schedule_simulate)
 *   run.c       the runtime (zs_pp_create / zs_pp_run) */
#ifndef ZS_PP_PP_IMPL_H
#define ZS_PP_PP_IMPL_H

#include <stdint.h>

#include "common/common.h"
#include "zeroshard/pipeline.h"

/* One rank's list and, per action, its buffer plan (see schedule.c):
 *   buf[k]   the pool buffer action k acquires (receives, forward output,
 *            backward grad_input) or sends; -1 for none
 *   prev[k]  for an acquiring action, the index in this list of the action
 *            whose end frees that buffer for it (-1: unused so far); -1 else */
typedef struct {
  int n;
  zs_pp_action_t *acts;
  int *buf, *prev;
  unsigned char *fuse; /* fuse[k]: actions k and k + 1 are a send and a receive that run as one sendrecv */
  int nbuf;            /* buffers the plan uses (peak_buffers) */
} zs__pp_list_t;

struct zs_pp_schedule {
  zs_pp_schedule_config_t cfg;
  int p, m, v, S; /* S = p*v model stages */
  zs__pp_list_t *lists; /* p */
  void *block;          /* every rank's arrays, one allocation */
};

/* A send (of an activation or a gradient); a transfer (a send or a receive). */
static inline int zs__pp_is_send(zs_pp_op_t op) { return op == ZS_PP_SEND_ACT || op == ZS_PP_SEND_GRAD; }
static inline int zs__pp_is_transfer(zs_pp_op_t op) { return op != ZS_PP_FORWARD && op != ZS_PP_BACKWARD; }

/* Model stage of (rank, chunk). */
static inline int zs__pp_stage(const zs_pp_schedule_t *s, int rank, int chunk) { return chunk * s->p + rank; }

/* Checks cfg (NULL is invalid); the message names the parameter. `fn` prefixes it. */
zs_status_t zs__pp_schedule_check(const zs_pp_schedule_config_t *cfg, const char *fn, char *err);

#endif
