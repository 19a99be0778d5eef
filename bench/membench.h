/* membench.h: what the parts of zs-membench share (membench.c: flags, runs and
 * measurement; membench_gpt.c: the example GPT's units and compute;
 * membench_report.c: the table, the JSON document and the plot). */
#ifndef ZS_BENCH_MEMBENCH_H
#define ZS_BENCH_MEMBENCH_H

#include <stdint.h>
#include <stdio.h>

#include "zeroshard/comm.h"
#include "zeroshard/engine.h"

#define MB_NAME_MAX 64

/* ---- the command line ------------------------------------------------------------ */

typedef struct {
  int gpt;                                  /* --model gpt (else --units) */
  int layers, channels, heads, vocab, seq;  /* --model gpt: the trainer's model flags */
  int batch;                                /* sequences per rank per step (compute) */
  int compute;                              /* gpt: run forward/backward (--no-compute: 0) */
  int64_t *units;                           /* --units N1,N2,...: elements per unit */
  int nunits;
  int frozen;                               /* --frozen K: the first K units are ZS_PARAM_FROZEN */
  int stages[4], nstages;
  zs_dtype_t dtype, reduce_dtype;
  int offload;                              /* add offloaded runs for stages 1-3 */
  zs_state_dtype_t optim_state;             /* --optim-state: AdamW's m and v */
  int optim_block;                          /* --optim-block (int8) */
  int delayed;                              /* add offloaded runs with the delayed update */
  double compute_ms;                        /* --units: emulated compute per round (host idle) */
  int prefetch;                             /* -1: the engine's default */
  int shard_group;                          /* hybrid sharding (stages 1-3); 0 = all ranks */
  int quantized_weights, qw_block;          /* --quantized-weights (stage 3 runs), its block (0: 256) */
  int hpz;                                  /* --hpz K (stage 3 runs): backward gathers among K ranks */
  int qg, qg_group;                         /* --quantized-grads 8 (stages 2-3), --quantized-grads-group K */
  int tp, sp;                               /* --tp N (gpt: mesh dp x tp), --sequence-parallel */
  int tp_rank;                              /* this rank's coordinate in its tp group (main sets it) */
  int cuda;                                 /* --device cuda */
  int steps;
  int json;
  const char *plot;                         /* --plot FILE.png */
} mb_opts_t;

/* ---- the model as declared: units of parameters ------------------------------------ */

/* Steps the comm and time figures average over: every step after the first
 * (which differs with the delayed update: nothing to regather yet), or the one. */
static inline int mb_measured_steps(const mb_opts_t *o) { return o->steps > 1 ? o->steps - 1 : 1; }

typedef struct {
  char name[MB_NAME_MAX];
  int unit, ndim;
  int64_t shape[2], numel;
  unsigned flags;
} mb_param_t;

typedef struct {
  char desc[160];      /* for titles: "gpt L2 C64 H4 V256 T64" or "units 1000,3000" */
  int nunits, nparams;
  int *unit_first;     /* [nunits + 1]: first parameter of each unit */
  char (*unit_names)[MB_NAME_MAX];
  mb_param_t *params;
  int64_t numel;       /* parameters, unpadded (with --tp: this rank's part) */
  /* --tp: the whole model's parameters replicated across tp (ZS_PARAM_MP_REPLICATED)
   * and split over it; per rank the formula is replicated + split/tp (the
   * vocabulary's rows rounded up to ceil(V/tp), tp.h's split) */
  int64_t tp_replicated, tp_split, tp_formula;
} mb_model_t;

void mb_model_free(mb_model_t *m);

/* ---- figures per rank and per run ------------------------------------------------------ */

enum { MB_F_PARAMS = 0, MB_F_GRADS, MB_F_OPTIM, MB_F_COUNT }; /* model-state categories */

/* One rank's figures for one run; gathered on rank 0 as raw bytes. */
typedef struct {
  int64_t rank;
  int64_t model_state, host_model_state; /* measured after zs_step (params+grads+optimizer) */
  int64_t formula, host_formula;         /* the ZeRO table with padding */
  int64_t f_dev[MB_F_COUNT], f_host[MB_F_COUNT];
  int64_t peak, host_peak;               /* peak of the domain total over the run */
  int64_t cur[ZS_MEM_CATEGORY_COUNT], pk[ZS_MEM_CATEGORY_COUNT];   /* device domain */
  int64_t hcur[ZS_MEM_CATEGORY_COUNT], hpk[ZS_MEM_CATEGORY_COUNT]; /* host domain */
  int64_t comm_bytes;                    /* bytes sent over all steps, every kind */
  int64_t comm_ag, comm_rs, comm_ar;     /* of which all-gather, reduce-scatter, all-reduce */
  int64_t comm_inter;                    /* sent inside the replica group (hybrid) */
  int64_t comm_calls;
  double step_s;                         /* mean over the steps after the first */
  /* the runtime's view (cudaMemGetInfo) of device memory used after the steps,
   * minus before engine creation; -1 where there is none (cpu device). GPU-wide:
   * ranks sharing a GPU see each other's allocations. */
  int64_t runtime_used;
  int64_t acct_device;                   /* the accountant's device total at the same point */
  /* over the steps after the first: device memory from and to the backend,
   * device-wide synchronisations, host waits (zeroshard/memory.h) */
  int64_t backend_allocs, backend_frees, device_syncs, host_waits;
  /* --tp (0 otherwise): parameters this rank declared (the engine's count) and
   * the formula; activation bytes one layer keeps (gpt_tp_acts_t.layer_floats x 4)
   * and 4 (4 Nr C + 4 Nr + 12 N C/tp + B (NH/tp) T^2); bytes sent on the tp comm
   * per measured step (-1: not a whole number of bytes per step) and theory */
  int64_t tp_numel, tp_numel_formula, act_bytes, act_formula, tp_comm_step, tp_comm_theory;
  int64_t tp_ar, tp_ag, tp_rs;           /* the tp comm's bytes by kind, all measured steps */
} mb_rank_t;

