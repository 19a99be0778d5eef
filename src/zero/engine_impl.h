/* Internal: the engine's state, shared by the files of src/zero (engine.c's
 * first comment says which holds what) and by src/ckpt.
 *
 * Layout of a unit (r = rank, N = ranks): parameters laid end to end in a flat
 * buffer, each start aligned to ZS_ALIGN elements, the total padded to a multiple
 * of N*ZS_ALIGN and cut into N shards of `shard` elements; rank r owns flat range
 * [r*shard, (r+1)*shard). The optimizer owns that range (stage 0: the whole
 * buffer). What lives where (pb/rb: bytes of param/reduce dtype):
 *   stage 0: full params P*pb, full grads P*pb, master (fp32, P; aliases the params
 *            when they are fp32), m, v (P each)
 *   stage 1: full params, full grads; master, m, v on the shard (S)
 *   stage 2: full params; grad shard S*rb; full grads transient per unit
 *   stage 3: param shard S*pb; grad shard S*rb; master, m, v on the shard;
 *            full params and full grads transient per unit
 * With offload (stages 1-3) master, m, v and an fp32 grad shard (S each) live in
 * pinned host memory (delayed update: a second grad shard, and for 16-bit params
 * a host copy of the param shard in param dtype); the device keeps the parameters as above, stage 1's full
 * grads, and transient buffers (stage 2-3 grad shards exist only between the
 * reduction and their copy to the host).
 *
 * A frozen unit (every parameter ZS_PARAM_FROZEN) keeps only its parameters, as
 * above: no master (its parameters in param dtype are the truth), no m, v, no
 * gradient buffer of any kind, no reduction; master is NULL. A unit mixing
 * frozen and trainable parameters is laid out as a trainable one (its frozen
 * parameters' grads exist but are never handed out, reduced-but-ignored).
 */
#ifndef ZS_ZERO_ENGINE_IMPL_H
#define ZS_ZERO_ENGINE_IMPL_H

#include <stdatomic.h>
#include <string.h>

#include "comm/comm_impl.h" /* zs__comm_engine_scope */
#include "common/common.h"
#include "device/work.h"
#include "offload/offload.h"
#include "optim/optim.h"
#include "zeroshard/engine.h"

#define ZS_ALIGN 64
/* The most elements a model may declare (64-aligned parameters): with at most
 * ~32 bytes per element across every buffer, byte sizes stay below 2^62. */
#define ZS_MAX_ELEMS ((int64_t)1 << 56)
/* calls logged per step for naming the ranks of a refused one (calls.c) */
#define ZS_CALL_LOG 256

/* declare.c: an open-addressing set of entries (indices) with their hashes */
typedef struct {
  uint64_t hash;
  int32_t entry; /* -1: empty */
} zs_index_slot_t;
typedef struct {
  zs_index_slot_t *tab;
  size_t cap, n; /* cap: a power of two */
} zs_index_set_t;

typedef struct {
  char name[ZS_NAME_MAX];
  int unit, ndim;
  int64_t shape[ZS_MAX_DIMS];
  int64_t numel, flat_off;
  unsigned flags;
  float lr_scale, wd_scale; /* zs_param_set_scales (1, 1 by default) */
  void **pslot, **gslot;
} zs_param_t;

/* Stage-3 life of a unit's gathered parameters (stages 0-2: IDLE <-> HELD only). */
typedef enum {
  ZS_U_IDLE = 0,  /* not gathered (stage 3) / resident and not in use (0-2) */
  ZS_U_PREFETCHED,/* gather issued ahead, trainer has not asked yet */
  ZS_U_HELD,      /* handed to the trainer by zs_gather */
  ZS_U_KEPT,      /* released in forward with reshard_after_forward off */
  ZS_U_RELEASED   /* released; buffer freed at the next free point */
} zs_ustate_t;

typedef struct {
  void *p;
  size_t bytes;
  zs_mem_category_t cat;
  int host;
} zs_owned_t;

