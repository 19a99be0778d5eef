/* What test_plan and test_plan_zeropp share: running zs-plan and
 * zs-membench, reading their JSON, finding an option, comparing the two.
 * Include once, after harness.h. */
#ifndef ZS_TESTS_PLAN_CHECK_H
#define ZS_TESTS_PLAN_CHECK_H

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define UNITS4 "--units 1048576,1048576,1048576,1048576"

static const char *plan, *mpiexec, *membench;

/* ============================================================================
 * running the programs
 * ========================================================================== */

/* Runs cmd (stderr to /dev/null), returns its stdout (malloc'd) and exit code. */
/* The last command's stderr (for the reports below). */
static char g_err[2048];

/* cmd's stdout (to free) and exit code; its stderr kept in g_err. A run that a
 * sanitizer's own runtime ended ("...Sanitizer has encountered a fatal error",
 * LeakSanitizer's stop-the-world failing on a loaded machine) is the tool's
 * failure, not the program's: it is run once more. */
static char *run_once(const char *cmd, int *code) {
  char errf[] = "/tmp/zs-plan-test-err-XXXXXX", full[2200];
  int fd = mkstemp(errf);
  if (fd >= 0) close(fd);
  snprintf(full, sizeof full, "%s 2>%s", cmd, fd >= 0 ? errf : "/dev/null");
  g_err[0] = 0;
  FILE *p = popen(full, "r");
  if (!p) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  for (size_t k; buf && (k = fread(buf + n, 1, cap - n - 1, p)) > 0;) {
    n += k;
    if (cap - n < 4096) buf = realloc(buf, cap *= 2);
  }
  int st = pclose(p);
  *code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  if (buf) buf[n] = 0;
  FILE *e = fd >= 0 ? fopen(errf, "r") : NULL;
  if (e) {
    size_t k = fread(g_err, 1, sizeof g_err - 1, e);
    g_err[k] = 0;
    fclose(e);
  }
  if (fd >= 0) unlink(errf);
  return buf;
}

static char *run(const char *cmd, int *code) {
  char *out = run_once(cmd, code);
  if (strstr(g_err, "Sanitizer has encountered a fatal error")) {
    fprintf(stderr, "%s: the sanitizer's runtime failed (%s); once more\n", cmd, g_err);
    free(out);
    out = run_once(cmd, code);
  }
  return out;
}

/* zs-plan ARGS --json: the document, or NULL (and *code) */
static cJSON *plan_json(const char *args, int *code) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s %s --json", plan, args);
  char *out = run(cmd, code);
  cJSON *d = out ? cJSON_Parse(out) : NULL;
  if (!d && *code != 77) ZS_T_REPORT("zs-plan %s: no JSON document (exit %d; stderr: %s)", args, *code, g_err);
  free(out);
  return d;
}

static double num(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsNumber(v)) {
    ZS_T_REPORT("key \"%s\" missing or not a number", key);
    return -1;
  }
  return v->valuedouble;
}

static int flag(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsBool(v)) ZS_T_REPORT("key \"%s\" missing or not a boolean", key);
  return cJSON_IsTrue(v);
}

static int str_is(const cJSON *o, const char *key, const char *want) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsString(v)) ZS_T_REPORT("key \"%s\" missing or not a string", key);
  return cJSON_IsString(v) && !strcmp(v->valuestring, want);
}

/* The option with this stage, shard group and offload (and quantized weights
 * and hpZ partition as g_qw and g_hpz say: 0 unless a test sets them; where the
 * optimizer state and stage 3's parameter shards are as g_opt and g_param say:
 * "cpu" for an offloaded optimizer and "none" unless a test sets them), or NULL. */
static int g_qw, g_hpz, g_qg;
static const char *g_opt, *g_param;
static const cJSON *option(const cJSON *doc, int stage, int shard, int offload) {
  const cJSON *o;
  const char *opt = g_opt ? g_opt : offload ? "cpu" : "none", *par = g_param && stage == 3 ? g_param : "none";
  cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(doc, "options")) {
    if ((int)num(o, "stage") == stage && (int)num(o, "shard_group") == shard && flag(o, "offload") == offload &&
        flag(o, "quantized_weights") == (g_qw && stage == 3) &&
        (int)num(o, "hpz_partition_size") == (stage == 3 ? g_hpz : 0) &&
        flag(o, "quantized_gradients") == (g_qg && stage >= 2) && str_is(o, "offload_optimizer", opt) &&
        str_is(o, "offload_param", par))
      return o;
  }
  ZS_T_REPORT("no option stage %d shard_group %d offload %d (%s, parameters %s) quantized weights %d hpz %d", stage,
              shard, offload, opt, par, g_qw, g_hpz);
  return NULL;
}

static const cJSON *best_of(const cJSON *d) {
  const cJSON *b = cJSON_GetObjectItemCaseSensitive(d, "best");
  if (!cJSON_IsObject(b)) ZS_T_REPORT("%s", "no best option");
  return cJSON_IsObject(b) ? b : NULL;
}


