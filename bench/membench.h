/* membench.h: what the parts of zs-membench share (membench.c: the process,
 * the runs it makes and their figures gathered on rank 0; membench_flags.c:
 * the command line; membench_formula.c: the model and the formulas;
 * membench_run.c: one run and its measurement; membench_gpt.c: the example
 * GPT's units and compute; membench_links.c: the engine's comm groups inside
 * a node and across nodes; membench_report.c: the table, the JSON document
 * and the plot). */
#ifndef ZS_BENCH_MEMBENCH_H
#define ZS_BENCH_MEMBENCH_H

#include <stdint.h>
#include <stdio.h>

#include "zeroshard/comm.h"
#include "zeroshard/device.h"
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
  int offload_param;                        /* --offload-param: stage 3 again with the parameter shards
                                               in host memory, or (with --nvme) on disk */
  const char *nvme;                         /* --nvme DIR: stages 1-3 again with the optimizer state in
                                               the NVMe tier, its files under DIR */
  int64_t nvme_chunk;                       /* --nvme-chunk: elements a chunk (0: the engine's default) */
  double compute_ms;                        /* --units: emulated compute per round (host idle) */
  int prefetch;                             /* -1: the engine's default */
  int shard_group;                          /* hybrid sharding (stages 1-3); 0 = all ranks */
  int quantized_weights, qw_block;          /* --quantized-weights (stage 3 runs), its block (0: 256) */
  int hpz;                                  /* --hpz K (stage 3 runs): backward gathers among K ranks */
  zs_overlap_t replica_overlap;             /* --replica-overlap auto|on|off (hybrid stage 2-3 runs) */
  int qg, qg_group;                         /* --quantized-grads 8|4 (stages 2-3), --quantized-grads-group K */
  int tp, sp;                               /* --tp N (gpt: mesh dp x tp), --sequence-parallel */
  int ranks_per_node;                       /* --ranks-per-node R: nodes of R consecutive ranks (emulated;
                                               0: the nodes MPI's shared-memory split finds) */
  int tp_rank;                              /* this rank's coordinate in its tp group (main sets it) */
  int cuda;                                 /* --device cuda */
  int steps;
  int json;
  const char *plot;                         /* --plot FILE.png */
  /* derived from the flags: the optimizer's states (--optim-state) have
   * state_esz bytes per element of m and of v, int8 ones a block of
   * state_block elements (its scales, 4 bytes a block each; 0 otherwise), and
   * a parameter starts at a multiple of align_elems elements in its unit, 64
   * or the block when larger (docs/design.md 2.2.1) */
  int64_t state_esz, state_block, align_elems;
} mb_opts_t;

/* The engine's comm groups, in zs_group_t's order from ZS_GROUP_WORLD (flat
 * sharding: the shard group is the world comm, its bytes counted under world). */
