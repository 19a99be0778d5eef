/* test_gpt_recompute: --recompute (activation recomputation) in the example
 * GPT trainer, at 4 ranks, in every dense layout: stage 0, stage 3 flat, stage
 * 2 in bf16 with accumulation, hybrid shard groups of 2 at stage 3 with
 * prefetch, --tp 2 with and without --sequence-parallel, --pp 2 (1F1B, and
 * interleaved with 2 chunks a rank), --pp 2 x --tp 2, and the parameter-server
 * baseline. Each layout runs 6 steps without --recompute, with it (level
 * block) and with --recompute gelu: every training loss, the validation loss
 * and every final parameter equal bit for bit (backward recomputes a block
 * from its kept input, or a GELU output from its kept fc, with the same code),
 * and the activations kept from forward to backward (act_peak_bytes) smaller
 * by exactly, computed here from the shapes: (layers kept - 1) blocks' tensors
 * for block (for one micro-batch without a pipeline: L blocks against 1, plus
 * the L + 1 residuals both keep); (layers kept - 1) GELU outputs ([N, 4C/tp])
 * for gelu (L blocks without theirs and one shared). A recompute that skipped
 * the forward again (backward on the last layer's tensors), or the GELU again
 * (backward on the last layer's GELU output), changes the losses. The flag
 * parses with its optional level; the JSON names the level; with
 * --moe-experts either level is refused with a message naming it. Tiny model:
 * 4 layers, 32 channels, 2 heads, seq 16, batch 8. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_world.h"
#include "harness.h"
#include "trainer.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#include "zeroshard/pipeline.h"


static void tiny(gpt_opts_t *o) {
  gpt_opts_default(o);
  o->layers = 4, o->channels = 32, o->heads = 2, o->seq = 16, o->vocab = 256;
  o->batch = 8, o->steps = 6, o->val_seqs = 8, o->val_every = 3, o->seed = 7, o->quiet = 1;
  o->dtype = o->reduce_dtype = ZS_FP32;
  o->collect_params = 1;
}

typedef struct {
  const char *what;
  int stage, tp, sp, pp, kind, virt, micro_n, shard_group, prefetch, accum, bf16, ps;
} layout_t;

/* One block's floats kept from forward to backward (gpt.h's GPT_BLOCK_ACTS) for
 * a micro-batch of B sequences: N token rows, Nr kept between regions, the
 * tp rank's channels and heads. */
static int64_t block_floats(const gpt_opts_t *o, int B, int tp, int sp) {
  const int64_t T = o->seq, N = (int64_t)B * T, Nr = sp ? N / tp : N, C = o->channels, Cl = C / tp,
                NHl = o->heads / tp;
  return 3 * Nr * C + 4 * Nr + 12 * N * Cl + (int64_t)B * NHl * T * T;
}

/* One block's GELU output's floats: [N, 4C/tp] (all N rows with sp too: the MLP's
 * inside is column-parallel). */
static int64_t gelu_floats(const gpt_opts_t *o, int B, int tp) { return (int64_t)B * o->seq * 4 * o->channels / tp; }

/* The JSON's "recompute" names the level. */
static void check_json(const gpt_result_t *r, const gpt_opts_t *o, const char *want) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_true(f != NULL);
  gpt_result_json(r, o, f);
  fclose(f);
  char key[64];
  snprintf(key, sizeof key, "\"recompute\": \"%s\"", want);
  expect_str_contains(buf, key);
  free(buf);
}

