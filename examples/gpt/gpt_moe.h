/* gpt_moe.h: the GPT of gpt.h with a mixture-of-experts MLP in every block
 * (zs-train-gpt --moe-experts E --moe-topk K --ep N), on the cpu device.
 *
 * A block: mid = x + attn(ln1(x)) as in gpt.h; then the router, logits =
 * ln2(mid) W_r (W_r [C,E], no bias), the top-k experts of each token
 * (zeroshard/moe.h: softmax, top-k, gates renormalised over the k, optional
 * capacity), and out = mid + sum_j gate_j expert_{e_j}(ln2(mid)), each expert
 * its own GPT MLP: proj(gelu(fc(x))), fc [C,4C]+b, proj [4C,C]+b.
 *
 * Parameters come in two tables, for two engines (trainer_moe.c):
 *   dense (every rank, data parallel over the world):
 *     unit 0 "embed" wte, wpe;  unit 1+l "h.l" ln1.w ln1.b attn.qkv.w attn.qkv.b
 *     attn.proj.w attn.proj.b ln2.w ln2.b mlp.router.w;  unit L+1 "lnf" lnf.w lnf.b
 *   experts (this expert-parallel rank's E/ep experts, data parallel over the
 *   ranks holding the same ones): unit l "h.l.experts", per local expert
 *     h.l.mlp.experts.<e>.fc.w fc.b proj.w proj.b   (e: the global expert index)
 * Initial values: gpt.h's for the dense GPT's tensors of the same name; the
 * router as a weight (normal, std 0.02) and expert e's MLP as gpt.h's MLP, each
 * from its own stream of draws keyed by the global index, so that every ep
 * gives one model. Expert 0 draws exactly the dense GPT's MLP: with E = 1 and
 * k = 1 the gate is 1, the router's gradient 0, and the model the dense GPT.
 *
 * Expert weight gradients: the engine averages over its own ranks (the ones
 * holding the same experts), but an expert's gradient already sums the tokens
 * of ep ranks; the block backward scales it by 1/ep (engine.h, zs_step_group). */
#ifndef ZS_EXAMPLES_GPT_MOE_H
#define ZS_EXAMPLES_GPT_MOE_H

#include <stdint.h>

#include "gpt.h"
#include "zeroshard/moe.h"

#define GPT_MOE_DENSE_NPARAMS 9 /* per block: the attention half, ln2, the router */
#define GPT_MOE_EXPERT_NPARAMS 4

typedef struct {
  gpt_config_t mc;
  int experts, topk, ep, ep_rank; /* E, k; this rank's experts: [first, first + El) */
  int first, El;
} gpt_moe_t;

/* 0, or -1 with a message (E a multiple of ep, 1 <= k <= E, the model's checks). */
int gpt_moe_plan(gpt_moe_t *m, const gpt_config_t *mc, int experts, int topk, int ep, int ep_rank, char *err,
                 size_t n);

int gpt_moe_dense_count(const gpt_moe_t *m); /* 2 + 9 L + 2 */
/* First dense table entry of unit u (u = L + 2: the count). */
int gpt_moe_dense_unit_first(const gpt_moe_t *m, int unit);
void gpt_moe_dense_info(const gpt_moe_t *m, int index, gpt_param_info_t *p);
/* The dense GPT's (gpt.h's) table index of dense entry `index`, whose name,
 * shape and values it has (the tensor-parallel split, gpt_tp.h, is that
 * entry's); -1 for a router (replicated under --tp). */
int gpt_moe_dense_gpt_index(const gpt_moe_t *m, int index);
int gpt_moe_expert_count(const gpt_moe_t *m); /* L x El x 4: this rank's */
void gpt_moe_expert_info(const gpt_moe_t *m, int index, gpt_param_info_t *p);
void gpt_moe_dense_fill(const gpt_moe_t *m, uint64_t seed, int index, int64_t off, int64_t count, float *dst);
void gpt_moe_expert_fill(const gpt_moe_t *m, uint64_t seed, int index, int64_t off, int64_t count, float *dst);
/* Parameters of the whole model (every expert), from the shapes alone. */
int64_t gpt_moe_param_count(const gpt_moe_t *m);

/* The whole model's tensors (every expert, on any ep) in the order of an
 * export (zs-train-gpt --export): wte, wpe; per layer l the dense block's nine
 * tensors (gpt_moe_dense_info's order, the router last), then every expert's
 * four, h.l.mlp.experts.<e>.fc.w fc.b proj.w proj.b, e in global order; lnf.w,
 * lnf.b. Entry k's name and shape into *p; *dense its dense table index, or -1
 * for an expert's tensor, whose layer, global expert and place among the four
 * go to *layer, *expert, *which. */
int gpt_moe_whole_count(const gpt_moe_t *m); /* dense count + L x E x 4 */
void gpt_moe_whole_info(const gpt_moe_t *m, int k, gpt_param_info_t *p, int *dense, int *layer, int *expert,
                        int *which);
/* The expert table index of (layer, global expert, which) on this rank, or -1
 * where another ep rank holds that expert. */
