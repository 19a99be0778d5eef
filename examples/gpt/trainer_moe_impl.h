/* trainer_moe_impl.h: the mixture-of-experts trainer's state, shared by
 * trainer_moe.c (setup, the steps, the results), trainer_moe_round.c (one
 * round and the validation pass over both engines), trainer_moe_whole.c
 * (the whole model: the tests' final parameters, --export, --init-from) and
 * trainer_moe_cuda.c (the round and the validation pass on a cuda device). */
#ifndef ZS_EXAMPLES_GPT_TRAINER_MOE_IMPL_H
#define ZS_EXAMPLES_GPT_TRAINER_MOE_IMPL_H

#include <stdint.h>

#include "data.h"
#include "gpt_moe.h"
#include "gpt_tp.h"
#include "trainer_common.h" // defines: TRY, trainer_fail
#include "zeroshard/engine.h"
#include "zeroshard/mesh.h"
#include "zeroshard/moe.h"

typedef struct {
  const gpt_opts_t *o;
  gpt_moe_t mm;
  zs_device_t *dev;
  zs_comm_t *comm, *ep_comm, *edp_comm;
  zs_mesh_t *mesh;
  zs_engine_t *dz, *xz;          /* dense (edp x ep, mp = tp), experts (edp x tp, mp = ep) */
  zs_moe_t *moe[GPT_MAX_LAYERS];
  int rank, world, ep, edp, L, nd, nx, per_rank, micro, bf16;
  /* --tp (trainer_moe_tp.c): the mesh edp x ep x tp, tp innermost; a tp group
   * sees one data rank's tokens (drank of dworld = world / tp); attention, the
   * embedding and the head split as gpt_tp.h's (tpm), the router and experts
   * computed whole on every tp rank. tp 1: tph NULL, drank = rank. */
  int tp, drank, dworld;
  gpt_tp_t tpm;
  zs_tp_t *tph;
  gpt_tp_acts_t tacts, tvacts;   /* a micro-batch's, a validation chunk's */
  int64_t step0;
  gpt_data_t data;
  gpt_param_info_t *dinfo, *xinfo;
  void **dp, **dg, **xp, **xg;   /* the engines' slots, per table entry */
  /* fp32 views of the gathered units' slots, per table entry (NULL where not
   * gathered, gradients only in backward): the slots themselves in fp32; in
   * bf16 the unit's parameters widened into the scratch dps / xps and its
   * gradients made in the zeroed scratch dgs / xgs, added into the bf16 slots
   * at zs_reduce (trainer_round.c's scheme). One dense and one expert unit are
   * gathered at a time; doff / xoff: an entry's offset in its unit's scratch. */
  float **dpv, **dgv, **xpv, **xgv;
  float *dps, *dgs, *xps, *xgs;
  int64_t *doff, *xoff;
  gpt_weights_t w, g;            /* embed and lnf views (blk unused) */
  gpt_moe_block_w_t *bw, *bg;    /* per layer */
  float **ptrs;                  /* bw/bg's expert pointer arrays: 8 x L x El */
  gpt_acts_t acts;
  gpt_moe_acts_t macts;
  float *dwte_head;
  int *tin, *ttg;
  /* validation: this rank's windows [v_first, v_first + v_count) of v_total,
   * their residual stream, in chunks of `micro` sequences, v_chunks of them on
   * every rank (the all-to-alls pair the ranks' calls; a rank out of windows
   * routes empty chunks) */
  int v_total, v_first, v_count, v_chunks;
  float *vresid;
  int *vin, *vtg;
  double val_time;
  /* this step's routing, summed over layers and micro-batches */
  uint64_t route_sent, route_recv;
  int64_t *routed, *kept, *tmp_r, *tmp_k; /* [L x E] this rank's over the run; scratch [E] x 2 */
  double aux_sum;
  /* --pp (trainer_moe_pp.c): the mesh pp x edp x ep, pp outermost; this rank
   * declares its pipeline stage's units only (dmap / xmap: engine parameter ->
   * table entry, NULL without pp); pps: the pipeline's state. pp 1: NULL. */
  int pp, pp_rank, nmb; /* nmb: micro-batches a step (--accum, or --microbatches with --pp) */
  int *dmap, *xmap, *dpid, *xpid;
  int64_t dmax, xmax; /* bf16: the scratch a unit needs (--pp: this stage's units), elements */
  struct moe_pp *pps;
  /* --device cuda (trainer_moe_cuda.c; no --pp): the tp handle (tph; at tp 1
   * a 1-rank one) so gpt_tp_cuda.c's units run the dense parts; acts unused,
   * tacts / tvacts, macts, dwte_head, the bf16 scratch and vresid in device
   * memory, tin / ttg pinned; cu: the rest of the GPU's state. NULL on the
   * cpu device. With --pp (trainer_moe_cuda_pp.c) tacts and dwte_head stay
   * unused, the pipeline's slots and tokens in pps. */
  int cuda;
  struct moe_cuda *cu;
  void *stage;                   /* trainer_moe_host_gather's device staging (freed at teardown) */
  size_t stage_bytes;
  /* checkpoints (trainer_moe_ckpt.c): the slot moe_pair names in --save's dir
   * (-1: not known yet), and a background save's slot and tag not named yet */
  int pair_slot, pending_slot;
  unsigned long long pending_tag;
} moet_t;

