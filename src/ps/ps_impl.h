/* Internal: the parameter-server handle, shared by ps.c (create, checks,
 * workers, stats) and ps_serve.c (the servers' loops). */
#ifndef ZS_PS_PS_IMPL_H
#define ZS_PS_PS_IMPL_H

#include "common/common.h"
#include "optim/optim.h"
#include "zeroshard/ps.h"

/* A segment of the shard for the optimizer: [off, off + n) of the shard, with
 * or without weight decay (the pointers are filled per step). */
typedef struct {
  int64_t off, n;
  float wd_scale;
} ps_seg_t;

struct zs_ps {
  zs_ps_config_t cfg;      /* no_decay points at `ranges` (a copy) */
  zs_ps_range_t *ranges;
  zs_comm_t *comm;         /* the parent (borrowed) */
  zs_device_t *dev;
  zs_comm_t *group;        /* this role's ranks */
  int rank, size, S, W;
  zs_ps_role_t role;
  int index;
  int failed;              /* a transfer failed: the comms are aborted */
  int served;              /* servers: zs_ps_serve ran */
  char err[ZS_ERRBUF];

  /* servers: one comm, stream and event per worker (the worker is rank S in it) */
  zs_comm_t **wcomm;
  zs_stream_t **stream;
  zs_event_t **ev;
  int64_t off, n;          /* the shard */
  float *master, *m, *v;   /* the shard's parameters and optimizer state */
  float **gbuf;            /* [W][n] received gradients */
  float **snap;            /* async: [W][n] parameters being sent (they change meanwhile) */
  float *acc;              /* sync: the summed gradient */
  ps_seg_t *segs;
  zs_optim_seg_t *osegs;
  int nseg;
  int *snseg, maxseg;      /* every server's segment count, and the most */
  double *segsq;           /* sync norm: [S][maxseg] every server's segment sums of squares */
  int64_t *pushed, *vsent; /* per worker: gradients received; version its last pull carried */
  int *held, *posted;      /* per worker: a reply waits for the bound; a receive is posted */

  /* workers: the comm with the servers (this worker is rank S) */
  zs_comm_t *mycomm;
  int64_t *soff, *scount;  /* every server's shard (workers and servers) */

  zs_ps_stats_t st;
};

/* ps.c: marks the handle failed, aborts its comms, formats the message. */
zs_status_t zs__ps_fail(zs_ps_t *ps, zs_status_t st, const char *fmt, ...) ZS_PRINTF(3, 4);

/* ps.c: the segments of [a, b) (offsets from a; written when out is not NULL),
 * and whether a segment starts at x. */
int zs__ps_segs(const zs_ps_config_t *c, int64_t a, int64_t b, ps_seg_t *out);
int zs__ps_cut_at(const zs_ps_config_t *c, int64_t x);

/* ps_serve.c */
zs_status_t zs__ps_serve_sync(zs_ps_t *ps);
zs_status_t zs__ps_serve_async(zs_ps_t *ps);

#endif
