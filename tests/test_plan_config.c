/* zs-plan --config FILE checked from outside the program (plan_check.h's
 * helpers, as test_plan).
 *
 *   test_plan_config ZS-PLAN
 *       a DeepSpeed ds_config.json and a file of our keys plan exactly what the
 *       equivalent flags plan (your config's option and every other one); the
 *       loader's unknown keys and its notes on keys it does not use are shown;
 *       a file that does not load exits 2 naming the file; a flag wins over the
 *       file; your config is appended to the table where no option has its
 *       settings; DeepSpeed's stage3_param_persistence_threshold in the traffic
 *       and memory in closed form.
 *
 * The files are written under a fresh directory in /tmp, removed at the end. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "plan_check.h"

/* 2 nodes of 4 ranks, 1 Gbit/s between them: the options differ in time */
#define CLUSTER UNITS4 " --world 8 --ranks-per-node 4 --inter-gbps 1 --intra-gbps 100"

static char g_dir[64];

/* Writes `text` to g_dir/name; returns the path (static: one at a time per slot). */
static const char *write_file(const char *name, const char *text) {
  static char paths[4][160];
  static int next;
  char *p = paths[next++ % 4];
  snprintf(p, sizeof paths[0], "%s/%s", g_dir, name);
  FILE *f = fopen(p, "w");
  if (!f) {
    ZS_T_REPORT("cannot write %s", p);
    return p;
  }
  fputs(text, f);
  fclose(f);
  return p;
}

/* Every figure of option a equals option b's (both computed, so exactly). */
static void expect_same_figures(const cJSON *a, const cJSON *b) {
  static const char *keys[] = {"stage", "shard_group", "model_state_bytes", "host_state_bytes", "nvme_state_bytes",
                               "device_peak_bytes", "comm_bytes_per_step", "replica_bytes_per_step",
                               "inter_link_bytes_per_step", "intra_bytes_per_step", "disk_read_bytes_per_step",
                               "disk_write_bytes_per_step", "comm_s_per_step", "disk_s", "step_s"};
  if (!a || !b) {
    ZS_T_REPORT("%s", "an option to compare is missing");
    return;
  }
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
    if (num(a, keys[k]) != num(b, keys[k]))
      ZS_T_REPORT("%s: %.17g (your config) vs %.17g (the flags)", keys[k], num(a, keys[k]), num(b, keys[k]));
  expect_int_eq(flag(a, "fits"), flag(b, "fits"));
  expect_int_eq(flag(a, "offload"), flag(b, "offload"));
  expect_int_eq(flag(a, "quantized_weights"), flag(b, "quantized_weights"));
}

/* doc's "config" object, asserted present */
static const cJSON *config_of(const cJSON *d) {
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(d, "config");
  if (!cJSON_IsObject(c)) ZS_T_REPORT("%s", "no \"config\" object in zs-plan's JSON");
  return cJSON_IsObject(c) ? c : NULL;
}

static const cJSON *config_option(const cJSON *d) {
  const cJSON *c = config_of(d);
  return c ? cJSON_GetObjectItemCaseSensitive(c, "option") : NULL;
}

/* Two documents list the same options with the same figures. */
static void expect_same_options(const cJSON *a, const cJSON *b) {
  const cJSON *oa = cJSON_GetObjectItemCaseSensitive(a, "options"), *ob = cJSON_GetObjectItemCaseSensitive(b, "options");
  expect_int_eq(cJSON_GetArraySize(oa), cJSON_GetArraySize(ob));
  for (int i = 0; i < cJSON_GetArraySize(oa) && i < cJSON_GetArraySize(ob); i++)
    expect_same_figures(cJSON_GetArrayItem(oa, i), cJSON_GetArrayItem(ob, i));
  expect_int_eq(num(a, "best_index"), num(b, "best_index"));
}

static int array_has(const cJSON *arr, const char *s) {
  const cJSON *it;
  cJSON_ArrayForEach(it, arr) if (cJSON_IsString(it) && !strcmp(it->valuestring, s)) return 1;
  return 0;
}

/* ============================================================================
 * the same figures as the flags
 * ========================================================================== */

