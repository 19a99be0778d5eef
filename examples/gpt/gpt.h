/* gpt.h: a GPT-2-architecture language model on plain float pointers.
 *
 * The model is cut into the units the zeroshard engine gathers and reduces:
 *   unit 0        "embed"  wte [V,C], wpe [T,C]
 *   unit 1+l      "h.l"    ln1.w [C], ln1.b [C], attn.qkv.w [C,3C], attn.qkv.b [3C],
 *                          attn.proj.w [C,C], attn.proj.b [C], ln2.w [C], ln2.b [C],
 *                          mlp.fc.w [C,4C], mlp.fc.b [4C], mlp.proj.w [4C,C], mlp.proj.b [C]
 *   unit L+1      "lnf"    lnf.w [C], lnf.b [C]
 * The LM head has no weights of its own: it is tied to wte (logits = x wte^T).
 *
 * Layout convention: every tensor is row-major; a linear layer's weight is
 * stored [in, out] and applied as y = x W + b with x [N, in] (GPT-2's own
 * "Conv1D" layout), so W[i*out + o] connects input i to output o. wte row v is
 * token v's embedding, wpe row t position t's. Activations are [B, T, C] (N = B*T
 * rows of C). qkv rows hold q | k | v, each C wide, head h at columns h*hs..h*hs+hs.
 *
 * Each unit has a forward and a backward on float pointers; gradients are ADDED
 * into the gradient tensors (the engine zeroes them), so a trainer can call the
 * unit functions between zs_gather and zs_release / zs_reduce. gpt_forward_backward
 * chains them for a whole model in one process (the tests' reference).
 * Loops use OpenMP; every sum has a fixed order independent of the thread count,
 * so results do not depend on OMP_NUM_THREADS. */
#ifndef ZS_EXAMPLES_GPT_H
#define ZS_EXAMPLES_GPT_H

#include <stddef.h>
#include <stdint.h>

#define GPT_MAX_LAYERS 128
#define GPT_BLOCK_NPARAMS 12
#define GPT_NAME_MAX 48

typedef struct {
  int vocab;    /* V: embedding rows (tokens are bytes, so >= 256) */
  int seq;      /* T: context length = rows of wpe */
  int channels; /* C */
  int heads;    /* NH (C % NH == 0) */
  int layers;   /* L */
} gpt_config_t;

/* How a parameter starts: GPT-2's initialisation. */
typedef enum {
  GPT_INIT_NORMAL = 0, /* normal, std 0.02 */
  GPT_INIT_RESID,      /* residual projections: std 0.02 / sqrt(2 L) */
  GPT_INIT_ONE,        /* LayerNorm weights */
  GPT_INIT_ZERO        /* biases */
} gpt_init_kind_t;

/* One row of the parameter table, in declaration order. */
typedef struct {
  char name[GPT_NAME_MAX];
  int unit;
  int ndim;
  int64_t shape[2];
  int64_t numel;
  int no_decay; /* LayerNorm weights and biases */
  gpt_init_kind_t init;
} gpt_param_info_t;

/* ---- shapes and the parameter table ---------------------------------------- */

/* 0 if the shapes are usable, else -1 with a message in err. */
int gpt_config_check(const gpt_config_t *cfg, char *err, size_t errlen);
int gpt_unit_count(const gpt_config_t *cfg);  /* L + 2 */
int gpt_param_table_size(const gpt_config_t *cfg); /* 2 + 12 L + 2 */
/* First table index of unit u (u = unit count gives the table size). */
int gpt_unit_first_param(const gpt_config_t *cfg, int unit);
void gpt_unit_name(const gpt_config_t *cfg, int unit, char *buf, size_t n);
void gpt_param_info(const gpt_config_t *cfg, int index, gpt_param_info_t *out);
/* Total parameters, from the shapes alone (no allocation). */
int64_t gpt_param_count(const gpt_config_t *cfg);

/* Initial values of elements [offset, offset+count) of table entry `index`, from
 * (seed, index, element) only: normal draws by Box-Muller on a counter-based
 * hash, so any rank can fill any range and every world size gets one model. */
void gpt_init_fill(const gpt_config_t *cfg, uint64_t seed, int index, int64_t offset,
                   int64_t count, float *dst);

/* ---- weight views ------------------------------------------------------------ */

typedef struct {
  float *wte, *wpe;
} gpt_embed_w_t;

