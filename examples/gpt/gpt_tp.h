/* gpt_tp.h: the GPT of gpt.h split Megatron-style over a tensor-parallel group,
 * built from zeroshard/tp.h's operators (the library's building blocks).
 *
 * Each of the tp ranks holds (gpt.h's table, same order, same names, local shapes):
 *   wte          [rows, C]   its slice of the vocabulary (zs_tp_vocab_part; rows past
 *                            the slice are padding: zero, never updated); tied head
 *   attn.qkv.w   [C, 3C/tp]  column-parallel: for q, k and v, the columns of its heads
 *   attn.qkv.b   [3C/tp]       (heads r*NH/tp .. (r+1)*NH/tp - 1)
 *   attn.proj.w  [C/tp, C]   row-parallel: the rows of its heads
 *   mlp.fc.w     [C, 4C/tp]  column-parallel: columns r*4C/tp ..
 *   mlp.fc.b     [4C/tp]
 *   mlp.proj.w   [4C/tp, C]  row-parallel: rows r*4C/tp ..
 * and everything else whole on every rank (wpe, LayerNorms, attn.proj.b,
 * mlp.proj.b, lnf): the replicated parameters (ZS_PARAM_MP_REPLICATED for the
 * engine's norm). The block is f -> column -> attention / gelu -> row -> g, two
 * all-reduces of N x C floats forward and two backward per block; the head is a
 * vocab-parallel tied projection with zs_tp_cross_entropy (logits never gathered).
 *
 * Sequence parallelism (sp = 1): between the tensor-parallel regions (residual
 * stream, LayerNorms, biases of the row-parallel layers, wpe) each rank keeps
 * N/tp of the N = B*T token rows (rows rank*N/tp .., as they lie in [B,T,C]
 * order); f and g become an all-gather and a reduce-scatter. The replicated
 * parameters' gradients are then partial sums over each rank's rows: the caller
 * sums them over tp before the optimizer step (gpt_tp_sum_replicated_grads,
 * what Megatron does for its sequence-parallel parameters).
 *
 * Every call runs on the host (cpu device), synchronously: the tp calls use the
 * caller's stream (NULL). gpt_tp_cuda.h holds the same units on a CUDA device
 * (the split, the activations' layout and gpt_tp_sum_replicated_grads are
 * shared). */
#ifndef ZS_EXAMPLES_GPT_TP_H
#define ZS_EXAMPLES_GPT_TP_H

#include <stddef.h>
#include <stdint.h>

#include "gpt.h"
#include "zeroshard/checkpoint.h"
#include "zeroshard/tp.h"

typedef struct {
  gpt_config_t c; /* the whole model */
  zs_tp_t *tp;
  int size, rank, sp;
  int Cl, NHl;     /* C / tp, NH / tp */
  zs_tp_vocab_t vp; /* this rank's vocabulary slice */
} gpt_tp_t;

/* 0, or -1 with a message (heads or channels not divisible by tp, ...). tp may
 * be NULL for a plan only (size 1 then, or pass size and rank through gpt_tp_plan). */
int gpt_tp_init(gpt_tp_t *m, const gpt_config_t *c, zs_tp_t *tp, int sp, char *err, size_t n);
/* The same split for (size, rank) without a handle: parameter shapes and the
 * index maps below (tests, planners). */
int gpt_tp_plan(gpt_tp_t *m, const gpt_config_t *c, int size, int rank, int sp, char *err, size_t n);

/* Table entry `index` as this rank holds it (local shape and numel); *replicated
 * is 1 for the parameters every rank holds whole. */
void gpt_tp_param_info(const gpt_tp_t *m, int index, gpt_param_info_t *p, int *replicated);
/* Element e of this rank's entry `index` is element gpt_tp_full_index of the
 * whole tensor (gpt_param_info's shape), or -1 for a padding row of wte. */
int64_t gpt_tp_full_index(const gpt_tp_t *m, int index, int64_t e);
/* How this rank's entry `index` is split out of the whole tensor, for
 * zs_checkpoint_set_split (gpt_tp_full_index's map as a view, a part and its
 * padding; whole_* left to the caller): 1, or 0 for a replicated entry. */
int gpt_tp_split(const gpt_tp_t *m, int index, zs_split_t *s);
/* Initial values of local elements [offset, offset+count): gpt_init_fill's values
 * of the corresponding whole-tensor elements (0 for padding), so every tp size
 * starts from the one model. */
void gpt_tp_init_fill(const gpt_tp_t *m, uint64_t seed, int index, int64_t offset, int64_t count,
                      float *dst);

typedef struct {
  GPT_BLOCK_ACTS(GPT_ACT_FIELD, , ) /* gpt.h's block layout at this rank's sizes */
  float *ln1_full, *ln2_full; /* the column-parallel layers' inputs: ln1 / ln2, or (sp) xg */
} gpt_tp_block_acts_t;

