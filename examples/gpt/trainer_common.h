/* trainer_common.h: what the GPT's three trainers share (trainer.c through the
 * engine, trainer_moe.c over two engines, trainer_ps.c through a parameter
 * server): the run's error message, the clock, sums over ranks, the data, the
 * result's arrays. Defined in trainer_common.c, with gpt_result_free,
 * gpt_result_json and gpt_threads_auto (trainer.h). */
#ifndef ZS_EXAMPLES_GPT_TRAINER_COMMON_H
#define ZS_EXAMPLES_GPT_TRAINER_COMMON_H

#include <stddef.h>

#include "../common/check.h" // defines: TRY
#include "data.h"
#include "gpt.h" // defines: GPT_ACTS_ (trainer_acts_mode_of)
#include "trainer.h"
#include "zeroshard/comm.h"
#include "zeroshard/engine.h" // defines: zs_schedule_t, zs_step_report_t
#include "zeroshard/status.h"

/* res->err = "what: detail (NAME)" (the status's own string without a detail);
 * returns st, so that a failure reads `return trainer_fail(res, st, ...)`. */
zs_status_t trainer_fail(gpt_result_t *res, zs_status_t st, const char *what, const char *detail);

/* The training activations' GPT_ACTS_ mode (gpt.h) for o's --recompute level. */
static inline int trainer_acts_mode_of(const gpt_opts_t *o) {
  return o->recompute == GPT_RECOMPUTE_BLOCK  ? GPT_ACTS_RECOMPUTE
         : o->recompute == GPT_RECOMPUTE_GELU ? GPT_ACTS_RECOMPUTE_GELU
                                              : GPT_ACTS_TRAIN;
}

/* CLOCK_MONOTONIC in seconds. */
double trainer_now_s(void);

/* --save-async: st of a background save (or of the wait that finished one)
 * into dir; one that failed on the disk or for memory (every rank's status:
 * the checkpoint calls agree it) leaves the folder's previous checkpoint, so
 * rank 0 warns and ZS_OK comes back: training goes on, the next interval
 * tries again. Any other st is returned as it is. */
zs_status_t trainer_background_saved(int rank, const char *dir, const zs_engine_t *zs, zs_status_t st);

/* An all-gather of `count` elements of dt from host memory into host memory;
 * trainer_sum_over_ranks calls it (zs_comm_all_gather on comm when NULL). */
typedef zs_status_t (*trainer_gather_fn)(void *user, const void *send, void *recv, size_t count, zs_dtype_t dt);

/* Sums `k` doubles over the ranks r = 0, stride, 2 stride, ... of comm, in rank
 * order (the same sum at every world size up to double rounding; stride > 1
 * where groups of ranks hold the same numbers, e.g. a tp group). Raw bytes
 * travel, so nothing is rounded to float. Collective. */
zs_status_t trainer_sum_over_ranks(zs_comm_t *comm, int stride, const double *mine, double *sum, int k,
                                   trainer_gather_fn gather, void *user);

/* The learning-rate schedule of o for a run that starts at step0 (a checkpoint's
 * step): *s filled, and 1 when there is one to set, 0 when there is none
 * (--lr-schedule constant, or --steps too short for the default warmup), -1
 * when an explicit --warmup / --lr-steps leaves no room for it (s says both). */
int trainer_schedule(const gpt_opts_t *o, int64_t step0, zs_schedule_t *s);

/* Validation is due before `step`'s update (step 0, then every --val-every). */
int trainer_val_due(const gpt_opts_t *o, int step);

/* The validation windows (o->val_seqs of those data holds) split over `parts`
 * ranks: part's [*first, *first + *count) of *total. */
void trainer_val_split(const gpt_data_t *data, const gpt_opts_t *o, int part, int parts, int *total, int *first,
                       int *count);

/* Opens the trace range "step N" that zs-trace's bubble measures one step by, for
 * the run's 0-based step: N = step + 1, the number the trainer prints and, for
 * a run from scratch, the engine's "update step N" inside it. */
void trainer_trace_step(int64_t step);

/* --data FILE, or the built-in licenses text, checked for windows of o->seq;
 * ZS_ERR_IO with res->err saying why. */
zs_status_t trainer_data_load(gpt_data_t *data, const gpt_opts_t *o, gpt_result_t *res);

/* The run's model-parallel layout in words for zs_checkpoint_set_layout, so a
 * resume in another layout is refused naming both: "tp=T pp=P", then with
 * --pp " virtual=V" (V > 1) and " layers a,b,..." (every model stage's layers:
 * --pp-layers or the even split; " layers #HASH of S stages" where the list
 * would not fit ZS_CKPT_LAYOUT_MAX); for the experts of --moe-experts
 * "ep=N experts=E". The data-parallel size and stage are left out: a load may
 * change them. */
void trainer_layout(const gpt_opts_t *o, char *buf, size_t n);

/* Clears res (val_loss NAN). */
void trainer_result_init(gpt_result_t *res);
/* res's arrays: losses, grad norms, lrs for `steps` + 1 steps, `nval` validation
 * points, `world` ranks (at least 1). ZS_ERR_NOMEM (no message: the caller's
 * own failure may be the one to report) if one could not be had; what was had
 * stays for gpt_result_free. */
zs_status_t trainer_result_alloc(gpt_result_t *res, int steps, int nval, int world);
/* A training step's figures: its global mean loss (before its update) and the
 * engine's report (norm, lr, skipped); res->steps = step + 1. */
void trainer_result_add_step(gpt_result_t *res, int step, double loss, const zs_step_report_t *rep);
/* res->tokens_per_s: the steps' training tokens over `seconds` (0 when none). */
void trainer_result_rate(gpt_result_t *res, const gpt_opts_t *o, int steps, double seconds);
/* res->ranks from every rank's mine[TRAINER_PEAKS] (device and host peaks,
 * activation peak bytes and micro-batches, all-gather bytes a step; the NVMe
 * tier's file bytes, the estimate's, its optimizer phases' microseconds and
 * bytes moved over the run), through gather (zs_comm_all_gather on comm when
 * NULL). Collective. */
enum { TRAINER_PEAKS = 9 };
zs_status_t trainer_result_peaks(gpt_result_t *res, zs_comm_t *comm, const int64_t mine[TRAINER_PEAKS],
                                 trainer_gather_fn gather, void *user);
/* A validation point: the mean token loss after `step` updates (0 = the
 * initial model), also the run's last (res->val_loss). */
void trainer_result_add_val(gpt_result_t *res, int step, double loss);

/* A collective on host buffers over c (op >= 0: an all-reduce; -1: an
 * all-gather; -2 - root: a broadcast from root, in place in recv), through
 * device memory allocated for the call where c is a cuda device's comm (NCCL
 * takes device buffers only); the plain call otherwise. The result is on the
 * host at return. Between steps only (--export, the final parameters, checks). */
zs_status_t trainer_host_coll(zs_comm_t *c, const void *send, void *recv, size_t n, zs_dtype_t dt, int op);

#endif