static void run_layout(const layout_t *l, int index) {
  gpt_opts_t o;
  tiny(&o);
  o.stage = l->stage, o.tp = l->tp, o.sequence_parallel = l->sp, o.pp = l->pp, o.shard_group = l->shard_group;
  o.prefetch = l->prefetch, o.accum = l->accum;
  if (l->pp > 1) o.pp_kind = l->kind, o.virtual_stages = l->virt ? l->virt : 1, o.microbatches = l->micro_n;
  if (l->bf16) o.dtype = o.reduce_dtype = ZS_BF16;
  if (l->ps) o.ps_servers = 1, o.batch = 6, o.collect_params = 0;
  gpt_result_t plain;
  assert_ok(gpt_train_run(&o, g_dev, g_world, &plain));
  if (index == 0) check_json(&plain, &o, "none");
  for (int level = GPT_RECOMPUTE_BLOCK; level <= GPT_RECOMPUTE_GELU; level++) {
    const char *name = gpt_recompute_name(level);
    gpt_result_t rec;
    o.recompute = level;
    assert_ok(gpt_train_run(&o, g_dev, g_world, &rec));
    assert_int_eq(rec.steps, plain.steps);
    if (index == 0) check_json(&rec, &o, name);
    int same = memcmp(rec.losses, plain.losses, (size_t)plain.steps * sizeof *plain.losses) == 0 &&
               memcmp(&rec.val_loss, &plain.val_loss, sizeof rec.val_loss) == 0;
    if (!same)
      ZS_T_REPORT("%s: losses differ with --recompute %s (last %.9g vs %.9g)", l->what, name, rec.losses[5],
                  plain.losses[5]);
    if (o.collect_params && plain.final_params && rec.final_params &&
        memcmp(rec.final_params, plain.final_params, (size_t)plain.params * sizeof(float)))
      ZS_T_REPORT("%s: final parameters differ with --recompute %s", l->what, name);
    if (!l->ps) { /* the activations kept, this rank's */
      const gpt_rank_mem_t *p = &plain.ranks[g_rank], *r = &rec.ranks[g_rank];
      const int dp = g_size / (l->tp * l->pp), m = l->pp > 1 ? (l->micro_n ? l->micro_n : l->pp) : l->accum;
      const int B = o.batch / dp / m, kept = o.layers / (l->pp * (l->virt ? l->virt : 1));
      const int64_t each = level == GPT_RECOMPUTE_GELU ? gelu_floats(&o, B, l->tp) : block_floats(&o, B, l->tp, l->sp);
      const int64_t saved = (int64_t)sizeof(float) * (kept - 1) * each;
      const int64_t got = p->act_peak_bytes / p->act_peak_microbatches - r->act_peak_bytes / r->act_peak_microbatches;
      if (got != saved)
        ZS_T_REPORT("%s: --recompute %s kept %lld fewer bytes a micro-batch, want %lld (%d layers kept, B %d)",
                    l->what, name, (long long)got, (long long)saved, kept, B);
      if (l->pp == 1 && l->tp == 1) { /* the whole figure, from the shapes */
        const int64_t in = (int64_t)B * o.seq * o.channels, bf = block_floats(&o, B, 1, 0), g = gelu_floats(&o, B, 1);
        const int64_t want = level == GPT_RECOMPUTE_GELU ? o.layers * (bf - g) + g : bf;
        expect_true(p->act_peak_bytes == (int64_t)sizeof(float) * (o.layers * bf + (o.layers + 1) * in));
        expect_true(r->act_peak_bytes == (int64_t)sizeof(float) * (want + (o.layers + 1) * in));
      }
      if (g_rank == 0)
        fprintf(stderr, "%-36s %-5s losses %s (%.6f); activations %lld -> %lld bytes a micro-batch\n", l->what,
                name, same ? "equal" : "DIFFER", rec.val_loss,
                (long long)(p->act_peak_bytes / p->act_peak_microbatches),
                (long long)(r->act_peak_bytes / r->act_peak_microbatches));
    }
    gpt_result_free(&rec);
  }
  gpt_result_free(&plain);
}