/* A DeepSpeed ZeRO-3 config with the optimizer offloaded to the CPU, bf16 and
 * two accumulation steps (what Hugging Face ships, with the keys zeroshard does
 * not use): your config is flat stage 3 with offload, with exactly the figures
 * of that option under --dtype bf16 --grad-accum 2 (DeepSpeed's reduce dtype
 * without communication_data_type is fp32 here: config_load.h); every option is
 * planned with the file's settings; the table shows your config first. */
static void test_ds_stage3_offload(void) {
  const char *f = write_file("ds_z3_offload.json",
                             "{\n"
                             "  \"train_batch_size\": 64, \"train_micro_batch_size_per_gpu\": 4,\n"
                             "  \"gradient_accumulation_steps\": 2, \"gradient_clipping\": 1.0,\n"
                             "  \"bf16\": {\"enabled\": true},\n"
                             "  \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-4, \"weight_decay\": 0.01}},\n"
                             "  \"zero_optimization\": {\n"
                             "    \"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true},\n"
                             "    \"overlap_comm\": true, \"contiguous_gradients\": true, \"sub_group_size\": 1e9\n"
                             "  }\n"
                             "}\n");
  char args[512];
  int code;
  snprintf(args, sizeof args, CLUSTER " --config %s", f);
  cJSON *a = plan_json(args, &code);
  expect_int_eq(code, 0);
  cJSON *b = plan_json(CLUSTER " --dtype bf16 --reduce-dtype fp32 --grad-accum 2", &code);
  cJSON *plain = plan_json(CLUSTER, &code);
  assert_true(a && b && plain);
  const cJSON *mine = config_option(a), *want = option(b, 3, 8, 1);
  assert_true(mine && want);
  expect_true(str_is(mine, "offload_optimizer", "cpu") && str_is(mine, "offload_param", "none"));
  expect_same_figures(mine, want);
  expect_same_options(a, b);
  /* the file's settings matter: fp32 and one round give other figures */
  expect_true(num(mine, "model_state_bytes") != num(option(plain, 3, 8, 1), "model_state_bytes"));
  expect_true(str_is(a, "param_dtype", "bf16") && str_is(a, "reduce_dtype", "fp32"));
  expect_int_eq(num(a, "grad_accum"), 2);
  /* your config is the listed option with its settings */
  const cJSON *c = config_of(a);
  if (c) {
    expect_same_figures(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(a, "options"), (int)num(c, "index")), want);
    expect_int_eq(flag(c, "fits"), 1);
    expect_int_eq(flag(c, "is_best"), num(c, "index") == num(a, "best_index"));
  }
  cJSON_Delete(a), cJSON_Delete(b), cJSON_Delete(plain);
  /* the table: your config first, then every option with its row marked, then how it compares */
  char cmd[600];
  snprintf(cmd, sizeof cmd, "%s %s", plan, args);
  char *out = run(cmd, &code);
  expect_int_eq(code, 0);
  assert_true(out != NULL);
  const char *yours = strstr(out, "# your config: "), *every = strstr(out, "# every option");
  expect_true(yours && every && yours < every);
  expect_str_contains(out, "\n> 3     flat       yes ");
  expect_str_contains(out, "\n> your config fits");
  free(out);
}

/* Our own keys: hybrid stage 2 over shard groups of 4 (2 ranks a node, so not
 * the default group), bf16 with bf16 reductions, SGD with momentum (its buffer
 * is optimizer state: --momentum), 3 rounds, the optimizer offloaded. */
static void test_our_keys(void) {
  const char *f = write_file("ours.json",
                             "{\"stage\": 2, \"param_dtype\": \"bf16\", \"reduce_dtype\": \"bf16\",\n"
                             " \"optim\": {\"kind\": \"sgd\", \"lr\": 0.01, \"momentum\": 0.9},\n"
                             " \"grad_accum\": 3, \"prefetch\": 2, \"shard_group\": 4, \"offload_optimizer\": \"cpu\"}\n");
  char args[512];
  int code;
  snprintf(args, sizeof args, UNITS4 " --world 8 --ranks-per-node 2 --config %s", f);
  cJSON *a = plan_json(args, &code);
  cJSON *b = plan_json(UNITS4 " --world 8 --ranks-per-node 2 --dtype bf16 --reduce-dtype bf16 --optim sgd --momentum 0.9 "
                       "--grad-accum 3 --prefetch 2 --shard-group 4", &code);
  cJSON *nom = plan_json(UNITS4 " --world 8 --ranks-per-node 2 --dtype bf16 --reduce-dtype bf16 --optim sgd "
                         "--grad-accum 3 --prefetch 2 --shard-group 4", &code);
  assert_true(a && b && nom);
  const cJSON *mine = config_option(a), *want = option(b, 2, 4, 1);
  assert_true(mine && want);
  expect_true(flag(mine, "hybrid"));
  expect_same_figures(mine, want);
  expect_same_options(a, b);
  /* momentum's buffer: one fp32 a shard element more on the host than plain SGD */
  expect_int_eq(num(want, "host_state_bytes") - num(option(nom, 2, 4, 1), "host_state_bytes"), 4 * (4 << 20) / 4);
  cJSON_Delete(a), cJSON_Delete(b), cJSON_Delete(nom);
}