typedef struct {
  char name[ZS_NAME_MAX];
  int first_param, nparams;
  int64_t numel, padded, shard; /* elements */
  int64_t opt_off, opt_n;       /* flat range the optimizer owns */
  int persistent;               /* stage 3: kept gathered for the whole run */
  /* where its parameter shard lives (stage 3): ZS_OFFLOAD_NONE the device
   * (pshard), CPU pinned host memory (pshard is host memory), NVME the tier
   * (pshard NULL); cfg.offload_param for non-persistent units (tier.h) */
  int param_where;
  int frozen;                   /* every parameter ZS_PARAM_FROZEN: parameters only */
  int bwd_unread;               /* every parameter ZS_PARAM_BACKWARD_UNREAD: not gathered for a backward */
  int gather_skipped;           /* the last zs_gather gathered nothing (bwd_unread in a backward) */

  void *full;       /* full params: resident (0-2, persistent) or gathered (3) */
  void *pshard;     /* stage 3: param shard (param dtype) */
  /* hpZ (cfg.hpz_partition_size = K > 1): this rank's 1/K of the gathered
   * parameters (elements hpz_rank P/K.., param dtype), copied from the gather
   * of forward number hsec_at (zs->forwards); backward gathers it among the K
   * ranks */
  void *hsec;
  int64_t hsec_at;
  float *master;
  void *m, *v;      /* optimizer moments in cfg.optim.state_dtype (src/optim/optim.h) */
  float *ms, *vs;   /* int8 states: the block scales of m and v (opt_n / block each) */
  int master_owned; /* master is its own allocation (not an alias of params) */
  void *gfull;      /* full grads: persistent (0-1) or per round (2-3) */
  void *gshard;     /* stage 2-3: grad shard (reduce dtype) */
  void *gtemp;      /* reduce-dtype staging when it differs from the param dtype */
  float *gacc;      /* grad_accum > 1, the rounds' fp32 sum (persistent): stages 2-3 with a 16-bit
                       reduce, the reduced shard's (S); stages 0-1 with 16-bit params, the full
                       gradient's before its reduction (P: zs__eng_full_accum) */
  float *hgrad;     /* offload: fp32 grad shard in pinned host memory (receiving this step's rounds) */
  float *hgrad2;    /* delayed update: the other grad shard, read by the running CPU step */
  void *hparam;     /* delayed update, 16-bit params: the CPU step's parameter copies (host) */
  int seg_first, seg_count;     /* this unit's optimizer segments */

  zs_owned_t owned[14]; /* persistent allocations, freed at destroy */
  int nowned;

  zs_ustate_t st;
  int grad_live, grad_pending; /* stage 2-3 full grads: allocated / awaiting free */
  int reduced_round;           /* round in which zs_reduce last ran */
  int gacc_dirty;              /* stages 0-1: gacc holds this step's earlier rounds */
  /* gathered: the all-gather landed (compute waits); computed: the unit's
   * backward ran (the reduction waits); reduced: its shard is summed (the
   * offload copy waits). Release needs none: the buffers go back to the
   * stream-ordered cache on the stream that read them. */
  zs_event_t *ev_gathered, *ev_computed, *ev_reduced;
} zs_unit_t;

enum { ZS_PH_IDLE = 0, ZS_PH_FORWARD = 1, ZS_PH_BACKWARD = 2 };