/* trainer_moe_ckpt.c. Both engines' checkpoint as one pair into dir (the slot
 * the named pair does not use; named once both went through: at once, or for a
 * background save at the next save), and the named pair loaded. Collective. */
zs_status_t trainer_moe_save(moet_t *t, gpt_result_t *res, const char *dir, int async);
zs_status_t trainer_moe_load(moet_t *t, gpt_result_t *res, const char *dir);

/* trainer_moe_round.c. One training round on the micro-batch in t->tin / ttg
 * (its mean token loss into *loss). Collective over both engines' groups. */
zs_status_t trainer_moe_round(moet_t *t, double *loss);
/* A forward-only pass over this rank's validation windows: the sum of their
 * token losses into *vsum. Collective (the layers' all-to-alls, v_chunks calls
 * each on every rank). */
zs_status_t trainer_moe_val_pass(moet_t *t, double *vsum);

/* trainer_moe_tp.c. Dense entry i as this rank holds it (gpt_moe_dense_info's
 * name, its tp part's shape; *replicated 1 where every tp rank holds it whole:
 * always at tp 1). Its initial values; its split for zs_checkpoint_set_split
 * (1, or 0 where whole). Entry i's whole values on every rank (collective over
 * the dense engine's group and tp). */
void trainer_moe_tp_info(const moet_t *t, int i, gpt_param_info_t *p, int *replicated);
void trainer_moe_tp_fill(const moet_t *t, int i, int64_t off, int64_t count, float *dst);
zs_status_t trainer_moe_tp_splits(moet_t *t);
zs_status_t trainer_moe_tp_whole(moet_t *t, int i, float *out);
/* A round and the validation pass with --tp (trainer_moe_round.c's, with
 * gpt_tp.h's embedding, attention, final LayerNorm and head). */
zs_status_t trainer_moe_tp_round(moet_t *t, double *loss);
/* The import's view of a tp part (zs_import_opts_t's part_fn, index_fn). */
int trainer_moe_tp_part(void *user, int pid, int *ndim, int64_t *shape);
int64_t trainer_moe_tp_index(void *user, int pid, int64_t e);

/* trainer_moe_round.c's unit handling, for trainer_moe_tp.c: dense unit u
 * with (a block) its experts' unit, gathered with fp32 views, released, reduced;
 * a layer's routing added to the step's figures. */
zs_status_t trainer_moe_gather2(moet_t *t, int u, int backward);
zs_status_t trainer_moe_release2(moet_t *t, int u);
zs_status_t trainer_moe_reduce2(moet_t *t, int u);
zs_status_t trainer_moe_note_routing(moet_t *t, int l);

/* trainer_moe_pp.c (--pp). The options with --pp (a refusal into res);
 * the mesh and both engines over it (engines' and handles' setup, as
 * trainer_moe.c's engines() without --pp); this stage's declarations; the
 * pipeline's runtime and activation slots (after the engines' setup). A step
 * (every micro-batch through the schedule: *loss the sum of the last stage's
 * micro-batch mean losses, 0 elsewhere), the validation chain (*vsum on the
 * last stage), whole-model entry k (gpt_moe_whole_info's) on every rank
 * (trainer_moe_collect's and --export's tensor source with --pp). Collective. */