/* ============================================================================
 * what the loader says
 * ========================================================================== */

/* Unknown keys at any depth are shown (the loader's warning on stderr, the
 * list in the JSON and in the table), and so are keys it accepts but does not
 * use; the plan goes on. */
static void test_unknown_keys(void) {
  const char *f = write_file("unknown.json",
                             "{\"zero_optimization\": {\"stage\": 2, \"stage2_bogus\": 1},\n"
                             " \"bogus_key\": \"x\", \"steps_per_print\": 10}\n");
  char args[512];
  int code;
  snprintf(args, sizeof args, CLUSTER " --config %s", f);
  cJSON *d = plan_json(args, &code);
  expect_int_eq(code, 0);
  assert_true(d != NULL);
  expect_str_contains(g_err, "unknown config key bogus_key");
  expect_str_contains(g_err, "unknown config key zero_optimization.stage2_bogus");
  expect_str_contains(g_err, "steps_per_print accepted, not used");
  expect_str_contains(g_err, f); /* the loader's messages name the file */
  const cJSON *c = config_of(d);
  if (c) {
    const cJSON *keys = cJSON_GetObjectItemCaseSensitive(c, "unknown_keys");
    expect_int_eq(cJSON_GetArraySize(keys), 2);
    expect_true(array_has(keys, "bogus_key") && array_has(keys, "zero_optimization.stage2_bogus"));
    expect_true(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(c, "messages")) >= 3);
  }
  cJSON_Delete(d);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "%s %s", plan, args);
  char *out = run(cmd, &code);
  expect_int_eq(code, 0);
  expect_str_contains(out, "unknown keys, ignored: zero_optimization.stage2_bogus, bogus_key");
  free(out);
}

/* A file that does not load: exit 2 with the loader's message, which names the file. */
static void test_bad_file(void) {
  const char *bad[][2] = {
      {"trailing_comma.json", "{\"zero_optimization\": {\"stage\": 3,}}"},
      {"not_object.json", "[1, 2]"},
      {"stage7.json", "{\"zero_optimization\": {\"stage\": 7}}"},
      {"offload_param_stage2.json", "{\"zero_optimization\": {\"stage\": 2, \"offload_param\": {\"device\": \"cpu\"}}}"},
      /* a scheduler the engine refuses does not save a file refused for more */
      {"stage7_onecycle.json", "{\"zero_optimization\": {\"stage\": 7}, \"scheduler\": {\"type\": \"OneCycle\"}}"},
  };
  char cmd[600];
  int code;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *f = write_file(bad[i][0], bad[i][1]);
    snprintf(cmd, sizeof cmd, "%s " CLUSTER " --config %s", plan, f);
    free(run(cmd, &code));
    if (code != 2) ZS_T_REPORT("%s: exit %d, want 2 (stderr: %s)", bad[i][0], code, g_err);
    expect_str_contains(g_err, f);
    expect_str_contains(g_err, "zs-plan: --config");
  }
  /* refused for its scheduler alone (OneCycle; Hugging Face's "auto" warmup):
   * planned without it, which changes no memory or traffic, saying that an
   * engine refuses the file as it is */
  const char *sched[][2] = {
      {"onecycle.json", "{\"zero_optimization\": {\"stage\": 2}, \"scheduler\": {\"type\": \"OneCycle\"}}"},
      {"auto_warmup.json", "{\"zero_optimization\": {\"stage\": 2}, \"scheduler\": {\"type\": \"WarmupLR\", "
                           "\"params\": {\"warmup_num_steps\": \"auto\"}}}"},
  };
  cJSON *plain2 = plan_json(CLUSTER, &code);
  for (size_t i = 0; i < 2; i++) {
    const char *f = write_file(sched[i][0], sched[i][1]);
    char args[512];
    snprintf(args, sizeof args, CLUSTER " --config %s", f);
    cJSON *d = plan_json(args, &code);
    if (code != 0) ZS_T_REPORT("%s: exit %d, want 0 (stderr: %s)", sched[i][0], code, g_err);
    expect_str_contains(g_err, "the file's scheduler is left out of the plan");
    expect_str_contains(g_err, "an engine refuses the file as it is");
    const cJSON *mine = d ? config_option(d) : NULL, *want = plain2 ? option(plain2, 2, 8, 0) : NULL;
    expect_true(mine && want);
    expect_same_figures(mine, want);
    cJSON_Delete(d);
  }
  cJSON_Delete(plain2);
  snprintf(cmd, sizeof cmd, "%s " CLUSTER " --config %s/absent.json", plan, g_dir);
  free(run(cmd, &code));
  expect_int_eq(code, 2);
  expect_str_contains(g_err, "absent.json");
  snprintf(cmd, sizeof cmd, "%s " CLUSTER " --config", plan);
  free(run(cmd, &code));
  expect_int_eq(code, 2);
}