struct zs_engine {
  zs_config_t cfg;
  zs_device_t *dev;
  zs_comm_t *comm;
  int rank, world;
  int warned_blank_name; /* a declared name ended in blanks: said once (declare.c) */
  int poison_released;   /* ZS_POISON_RELEASED: released gathered buffers filled with 0xFF bytes (NaN) */
  struct zs__held *held; /* ... and held until the next zs_forward_begin (gather.c) */
  int nheld, held_cap;
  /* Hybrid sharding (cfg.shard_group): state is sharded over the shard group
   * (nshard consecutive ranks; this rank is shard_rank in it) and replicated
   * over the replica group (nrep ranks, one per shard group, same shard_rank).
   * Flat: shard_comm == comm, rep_comm NULL, nshard == world. The sub-comms are
   * made by the first setup and owned by the engine. */
  zs_comm_t *shard_comm, *rep_comm;
  int nshard, shard_rank, nrep, rep_rank;
  /* hpZ: the K consecutive ranks of this one (made by the first setup, owned;
   * NULL off), K = nhpz, this rank's place hpz_rank */
  zs_comm_t *hpz_comm;
  int nhpz, hpz_rank;
  /* qgZ (cfg.quantized_gradients): groups of nqg consecutive ranks of the
   * shard group (qg_intra) and the ranks of one member index across them
   * (qg_inter), split from shard_comm by shard rank, made by the
   * first setup, owned (NULL off; either may be NULL where its size is 1) */
  zs_comm_t *qg_intra, *qg_inter;
  int nqg;
  int groups_borrowed; /* shard_comm/rep_comm belong to a mesh (zs_engine_create_mesh) */
  /* model-parallel group (zs_engine_set_model_parallel): the norm adds its
   * ranks' sums, counting ZS_PARAM_MP_REPLICATED parameters on mp rank 0 only */
  zs_comm_t *mp_comm;
  int mp_rank;
  int repl_rank; /* ZS_PARAM_MP_REPLICATED counts where this is 0: the mp rank, or a mesh's tp coordinate */
  /* a mesh's tp group (2+ ranks, zs_engine_create_mesh): setup checks that its
   * ranks declare the same structure (names, units, ranks of shapes, flags) */
  zs_comm_t *tp_comm;
  zs_stream_t *compute, *ag_stream, *rs_stream;
  /* hybrid stages 2-3 with mpi comms (zs__eng_rep_overlaps, replica_overlap): the replica
   * all-reduce of each unit's shard runs here, so the next unit's
   * reduce-scatter inside the group does not queue behind the slow link (the
   * comms have their own progress threads); ev_rep_all orders rs_stream after
   * it at the step. Made whenever hybrid (NULL: flat). */
  zs_stream_t *rep_stream;
  zs_event_t *ev_rep_all;
  zs_event_t *ev_step;
  zs_event_t *ev_switch; /* zs_engine_set_stream: the old compute stream's end, which the new one waits for */
  /* order.c: the last collective issued on a communicator, and where */
  zs_event_t *ev_order;
  zs_comm_t *ord_comm;
  zs_stream_t *ord_stream;

  zs_unit_t *units;
  int nunits, cap_units;
  zs_param_t *params;
  int nparams, cap_params;
  zs_index_set_t unit_names, param_names, slots; /* duplicate checks (declare.c) */
  int64_t extent_total; /* elements declared, each parameter aligned to ZS_ALIGN */
  int setup_done;
  atomic_flag busy; /* a step call is running (zs__eng_enter): a second thread's is refused */

  int phase;       /* ZS_PH_* */
  int phase_before_forward; /* restored by zs_forward_end */
  int round;       /* backward rounds begun since the last step */
  int64_t step;
  int moments_set_at_zero; /* zs_param_state_set at step count 0 and no zs_engine_set_step_count since */
  int64_t forwards; /* zs_forward_begin calls: which forward filled an hpZ copy */
  uint64_t init_hash; /* the initial values this rank stored, hashed in order (setup.c) */
  float loss_scale;
  int good_steps, hysteresis_left;

  /* prefetch: predicted order per phase (last step's record) and this step's record */
  int *order[3], order_len[3], *rec[3], rec_len[3], pos;
  /* the calls whose order the ranks must share since the last zs_step: stage
   * 3's zs_gather of units gathered on demand and every zs_reduce that issues
   * a collective (matched by their order; the next step prefetches in the
   * order recorded), hashed and logged (calls.c); compared in zs_step's norm
   * (step.c). The log of the calls since the last step fills call_log[call_cur]
   * (its first ZS_CALL_LOG); the last step's stays in the other one, with its
   * hash and count, for naming the ranks of a refused step */
  uint64_t call_hash, call_prev_hash;
  int64_t call_n, call_prev_n;
  int call_cur;
  int32_t call_log[2][ZS_CALL_LOG];
  int last_reduced;     /* unit whose reduction was queued last */
  zs_event_t *ev_reduced_all;
  double *hscalar;      /* pinned host: the norm's double total, then the calls' slots (nslots in all) */

