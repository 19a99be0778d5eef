/* Internal: the NVMe tier of an engine (ZeRO-Infinity; docs/design.md, "The
 * NVMe tier"): where the optimizer state (offload_optimizer nvme) and the
 * parameter shards (offload_param nvme) of a rank live on disk, and the
 * engine's accessors that read and write them.
 *
 * One file a rank and engine, in nvme_path, made at setup and removed at
 * destroy. A unit's owned range (opt_off, opt_n) is cut into chunks of
 * nvme_chunk elements (the last one shorter); a chunk's record holds its
 * fields, each padded to ZS_AIO_ALIGN bytes:
 *   master (fp32), m, v (state dtype), ms, vs (int8 scales), param (param dtype)
 * the first five when the optimizer state is on disk, the last when the
 * parameters are (for fp32 parameters with both on disk the param field is
 * the master field itself). A trainable unit's records exist twice, in region
 * 0 and region 1 of the file; `cur` says which region holds the committed
 * state. A step reads region cur and writes region !cur, and cur flips only
 * when every rank wrote every chunk (the engine's agreement), so a step that
 * fails leaves region cur whole. A frozen unit's parameters (never written by
 * a step) have one record, in region 2.
 *
 * Outside a step (setup, checkpoints, zs_param_get/set) the engine reads and
 * writes the committed records in place through the accessors below, one
 * chunk buffer at a time (the step's buffer 0). */
#ifndef ZS_ZERO_TIER_H
#define ZS_ZERO_TIER_H

#include "aio/aio.h"
#include "offload/offload.h"
#include "zero/engine_impl.h"

enum { ZS_TF_MASTER = 0, ZS_TF_M, ZS_TF_V, ZS_TF_MS, ZS_TF_VS, ZS_TF_PARAM, ZS_TF_COUNT };

typedef struct {
  int unit;
  int64_t lo, n;                 /* owned-range elements [lo, lo + n) */
  uint64_t off[2];               /* the record in region 0 and 1 (equal for a frozen unit's) */
  uint64_t field[ZS_TF_COUNT];   /* field offsets inside the record (UINT64_MAX: absent) */
  size_t bytes;                  /* the record's bytes */
  uint64_t goff;                 /* its fp32 gradients in region 3 (grads on disk; else unused) */
  size_t grad_at, stage_at;      /* in a chunk buffer: the gradients read, the 16-bit parameters
                                    staged for the device (after the record) */
} zs_tier_chunk_t;

typedef struct zs_tier {
  char path[ZS_NVME_PATH_MAX + 64];
  zs_aio_file_t *file;
  zs_aio_ring_t *ring;           /* the engine's thread: the step and the accessors */
  uint64_t bytes;                /* the file's size */
  uint64_t cat_bytes[ZS_MEM_CATEGORY_COUNT]; /* counted in the accountant's nvme domain */
  int cur;                       /* the committed region of trainable units' records */
  int opt, param;                /* the optimizer state / the parameters are on disk */
  int grads;                     /* the fp32 gradient shards too (with the optimizer state): region 3 */
  uint64_t *gbase;               /* per unit: its gradient shard's offset in region 3 */
  void *cbuf_mem;                /* the conversion thread's buffer (grads on disk) */
  size_t cbuf_alloc;
  zs_tier_chunk_t *chunks;
  int nchunks;
  int *unit_chunk0, *unit_nchunks; /* per unit (0 chunks: nothing of it on disk) */
  /* the step's chunk buffers (pinned; buffer 0 also serves the accessors) */
  void *buf_mem;
  size_t buf_alloc, buf_bytes;
  int nbuf;
  void *bufs[64];
  zs_event_t *buf_done[64];
  zs_nvme_chunk_t *plan;         /* the step's view of the chunks */
  int *plan_chunk;               /* plan entry -> chunk */
  int nplan;
  zs_optim_seg_t *seg_scratch;
  int seg_cap;
  int *piece_seg;                /* per scratch segment: the engine's segment it cuts */
  int64_t *piece_lo;             /* ... and its first owned-range element */
  int npieces;                   /* the chunk being updated: its pieces */
  zs_offload_unit_t *rest;       /* optimizer state in host memory: the units with no record */
  int nrest;
  int broken;                    /* a step failed where it cannot be undone (state in host memory) */
  char broken_msg[ZS_ERRBUF];
  /* parameters read for gathers (offload_param nvme): their own thread and ring */
  zs_offload_preader_t *reader;
  zs_preader_extent_t *pext;     /* a unit's extents (the most chunks a unit has) */
  void *pbufs[64];
  void *pbuf_mem;
  size_t pbuf_alloc, pbuf_bytes;
  int npbuf;
  zs_nvme_stats_t last;          /* the last step's figures */
} zs_tier_t;