/* ============================================================================
 * the flags over the file
 * ========================================================================== */

/* --dtype, --reduce-dtype and --grad-accum over a bf16 file with bf16
 * reductions and 4 rounds: your config is the flags' (fp32, one round), the
 * overrides are listed; --shard-group over our "shard_group" sets the group. */
static void test_flag_wins(void) {
  const char *f = write_file("ds_bf16.json",
                             "{\"gradient_accumulation_steps\": 4, \"communication_data_type\": \"bf16\",\n"
                             " \"bf16\": {\"enabled\": true},\n"
                             " \"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\"}}}\n");
  char args[512];
  int code;
  snprintf(args, sizeof args, CLUSTER " --config %s --dtype fp32 --reduce-dtype fp32 --grad-accum 1", f);
  cJSON *a = plan_json(args, &code);
  snprintf(args, sizeof args, CLUSTER " --config %s", f);
  cJSON *file = plan_json(args, &code);
  cJSON *b = plan_json(CLUSTER, &code);
  assert_true(a && b && file);
  expect_same_figures(config_option(a), option(b, 3, 8, 1));
  expect_same_options(a, b);
  expect_true(str_is(a, "param_dtype", "fp32"));
  expect_int_eq(num(a, "grad_accum"), 1);
  expect_true(num(config_option(file), "comm_bytes_per_step") != num(config_option(a), "comm_bytes_per_step"));
  const cJSON *c = config_of(a);
  if (c) {
    const cJSON *over = cJSON_GetObjectItemCaseSensitive(c, "overrides");
    expect_int_eq(cJSON_GetArraySize(over), 3);
    expect_true(array_has(over, "grad_accum 1 (--grad-accum; the file: 4)"));
  }
  cJSON_Delete(a), cJSON_Delete(b), cJSON_Delete(file);

  const char *g = write_file("ours_hybrid.json", "{\"stage\": 3, \"shard_group\": 2}");
  snprintf(args, sizeof args, CLUSTER " --config %s --shard-group 4", g);
  a = plan_json(args, &code);
  b = plan_json(CLUSTER " --shard-group 4", &code);
  assert_true(a && b);
  expect_int_eq(num(config_option(a), "shard_group"), 4);
  expect_same_figures(config_option(a), option(b, 3, 4, 0));
  cJSON_Delete(a), cJSON_Delete(b);
}

/* ============================================================================
 * settings the flags alone did not reach
 * ========================================================================== */

/* ZeRO++'s quantized weights with the optimizer state in the NVMe tier: no
 * listed option has both, so your config is one more row, after the others,
 * with the same figures as a run whose file has them (and, for the rest, the
 * --quantized-weights run's options, the file listing them as the flag does). */