  /* offload: the optimizer steps on the host (offload_optimizer cpu or nvme) */
  int offload;
  /* the NVMe tier (tier.h; NULL without one): opt_nvme: master, m, v there */
  int opt_nvme;
  struct zs_tier *tier;
  int64_t *seg_lo;      /* per segment: owned-range index of its first element */
  double *seg_sumsq;    /* gradients on disk: per segment, its sum of squares (the conversion thread's) */
  zs_stream_t *copy_stream;
  zs_event_t *ev_copy_done, *ev_slot[2];
  zs_offload_conv_t *conv; /* gradient shards to fp32 host shards, on its own thread */
  void *hstage_grad, *hstage_param[2];
  size_t hstage_grad_bytes, hstage_param_bytes;
  zs_offload_unit_t *ounits;
  /* delayed parameter update: the CPU step of step t runs on `worker` during
   * forward/backward of t+1; its results reach the device at the next zs_step or
   * zs_flush. segs2: the segments reading the other grad shard (hgrad2). */
  int dpu, dpu_running, dpu_unapplied;
  zs_offload_worker_t *worker;
  zs_optim_seg_t *segs2;
  zs_event_t **ev_applied; /* per unit: its parameters left the host buffers */
  void **seg_dst;       /* per segment: device destination of its parameters */

  size_t pb, rb;        /* bytes per param / reduce element */
  zs_dtype_t grad_dtype;/* dtype the optimizer reads gradients in */
  double *scalar;       /* device: the norm's double total, then the calls' slots (zs__eng_norm_slots) */
  int nslots;
  /* the norm's sum of squares over the segments in it, planned once (work.h:
   * one launch on cuda); NULL with offload (the host sums) or no such segment */
  zs__sumsq_plan_t *norm_plan;
  void *norm_mem;       /* device: the plan's memory (zs__sumsq_plan_bytes; none on cpu) */
  size_t norm_mem_bytes;
  /* device and pinned host scratch for small collectives of the checkpoint code
   * (2*world+2 int64), made at setup so those calls never allocate: an
   * allocation failing on one rank must not leave the others in a collective */
  int64_t *xdev, *xhost;
  int xcount;
  zs_optim_seg_t *segs; /* every optimizer segment, built at setup */
  int nsegs;
  unsigned char *seg_in_norm; /* per segment: counted in this rank's share of the norm */
  char ck_layout[128]; /* zs_checkpoint_set_layout's words ("" none; ZS_CKPT_LAYOUT_MAX) */
  struct zs_ck_split *ck_split; /* ck_split_n entries (grown to nparams by zs_checkpoint_set_split), or NULL */
  int ck_split_n;
  char ck_attr[16][2][64]; /* zs_checkpoint_set_attr: key, value ("" key: free; ZS_CKPT_ATTRS) */
  char ck_loaded_attr[16][2][64]; /* the last loaded manifest's attrs (zs_checkpoint_loaded_attr) */
  char ck_own[4096]; /* the folder (its realpath) this engine last saved into or loaded from; "" none */
  char ck_pending[4096]; /* the folder of its background save still pending (zs_checkpoint_save_async); "" none */
  int ck_loaded_nattr;
  /* zs_checkpoint_save_async's save in the background (src/ckpt/ckpt_async.c),
   * or NULL; zs_engine_destroy calls ck_async_drop when it is set: the writer
   * joined, its unfinished save removed, a kept copy freed */
  struct ck_async *ck_async;
  void (*ck_async_drop)(zs_engine_t *zs);
  void *ck_keep; /* ZS_CKPT_KEEP_COPY: the last background save's copy, kept for the next (ck_keep_bytes, ZS_MEM_OTHER) */
  size_t ck_keep_bytes;
  /* the checkpoint folders (realpaths) whose writer lock this engine shares
   * (src/ckpt/ckpt_lock.c), NULL: none; zs_engine_destroy calls ck_locks_drop
   * when it is set, after ck_async_drop */
  char **ck_locked;
  int ck_nlocked;
  void (*ck_locks_drop)(zs_engine_t *zs);
  char err[ZS_ERRBUF];
};

/* Stages 2-3 without offload, a 16-bit reduce dtype and grad_accum > 1: each
 * trainable unit keeps its accumulation rounds' sum in fp32 (gacc, S x 4 bytes
 * of ZS_MEM_GRADS beside the 16-bit shard), rounded once after the last round. */
static inline int zs__eng_fp32_accum(const zs_engine_t *zs) {
  return zs->cfg.stage >= 2 && !zs->offload && zs->rb != 4 && zs->cfg.grad_accum > 1;
}
/* Stages 0-1 with 16-bit parameters and grad_accum > 1: the trainer's
 * gradient slot (16-bit, the full unit) would sum the rounds in 16 bits, one
 * rounding a round (a trial: 6.5% off with bf16 over 16 rounds); each trainable
 * unit keeps the rounds' sum in fp32 instead (gacc, P x 4 bytes of
 * ZS_MEM_GRADS): each zs_reduce adds the slot into it and zeroes the slot, and
 * the last reduces the fp32 sum (DeepSpeed's bf16 default, fp32 gradient
 * accumulation). */