/* Activations of one micro-batch of B x T tokens on this rank. */
typedef struct {
  int B, T, L, train, Bmax; /* train: a GPT_ACTS_ mode (gpt.h); L: the layers resid holds */
  int nblk;                 /* block tensors kept: L (_TRAIN, _RECOMPUTE_GELU), else 1 (shared by every layer) */
  int64_t N, Nr; /* token rows, and rows kept between regions (N, or N/tp with sp) */
  float *resid;  /* [L+1][Nr, C] */
  gpt_tp_block_acts_t blk[GPT_MAX_LAYERS];
  float *lnf, *lnf_mean, *lnf_rstd, *lnf_full;
  float *xg;    /* sp: [N,C] a LayerNorm's output gathered (forward, and again in backward) */
  float *part;  /* [N,C]: a row-parallel layer's partial sums / f's gathered gradient */
  float *dfull; /* [N,C]: sp: the gathered gradient of a region's output */
  float *dres;  /* [Nr,C] */
  float *dlnf;  /* [Nr,C] */
  float *d4, *dln, *datty, *dqkv, *dtmp;
  float *logits, *row_loss; /* [head_rows, vp.rows], [head_rows] */
  /* floats one layer keeps from forward to backward: 4 Nr C + 4 Nr (LayerNorm
   * outputs, statistics, residuals) + 12 N C/tp + B (NH/tp) T^2 (qkv, attention,
   * MLP): with sp every term is 1/tp of the tp = 1 model's; with
   * GPT_ACTS_RECOMPUTE_GELU less the GELU output (N 4C/tp), kept once for
   * every layer (shared_floats; 0 in the other modes) */
  int64_t layer_floats, shared_floats;
  int head_rows;
  float *mem;
  float *head_mem; /* cuda: logits and row_loss in an allocation of their own
                      (gpt_tp_cuda_acts_alloc, head chunks from free memory), else NULL */
} gpt_tp_acts_t;

/* train: GPT_ACTS_EVAL, _TRAIN, _RECOMPUTE or _RECOMPUTE_GELU, as gpt_acts_alloc,
 * or'd with GPT_TP_ACTS_NO_HEAD for activations that never run the head (a
 * pipeline rank without the last model stage): no logits, head_rows 0. */
#define GPT_TP_ACTS_NO_HEAD 0x100
int gpt_tp_acts_alloc(gpt_tp_acts_t *a, const gpt_tp_t *m, int B, int T, int train);
/* gpt_tp_acts_alloc for one of several activation slots that a pipeline rank
 * runs one call at a time: with share (another slot, allocated the same way,
 * outliving this one) only what a micro-batch keeps from its forward to its
 * backward is this slot's own (the residuals, the final LayerNorm's output and
 * statistics and its gradient, and every block's tensors unless one block's
 * are refilled per layer, GPT_ACTS_RECOMPUTE); the scratch of a call is
 * share's. */
int gpt_tp_acts_alloc_slot(gpt_tp_acts_t *a, const gpt_tp_t *m, int B, int T, int train, const gpt_tp_acts_t *share);
/* gpt_tp_acts_alloc_slot's layout without the allocation (gpt_tp_cuda.c lays
 * the same fields out in device memory): with mem NULL it only counts, with mem
 * it points every field into it (a->mem = mem). att_cols: att's floats a row,
 * 0 for T (the probabilities; 1: a fused attention's log-sum-exp). Returns the
 * floats mem must hold, or 0 if (sp) B*T rows do not split over tp. */
size_t gpt_tp_acts_layout(gpt_tp_acts_t *a, const gpt_tp_t *m, int B, int T, int train, int att_cols,
                          const gpt_tp_acts_t *share, float *mem);
/* Layer l's block tensors in a (blk[0] where one is kept). */
static inline gpt_tp_block_acts_t *gpt_tp_acts_block(gpt_tp_acts_t *a, int l) { return &a->blk[a->nblk > 1 ? l : 0]; }
/* Runs the next calls on B <= the allocated sequences (a shorter last chunk of
 * validation windows). 0, or -1 if B does not fit or (sp) B*T rows do not split. */
int gpt_tp_acts_set_batch(gpt_tp_acts_t *a, const gpt_tp_t *m, int B);
/* a (GPT_TP_ACTS_NO_HEAD) runs its head in from's logits and row losses, as
 * gpt_acts_borrow_logits (m: a's split). */
void gpt_tp_acts_borrow_head(gpt_tp_acts_t *a, const gpt_tp_t *m, const gpt_tp_acts_t *from);
void gpt_tp_acts_free(gpt_tp_acts_t *a);

/* Units (w and dw: views of this rank's local tensors; gradients ADDED).
 * x / dres are [Nr, C] (this rank's rows with sp). Each returns the first
 * failing zs_tp call's status. */
zs_status_t gpt_tp_embed_forward(const gpt_tp_t *m, const gpt_embed_w_t *w, const int *tokens,
                                 gpt_tp_acts_t *a, float *x);
zs_status_t gpt_tp_embed_backward(const gpt_tp_t *m, gpt_embed_w_t *dw, const int *tokens,
                                  gpt_tp_acts_t *a, const float *dx);