typedef struct { /* fields in table order */
  float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
  float *ln2_w, *ln2_b, *fc_w, *fc_b, *mproj_w, *mproj_b;
  /* the four matrices as bf16 bits where a bf16 run keeps them (set by
   * gpt_weights_bind16), multiplied in place by gpt_gemm_b16 (the same bits as
   * on them widened), their fp32 fields then unread; NULL: the fp32 fields */
  const uint16_t *qkv_w16, *proj_w16, *fc_w16, *mproj_w16;
} gpt_block_w_t;

typedef struct {
  float *w, *b;
} gpt_lnf_w_t;

typedef struct {
  gpt_embed_w_t embed;
  gpt_block_w_t blk[GPT_MAX_LAYERS];
  gpt_lnf_w_t lnf;
} gpt_weights_t;

/* Fills the views from one pointer per table entry (NULL entries stay NULL). */
void gpt_weights_bind(const gpt_config_t *cfg, float *const *tensors, gpt_weights_t *out);
/* After gpt_weights_bind: each block matrix whose entry of t16 (bf16 bits, by
 * table entry) is not NULL is read from there (gpt_block_w_t). */
void gpt_weights_bind16(const gpt_config_t *cfg, const void *const *t16, gpt_weights_t *w);
/* 1 for the table entries that are a block's matrices (qkv_w, proj_w, fc_w,
 * mproj_w), which gpt_weights_bind16 binds. */
int gpt_param_is_matrix(const gpt_config_t *cfg, int index);

/* ---- activations ------------------------------------------------------------- */

/* The sizes a micro-batch's activations are carved from: B sequences of T
 * positions, N = B T token rows, Nr the rows kept between regions (N; N / tp
 * with gpt_tp.h's sequence parallelism), C channels, Cl and NHl this rank's
 * channels and heads (C and NH without tp), Ta att's floats a row (0: T, the
 * probabilities; 1: the CUDA path's fused attention keeps a log-sum-exp). */
typedef struct {
  int64_t B, T, N, Nr, C, Cl, NHl, Ta;
} gpt_act_dims_t;

/* What one block's backward needs from its forward: X(k, field, floats) in the
 * order every allocator carves them (gpt_acts_alloc; gpt_cuda_acts_alloc on the
 * device; gpt_tp_acts_alloc, split over tp), sizes from the gpt_act_dims_t d.
 * The one place this layout is written: the structs' fields come from it too. */
#define GPT_BLOCK_ACTS(X, k, d)                                                 \
  X(k, ln1, (d).Nr * (d).C)                 /* [Nr,C] ln1 output */            \
  X(k, ln1_mean, (d).Nr)                    /* [Nr] */                         \
  X(k, ln1_rstd, (d).Nr)                    /* [Nr] */                         \
  X(k, qkv, (d).N * 3 * (d).Cl)             /* [N,3Cl] */                      \
  X(k, att, (d).B * (d).NHl * (d).T * ((d).Ta ? (d).Ta : (d).T)) /* [B,NHl,T,T] softmax probabilities (or [B,NHl,T] lse) */ \
  X(k, atty, (d).N * (d).Cl)                /* [N,Cl] attention output before the projection */ \
  X(k, mid, (d).Nr * (d).C)                 /* [Nr,C] residual after attention */ \
  X(k, ln2, (d).Nr * (d).C)                                                    \
  X(k, ln2_mean, (d).Nr)                                                       \
  X(k, ln2_rstd, (d).Nr)                                                       \
  X(k, fc, (d).N * 4 * (d).Cl)              /* [N,4Cl] */                      \
  X(k, gelu, GPT_ACT_GELU_FLOATS(d))        /* [N,4Cl] the MLP's widest; GPT_ACTS_RECOMPUTE_GELU shares one */
#define GPT_ACT_GELU_FLOATS(d) ((d).N * 4 * (d).Cl)
#define GPT_ACT_FIELD(k, name, floats) float *name;

/* One allocation carved in two passes: with mem NULL gpt_carve only counts
 * (off: the floats needed), then with mem it points each tensor at its place.
 * Every tensor starts on a 16-float boundary. */
typedef struct {
  float *mem;
  size_t off;
} gpt_carve_t;

static inline void gpt_carve(gpt_carve_t *cv, float **p, int64_t floats) {
  if (cv->mem) *p = cv->mem + cv->off;
  cv->off += ((size_t)floats + 15) & ~(size_t)15;
}
/* For GPT_BLOCK_ACTS(GPT_ACT_CARVE_BUT, k, d): carves block k's fields from
 * the gpt_carve_t *cv in scope but the one the float **skip in scope points at
 * (NULL: none), left for the caller to point somewhere. */
#define GPT_ACT_CARVE_BUT(k, name, floats) \
  if (&(k)->name != skip) gpt_carve(cv, &(k)->name, (floats));
