/* zs-membench's JSON document, checked from outside the program.
 *
 *   test_membench MPIEXEC ZS-MEMBENCH RANKS [zs-membench flags...]
 *
 * Launches `MPIEXEC -n RANKS --oversubscribe ZS-MEMBENCH flags --json`, parses
 * stdout and checks the contract: the keys, one entry per rank, the
 * measured model-state bytes equal to the formula on every rank and at every
 * stage (device and host), the categories adding up, offload moving state to the
 * host, and the formula itself against docs/design.md's table in closed form from
 * padded_params (P; S = P / ranks): fp32 16P, 8P+8S, 4P+12S, 16S; bf16 16P,
 * 4P+12S, 2P+14S, 16S; offload device 2pbP, pbP, pbS and host 16S. Traffic: with
 * --units every byte sent is ZeRO's (no extra); one rank sends nothing.
 * zs-membench exiting 77 (the GPT or a device missing in this build) is a skip. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "harness.h"

static int nranks, dpr, units_model; /* dpr: the data-parallel ranks (nranks / --tp) */
/* --frozen: units holding parameters only; the whole-model closed forms below
 * do not apply; measured == zs-membench's per-unit formula and traffic ==
 * its theory still do (test_engine_frozen checks the engine's own per kind) */
static int frozen;
static cJSON *doc;

static long long num(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsNumber(v)) {
    ZS_T_REPORT("key \"%s\" missing or not a number", key);
    return -1;
  }
  return (long long)v->valuedouble;
}

static const cJSON *item(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v) ZS_T_REPORT("key \"%s\" missing", key);
  return v;
}

static void test_top_level(void) {
  const cJSON *model = item(doc, "model"), *dt = item(doc, "param_dtype"), *res = item(doc, "results");
  assert_true(cJSON_IsString(model) && cJSON_IsString(dt) && cJSON_IsArray(res));
  expect_true(!strcmp(model->valuestring, units_model ? "units" : "gpt"));
  expect_int_eq(num(doc, "world"), nranks);
  expect_true(num(doc, "params") > 0);
  expect_int_ge(num(doc, "padded_params"), num(doc, "params"));
  expect_int_eq(num(doc, "padded_params") % (64 * dpr), 0);
  expect_true(cJSON_GetArraySize(res) > 0);
  expect_true(cJSON_IsTrue(item(doc, "ok")));
}

/* docs/design.md's table per stage in closed form (pb == rb). */
static void table(int stage, int offload, int delayed, long long pb, long long P, long long S, long long *dev,
                  long long *host) {
  if (offload) {
    *dev = stage == 1 ? 2 * pb * P : stage == 2 ? pb * P : pb * S;
    /* delayed update: a second fp32 grad shard, and 16-bit param copies */
    *host = 16 * S + (delayed ? 4 * S + (pb == 4 ? 0 : pb * S) : 0);
    return;
  }
  *host = 0;
  long long opt = (pb == 4 ? 8 : 12);
  switch (stage) {
  case 0: *dev = 16 * P; break;
  case 1: *dev = 2 * pb * P + opt * S; break;
  case 2: *dev = pb * P + (pb + opt) * S; break;
  default: *dev = 16 * S; break;
  }
}