zs_status_t gpt_tp_block_forward(const gpt_tp_t *m, int l, const gpt_block_w_t *w, gpt_tp_acts_t *a,
                                 const float *x_in, float *x_out);
/* dres: in d loss/d x_out, out d loss/d x_in. */
zs_status_t gpt_tp_block_backward(const gpt_tp_t *m, int l, const gpt_block_w_t *w,
                                  gpt_block_w_t *dw, gpt_tp_acts_t *a, const float *x_in,
                                  float *dres);
/* Layer l's backward in a training loop, from what a (a training mode) kept:
 * with GPT_ACTS_RECOMPUTE block l's forward again first from its kept input
 * x_in (with the tp group's collectives; x_out, the kept output, written again
 * with the same bits), with GPT_ACTS_RECOMPUTE_GELU this rank's slice of its
 * GELU output again from its kept fc (no collective), then
 * gpt_tp_block_backward. Every training loop calls
 * this, so none can forget what its mode needs before the backward. */
zs_status_t gpt_tp_block_backward_kept(const gpt_tp_t *m, int l, const gpt_block_w_t *w, gpt_block_w_t *dw,
                                       gpt_tp_acts_t *a, const float *x_in, float *x_out, float *dres);
/* The block's attention half alone, for a block whose MLP is another layer
 * (gpt_moe.h's mixture of experts): a->blk[l].mid = x_in + attn(ln1(x_in));
 * gpt_tp_block_forward is this, then the MLP. Its backward takes d mid in
 * dres and leaves d x_in there. */
zs_status_t gpt_tp_attn_forward(const gpt_tp_t *m, int l, const gpt_block_w_t *w, gpt_tp_acts_t *a,
                                const float *x_in);
zs_status_t gpt_tp_attn_backward(const gpt_tp_t *m, int l, const gpt_block_w_t *w, gpt_block_w_t *dw,
                                 gpt_tp_acts_t *a, const float *x_in, float *dres);
/* Final LayerNorm of this rank's rows x into a->lnf, and (sp) gathered into
 * a->lnf_full, the head's input. */
zs_status_t gpt_tp_lnf_forward(const gpt_tp_t *m, const gpt_lnf_w_t *lnf, const float *x, gpt_tp_acts_t *a);
/* The vocab-parallel tied head and the loss over the N rows of xfull (the final
 * LayerNorm's output, all rows: a->lnf_full): *sum += the sum of the N token
 * losses (the same on every tp rank). With dwte != NULL also its backward, the
 * loss scaled by grad_scale: d lnf output of this rank's rows into a->dlnf, and
 * this rank's slice of d wte added into dwte. */
zs_status_t gpt_tp_head(const gpt_tp_t *m, const float *wte, const float *xfull, const int *targets,
                        gpt_tp_acts_t *a, float grad_scale, double *sum, float *dwte);
/* Final LayerNorm backward from a->dlnf: dres = (overwritten) d x, dlnf_w += . */
zs_status_t gpt_tp_lnf_backward(const gpt_tp_t *m, const gpt_lnf_w_t *lnf, gpt_lnf_w_t *dlnf_w, const float *x,
                                gpt_tp_acts_t *a, float *dres);
/* The regions' boundaries (gpt_tp.c's f and g, plain or sequence-parallel;
 * docs/tensor-parallel.md), for a device's twin of these units (gpt_tp_cuda.c):
 * zs_tp calls on the handle's NULL stream, so the buffers may be device memory.
 * f forward: in [Nr,C] -> full [N,C] (gathered with sp, else full aliases in);
 * f backward: partial [N,C] summed over tp -> *out [Nr,C] (inside partial);
 * g forward: partial [N,C] summed -> *out [Nr,C] (inside partial);
 * g backward: d [Nr,C] -> *full [N,C] (a->dfull with sp, else d). */
zs_status_t gpt_tp_f_forward(const gpt_tp_t *m, const gpt_tp_acts_t *a, const float *in, float *full);
zs_status_t gpt_tp_f_backward(const gpt_tp_t *m, const gpt_tp_acts_t *a, float *partial, float **out);
zs_status_t gpt_tp_g_forward(const gpt_tp_t *m, const gpt_tp_acts_t *a, float *partial, float **out);
zs_status_t gpt_tp_g_backward(const gpt_tp_t *m, gpt_tp_acts_t *a, const float *d, const float **full);
/* sp: sums the replicated parameters' gradients of one unit (gpt.h's unit
 * numbering) over the tp ranks, in place. No-op without sp. */
zs_status_t gpt_tp_sum_replicated_grads(const gpt_tp_t *m, int unit, float *const *grads);

/* The whole model in one process per tp rank: mean loss over B*T tokens (the
 * same on every rank); with g != NULL gradients are ADDED into g (local tensors). */
zs_status_t gpt_tp_forward_backward(const gpt_tp_t *m, const gpt_weights_t *w, gpt_weights_t *g,
                                    gpt_tp_acts_t *a, const int *inputs, const int *targets,
                                    double *loss);

#endif