/* Carves the n blocks blk[0..n) (gpt_block_acts_t or gpt_tp_block_acts_t) from
 * the gpt_carve_t *cv in scope at sizes d; with gelu_shared
 * (GPT_ACTS_RECOMPUTE_GELU) every block's fields but its GELU output, then one
 * GELU output, which every block's gelu points at (each layer's forward and
 * recompute overwrite it). */
#define GPT_ACTS_CARVE_BLOCKS(blk, n, d, gelu_shared)                  \
  do {                                                                 \
    for (int l_ = 0; l_ < (n); l_++) {                                 \
      float **skip = (gelu_shared) ? &(blk)[l_].gelu : NULL;           \
      GPT_BLOCK_ACTS(GPT_ACT_CARVE_BUT, &(blk)[l_], d)                 \
    }                                                                  \
    if (gelu_shared) {                                                 \
      gpt_carve(cv, &(blk)[0].gelu, GPT_ACT_GELU_FLOATS(d));           \
      for (int l_ = 1; l_ < (n); l_++) (blk)[l_].gelu = (blk)[0].gelu; \
    }                                                                  \
  } while (0)
/* For 0 GPT_BLOCK_ACTS(GPT_ACT_COUNT, , d): one block's floats. */
#define GPT_ACT_COUNT(k, name, floats) +(int64_t)(floats)

/* The LM head's rows per chunk for `cols` logits a row and N rows: N in chunks
 * as equal as can be of at most GPT_HEAD_LOGITS / cols rows and at most
 * GPT_HEAD_ROWS (at least 1), so the logits stay within GPT_HEAD_LOGITS floats
 * (64 MiB) at any vocabulary. Why so many: each chunk's three products read all
 * of wte (V x C) and the d wte one also writes it, so short chunks leave them
 * memory-bound: at GPT-2's vocabulary 83-row chunks (16 MiB) ran at 0.64 of
 * 256-row ones on two cores of the AMX Xeon (OpenBLAS; the 1-rank 124M step
 * 10-20% slower). Past ~330 rows their cost a row is flat (one core: 2.39 ms
 * at 332 rows, 2.34 at 512), hence the cap, which spares memory where the
 * columns are few (a tp rank's slice of the vocabulary). */
#define GPT_HEAD_LOGITS ((int64_t)1 << 24)
#define GPT_HEAD_ROWS 384
int gpt_head_rows(int64_t cols, int64_t N);

typedef struct { /* what one block's backward needs from its forward (GPT_BLOCK_ACTS) */
  GPT_BLOCK_ACTS(GPT_ACT_FIELD, , )
} gpt_block_acts_t;

/* gpt_acts_alloc's `train`: forward only (one reusable block), training with
 * every block's tensors kept from forward to backward, or training with
 * activation recomputation: only the residual stream's L+1 tensors are kept,
 * and one block's tensors (blk[0]) serve every layer; backward runs each
 * block's forward again from its kept input before that block's backward (the
 * same code on the same inputs: the same bits), for one more forward's compute.
 * GPT_ACTS_RECOMPUTE_GELU, the cheap level (llm.c's -r 1): every block's tensors
 * kept but the GELU output, the MLP's widest (4C a token row), of which one
 * buffer serves every layer (each blk[l].gelu points at it); backward computes
 * block l's again from its kept fc pre-activation before that block's backward
 * (the same bits), for one GELU a layer. */
enum { GPT_ACTS_EVAL = 0, GPT_ACTS_TRAIN = 1, GPT_ACTS_RECOMPUTE = 2, GPT_ACTS_RECOMPUTE_GELU = 3 };
/* Or'd into a mode: no logits of their own (head_rows 0); they borrow another
 * set's (gpt_acts_borrow_logits) or never run the head. */
#define GPT_ACTS_NO_LOGITS 0x100
/* Whether mode keeps a block's tensors per layer (nblocks = L): _TRAIN, _RECOMPUTE_GELU. */
static inline int gpt_acts_per_layer(int mode) { return mode == GPT_ACTS_TRAIN || mode == GPT_ACTS_RECOMPUTE_GELU; }