static void test_results(void) {
  const cJSON *res = cJSON_GetObjectItemCaseSensitive(doc, "results");
  const char *pdt = cJSON_GetObjectItemCaseSensitive(doc, "param_dtype")->valuestring;
  const cJSON *rdt = cJSON_GetObjectItemCaseSensitive(doc, "reduce_dtype");
  long long pb = !strcmp(pdt, "bf16") ? 2 : 4;
  int same_dtypes = cJSON_IsString(rdt) && !strcmp(rdt->valuestring, pdt) && !frozen;
  const char *cats[] = {"params", "grads", "optimizer", "gather", "comm", "other"};
  const cJSON *r;
  cJSON_ArrayForEach(r, res) {
    int stage = (int)num(r, "stage");
    /* hybrid sharding: a rank holds what it would in a flat layout of shard_group ranks */
    long long ns = num(r, "shard_group");
    expect_true(ns >= 1 && ns <= dpr && dpr % ns == 0);
    long long P = 0, S;
    if (ns == dpr) P = num(doc, "padded_params");
    else P = num(r, "padded_shard_params");
    S = P / ns;
    double inter = cJSON_GetObjectItemCaseSensitive(r, "comm_inter_bytes_per_step")->valuedouble;
    long long inter_theory = num(r, "comm_inter_theory_bytes");
    if (ns == dpr) expect_true(inter == 0 && inter_theory == 0);
    else if (units_model) {
      expect_near(inter, (double)inter_theory, 0, 0);
      /* 2 (psi/Ns)(Nr-1)/Nr in the reduce dtype: psi/Ns elements cross per step */
      long long nr = dpr / ns, rbb = same_dtypes ? pb : 4;
      if (!frozen) expect_int_eq(inter_theory, 2 * (nr - 1) * S * rbb / nr);
    }
    const cJSON *off = item(r, "offload"), *ranks = item(r, "ranks");
    assert_true(cJSON_IsBool(off) && cJSON_IsArray(ranks));
    int offload = cJSON_IsTrue(off), delayed = cJSON_IsTrue(item(r, "delayed"));
    expect_true(cJSON_IsBool(item(r, "delayed")));
    expect_true(!delayed || offload);
    expect_true(stage >= 0 && stage <= 3);
    expect_true(!(offload && stage == 0));
    expect_true(cJSON_GetObjectItemCaseSensitive(r, "step_s")->valuedouble > 0);
    /* steady state: nothing from or to the backend, no device-wide sync in a step */
    expect_true(cJSON_IsNumber(item(r, "host_waits_per_step")));
    if (num(doc, "steps") > 1) {
      expect_int_eq(num(r, "backend_allocs_per_step"), 0);
      expect_int_eq(num(r, "backend_frees_per_step"), 0);
      expect_int_eq(num(r, "device_syncs_per_step"), 0);
    }
    double comm = cJSON_GetObjectItemCaseSensitive(r, "comm_bytes_per_step")->valuedouble;
    long long theory = num(r, "comm_theory_bytes"), norm = num(r, "comm_norm_bytes");
    if (dpr == 1) expect_true(comm == 0);
    if (units_model) expect_near(comm, (double)(theory + norm), 0, 0);
    else expect_true(comm >= (double)(theory + norm));
    if (same_dtypes) /* 2psi (N-1)/N, 3psi (N-1)/N at stage 3, in the shard group; plus what crosses */
      expect_int_eq(theory - inter_theory, (stage == 3 ? 3 : 2) * (ns - 1) * P * pb / ns);
    long long want_dev, want_host;
    table(stage, offload, delayed, pb, P, S, &want_dev, &want_host);
    assert_int_eq(cJSON_GetArraySize(ranks), nranks);
    int k = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, ranks) {
      long long ms = num(x, "model_state_bytes"), hms = num(x, "host_model_state_bytes");
      expect_int_eq(num(x, "rank"), k);
      if (ms != num(x, "formula_bytes") || hms != num(x, "host_formula_bytes"))
        ZS_T_REPORT("stage %d offload %d rank %d: measured %lld/%lld (device/host) vs formula %lld/%lld", stage,
                    offload, k, ms, hms, num(x, "formula_bytes"), num(x, "host_formula_bytes"));
      if (same_dtypes) {
        expect_int_eq(num(x, "formula_bytes"), want_dev);
        expect_int_eq(num(x, "host_formula_bytes"), want_host);
      }
      if (offload) expect_true(hms > 0);
      else expect_int_eq(hms, 0);
      expect_int_ge(num(x, "peak_bytes"), ms);
      const cJSON *bc = item(x, "by_category"), *hbc = item(x, "host_by_category");
      assert_true(cJSON_IsObject(bc) && cJSON_IsObject(hbc));
      long long sum = 0, hsum = 0;
      for (int c = 0; c < 6; c++) {
        const cJSON *cat = item(bc, cats[c]), *hcat = item(hbc, cats[c]);
        assert_true(cJSON_IsObject(cat) && cJSON_IsObject(hcat));
        expect_int_ge(num(cat, "peak"), num(cat, "current"));
        if (c < 3) {
          sum += num(cat, "current"), hsum += num(hcat, "current");
          expect_int_eq(num(cat, "current"), num(cat, "formula")); /* per category too */
          expect_int_eq(num(hcat, "current"), num(hcat, "formula"));
        }
      }
      expect_int_eq(sum, ms);
      expect_int_eq(hsum, hms);
      expect_int_eq(num(item(bc, "gather"), "current"), 0); /* nothing gathered between steps */
      k++;
    }
  }
}

/* --tp: every rank's parameters, activations and tp traffic equal the formulas
 * zs-membench prints beside them, and those equal closed forms computed here
 * from the model's flags (tp = 2, where every all-reduce's bytes divide):
 *   params = replicated + split/tp, replicated = wpe + 6C per layer + lnf's 2C;
 *   act/layer = 4 (4 Nr C + 4 Nr + 12 N C/tp + B NH/tp T^2), Nr = N (N/tp with sp);
 *   tp comm/step = 2(t-1)/t x 4NC x (4L+2) plain, (t-1)/t x 4NC x (10L+4) + the
 *   replicated gradients' all-reduce with sp; + the cross-entropy's 3 floats a
 *   token and the norm's one, all-reduced. */