typedef struct {
  int stage, offload, delayed;   /* delayed: offload with the delayed parameter update */
  double step_s;                 /* max over ranks */
  double comm_bytes_per_step;    /* rank 0's bytes sent per step */
  /* per step after the first, the most over ranks (0 in steady state) */
  double allocs_per_step, frees_per_step, syncs_per_step, waits_per_step;
  int64_t comm_theory;           /* ZeRO: 2psi(N-1)/N (stages 0-2), 3psi(N-1)/N (stage 3); hybrid: the
                                    shard group's (N = Ns) plus the replicas' 2(psi/Ns)(Nr-1)/Nr */
  int shard_group;               /* ranks sharing a shard (the world when flat) */
  double comm_inter_bytes_per_step; /* rank 0's bytes sent across shard groups (the replica group) */
  int64_t comm_inter_theory;     /* 2 (psi/Ns)(Nr-1)/Nr in the reduce dtype; 0 when flat */
  int64_t comm_norm;             /* the gradient norm's fp32 all-reduce (stages 1-3) */
  int64_t padded;                /* parameters including padding */
  mb_rank_t *ranks;              /* world entries (rank 0 only) */
} mb_result_t;

typedef struct {
  const mb_opts_t *o;
  const mb_model_t *m;
  int world;
  const char *device;
  mb_result_t *res;
  int nres;
  int64_t padded_world; /* parameters with padding in a flat layout of every rank */
} mb_report_t;

/* ---- membench_gpt.c ---------------------------------------------------------------------- */

typedef struct mb_gpt mb_gpt_t;

/* 1 when this build has the example GPT (examples/gpt with a CBLAS). */
int mb_gpt_available(void);
/* The parameter table of the GPT the options describe. 0, or -1 with a message. */
int mb_gpt_model(const mb_opts_t *o, mb_model_t *m, char *err, size_t errlen);
/* State for the trainer's schedule on a tiny batch. pslot/gslot: the slots the
 * engine writes (one per parameter, in table order). 0 or -1 (message in err). */
int mb_gpt_create(mb_gpt_t **out, const mb_opts_t *o, const mb_model_t *m, void **pslot, void **gslot, int rank,
                  char *err, size_t errlen);
/* --tp: the same on the GPT split over tpc (the mesh's tp comm, borrowed):
 * gpt_tp.c's units, this rank's parameter shapes. */
int mb_gpt_create_tp(mb_gpt_t **out, const mb_opts_t *o, const mb_model_t *m, void **pslot, void **gslot,
                     zs_comm_t *tpc, int rank, char *err, size_t errlen);
/* --tp: floats one layer keeps from forward to backward (gpt_tp_acts_t.layer_floats),
 * its formula, and the tp comm's theoretical bytes per step (a rank sends; grad_clip
 * adds the engine's norm all-reduce of one fp32 over the tp group). 0 without tp. */
int64_t mb_gpt_layer_floats(const mb_gpt_t *g);
int64_t mb_gpt_layer_floats_formula(const mb_opts_t *o);
int64_t mb_gpt_tp_comm_theory(const mb_gpt_t *g, const mb_model_t *m, int norm);
/* The engine's init callback: GPT-2's initialisation of every element. user: mb_gpt_t. */
int mb_gpt_init(void *user, int param, int64_t offset, int64_t count, float *dst);
/* One training round (forward, backward) in the trainer's order of gathers,
 * releases and reductions; with compute, the model's math on synthetic tokens. */
zs_status_t mb_gpt_round(mb_gpt_t *g, zs_engine_t *zs, int step);
void mb_gpt_destroy(mb_gpt_t *g);
/* OpenMP/BLAS threads for ranks sharing the machine (the trainer's rule). */
int mb_gpt_threads(int ranks_here);

/* ---- membench_report.c ------------------------------------------------------------------- */

/* 1 if model_state == formula and host_model_state == host_formula on every rank. */
int mb_result_ok(const mb_result_t *r, int world);
void mb_report_table(const mb_report_t *rep, FILE *f);
void mb_report_json(const mb_report_t *rep, FILE *f);
/* Writes FILE.png through gnuplot; 0, or -1 after a warning on stderr (skipped). */
int mb_report_plot(const mb_report_t *rep, const char *path);

#endif