typedef struct {
  gpt_config_t cfg;
  int B, T, nblocks, train; /* train: a GPT_ACTS_ mode */
  float *resid;               /* [L+1][N,C] training, [2][N,C] eval: input of block l at l, output at l+1 */
  gpt_block_acts_t blk[GPT_MAX_LAYERS];
  float *lnf, *lnf_mean, *lnf_rstd; /* final LayerNorm output [N,C] and statistics */
  float *logits;              /* [head_rows, V]: one chunk of the head */
  int head_rows;
  /* train only: gradients flowing back */
  float *dlnf;                /* [N,C] d loss / d lnf output (written by the head) */
  float *dres;                /* [N,C] d loss / d residual stream */
  float *d4, *dln, *datty, *dqkv, *dtmp; /* block backward scratch */
  float *mem;
  size_t nfloats;
  int64_t layer_floats; /* floats one layer keeps from forward to backward: its block's tensors and its input
                           (GPT_ACTS_RECOMPUTE_GELU: less the GELU output) */
  int64_t shared_floats; /* floats kept once for every layer besides: _RECOMPUTE_GELU's GELU output, else 0 */
} gpt_acts_t;

/* Allocates activations for micro-batches of B sequences of T tokens (T <= cfg->seq).
 * train GPT_ACTS_TRAIN: all L blocks plus backward scratch; GPT_ACTS_RECOMPUTE:
 * one block plus backward scratch (gpt_acts_block); GPT_ACTS_RECOMPUTE_GELU: all
 * L blocks without their GELU outputs, one shared, plus scratch; GPT_ACTS_EVAL: one reusable
 * block, no gradients (forward only, see gpt_block_forward's aliasing note).
 * 0 or -1. */
int gpt_acts_alloc(gpt_acts_t *a, const gpt_config_t *cfg, int B, int T, int train);
/* a (GPT_ACTS_NO_LOGITS) runs its head in from's logits: the trainer's
 * validation chunks in the training micro-batch's (the head keeps nothing in
 * them between calls, and the two never run at once), in chunks of at most
 * from's rows. */
void gpt_acts_borrow_logits(gpt_acts_t *a, const gpt_acts_t *from);
/* The layout gpt_acts_alloc gives a: the shapes, and with mem != NULL every
 * field pointed into mem (a->mem = mem); returns the floats it needs (also
 * a->nfloats). gpt_cuda_acts_alloc carves device memory with it. */
size_t gpt_acts_layout(gpt_acts_t *a, const gpt_config_t *cfg, int B, int T, int train, float *mem);
/* The same with att_cols floats a row of att (gpt_act_dims_t's Ta: T is
 * gpt_acts_layout's; 1 for the fused attention's log-sum-exp). */
size_t gpt_acts_layout_att(gpt_acts_t *a, const gpt_config_t *cfg, int B, int T, int train, int att_cols,
                           float *mem);
void gpt_acts_free(gpt_acts_t *a);
/* Layer l's block tensors in a: its own, or with one block kept (eval,
 * recomputation) the shared blk[0]. */
static inline gpt_block_acts_t *gpt_acts_block(gpt_acts_t *a, int l) { return &a->blk[a->nblocks > 1 ? l : 0]; }

/* ---- units: forward and backward ---------------------------------------------- */

/* x[b,t] = wte[tokens[b,t]] + wpe[t]. */
void gpt_embed_forward(const gpt_config_t *cfg, const gpt_embed_w_t *w, const int *tokens, int B,
                       int T, float *x);
/* dwte[tokens[b,t]] += dx[b,t]; dwpe[t] += sum over b of dx[b,t]. */
void gpt_embed_backward(const gpt_config_t *cfg, gpt_embed_w_t *dw, const int *tokens, int B, int T,
                        const float *dx);

/* A bf16 run's embedding without an fp32 view of wte (its bits as stored):
 * gpt_embed_forward's x, the same bits as on wte widened. */
void gpt_embed_forward_b16(const gpt_config_t *cfg, const uint16_t *wte, const float *wpe, const int *tokens, int B,
                           int T, float *x);
/* Workspace of gpt_embed_backward_rows for micro-batches of up to n tokens:
 * rows [n,C]; row_of [V], -1 between calls; tok_of [n]. init: 0, or -1 out of
 * memory (nothing kept). */
typedef struct {
  float *rows;
  int *row_of, *tok_of;
  int64_t n;
} gpt_embed_rows_t;
int gpt_embed_rows_init(gpt_embed_rows_t *r, const gpt_config_t *cfg, int64_t n);
void gpt_embed_rows_free(gpt_embed_rows_t *r);
/* dwpe as gpt_embed_backward; for wte, the gradient gpt_embed_backward into a
 * zeroed dwte and then dwte += dhead would make, made in dhead itself (V x C):
 * the rows the tokens name summed in token order in the workspace, then each
 * added to its row of dhead, the others to zero: the same bits. 0, or -1
 * (nothing done) when B*T is more than r->n. */
int gpt_embed_backward_rows(const gpt_config_t *cfg, float *dwpe, float *dhead, const int *tokens, int B, int T,
                            const float *dx, gpt_embed_rows_t *r);
