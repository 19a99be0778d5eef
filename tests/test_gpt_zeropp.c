/* test_gpt_zeropp: ZeRO++'s options in the example GPT trainer (issue 32 items
 * 5-6), as a user runs them: the flags parse (--quantized-weights,
 * --quantized-weights-block B, --hpz N; --quantized-weights=1 is refused: a value on a
 * flag that takes none, as --offload=0, would be silently ignored); 200 steps of the tiny model at stage 3 with
 * quantized weights end within 1% of the exact run's validation loss (the
 * curve is printed); the gathers move 1/4 + 1/B of the fp32 run's bytes per
 * element (the trainer's gather_bytes_per_step, ranks > 1); and at stage 2 the
 * option is refused with the config's message; at 4 ranks --hpz 2 trains the
 * same losses bit for bit as the plain run; --quantized-grads 8 also ends
 * within 1% after 200 steps, and with --offload gives the same losses bit for
 * bit. Tiny model: 2 layers, 32
 * channels, 2 heads, seq 16, batch 8. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_world.h"
#include "harness.h"
#include "trainer.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"


static void tiny(gpt_opts_t *o, int steps) {
  gpt_opts_default(o);
  o->layers = 2, o->channels = 32, o->heads = 2, o->seq = 16, o->vocab = 256;
  o->batch = 8, o->steps = steps, o->val_seqs = 8, o->val_every = 50, o->seed = 2024, o->quiet = 1;
  o->dtype = o->reduce_dtype = ZS_FP32;
  o->stage = 3;
}

static void test_flags(void) {
  gpt_opts_t o;
  char err[256];
  char *argv[] = {"zs-train-gpt", "--stage", "3", "--quantized-weights", "--quantized-weights-block", "64",
                  "--hpz", "8", "--quantized-grads", "8", "--quantized-grads-group", "2"};
  expect_int_eq(gpt_opts_parse(&o, 12, argv, err, sizeof err), 0);
  expect_int_eq(o.quantized_grads, 8);
  expect_int_eq(o.quantized_grads_group, 2);
  expect_int_eq(o.quantized_weights, 1);
  expect_int_eq(o.quantized_weights_block, 64);
  expect_int_eq(o.hpz, 8);
  char *argv2[] = {"zs-train-gpt", "--quantized-weights=1"};
  expect_int_ne(gpt_opts_parse(&o, 2, argv2, err, sizeof err), 0); /* "=0" would not mean off */
  expect_str_contains(err, "takes no value");
}

static void test_quantized_weights(void) {
  gpt_opts_t o;
  gpt_result_t exact, quant;
  tiny(&o, 200);
  assert_ok(gpt_train_run(&o, g_dev, g_world, &exact));
  o.quantized_weights = 1;
  assert_ok(gpt_train_run(&o, g_dev, g_world, &quant));
  double rel = fabs(quant.val_loss - exact.val_loss) / exact.val_loss;
  if (g_rank == 0) {
    fprintf(stderr, "quantized weights int8/256, %d ranks, stage 3: validation loss", g_size);
    for (int i = 0; i < exact.nval && i < quant.nval; i++)
      fprintf(stderr, " %.4f/%.4f", quant.val_losses[i], exact.val_losses[i]);
    fprintf(stderr, " (quantized/exact, every 50 steps), %.2g apart at the end; gathers %lld vs %lld bytes a step\n",
            rel, (long long)quant.ranks[g_rank].gather_bytes_per_step, (long long)exact.ranks[g_rank].gather_bytes_per_step);
  }
  expect_true(rel <= 0.01);
  expect_true(quant.val_loss != exact.val_loss); /* the option did something */
  if (g_size > 1) {
    /* fp32 elements of 4 bytes became 1 + 4/256 (and at most 3 bytes of padding a shard) */
    double ratio = (double)quant.ranks[g_rank].gather_bytes_per_step / (double)exact.ranks[g_rank].gather_bytes_per_step;
    expect_true(ratio >= (1.0 + 4.0 / 256) / 4 && ratio <= (1.0 + 4.0 / 256) / 4 * 1.01);
  }
  gpt_result_free(&exact);
  gpt_result_free(&quant);
}

/* --hpz 2 at 4 ranks: the same run bit for bit (backward gathers the copies
 * forward kept), the world's all-gathers halved (forward's only). */