enum { MB_G_WORLD = 0, MB_G_SHARD, MB_G_REPLICA, MB_G_HPZ, MB_G_QG_NODE, MB_G_QG_CROSS, MB_G_MODEL, MB_G_COUNT };

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
  /* the NVMe tier (runs with --nvme; 0 otherwise): the accountant's nvme domain
   * (its model state and by category), the formula (docs/design.md 3.3.1) by
   * category, the tier file's size by zs_engine_nvme_stats and by fstat(2) of the open file, the
   * last step's optimizer phase's bytes read and written (the records and the
   * gradients it reads; not the conversion thread's gradient writes in
   * backward), and the parameter shards read for gathers over all steps */
  int64_t nvme_model_state, nvme_formula, f_nvme[MB_F_COUNT];
  int64_t ncur[ZS_MEM_CATEGORY_COUNT], npk[ZS_MEM_CATEGORY_COUNT];
  int64_t nvme_file_bytes, nvme_file_stat;
  int64_t nvme_read, nvme_written, nvme_param_read;
  int64_t comm_bytes;                    /* bytes sent over all steps, every kind */
  int64_t comm_ag, comm_rs, comm_ar;     /* of which all-gather, reduce-scatter, all-reduce */
  int64_t comm_inter;                    /* sent inside the replica group (hybrid) */
  int64_t comm_group[MB_G_COUNT];        /* sent on each of the engine's comm groups (MB_G_*) */
  int64_t comm_calls;
  double step_s;                         /* mean over the steps after the first */
  double step_min_s;                     /* the fastest of the steps after the first */
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
  int nvme;                      /* offload: the optimizer state in the NVMe tier (else host memory) */
  int param;                     /* stage 3: where the parameter shards live (zs_offload_t) */
  double step_s;                 /* max over ranks */
  double step_min_s;             /* max over ranks of each rank's fastest measured step */
  double comm_bytes_per_step;    /* rank 0's bytes sent per step */
  /* per step after the first, the most over ranks (0 in steady state) */
  double allocs_per_step, frees_per_step, syncs_per_step, waits_per_step;
  int64_t comm_theory;           /* ZeRO: 2psi(N-1)/N (stages 0-2), 3psi(N-1)/N (stage 3); hybrid: the
                                    shard group's (N = Ns) plus the replicas' 2(psi/Ns)(Nr-1)/Nr */
  int shard_group;               /* ranks sharing a shard (the world when flat) */
  double comm_inter_bytes_per_step; /* rank 0's bytes sent across shard groups (the replica group) */
  int64_t comm_inter_theory;     /* 2 (psi/Ns)(Nr-1)/Nr in the reduce dtype; 0 when flat */
  int64_t comm_norm;             /* the norm buffer's all-reduce over the shard group (step.c: stages 1-3; stage 0 its calls' slots),
                                    and with --tp over the tp ranks (the model-parallel comm) */
  int64_t comm_agree;            /* the NVMe tier's agreements: two int64 all-reduces over the engine's world a step */
  int64_t padded;                /* parameters including padding */
  /* rank 0's bytes a step on each comm group (MB_G_*) in theory, whether its
   * group of that kind spans nodes (-1: no such comm in this run), and the sums
   * over the groups inside one node (intra) and across nodes (inter), measured
   * and in theory (membench_links.c; without a known node layout: links 0) */
  int links;
  int64_t group_theory[MB_G_COUNT];
  int group_spans[MB_G_COUNT];
  double intra_per_step, inter_per_step;
  int64_t intra_theory, inter_theory;
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
  int node_size;        /* ranks a node (mb_links_node_size; 0: unknown) */
} mb_report_t;

/* ---- membench.c: the process ------------------------------------------------------------- */

extern int mb_rank, mb_world;  /* MPI_COMM_WORLD's */
extern zs_device_t *mb_dev;    /* the device every run's engine uses */
extern zs_comm_t *mb_comm;     /* over MPI_COMM_WORLD (mpi, or nccl on --device cuda) */
/* Destroys the comm and the device, finalizes MPI, exits with code. */
_Noreturn void mb_finish(int code);
/* Same on every rank (flags, configuration): rank 0 says it, everyone exits. */
_Noreturn void mb_die_all(int code, const char *fmt, const char *arg);
/* One rank failed in a collective run: the others may be waiting on it (MPI_Abort). */
_Noreturn void mb_die_rank(zs_status_t st, const char *what, const char *detail);

/* ---- membench_flags.c -------------------------------------------------------------------- */

/* The options from the command line; bad flags end every rank (exit 2). */
mb_opts_t mb_parse(int argc, char **argv);

/* ---- membench_formula.c ------------------------------------------------------------------ */

/* --units: one parameter of each size a unit (the first --frozen of them frozen). */
void mb_units_model(const mb_opts_t *o, mb_model_t *m);
/* Padded elements of unit u at n ranks, from the shapes (the engine's rule). */
int64_t mb_unit_padded(const mb_opts_t *o, const mb_model_t *m, int u, int n);
/* docs/design.md's tables per unit, summed: the model state's device, host
 * and NVMe tier bytes by category (MB_F_*) for the run's setting (its stage,
 * offload, delayed, nvme, param; nothing else of it is read), over n ranks. */
void mb_formula(const mb_opts_t *o, const mb_model_t *m, const mb_result_t *run, size_t pb, size_t rb, int n,
                int64_t f_dev[MB_F_COUNT], int64_t f_host[MB_F_COUNT], int64_t f_nvme[MB_F_COUNT]);
