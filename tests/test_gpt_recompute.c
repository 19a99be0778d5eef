/* test_gpt_recompute: --recompute (activation recomputation) in the example
 * GPT trainer, at 4 ranks, in every dense layout: stage 0, stage 3 flat, stage
 * 2 in bf16 with accumulation, hybrid shard groups of 2 at stage 3 with
 * prefetch, --tp 2 with and without --sequence-parallel, --pp 2 (1F1B, and
 * interleaved with 2 chunks a rank), --pp 2 x --tp 2, and the parameter-server
 * baseline. Each layout runs 6 steps without and with --recompute: every
 * training loss, the validation loss and every final parameter equal bit for
 * bit (backward recomputes a block from its kept input with the same code), and
 * the activations kept from forward to backward (act_peak_bytes) smaller by
 * exactly (layers kept - 1) blocks' tensors, computed here from the shapes (for
 * one micro-batch without a pipeline: L blocks against 1, plus the L + 1
 * residuals both keep). A recompute that skipped the forward again (backward on
 * the last layer's tensors) changes the losses. The flag parses; with
 * --moe-experts it is refused with a message naming it. Tiny model: 4 layers,
 * 32 channels, 2 heads, seq 16, batch 8. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "trainer.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#include "zeroshard/pipeline.h"

static zs_device_t *g_dev;
static zs_comm_t *g_world;
static int g_rank, g_size;

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

static void run_layout(const layout_t *l) {
  gpt_opts_t o;
  tiny(&o);
  o.stage = l->stage, o.tp = l->tp, o.sequence_parallel = l->sp, o.pp = l->pp, o.shard_group = l->shard_group;
  o.prefetch = l->prefetch, o.accum = l->accum;
  if (l->pp > 1) o.pp_kind = l->kind, o.virtual_stages = l->virt ? l->virt : 1, o.microbatches = l->micro_n;
  if (l->bf16) o.dtype = o.reduce_dtype = ZS_BF16;
  if (l->ps) o.ps_servers = 1, o.batch = 6, o.collect_params = 0;
  gpt_result_t plain, rec;
  assert_ok(gpt_train_run(&o, g_dev, g_world, &plain));
  o.recompute = 1;
  assert_ok(gpt_train_run(&o, g_dev, g_world, &rec));
  assert_int_eq(rec.steps, plain.steps);
  int same = memcmp(rec.losses, plain.losses, (size_t)plain.steps * sizeof *plain.losses) == 0 &&
             memcmp(&rec.val_loss, &plain.val_loss, sizeof rec.val_loss) == 0;
  if (!same) ZS_T_REPORT("%s: losses differ with --recompute (last %.9g vs %.9g)", l->what, rec.losses[5], plain.losses[5]);
  if (o.collect_params && plain.final_params && rec.final_params &&
      memcmp(rec.final_params, plain.final_params, (size_t)plain.params * sizeof(float)))
    ZS_T_REPORT("%s: final parameters differ with --recompute", l->what);
  if (!l->ps) { /* the activations kept, this rank's */
    const gpt_rank_mem_t *p = &plain.ranks[g_rank], *r = &rec.ranks[g_rank];
    const int dp = g_size / (l->tp * l->pp), m = l->pp > 1 ? (l->micro_n ? l->micro_n : l->pp) : l->accum;
    const int B = o.batch / dp / m, kept = o.layers / (l->pp * (l->virt ? l->virt : 1));
    const int64_t saved = (int64_t)sizeof(float) * (kept - 1) * block_floats(&o, B, l->tp, l->sp);
    const int64_t got = p->act_peak_bytes / p->act_peak_microbatches - r->act_peak_bytes / r->act_peak_microbatches;
    if (got != saved)
      ZS_T_REPORT("%s: --recompute kept %lld fewer bytes a micro-batch, want %lld (%d layers kept, B %d)", l->what,
                  (long long)got, (long long)saved, kept, B);
    if (l->pp == 1 && l->tp == 1) { /* the whole figure, from the shapes */
      const int64_t in = (int64_t)B * o.seq * o.channels, bf = block_floats(&o, B, 1, 0);
      expect_true(p->act_peak_bytes == (int64_t)sizeof(float) * (o.layers * bf + (o.layers + 1) * in));
      expect_true(r->act_peak_bytes == (int64_t)sizeof(float) * (bf + (o.layers + 1) * in));
    }
    if (g_rank == 0)
      fprintf(stderr, "%-36s losses %s (%.6f); activations %lld -> %lld bytes a micro-batch\n", l->what,
              same ? "equal" : "DIFFER", rec.val_loss, (long long)(p->act_peak_bytes / p->act_peak_microbatches),
              (long long)(r->act_peak_bytes / r->act_peak_microbatches));
  }
  gpt_result_free(&plain);
  gpt_result_free(&rec);
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
  for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) run_layout(&ls[i]);
}

static void test_flag_and_refusal(void) {
  gpt_opts_t o;
  char err[256];
  char *argv[] = {"zs-train-gpt", "--recompute"};
  expect_int_eq(gpt_opts_parse(&o, 2, argv, err, sizeof err), 0);
  expect_int_eq(o.recompute, 1);
  char *argv2[] = {"zs-train-gpt", "--recompute=1"};
  expect_int_ne(gpt_opts_parse(&o, 2, argv2, err, sizeof err), 0);
  gpt_result_t r;
  tiny(&o);
  o.steps = 1, o.recompute = 1, o.moe_experts = 2, o.collect_params = 0;
  expect_status(gpt_train_run(&o, g_dev, g_world, &r), ZS_ERR_UNSUPPORTED);
  expect_str_contains(r.err, "--recompute");
  gpt_result_free(&r);
}

int main(void) {
  if (zs_device_create_cpu(&g_dev) != ZS_OK || zs_comm_create_mpi_world(&g_world, g_dev) != ZS_OK) {
    fprintf(stderr, "cannot open the world: %s\n", zs_last_error());
    return 1;
  }
  g_rank = zs_comm_rank(g_world);
  g_size = zs_comm_size(g_world);
  zs_t_rank = g_rank;
  gpt_threads_auto(g_size);
  zs_test_run(test_flag_and_refusal);
  zs_test_run(test_layouts);
  zs_comm_destroy(g_world);
  zs_device_destroy(g_dev);
  return zs_test_finish();
}