static inline int zs__eng_full_accum(const zs_engine_t *zs) {
  return zs->cfg.stage <= 1 && zs->pb != 4 && zs->cfg.grad_accum > 1;
}
/* Where the reduced gradient is kept in fp16 (stages 0-1 with fp16
 * parameters store it back in their dtype; any stage with an fp16 reduce
 * dtype reduces in it), the reduction averages over the ranks and the rounds
 * (the source scaled by 1 / (ranks x rounds), then summed: phases.c, NCCL's
 * ncclAvg way) instead of summing: a sum of finite fp16 gradients could pass
 * 65504 on 2 ranks, or over 16 rounds, where one rank's round and stages 2-3's
 * fp32 shard do not (a trial: every step skipped at stage 0, none at stage 2).
 * The optimizer's multiplier then leaves ranks and rounds out (step.c's
 * grad_base). bf16 has fp32's range: its sums stay sums, as fp32's, rounded
 * as before. */
static inline int zs__eng_grad_avg(const zs_engine_t *zs) {
  return (zs->cfg.stage <= 1 && zs->cfg.param_dtype == ZS_FP16) || zs->cfg.reduce_dtype == ZS_FP16;
}
/* The config puts something in the NVMe tier (src/zero/tier.h). */
static inline int zs__eng_has_tier(const zs_config_t *c) {
  return c->offload_optimizer == ZS_OFFLOAD_NVME || (c->stage == 3 && c->offload_param == ZS_OFFLOAD_NVME);
}
/* The engine's member of the check family (common/common.h): ZS_CHECK whose
 * failure carries the callee's message as "<what> failed on rank R: <message>"
 * in the engine's buffer, the words zs__eng_agree gives every rank; here only
 * this rank fails. */
#define ZS_ENG_CHECK(zs, expr, what)                                                                    \
  do {                                                                                                  \
    zs_status_t zs__st_ = (expr);                                                                       \
    if (zs__st_ != ZS_OK)                                                                               \
      return ZS_FAIL((zs)->err, zs__st_, "%s failed on rank %d: %s", (what), (zs)->rank, zs_last_error()); \
  } while (0)
/* qwZ's elements a scale (cfg.quantized_weights_block, 0: the default). */
static inline size_t zs__eng_wq_block(const zs_config_t *c) {
  return c->quantized_weights_block > 0 ? (size_t)c->quantized_weights_block : ZS_WQ_BLOCK_DEFAULT;
}
/* A collective `expr` on comm and stream s, ordered after the engine's previous
 * collective on another communicator (order.c). */
#define ZS_ENG_COLL(zs, comm, s, expr, what)                                                   \
  do {                                                                                         \
    ZS_ENG_CHECK(zs, zs__eng_comm_order(zs, comm, s), "ordering the engine's communicators"); \
    ZS_ENG_CHECK(zs, expr, what);                                                              \
    ZS_ENG_CHECK(zs, zs__eng_comm_mark(zs, comm, s), "ordering the engine's communicators");  \
  } while (0)
/* order.c */
/* The step's calls (forward/backward begin and end, gather, release, reduce,
 * step) run one at a time: an engine is driven from one thread at a time
 * (design.md 6.2), and a second thread's call while one runs is ZS_ERR_STATE
 * instead of a race on the engine's state. enter fails with the message; leave
 * after every entered call. */
zs_status_t zs__eng_enter(zs_engine_t *zs, const char *fn);
static inline void zs__eng_leave(zs_engine_t *zs) {
  zs__comm_engine_scope(-1);
  atomic_flag_clear_explicit(&zs->busy, memory_order_release);
}
/* ZS_POISON_RELEASED's held buffers back to the device's cache, each on the
 * stream of its fill and last use (idle: the streams are synchronised, at
 * release). */
void zs__eng_free_held(zs_engine_t *zs, int idle);
/* zs_flush and zs_param_get without taking the engine (for the calls that do:
 * checkpoints, exports, imports, zs_param_set). */