/* dwpe as gpt_embed_backward; wte's gradient added into a bf16 one where it is
 * kept (gwte, V x C bits): each row the tokens name gets their sum (in token
 * order, as gpt_embed_backward's) with one rounding (nearest even), the others
 * stay as they are. 0, or -1 (nothing done) when B*T is more than r->n. */
int gpt_embed_backward_b16(const gpt_config_t *cfg, float *dwpe, uint16_t *gwte, const int *tokens, int B, int T,
                           const float *dx, gpt_embed_rows_t *r);

/* One transformer block. x_out may equal x_in (x_in is read only before x_out is
 * written), which the forward-only path uses to keep one residual buffer. */
void gpt_block_forward(const gpt_config_t *cfg, const gpt_block_w_t *w, gpt_block_acts_t *a,
                       const float *x_in, float *x_out, int B, int T);
/* dres: in d loss/d x_out, out d loss/d x_in (updated in place); adds into dw.
 * Scratch comes from acts (a train allocation). */
void gpt_block_backward(const gpt_config_t *cfg, const gpt_block_w_t *w, gpt_block_w_t *dw,
                        const gpt_block_acts_t *a, gpt_acts_t *scratch, const float *x_in,
                        float *dres, int B, int T);

/* Layer l's backward in a training loop, from what a (gpt_acts_alloc's, a
 * training mode) kept: with GPT_ACTS_RECOMPUTE block l's forward runs again
 * first, from its kept input x_in into the shared block (x_out, the kept
 * output, is written again with the same bits); with GPT_ACTS_RECOMPUTE_GELU
 * its GELU output again from its kept fc; then gpt_block_backward on
 * gpt_acts_block(a, l) with a's scratch. Every training loop calls this, so
 * none can forget what its mode needs before the backward. */
void gpt_block_backward_kept(const gpt_config_t *cfg, const gpt_block_w_t *w, gpt_block_w_t *dw, gpt_acts_t *a,
                             int l, const float *x_in, float *x_out, float *dres, int B, int T);

/* The attention half of a block, for blocks with another MLP (gpt_moe.c):
 * a->mid = x_in + proj(attn(ln1(x_in))); and its backward, dres from d mid to
 * d x_in (gpt_block_forward / _backward are these plus the MLP). */
void gpt_attn_forward(const gpt_config_t *cfg, const gpt_block_w_t *w, gpt_block_acts_t *a, const float *x_in,
                      int B, int T);
void gpt_attn_backward(const gpt_config_t *cfg, const gpt_block_w_t *w, gpt_block_w_t *dw,
                       const gpt_block_acts_t *a, gpt_acts_t *scratch, const float *x_in, float *dres, int B, int T);

/* Final LayerNorm over N rows (out may equal x). */
void gpt_lnf_forward(const gpt_config_t *cfg, const gpt_lnf_w_t *w, const float *x, float *out,
                     float *mean, float *rstd, int64_t N);
/* dx = (overwritten) d loss/d x; adds into dw. */
void gpt_lnf_backward(const gpt_config_t *cfg, const gpt_lnf_w_t *w, gpt_lnf_w_t *dw, const float *x,
                      const float *mean, const float *rstd, const float *dout, float *dx, int64_t N);

/* logits [n,V] = x [n,C] wte^T. */
void gpt_logits(const gpt_config_t *cfg, const float *wte, const float *x, int64_t n, float *logits);
/* The tied LM head and the cross-entropy loss over N rows, in chunks of
 * logits_rows rows (logits scratch [logits_rows, V]). Returns the SUM of the
 * token losses (double). With dx != NULL also backpropagates the loss scaled by
 * grad_scale (1/N gives the mean): dx = (overwritten) d/d x, dwte += d/d wte. */
double gpt_head(const gpt_config_t *cfg, const float *wte, const float *x, const int *targets,
                int64_t N, float *logits, int logits_rows, float grad_scale, float *dx, float *dwte);
/* gpt_head on a bf16 wte (its bits as stored): the same bits as on wte widened. */
double gpt_head_b16(const gpt_config_t *cfg, const uint16_t *wte, const float *x, const int *targets, int64_t N,
                    float *logits, int logits_rows, float grad_scale, float *dx, float *dwte);

/* Whole model in one process: mean loss over B*T tokens; with grads != NULL the
 * gradients are ADDED into it (wte gets both the embedding's and the head's part). */
double gpt_forward_backward(const gpt_config_t *cfg, const gpt_weights_t *w, gpt_weights_t *grads,
                            gpt_acts_t *a, const int *inputs, const int *targets);

#endif