int gpt_moe_expert_index(const gpt_moe_t *m, int layer, int expert, int which);
/* 1 if name is an expert tensor of this model's shape of names
 * ("h.<l>.mlp.experts.<e>.<fc.w|fc.b|proj.w|proj.b>", l < layers, e < E,
 * written as the model writes it), with *layer, *expert, *which; else 0. */
int gpt_moe_expert_parse(const gpt_moe_t *m, const char *name, int *layer, int *expert, int *which);

/* One block's weights: the attention half and ln2 in gpt.h's view (fc_w etc.
 * unused), the router, and the local experts' (El each). */
typedef struct {
  gpt_block_w_t a;
  float *router;
  float **fc_w, **fc_b, **proj_w, **proj_b;
} gpt_moe_block_w_t;

/* Activations of one micro-batch (B x T tokens) beyond gpt_acts_t's: per block
 * the router logits and the expert rows (dispatched input, fc, gelu, output),
 * plus backward scratch shared by the blocks. */
typedef struct {
  int64_t rows_max; /* expert rows a dispatch can give this rank */
  float *logits[GPT_MAX_LAYERS], *xin[GPT_MAX_LAYERS], *fc[GPT_MAX_LAYERS], *gelu[GPT_MAX_LAYERS];
  int64_t *rows[GPT_MAX_LAYERS]; /* [El] rows per local expert, from dispatch */
  float *aux;                    /* [L] aux loss per block (written by zs_moe_route) */
  float *xout, *y, *dxout, *d4, *dxin, *dln2, *dlogits;
  float *mem;
} gpt_moe_acts_t;

/* moe: one handle per block (its rows_max sizes the rows). 0 or -1. */
int gpt_moe_acts_alloc(gpt_moe_acts_t *a, const gpt_moe_t *m, zs_moe_t *const *moe, int B, int T);
/* The layout gpt_moe_acts_alloc carves (gpt_moe_cuda.c lays it out in device
 * memory): N tokens, R expert rows a layer; rows 0 leaves the blocks' rows out
 * (kept elsewhere); base NULL only counts, else every field points into base.
 * Returns the floats base must hold. gpt_moe_rows_max: the largest expert rows
 * of the layers' handles. */
size_t gpt_moe_acts_layout(gpt_moe_acts_t *a, const gpt_moe_t *m, size_t N, size_t R, int rows, float *base);
int64_t gpt_moe_rows_max(const gpt_moe_t *m, zs_moe_t *const *moe);
void gpt_moe_acts_free(gpt_moe_acts_t *a);

/* The block's MoE half on N token rows (B x T, or none: a rank without
 * validation windows still routes): the block's attention output mid in, its
 * ln2 (output, mean, rstd: kept for backward) and x_out = mid +
 * MoE(ln2(mid)) out. gpt_moe_block_forward is gpt_attn_forward then this; the
 * tensor-parallel block (trainer_moe_tp.c) is gpt_tp_attn_forward then this,
 * the same on every tp rank. Its backward takes d x_out in dres and leaves
 * d mid there (gradients added into dw's router, ln2 and experts). */
typedef struct {
  const float *mid;
  float *ln2, *mean, *rstd;
} gpt_moe_ln2_t;
zs_status_t gpt_moe_ffn_forward(const gpt_moe_t *m, zs_moe_t *h, zs_device_t *dev, const gpt_moe_block_w_t *w,
                                const gpt_moe_ln2_t *n2, gpt_moe_acts_t *ma, int l, float *x_out, int64_t N);
zs_status_t gpt_moe_ffn_backward(const gpt_moe_t *m, zs_moe_t *h, zs_device_t *dev, const gpt_moe_block_w_t *w,
                                 gpt_moe_block_w_t *dw, const gpt_moe_ln2_t *n2, gpt_moe_acts_t *ma, int l,
                                 float *dres, float aux_weight, int64_t N);

/* Block l forward: x_out = mid + MoE(ln2(mid)); ga: gpt.h's block activations
 * (the attention half, ln2). Routes, dispatches and combines through h over its
 * comm (collective over the ep group). */
zs_status_t gpt_moe_block_forward(const gpt_moe_t *m, zs_moe_t *h, zs_device_t *dev, const gpt_moe_block_w_t *w,
                                  gpt_block_acts_t *ga, gpt_moe_acts_t *ma, int l, const float *x_in, float *x_out,
                                  int B, int T);
/* Its backward: dres from d x_out to d x_in; adds into dw (the router and the
 * dense block's) and dx (the experts', scaled by 1/ep); aux_weight: the loss's
 * weight of each block's aux loss. Collective over the ep group. */
zs_status_t gpt_moe_block_backward(const gpt_moe_t *m, zs_moe_t *h, zs_device_t *dev, const gpt_moe_block_w_t *w,
                                   gpt_moe_block_w_t *dw, const gpt_block_acts_t *ga, gpt_moe_acts_t *ma,
                                   gpt_acts_t *scratch, int l, const float *x_in, float *dres, float aux_weight,
                                   int B, int T);

#endif