zs_status_t zs__eng_flush(zs_engine_t *zs);
zs_status_t zs__eng_param_get(zs_engine_t *zs, int param, float *out);
/* The body of a public call that runs `expr` as one call on the engine
 * (refused while another thread's runs): returns its status. */
#define ZS__ENG_ONE_CALL(zs, fn, expr)                                          \
  do {                                                                          \
    if (!(zs)) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: engine is NULL", fn);  \
    ZS_CHECK(zs__eng_enter(zs, fn));                                            \
    const zs_status_t one_call_st_ = (expr);                                    \
    zs__eng_leave(zs);                                                          \
    return one_call_st_;                                                        \
  } while (0)
/* The process's live engines (create adds, destroy removes), for the checks
 * one engine makes against the others: whether another live engine last
 * saved into or loaded from the folder `dir` (a realpath), or has a background
 * save pending there, and this one did not; if so, its description ("the
 * engine of N parameters, 'name' first") into other (n bytes). */
void zs__eng_live_add(zs_engine_t *zs);
void zs__eng_live_remove(zs_engine_t *zs);
int zs__eng_folder_taken(const zs_engine_t *zs, const char *dir, char *other, size_t n);
/* st, or, when st is ZS_ERR_STATE and a comm of the engine has failed, that
 * comm's status and message: a call refused for the state an earlier failed
 * call left behind reports the failure (comm.h: every later call fails with
 * ZS_ERR_PEER), not a call-order error the caller did not make. The comms are
 * asked only on this error path. fn: the public call. */
zs_status_t zs__eng_state_or_comm(zs_engine_t *zs, zs_status_t st, const char *fn);

zs_status_t zs__eng_comm_order(zs_engine_t *zs, zs_comm_t *comm, zs_stream_t *s);
zs_status_t zs__eng_comm_mark(zs_engine_t *zs, zs_comm_t *comm, zs_stream_t *s);
/* qgrad.c: the quantized reduce-scatter of src (P elements of dt) into *out,
 * the unit's shard in fp32 (S floats from the cache on rs_stream; the caller
 * frees it there). */
zs_status_t zs__eng_qg_reduce(zs_engine_t *zs, zs_unit_t *u, const void *src, zs_dtype_t dt, float **out);
/* The packed bytes of a shard of S elements at cfg.quantized_gradients (8 or 4)
 * bits: the unit of qgZ's all-to-alls, for the estimate and the tools. */
size_t zs__eng_qg_bytes(const zs_config_t *c, size_t S);
/* The replica all-reduce runs on rep_stream, unordered with the shard comm's
 * work: stages 2-3 over mpi comms as replica_overlap says (auto: stage 2;
 * order.c says why). */
int zs__eng_rep_overlaps(const zs_engine_t *zs);
/* agree.c */
/* Bytes of the engine's scratch (xdev/xhost) at `world` ranks. */
uint64_t zs__eng_scratch_bytes(int world);
/* Doubles in the norm's buffer (scalar, hscalar) at `world` data-parallel
 * ranks: the sum of squares, and with more than one rank a hash's sum and its
 * square's sum for each model-parallel position (calls.c) */
static inline int zs__eng_norm_slots(const zs_engine_t *zs, int world) {
  return world > 1 ? 1 + 2 * (zs->mp_comm ? zs_comm_size(zs->mp_comm) : 1) : 1;
}
/* calls.c: the ranks' calls. note: one call (kind 0 a forward gather, 1 a
 * backward gather, 2 a reduce); close: the step's log closed, its hash into
 * the norm's slots (hscalar[1..nslots)); agree: after the norm's all-reduces,
 * whether every position's ranks made the same calls; name (a collective of
 * zs->comm, after a refusal): which ranks differ and at which call, into out
 * (*found 1), or that this engine's ranks made the same calls (*found 0) */
void zs__eng_call_note(zs_engine_t *zs, int unit, int kind);
void zs__eng_calls_close(zs_engine_t *zs);
int zs__eng_calls_agree(const zs_engine_t *zs);
zs_status_t zs__eng_calls_name(zs_engine_t *zs, int *found, char *out, size_t len);
/* Collectives of a few values through the scratch, on the NULL stream; they
 * complete before returning. v holds n int64 (n <= xcount). */
zs_status_t zs__eng_xall_reduce(zs_engine_t *zs, int64_t *v, int n, zs_redop_t op);
zs_status_t zs__eng_xbroadcast(zs_engine_t *zs, void *buf, size_t bytes, int root);
zs_status_t zs__eng_xbroadcast_on(zs_engine_t *zs, zs_comm_t *comm, void *buf, size_t bytes, int root);
/* zs__eng_xall_reduce over another comm of this rank's (the tp group) */
zs_status_t zs__eng_xall_reduce_on(zs_engine_t *zs, zs_comm_t *comm, int64_t *v, int n, zs_redop_t op);
/* Collective over comm: *alike = 1 when every rank passed the same hash h (one
 * all-reduce of MIN of h and of -h, which differ exactly when some rank's h
 * is another). The comm's failure is returned as it is. */
zs_status_t zs__eng_alike_on(zs_engine_t *zs, zs_comm_t *comm, uint64_t h, int *alike);
/* h over n floats' bits, word by word (FNV-1a's constants, 4-byte words; the
 * offset basis 0xcbf29ce484222325 to start): setup's and zs_param_set's
 * comparison of the values the ranks were given. */
static inline uint64_t zs__eng_hash_floats(uint64_t h, const float *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t w;
    memcpy(&w, &x[i], 4);
    h = (h ^ w) * 0x100000001b3ull;
  }
  return h;
}
/* Collective: the ranks agree on a local outcome. ZS_OK when every rank passed
 * st == ZS_OK; otherwise every rank returns the lowest failing rank's status with
 * "<what> failed on rank R: <its message>". */