/* The record layout of a chunk of n elements under config c with the
 * optimizer state (opt) and the parameters (param) on disk: field offsets and
 * the record's bytes; by category too (bytes_cat[ZS_MEM_OPTIMIZER] and
 * [ZS_MEM_PARAMS], padding included). Pure: zs_engine_estimate uses it. */
size_t zs__tier_record(const zs_config_t *c, int64_t n, int opt, int param, int trainable, uint64_t field[ZS_TF_COUNT],
                       uint64_t bytes_cat[ZS_MEM_CATEGORY_COUNT]);
/* Bytes on disk of a unit whose owned range has `on` elements: every chunk's
 * record, twice for a trainable unit; by category into cat (added). */
uint64_t zs__tier_unit_bytes(const zs_config_t *c, int64_t on, int opt, int param, int trainable,
                             uint64_t cat[ZS_MEM_CATEGORY_COUNT]);
/* A trainable unit's fp32 gradient shard on disk (with the optimizer state):
 * pad(4 on) bytes in region 3, category grads. */
static inline uint64_t zs__tier_grad_bytes(int64_t on) { return ((uint64_t)on * 4 + 4095) / 4096 * 4096; }
/* The step's chunk buffers: count and bytes each (a full chunk's record). */
int zs__tier_nbuf(const zs_config_t *c);
size_t zs__tier_chunk_elems(const zs_config_t *c);
/* The chunk buffer a unit needs (its first chunk's record, and room to stage
 * 16-bit parameters bound for the device when stage_params). */
size_t zs__tier_buf_bytes(const zs_config_t *c, int64_t on, int opt, int param, int trainable, int stage_params);
/* What of u is on disk: its optimizer state, its parameters. */
int zs__tier_unit_opt(const zs_engine_t *zs, const zs_unit_t *u);
int zs__tier_unit_param(const zs_engine_t *zs, const zs_unit_t *u);

/* tier.c: made at setup (after the units' buffers and segments), removed
 * with them (the file too). */
zs_status_t zs__tier_setup(zs_engine_t *zs);
void zs__tier_release(zs_engine_t *zs);
/* Bytes [off, off + n) of unit u's field f (ZS_TF_*) laid end to end over
 * its owned range, from or into the committed records; host memory;
 * synchronous. Outside a step only. */
zs_status_t zs__tier_get(zs_engine_t *zs, const zs_unit_t *u, int f, uint64_t off, size_t n, void *dst);
zs_status_t zs__tier_put(zs_engine_t *zs, const zs_unit_t *u, int f, uint64_t off, size_t n, const void *src);

/* tier_step.c */
/* The optimizer phase through the tier: stream every chunk (zs__nvme_step),
 * agree with every rank, then commit (flip cur) or, when any rank failed,
 * restore what the step changed outside the tier (the parameters, from the
 * committed master) and return the failure on every rank. */
zs_status_t zs__tier_step(zs_engine_t *zs, const zs_optim_hyper_t *h);
/* Stage 3 with parameters on disk: queue the read of unit u's shard and its
 * copy up into dst (the gathered buffer's own slot) on stream s. */
zs_status_t zs__tier_read_params(zs_engine_t *zs, zs_unit_t *u, void *dst, zs_stream_t *s);
/* The parameter reads' first failure (waits for the reads queued). */
zs_status_t zs__tier_reads_check(zs_engine_t *zs);
/* The run cannot go on through the tier (a step's data was lost): every later
 * step fails with msg. */
void zs__tier_break(zs_engine_t *zs, const char *msg);

#endif