/* zs-membench at 4 ranks with FLAGS against zs-plan with PLAN_ARGS: every
 * result's rank-0 memory and comm bytes equal the plan's option. */
static void against_membench(const char *flags, const char *plan_args, int shard, int dp) {
  char cmd[1024];
  int code;
  snprintf(cmd, sizeof cmd, "%s -n 4 --oversubscribe %s %s --steps 2 --json", mpiexec, membench, flags);
  char *out = run(cmd, &code);
  if (code == 77) {
    free(out);
    zs_test_skip("zs-membench: not in this build");
    return;
  }
  cJSON *m = out ? cJSON_Parse(out) : NULL;
  free(out);
  if (!m) ZS_T_REPORT("zs-membench %s: no JSON (exit %d)", flags, code);
  cJSON *d = plan_json(plan_args, &code);
  assert_true(m && d);
  int n = 0;
  const cJSON *r;
  cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(m, "results")) {
    int stage = (int)num(r, "stage"), off = flag(r, "offload");
    if (flag(r, "delayed")) continue;
    /* ZeRO-Infinity's runs: the plan's option with the same tiers */
    const cJSON *wo = cJSON_GetObjectItemCaseSensitive(r, "offload_optimizer");
    const cJSON *wp = cJSON_GetObjectItemCaseSensitive(r, "offload_param");
    g_opt = cJSON_IsString(wo) ? wo->valuestring : NULL;
    g_param = cJSON_IsString(wp) ? wp->valuestring : NULL;
    const cJSON *o = option(d, stage, stage == 0 ? dp : shard, off);
    g_opt = g_param = NULL;
    const cJSON *r0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r, "ranks"), 0);
    if (!o || !r0) continue;
    fprintf(stderr, "  stage %d offload %d shard %d: model state %.0f (plan %.0f), host %.0f (%.0f), comm %.0f (%.0f), "
            "replicas %.0f (%.0f)\n", stage, off, (int)num(o, "shard_group"), num(r0, "model_state_bytes"),
            num(o, "model_state_bytes"), num(r0, "host_model_state_bytes"), num(o, "host_state_bytes"),
            num(r, "comm_bytes_per_step"), num(o, "comm_bytes_per_step"), num(r, "comm_inter_bytes_per_step"),
            num(o, "replica_bytes_per_step"));
    expect_int_eq(num(r0, "model_state_bytes"), num(o, "model_state_bytes"));
    expect_int_eq(num(r0, "host_model_state_bytes"), num(o, "host_state_bytes"));
    expect_int_eq(num(r, "comm_bytes_per_step"), num(o, "comm_bytes_per_step"));
    expect_int_eq(num(r, "comm_inter_bytes_per_step"), num(o, "replica_bytes_per_step"));
    if (num(o, "nvme_state_bytes") > 0 || num(r0, "nvme_model_state_bytes") > 0) { /* the tier: its file, its I/O a step */
      /* measured: the optimizer phase's reads (records, gradients) and the gathers'; its writes and,
       * zs-membench running one round a step, backward's one write of the gradient shards */
      double mread = num(r0, "nvme_read_bytes") + num(r0, "nvme_param_read_bytes_per_step");
      const cJSON *ng = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r0, "nvme_by_category"), "grads");
      double mwrite = num(r0, "nvme_written_bytes") + num(ng, "current");
      fprintf(stderr, "    nvme: state %.0f (plan %.0f), read %.0f (%.0f), written %.0f (%.0f)\n",
              num(r0, "nvme_model_state_bytes"), num(o, "nvme_state_bytes"), mread, num(o, "disk_read_bytes_per_step"),
              mwrite, num(o, "disk_write_bytes_per_step"));
      expect_int_eq(num(r0, "nvme_model_state_bytes"), num(o, "nvme_state_bytes"));
      expect_int_eq(mread, num(o, "disk_read_bytes_per_step"));
      expect_int_eq(mwrite, num(o, "disk_write_bytes_per_step"));
    }
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(r0, "tp"), *pt = cJSON_GetObjectItemCaseSensitive(d, "tp");
    if (mt) { /* --tp: the part's parameters, the tp traffic and the activations */
      assert_true(cJSON_IsObject(pt));
      fprintf(stderr, "    tp: params %.0f (plan %.0f), tp comm %.0f (%.0f), act/layer %.0f (%.0f)\n", num(mt, "params"),
              num(pt, "params_per_rank"), num(mt, "comm_bytes_per_step"), num(pt, "comm_bytes_per_step"),
              num(mt, "act_bytes_per_layer"), num(pt, "act_bytes_per_layer"));
      expect_int_eq(num(mt, "params"), num(pt, "params_per_rank"));
      expect_int_eq(num(mt, "comm_bytes_per_step"), num(pt, "comm_bytes_per_step"));
      expect_int_eq(num(mt, "act_bytes_per_layer"), num(pt, "act_bytes_per_layer"));
    }
    n++;
  }
  expect_true(n > 0);
  cJSON_Delete(m);
  cJSON_Delete(d);
}

#endif