zs_status_t zs__eng_agree(zs_engine_t *zs, zs_status_t st, const char *what);
/* zs__eng_agree over another comm of this rank's (the model-parallel one) */
zs_status_t zs__eng_agree_on(zs_engine_t *zs, zs_comm_t *comm, zs_status_t st, const char *what);
/* release.c */
/* Frees everything setup made and returns the engine to its declared state. */
void zs__eng_release_setup(zs_engine_t *zs);
/* declare.c */
void zs__eng_decl_free(zs_engine_t *zs);
zs_status_t zs__eng_check_declaring(zs_engine_t *zs, const char *what);
/* Collective: every rank declared the same (ZS_ERR_MISMATCH on every rank otherwise). */
zs_status_t zs__eng_check_declarations(zs_engine_t *zs);
/* Waits for the compute stream; a failure carries the stream's message. */
zs_status_t zs__eng_sync_compute(zs_engine_t *zs);
/* setup.c */
/* The range [*a, *b) of parameter p this rank stores (everything at stages 0-2,
 * the intersection with its shard at stage 3); 0 when empty. */
int zs__eng_stored_range(const zs_engine_t *zs, const zs_param_t *p, int64_t *a, int64_t *b);
/* gather.c */
zs_status_t zs__eng_issue_gather(zs_engine_t *zs, int u);
/* The unit's gathered copy goes back to the cache after its last use on
 * `last` (held instead under ZS_POISON_RELEASED); the unit is idle. */
void zs__eng_drop_gathered(zs_engine_t *zs, zs_unit_t *u, zs_stream_t *last);
zs_status_t zs__eng_free_released(zs_engine_t *zs);
zs_status_t zs__eng_free_grads(zs_engine_t *zs, int keep_latest);
zs_status_t zs__eng_evict_prefetched(zs_engine_t *zs);
/* step.c and setup.c helpers that param_access.c and src/ckpt use */
/* Re-gathers resident parameters after their shards changed: at stages 1-2
 * every unit (ZS_REGATHER_ALL: values were written, e.g. a checkpoint load) or
 * every trainable unit (ZS_REGATHER_UPDATED: after an optimizer update, which
 * never touches frozen units), none with ZS_REGATHER_PERSISTENT; persistent
 * stage-3 units always, except frozen ones after an update. */
enum { ZS_REGATHER_PERSISTENT = 0, ZS_REGATHER_ALL = 1, ZS_REGATHER_UPDATED = 2 };
zs_status_t zs__eng_regather(zs_engine_t *zs, int all);
/* A frozen unit's values: count fp32 values from flat offset `flat` of unit u,
 * read from this rank's parameter storage (param dtype, widened) into host
 * memory; the range must be stored here. Synchronous. */