static void test_tp(void) {
  const cJSON *tp = cJSON_GetObjectItemCaseSensitive(doc, "tp");
  if (!tp) return;
  const cJSON *mc = item(doc, "model_config");
  const long long t = num(tp, "size"), B = num(tp, "batch"), L = num(mc, "layers"), C = num(mc, "channels");
  const long long H = num(mc, "heads"), V = num(mc, "vocab"), T = num(mc, "seq"), N = B * T;
  const int sp = cJSON_IsTrue(item(tp, "sequence_parallel"));
  const long long rep = T * C + 6 * C * L + 2 * C, split = num(tp, "split_params");
  expect_int_eq(num(tp, "replicated_params"), rep);
  expect_int_eq(num(tp, "params_per_rank_formula"), rep + (split - V * C) / t + (V + t - 1) / t * C);
  if (V % t == 0) expect_int_eq(num(tp, "params_per_rank_formula"), rep + split / t);
  const long long Nr = sp ? N / t : N, act = 4 * (4 * Nr * C + 4 * Nr + 12 * N * C / t + B * (H / t) * T * T);
  long long X = 4 * N * C, comm = sp ? (t - 1) * X / t * (10 * L + 4) + 2 * (t - 1) * 4 * rep / t
                                     : 2 * (t - 1) * X / t * (4 * L + 2);
  comm += 2 * (t - 1) * (12 * N + 4) / t;
  const cJSON *r;
  cJSON_ArrayForEach(r, item(doc, "results")) {
    const cJSON *x;
    cJSON_ArrayForEach(x, item(r, "ranks")) {
      const cJSON *q = item(x, "tp");
      assert_true(cJSON_IsObject(q));
      expect_int_eq(num(q, "params"), num(q, "params_formula"));
      expect_int_eq(num(q, "params_formula"), num(tp, "params_per_rank_formula"));
      expect_int_eq(num(q, "param_bytes"), num(q, "param_bytes_formula"));
      expect_int_eq(num(q, "act_bytes_per_layer"), num(q, "act_bytes_per_layer_formula"));
      expect_int_eq(num(q, "act_bytes_per_layer_formula"), act);
      expect_int_eq(num(q, "comm_bytes_per_step"), num(q, "comm_theory_bytes"));
      if (t == 2) expect_int_eq(num(q, "comm_theory_bytes"), comm);
      const cJSON *k = item(q, "comm_by_kind");
      expect_int_eq(num(k, "all_reduce") + num(k, "all_gather") + num(k, "reduce_scatter"), num(q, "comm_bytes_per_step"));
      if (!sp) expect_int_eq(num(k, "all_gather") + num(k, "reduce_scatter"), 0);
    }
  }
}

static char *run(int argc, char **argv, int *code) {
  size_t cap = 4096, len = 0;
  char *cmd = malloc(cap);
  len += (size_t)snprintf(cmd + len, cap - len, "'%s' -n %d --oversubscribe '%s'", argv[1], nranks, argv[2]);
  for (int i = 4; i < argc; i++) len += (size_t)snprintf(cmd + len, cap - len, " '%s'", argv[i]);
  snprintf(cmd + len, cap - len, " --json");
  fprintf(stderr, "running: %s\n", cmd);
  FILE *p = popen(cmd, "r");
  free(cmd);
  if (!p) return NULL;
  size_t n = 0, ocap = 1 << 16;
  char *out = malloc(ocap);
  for (size_t got; (got = fread(out + n, 1, ocap - n - 1, p)) > 0;) {
    n += got;
    if (ocap - n < 1024) out = realloc(out, ocap *= 2);
  }
  out[n] = 0;
  int st = pclose(p);
  *code = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  return out;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: test_membench MPIEXEC ZS-MEMBENCH RANKS [flags...]\n");
    return 2;
  }
  zs_t_rank = 0;
  nranks = atoi(argv[3]);
  for (int i = 4; i < argc; i++) units_model |= !strcmp(argv[i], "--units"), frozen |= !strcmp(argv[i], "--frozen");
  int code = 0;
  char *out = run(argc, argv, &code);
  if (!out) {
    fprintf(stderr, "cannot run %s\n", argv[1]);
    return 1;
  }
  if (code == ZS_SKIP_CODE) ZS_SKIP("zs-membench cannot run this here (see its message above)");
  if (code != 0) fprintf(stderr, "zs-membench exited %d\n", code);
  const char *end = NULL;
  doc = cJSON_ParseWithOpts(out, &end, 1); /* exactly one document (only rank 0 prints) */
  if (!doc) {
    fprintf(stderr, "stdout is not one JSON document:\n%s\n", out);
    return 1;
  }
  dpr = nranks;
  {
    const cJSON *tpo = cJSON_GetObjectItemCaseSensitive(doc, "tp");
    if (tpo) dpr = nranks / (int)num(tpo, "size");
  }
  zs_test_run(test_top_level);
  zs_test_run(test_results);
  zs_test_run(test_tp);
  cJSON_Delete(doc);
  free(out);
  int rc = zs_test_finish();
  return code ? 1 : rc;
}