zs_status_t trainer_moe_pp_check(moet_t *t, gpt_result_t *res);
zs_status_t trainer_moe_pp_engines(moet_t *t, gpt_result_t *res);
zs_status_t trainer_moe_pp_declare(moet_t *t);
zs_status_t trainer_moe_pp_setup(moet_t *t, gpt_result_t *res);
zs_status_t trainer_moe_pp_step(moet_t *t, int64_t step, double *loss);
zs_status_t trainer_moe_pp_val_pass(moet_t *t, double *vsum);
zs_status_t trainer_moe_pp_whole(moet_t *t, int k, float *out);
void trainer_moe_pp_free(moet_t *t);
/* The pipeline's own error (a callback's), or NULL. */
const char *trainer_moe_pp_last_error(const moet_t *t);
/* trainer_moe.c: the routers' zs_moe config (one micro-batch's tokens); the
 * model's plan (t->mm, this ep rank's experts; its gpt.h config into *gc). */
zs_status_t trainer_moe_plan(moet_t *t, gpt_result_t *res, gpt_config_t *gc);
void trainer_moe_router_config(const moet_t *t, zs_moe_config_t *mc);
/* trainer_moe_round.c: the model's views (w, g, bw, bg) from the fp32 views.
 * One engine's table entries [a, b) into fp32 views pv / gv (gradients only
 * with backward): the slots, or in bf16 the parameters widened into ps + off[i]
 * and the gradients zeroed in gs + off[i]; and (bf16) the fp32 gradients of
 * [a, b) added into the bf16 slots, as zs_reduce is about to take them. */
void trainer_moe_bind(moet_t *t);
void trainer_moe_view(const moet_t *t, int a, int b, void **slot, void **gslot, float **pv, float **gv, float *ps,
                      float *gs, const int64_t *off, const gpt_param_info_t *info, int backward);
void trainer_moe_grads_into_slots(const moet_t *t, int a, int b, void **gslot, float **gv, const gpt_param_info_t *info);

/* trainer_moe_cuda.c (trainer_nocuda.c without the CUDA model path: refusals).
 * setup: after the engines' setup and the validation windows on the host,
 * everything the rounds need on the GPU (failures into res); free: what it
 * made (NULLs left). round / val_pass: trainer_moe_round (with --tp
 * trainer_moe_tp_round) / val_pass on the GPU
 * (the losses and aux losses read once a call). view / grads_into_slots:
 * trainer_moe_view's and trainer_moe_grads_into_slots's bf16 work on device
 * pointers (stream order; a launch failure is kept and returned by the round). */
zs_status_t trainer_moe_cuda_setup(moet_t *t, gpt_result_t *res);
void trainer_moe_cuda_free(moet_t *t);
zs_status_t trainer_moe_cuda_round(moet_t *t, double *loss);
zs_status_t trainer_moe_cuda_val_pass(moet_t *t, double *vsum);
void trainer_moe_cuda_view(const moet_t *t, int a, int b, void **slot, void **gslot, float **pv, float **gv, float *ps,
                           float *gs, const int64_t *off, const gpt_param_info_t *info, int backward);
void trainer_moe_cuda_grads_into_slots(const moet_t *t, int a, int b, void **gslot, float **gv,
                                       const gpt_param_info_t *info);
/* The GPU run's last error text ("" where none, or on the cpu device). */
const char *trainer_moe_cuda_error(const moet_t *t);

/* trainer_gather_fn over the world (user: the moet_t): on a cuda device
 * through t->stage, device memory kept from the first call on (grown where a
 * call needs more), so the steps' loss gathers allocate nothing. */
zs_status_t trainer_moe_host_gather(void *user, const void *send, void *recv, size_t n, zs_dtype_t dt);

/* trainer_moe_whole.c. res->final_params: the whole model on every rank (the
 * dense table, then per layer every expert's four tensors in global expert
 * order). Collective. */
zs_status_t trainer_moe_collect(moet_t *t, gpt_result_t *res);
/* --export FILE: the whole model in one safetensors file (gpt_moe_whole_info's
 * names and order), written by world rank 0; every rank takes part. Collective. */
zs_status_t trainer_moe_export(moet_t *t, const char *path, gpt_result_t *res);
/* --init-from FILE: both engines' parameters from such a file (each rank reads
 * its own ranges of the dense tensors and of its experts). Collective. */
zs_status_t trainer_moe_init_from(moet_t *t, const char *path, gpt_result_t *res);

/* The windows in validation chunk c of this rank (micro at most; 0 past its
 * windows: the chunk is still routed, empty, so the all-to-alls pair). */
static inline int trainer_moe_val_rows(const moet_t *t, int c) {
  const int c0 = c * t->micro;
  return c0 >= t->v_count ? 0 : t->v_count - c0 < t->micro ? t->v_count - c0 : t->micro;
}

#endif