/* Ring bytes a rank sends per step (the gradient norm's all-reduce in *norm). */
int64_t mb_comm_theory(const mb_opts_t *o, const mb_model_t *m, int stage, size_t pb, size_t rb, int n, size_t qwb, int hpz,
                       int qgk, size_t qgb, int slots, int64_t *norm);
/* The same bytes (the norm aside) by the comm group that carries them: the
 * shard group's collectives, hpZ's backward gathers, qgZ's two all-to-alls
 * (MB_G_SHARD, MB_G_HPZ, MB_G_QG_NODE, MB_G_QG_CROSS; the rest 0). */
void mb_comm_theory_groups(const mb_opts_t *o, const mb_model_t *m, int stage, size_t pb, size_t rb, int n, size_t qwb,
                           int hpz, int qgk, size_t qgb, int64_t by_group[MB_G_COUNT]);
/* Hybrid: what crosses the shard groups per step (ns ranks a group, nr replicas). */
int64_t mb_comm_inter_theory(const mb_opts_t *o, const mb_model_t *m, size_t rb, int ns, int nr, int slots);
/* Doubles in zs_step's norm buffer at dpw data-parallel ranks and tp (src/zero/step.c) */
static inline int mb_norm_slots(int dpw, int tp) { return dpw > 1 ? 1 + 2 * tp : 1; }

/* ---- membench_links.c --------------------------------------------------------------------- */

/* Ranks a node: --ranks-per-node, or MPI's shared-memory split where every node
 * holds an equal run of consecutive ranks; 0 where it does not (collective). */
int mb_links_node_size(const mb_opts_t *o);
/* Rank 0's groups inside a node or across nodes of r ranks (r > 0), their
 * theory (group_theory, set by the caller) summed each way, and rank 0's
 * measured bytes likewise (x->ranks[0].comm_group); qg_k: qgZ's group. */
void mb_links_split(const mb_opts_t *o, mb_result_t *x, int dp_world, int qg_k, int r);
/* The comm groups' names in the JSON ("world", "shard", "replica", "hpz",
 * "qg_node", "qg_cross"), and the formula of one group's bytes a step, and of
 * one side's (across: the groups that span nodes, else those inside one), in
 * words (docs/design.md 4.2-4.3's terms). */
extern const char *const mb_group_names[MB_G_COUNT];
void mb_links_group_formula(const mb_opts_t *o, const mb_result_t *x, int g, char *b, size_t n);
void mb_links_side_formula(const mb_opts_t *o, const mb_result_t *x, int across, char *b, size_t n);

/* ---- membench_run.c ---------------------------------------------------------------------- */

/* One run on every rank: an engine at the run's stage and offload setting
 * (its stage, offload, delayed, nvme, param) over the model, --steps steps,
 * this rank's figures in *me. pslot, gslot: a slot per parameter for the
 * engine's pointers. A failure ends the job (mb_die_rank). */
void mb_run_one(const mb_opts_t *o, const mb_model_t *m, const mb_result_t *run, void **pslot, void **gslot,
                mb_rank_t *me);

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
 * adds the engine's norm all-reduce of one fp64 over the tp group). 0 without tp. */
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

/* 1 if model_state == formula, host_model_state == host_formula and
 * nvme_model_state == nvme_formula == the tier file's size (both ways of
 * reading it) on every rank. */
int mb_result_ok(const mb_result_t *r, int world);
/* The run's offload setting for the table: "no", "yes" (optimizer state in host
 * memory), "delayed", "param cpu" (and the parameter shards), "nvme" (the
 * optimizer state on disk), "nvme+param" (and the parameter shards). */
const char *mb_run_label(const mb_result_t *r);
void mb_report_table(const mb_report_t *rep, FILE *f);
void mb_report_json(const mb_report_t *rep, FILE *f);
/* Writes FILE.png through gnuplot; 0, or -1 after a warning on stderr (skipped). */
int mb_report_plot(const mb_report_t *rep, const char *path);

#endif