zs_status_t zs__eng_read_params(zs_engine_t *zs, const zs_unit_t *u, int64_t flat, int64_t count, float *out);
/* Widens n 16-bit values of dtype dt at the start of buf to fp32 in place. */
void zs__eng_widen(void *buf, size_t n, zs_dtype_t dt);
/* estimate.c: a unit's flat size at `world` ranks (setup.c's layout uses it
 * with place = 1 to set the parameters' offsets), whether it is frozen, and the
 * room checks setup runs before it allocates (host memory, the tier's disk). */
void zs__eng_unit_extent(const zs_engine_t *zs, const zs_unit_t *u, int64_t world, int place, int64_t *numel,
                         int64_t *padded, int *persistent);
int zs__eng_unit_frozen(const zs_engine_t *zs, const zs_unit_t *u);
zs_status_t zs__eng_check_room(zs_engine_t *zs);
zs_status_t zs__eng_check_disk(zs_engine_t *zs);
/* Parameter alignment in a unit's flat buffer (ZS_ALIGN, or the int8 state
 * block when larger) and the bytes of one optimizer moment over `on` owned
 * elements (state dtype, plus int8 scales): src/zero/setup.c. */
int64_t zs__eng_align(const zs_config_t *c);
uint64_t zs__eng_state_bytes(const zs_config_t *c, uint64_t on);
/* Moment `which` (1: m, 2: v) of unit u at owned-range elements [lo, lo + n) in
 * fp32: decoded from (get) or encoded into (set) the state dtype; lo on an int8
 * block boundary; host buffers; synchronous (src/zero/state.c). */
zs_status_t zs__eng_state_get(zs_engine_t *zs, const zs_unit_t *u, int which, int64_t lo, size_t n, float *out);
zs_status_t zs__eng_state_set(zs_engine_t *zs, zs_unit_t *u, int which, int64_t lo, size_t n, const float *in);
/* The fp32 master of unit u at owned-range elements [lo, lo + n), wherever it
 * is kept (device, host, the NVMe tier): host buffers; synchronous; ZS_ERR_INTERNAL
 * for a unit without one (frozen). src/zero/state.c. */
zs_status_t zs__eng_master_get(zs_engine_t *zs, const zs_unit_t *u, int64_t lo, size_t n, float *out);
zs_status_t zs__eng_master_set(zs_engine_t *zs, const zs_unit_t *u, int64_t lo, size_t n, const float *in);
/* Whether u keeps state kind k (0 master, 1 m, 2 v) somewhere. */
int zs__eng_unit_keeps(const zs_engine_t *zs, const zs_unit_t *u, int k);
/* The same range as stored: n elements in the state dtype into codes and, for
 * int8, its ceil(n / block) scales into scales (either may be NULL). */
zs_status_t zs__eng_state_raw(zs_engine_t *zs, const zs_unit_t *u, int which, int64_t lo, size_t n, void *codes,
                              float *scales);

/* Writes `count` fp32 values of parameter p from element `poff` wherever this
 * rank stores them: parameter storage (param dtype, rounded) and the fp32 master
 * (when it is its own buffer), clipped to what the rank holds. Synchronous. */
zs_status_t zs__eng_write_values(zs_engine_t *zs, zs_param_t *p, int64_t poff, int64_t count, const float *src);
/* Waits for a running delayed update (its results stay on the host until applied). */
zs_status_t zs__eng_dpu_join(zs_engine_t *zs);
/* alloc.c: memory helpers (host: pinned host memory, counted in the host domain) */
zs_status_t zs__eng_alloc(zs_engine_t *zs, size_t bytes, zs_mem_category_t cat, void **out);
zs_status_t zs__eng_host_alloc(zs_engine_t *zs, size_t bytes, zs_mem_category_t cat, void **out);
void zs__eng_host_free(zs_engine_t *zs, void **p, size_t bytes, zs_mem_category_t cat);
void zs__eng_free(zs_engine_t *zs, void **p, size_t bytes, zs_mem_category_t cat);
/* Transient buffers of a step, from the device's stream-ordered cache: the
 * buffer's first use is on stream s (alloc), its last use was queued on s (free). */
zs_status_t zs__eng_alloc_on(zs_engine_t *zs, size_t bytes, zs_mem_category_t cat, zs_stream_t *s, void **out);
void zs__eng_free_on(zs_engine_t *zs, void **p, size_t bytes, zs_mem_category_t cat, zs_stream_t *s);

#endif