static void test_hpz(void) {
  if (g_size != 4) zs_test_skip("4 ranks (partitions of 2)");
  gpt_opts_t o;
  gpt_result_t plain, hpz;
  tiny(&o, 20);
  assert_ok(gpt_train_run(&o, g_dev, g_world, &plain));
  o.hpz = 2;
  assert_ok(gpt_train_run(&o, g_dev, g_world, &hpz));
  for (int s = 0; s < 20; s++) expect_true(plain.losses[s] == hpz.losses[s]);
  expect_true(plain.val_loss == hpz.val_loss);
  if (g_rank == 0)
    fprintf(stderr, "--hpz 2, 4 ranks: losses equal to the plain run's; gathers received %lld vs %lld bytes a step\n",
            (long long)hpz.ranks[0].gather_bytes_per_step, (long long)plain.ranks[0].gather_bytes_per_step);
  gpt_result_free(&plain);
  gpt_result_free(&hpz);
}

/* --quantized-grads 8 (at 4 ranks in groups of 2: both all-to-alls): 200
 * steps within 1% of the exact run's validation loss. */
static void test_quantized_grads(void) {
  gpt_opts_t o;
  gpt_result_t exact, quant;
  tiny(&o, 200);
  assert_ok(gpt_train_run(&o, g_dev, g_world, &exact));
  o.quantized_grads = 8;
  o.quantized_grads_group = g_size == 4 ? 2 : 0;
  assert_ok(gpt_train_run(&o, g_dev, g_world, &quant));
  double rel = fabs(quant.val_loss - exact.val_loss) / exact.val_loss;
  if (g_rank == 0) {
    fprintf(stderr, "quantized gradients int8/256, %d ranks, stage 3: validation loss", g_size);
    for (int i = 0; i < exact.nval && i < quant.nval; i++)
      fprintf(stderr, " %.4f/%.4f", quant.val_losses[i], exact.val_losses[i]);
    fprintf(stderr, " (quantized/exact, every 50 steps), %.2g apart at the end\n", rel);
  }
  expect_true(rel <= 0.01);
  if (g_size > 1) expect_true(quant.val_loss != exact.val_loss);
  gpt_result_free(&exact);
  gpt_result_free(&quant);
}

/* --quantized-grads 8 with --offload: the trainer runs it (the config took it
 * since qgZ feeds offload's copy to the host), and 20 steps give the losses of
 * the run without offload bit for bit (test_engine_qg_offload: the engine's
 * claim, with every parameter). */
static void test_quantized_grads_offload(void) {
  gpt_opts_t o;
  gpt_result_t dev, off;
  tiny(&o, 20);
  o.val_every = 20;
  o.quantized_grads = 8;
  o.quantized_grads_group = g_size == 4 ? 2 : 0;
  assert_ok(gpt_train_run(&o, g_dev, g_world, &dev));
  o.offload = 1;
  assert_ok(gpt_train_run(&o, g_dev, g_world, &off));
  assert_int_eq(off.steps, dev.steps);
  expect_true(memcmp(off.losses, dev.losses, (size_t)dev.steps * sizeof *dev.losses) == 0);
  expect_true(memcmp(&off.val_loss, &dev.val_loss, sizeof dev.val_loss) == 0);
  if (g_rank == 0)
    fprintf(stderr, "quantized gradients int8, offload, %d ranks: validation loss %.6f (%.6f without offload)\n",
            g_size, off.val_loss, dev.val_loss);
  gpt_result_free(&dev);
  gpt_result_free(&off);
}

static void test_refused(void) {
  gpt_opts_t o;
  gpt_result_t r;
  tiny(&o, 2);
  o.stage = 2;
  o.quantized_weights = 1;
  expect_status(gpt_train_run(&o, g_dev, g_world, &r), ZS_ERR_INVALID);
  expect_str_contains(r.err, "stage 3");
  gpt_result_free(&r);
}

int main(void) {
  gpt_world_open();
  zs_test_run(test_flags);
  zs_test_run(test_quantized_weights);
  zs_test_run(test_hpz);
  zs_test_run(test_quantized_grads);
  zs_test_run(test_quantized_grads_offload);
  zs_test_run(test_refused);
  return gpt_world_close();
}