static void test_layouts(void) {
  if (g_size != 4) zs_test_skip("4 ranks");
  const layout_t ls[] = {
      {.what = "stage 0", .stage = 0, .tp = 1, .pp = 1, .accum = 1},
      {.what = "stage 3", .stage = 3, .tp = 1, .pp = 1, .accum = 1},
      {.what = "stage 2, bf16, accum 2", .stage = 2, .tp = 1, .pp = 1, .accum = 2, .bf16 = 1},
      {.what = "stage 3, shard groups of 2, prefetch", .stage = 3, .tp = 1, .pp = 1, .accum = 1, .shard_group = 2,
       .prefetch = 2},
      {.what = "--tp 2, stage 1", .stage = 1, .tp = 2, .pp = 1, .accum = 1},
      {.what = "--tp 2 --sequence-parallel, stage 3", .stage = 3, .tp = 2, .sp = 1, .pp = 1, .accum = 1},
      {.what = "--pp 2 1f1b, stage 1", .stage = 1, .tp = 1, .pp = 2, .kind = ZS_PP_1F1B, .micro_n = 2, .accum = 1},
      {.what = "--pp 2 interleaved x 2", .stage = 0, .tp = 1, .pp = 2, .kind = ZS_PP_INTERLEAVED, .virt = 2,
       .micro_n = 4, .accum = 1},
      {.what = "--pp 2 x --tp 2", .stage = 0, .tp = 2, .pp = 2, .kind = ZS_PP_1F1B, .micro_n = 2, .accum = 1},
      {.what = "--ps-servers 1", .stage = 0, .tp = 1, .pp = 1, .accum = 1, .ps = 1},
  };
  for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) run_layout(&ls[i], (int)i);
}

static void test_flag_and_refusal(void) {
  gpt_opts_t o;
  char err[256];
  char *argv[] = {"zs-train-gpt", "--recompute"};
  expect_int_eq(gpt_opts_parse(&o, 2, argv, err, sizeof err), 0);
  expect_int_eq(o.recompute, 1);
  char *argv2[] = {"zs-train-gpt", "--recompute=1"};
  expect_int_ne(gpt_opts_parse(&o, 2, argv2, err, sizeof err), 0);
  expect_str_contains(err, "block or gelu");
  /* the optional level: a next word that is a level is taken, any other is left */
  const struct {
    int argc;
    char *argv[4];
    int level, steps;
  } forms[] = {
      {3, {"zs-train-gpt", "--recompute", "gelu"}, GPT_RECOMPUTE_GELU, 0},
      {3, {"zs-train-gpt", "--recompute", "block"}, GPT_RECOMPUTE_BLOCK, 0},
      {2, {"zs-train-gpt", "--recompute=gelu"}, GPT_RECOMPUTE_GELU, 0},
      {3, {"zs-train-gpt", "--recompute", "none"}, GPT_RECOMPUTE_NONE, 0},
      {4, {"zs-train-gpt", "--recompute", "--steps", "3"}, GPT_RECOMPUTE_BLOCK, 3},
      {4, {"zs-train-gpt", "--recompute", "gelu", "--json"}, GPT_RECOMPUTE_GELU, 0},
  };
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
    gpt_opts_default(&o);
    const int steps = o.steps;
    expect_int_eq(gpt_opts_parse(&o, forms[i].argc, (char **)forms[i].argv, err, sizeof err), 0);
    expect_int_eq(o.recompute, forms[i].level);
    expect_int_eq(o.steps, forms[i].steps ? forms[i].steps : steps);
  }
  for (int level = GPT_RECOMPUTE_BLOCK; level <= GPT_RECOMPUTE_GELU; level++) {
    gpt_result_t r;
    tiny(&o);
    o.steps = 1, o.recompute = level, o.moe_experts = 2, o.collect_params = 0;
    expect_status(gpt_train_run(&o, g_dev, g_world, &r), ZS_ERR_UNSUPPORTED);
    expect_str_contains(r.err, "--recompute");
    gpt_result_free(&r);
  }
}

int main(void) {
  gpt_world_open();
  zs_test_run(test_flag_and_refusal);
  zs_test_run(test_layouts);
  return gpt_world_close();
}