static void test_appended(void) {
  const char *f = write_file("ds_qw_nvme.json",
                             "{\"zero_optimization\": {\"stage\": 3, \"zero_quantized_weights\": true,\n"
                             " \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"/tmp/none\"}}}\n");
  char args[512];
  int code;
  snprintf(args, sizeof args, CLUSTER " --config %s", f);
  cJSON *a = plan_json(args, &code);
  cJSON *b = plan_json(CLUSTER " --quantized-weights", &code);
  assert_true(a && b);
  const int na = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(a, "options"));
  expect_int_eq(na, cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(b, "options")) + 1);
  const cJSON *c = config_of(a), *mine = config_option(a);
  assert_true(c && mine);
  expect_int_eq(num(c, "index"), na - 1);
  expect_true(flag(mine, "quantized_weights") && str_is(mine, "offload_optimizer", "nvme"));
  expect_true(num(mine, "nvme_state_bytes") > 0 && num(mine, "disk_s") > 0);
  /* the packed gathers: fewer bytes than the tier's exact option, the same file */
  g_opt = "nvme";
  const cJSON *exact = option(b, 3, 8, 1);
  g_opt = NULL;
  assert_true(exact != NULL);
  expect_true(num(mine, "comm_bytes_per_step") < num(exact, "comm_bytes_per_step"));
  expect_int_eq(num(mine, "nvme_state_bytes"), num(exact, "nvme_state_bytes"));
  cJSON_Delete(a), cJSON_Delete(b);
}

/* DeepSpeed's stage3_param_persistence_threshold (persist_threshold; the flag
 * --persist-threshold): at stage 3 a unit of at most that many elements stays
 * gathered. Units of 1M, 1M, 1M and 1000 elements on one node of 4: the last
 * (padded to 1024) is gathered once a step, after the update, instead of in
 * forward and in backward, one all-gather's 3/4 x 1024 x 4 bytes fewer, and
 * its full copy stays on the device (+ 1024 x 4 bytes of model state). The
 * engine's own counters gave these bytes at 4 ranks (by hand: no zs-membench
 * flag sets the threshold). */
static void test_persist(void) {
  const char *f = write_file("ds_persist.json",
                             "{\"zero_optimization\": {\"stage\": 3, \"stage3_param_persistence_threshold\": 1e5}}");
  char args[512];
  int code;
#define PUNITS "--units 1048576,1048576,1048576,1000 --world 4 --ranks-per-node 4"
  snprintf(args, sizeof args, PUNITS " --config %s", f);
  cJSON *a = plan_json(args, &code);
  cJSON *b = plan_json(PUNITS " --persist-threshold 100000", &code);
  cJSON *none = plan_json(PUNITS, &code);
  assert_true(a && b && none);
  const cJSON *mine = config_option(a), *want = option(b, 3, 4, 0), *plain = option(none, 3, 4, 0);
  assert_true(mine && want && plain);
  expect_same_figures(mine, want);
  expect_int_eq(num(plain, "comm_bytes_per_step") - num(mine, "comm_bytes_per_step"), 3 * 1024 * 4 / 4);
  expect_int_eq(num(mine, "model_state_bytes") - num(plain, "model_state_bytes"), 1024 * 4);
  expect_int_eq(num(mine, "comm_bytes_per_step"), 28317732); /* with the norm's 3 fp64 (step.c): 36 bytes */
  /* below stage 3 nothing changes */
  expect_same_figures(option(b, 2, 4, 0), option(none, 2, 4, 0));
#undef PUNITS
  cJSON_Delete(a), cJSON_Delete(b), cJSON_Delete(none);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_plan_config ZS-PLAN\n");
    return 2;
  }
  plan = argv[1];
  (void)against_membench, (void)best_of; /* plan_check.h's; the membench runs are test_plan's */
  (void)mpiexec, (void)membench;
  snprintf(g_dir, sizeof g_dir, "/tmp/zs-plan-config-XXXXXX");
  if (!mkdtemp(g_dir)) {
    fprintf(stderr, "mkdtemp %s failed\n", g_dir);
    return 1;
  }
  zs_test_run(test_ds_stage3_offload);
  zs_test_run(test_our_keys);
  zs_test_run(test_unknown_keys);
  zs_test_run(test_bad_file);
  zs_test_run(test_flag_wins);
  zs_test_run(test_appended);
  zs_test_run(test_persist);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
  return zs_test_finish();
}
