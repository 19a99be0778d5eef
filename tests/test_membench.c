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
 * --units every byte sent is ZeRO's (no extra; with the NVMe tier its commit's
 * all-reduce); one rank sends nothing.
 * ZeRO-Infinity's runs (--offload-param, --nvme DIR): the accountant's nvme
 * domain equals the tier's formula on every rank, by category, and so does the
 * tier file's size (the engine's figure and stat's); runs without a tier have
 * none; with the optimizer on disk the device holds what offload leaves it and
 * the host no model state (the fp32 gradient shard is on disk too), or with
 * parameter offload to the host the parameter shard; in closed form
 * (docs/design.md 3.3, 3.3.1; fp32 states, every unit's shard a multiple of
 * 2048 elements, so that no field is padded): the file 2 x (4 + 2 x 4) S + 4S
 * = 28S, + 2 x 2S = 4S with bf16 parameters on disk (fp32 ones are the
 * master); a step's optimizer phase reads one region's records and the
 * gradients and writes the other region's records; parameter offload to the
 * host without the tier: device 0, host 16S (fp32: the parameters are the
 * master) or 18S (bf16). A run with --nvme DIR makes DIR and leaves no tier
 * file in it.
 * zs-membench exiting 77 (the GPT or a device missing in this build) is a skip. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "harness.h"

static int nranks, dpr, units_model; /* dpr: the data-parallel ranks (nranks / --tp) */
/* --frozen: units holding parameters only; the whole-model closed forms below
 * do not apply; measured == zs-membench's per-unit formula and traffic ==
 * its theory still do (test_engine_frozen checks the engine's own per kind) */
static int frozen;
/* --nvme DIR (NULL without), --offload-param, --optim-state given (the closed
 * forms below are fp32 states') */
static const char *nvme_dir;
static int offload_param, compact_states;
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

/* Where a run keeps the optimizer state and the parameter shards (JSON's
 * "offload_optimizer", "offload_param"). */
enum { W_NONE = 0, W_CPU, W_NVME };
static int where(const cJSON *r, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, key);
  if (!cJSON_IsString(v)) {
    ZS_T_REPORT("key \"%s\" missing or not a string", key);
    return -1;
  }
  return !strcmp(v->valuestring, "nvme") ? W_NVME : !strcmp(v->valuestring, "cpu") ? W_CPU : W_NONE;
}

/* docs/design.md's table per stage in closed form (pb == rb); opt, par: where
 * the optimizer state and stage 3's parameter shards are (W_*); *nvme: the
 * tier's file when no field of it is padded (fp32 states). */
static void table(int stage, int opt, int par, int delayed, long long pb, long long P, long long S, long long *dev,
                  long long *host, long long *nvme) {
  *nvme = 0;
  if (opt == W_NVME) { /* master, m, v on disk (twice: the two regions), the fp32 grad shard (once) */
    *dev = stage == 1 ? 2 * pb * P : stage == 2 ? pb * P : par == W_NONE ? pb * S : 0;
    *host = par == W_CPU ? pb * S : 0;
    *nvme = 24 * S + 4 * S + (par == W_NVME && pb != 4 ? 2 * pb * S : 0);
    return;
  }
  if (opt == W_CPU && par == W_CPU) { /* fp32 parameters in host memory are their own master */
    *dev = 0;
    *host = pb * S + 4 * S + (pb == 4 ? 0 : 4 * S) + 8 * S;
    return;
  }
  if (opt == W_CPU) {
    *dev = stage == 1 ? 2 * pb * P : stage == 2 ? pb * P : pb * S;
    /* delayed update: a second fp32 grad shard, and 16-bit param copies */
    *host = 16 * S + (delayed ? 4 * S + (pb == 4 ? 0 : pb * S) : 0);
    return;
  }
  *host = 0;
  long long c = (pb == 4 ? 8 : 12);
  switch (stage) {
  case 0: *dev = 16 * P; break;
  case 1: *dev = 2 * pb * P + c * S; break;
  case 2: *dev = pb * P + (pb + c) * S; break;
  default: *dev = 16 * S; break;
  }
}

/* The tier's closed form holds: --units, fp32 states, nothing frozen, and
 * every unit's shard at ns ranks (each unit 64-aligned, padded to 64 x ns) a
 * multiple of 2048 elements, so that no field of a record (4n, 4n, 4n, 2n
 * bytes; chunks of a multiple of 4096 elements) is padded. */
static int tier_exact(long long ns) {
  if (!units_model || frozen || compact_states) return 0;
  const cJSON *u;
  cJSON_ArrayForEach(u, item(doc, "units")) {
    long long n = (long long)u->valuedouble, q = 64 * ns;
    n = (n + 63) / 64 * 64;
    if ((n + q - 1) / q * q / ns % 2048) return 0;
  }
  return 1;
}

static void test_results(void) {
  const cJSON *res = cJSON_GetObjectItemCaseSensitive(doc, "results");
  const char *pdt = cJSON_GetObjectItemCaseSensitive(doc, "param_dtype")->valuestring;
  const cJSON *rdt = cJSON_GetObjectItemCaseSensitive(doc, "reduce_dtype");
  long long pb = !strcmp(pdt, "bf16") ? 2 : 4;
  int same_dtypes = cJSON_IsString(rdt) && !strcmp(rdt->valuestring, pdt) && !frozen;
  const char *cats[] = {"params", "grads", "optimizer", "gather", "comm", "other"};
  const cJSON *r;
  int tier_runs = 0;
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
      /* 2 (psi/Ns)(Nr-1)/Nr in the reduce dtype: psi/Ns elements cross per step, */
      long long nr = dpr / ns, rbb = same_dtypes ? pb : 4;
      /* and zs_step's two fp64 comparing the ranks' calls across the replicas (step.c) */
      if (!frozen) expect_int_eq(inter_theory, 2 * (nr - 1) * S * rbb / nr + 2 * (nr - 1) * 16 / nr);
    }
    const cJSON *off = item(r, "offload"), *ranks = item(r, "ranks");
    assert_true(cJSON_IsBool(off) && cJSON_IsArray(ranks));
    int offload = cJSON_IsTrue(off), delayed = cJSON_IsTrue(item(r, "delayed"));
    expect_true(cJSON_IsBool(item(r, "delayed")));
    expect_true(!delayed || offload);
    expect_true(stage >= 0 && stage <= 3);
    expect_true(!(offload && stage == 0));
    /* ZeRO-Infinity: where the optimizer state and the parameter shards were */
    const int opt = where(r, "offload_optimizer"), par = where(r, "offload_param");
    const int tier = opt == W_NVME || par == W_NVME;
    tier_runs += tier;
    expect_int_eq(opt != W_NONE, offload);
    expect_true(par == W_NONE || (stage == 3 && opt != W_NONE && !delayed));
    expect_true(!tier || nvme_dir); /* a tier only with --nvme, and with it at stages 1-3 */
    if (nvme_dir && stage > 0 && opt == W_NVME) expect_int_eq(par, stage == 3 && offload_param ? W_NVME : W_NONE);
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
    long long agree = num(r, "comm_agree_bytes"); /* the tier's commit: one int64 all-reduced */
    expect_int_eq(agree, tier ? 2 * (2 * (dpr - 1) * 8 / dpr) : 0); /* two a step: data arrived, chunks written */
    if (dpr == 1) expect_true(comm == 0);
    if (units_model) expect_near(comm, (double)(theory + norm + agree), 0, 0);
    else expect_true(comm >= (double)(theory + norm + agree));
    if (same_dtypes) /* 2psi (N-1)/N, 3psi (N-1)/N at stage 3, in the shard group; plus what crosses */
      expect_int_eq(theory - inter_theory, (stage == 3 ? 3 : 2) * (ns - 1) * P * pb / ns);
    long long want_dev, want_host, want_nvme;
    table(stage, opt, par, delayed, pb, P, S, &want_dev, &want_host, &want_nvme);
    const int exact = tier && tier_exact(ns);
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
      /* the tier: the accountant's nvme domain, the formula and the file, one figure */
      long long nms = num(x, "nvme_model_state_bytes");
      if (nms != num(x, "nvme_formula_bytes") || nms != num(x, "nvme_file_bytes") ||
          nms != num(x, "nvme_file_stat_bytes"))
        ZS_T_REPORT("stage %d offload %s/%s rank %d: nvme measured %lld vs formula %lld, file %lld (stat %lld)", stage,
                    opt == W_NVME ? "nvme" : opt == W_CPU ? "cpu" : "none",
                    par == W_NVME ? "nvme" : par == W_CPU ? "cpu" : "none", k, nms, num(x, "nvme_formula_bytes"),
                    num(x, "nvme_file_bytes"), num(x, "nvme_file_stat_bytes"));
      if (tier) expect_true(nms > 0);
      else expect_int_eq(nms, 0);
      if (exact) expect_int_eq(num(x, "nvme_formula_bytes"), want_nvme);
      if (tier) { /* a step reads one region's records and the gradients, writes the other region's records */
        const long long g = num(item(item(x, "nvme_by_category"), "grads"), "current");
        expect_int_eq(num(x, "nvme_read_bytes"), num(x, "nvme_written_bytes") + g);
        if (opt == W_NVME && !frozen) expect_int_eq(2 * num(x, "nvme_written_bytes") + g, nms);
      }
      if (par == W_NVME)
        expect_true(cJSON_GetObjectItemCaseSensitive(x, "nvme_param_read_bytes_per_step")->valuedouble > 0);
      if (opt == W_CPU || par == W_CPU) expect_true(hms > 0);
      else expect_int_eq(hms, 0); /* none offloaded, or everything offloaded on disk */
      expect_int_ge(num(x, "peak_bytes"), ms);
      const cJSON *bc = item(x, "by_category"), *hbc = item(x, "host_by_category"), *nbc = item(x, "nvme_by_category");
      assert_true(cJSON_IsObject(bc) && cJSON_IsObject(hbc) && cJSON_IsObject(nbc));
      long long sum = 0, hsum = 0, nsum = 0;
      for (int c = 0; c < 6; c++) {
        const cJSON *cat = item(bc, cats[c]), *hcat = item(hbc, cats[c]), *ncat = item(nbc, cats[c]);
        assert_true(cJSON_IsObject(cat) && cJSON_IsObject(hcat) && cJSON_IsObject(ncat));
        expect_int_ge(num(cat, "peak"), num(cat, "current"));
        if (c < 3) {
          sum += num(cat, "current"), hsum += num(hcat, "current"), nsum += num(ncat, "current");
          expect_int_eq(num(cat, "current"), num(cat, "formula")); /* per category too */
          expect_int_eq(num(hcat, "current"), num(hcat, "formula"));
          expect_int_eq(num(ncat, "current"), num(ncat, "formula"));
        } else {
          expect_int_eq(num(ncat, "current"), 0); /* the file holds model state only */
        }
      }
      expect_int_eq(sum, ms);
      expect_int_eq(hsum, hms);
      expect_int_eq(nsum, nms);
      /* bf16 parameters on disk: their own field; fp32 ones are the master's */
      if (par == W_NVME && opt == W_NVME)
        expect_true((num(item(nbc, "params"), "current") > 0) == (pb != 4 || frozen));
      expect_int_eq(num(item(bc, "gather"), "current"), 0); /* nothing gathered between steps */
      k++;
    }
  }
  if (nvme_dir) expect_true(tier_runs > 0);
}

/* --nvme DIR: made before the run (the tier wants an existing directory), and
 * every rank's file gone after it (the engine removes it at destroy). */
static void make_nvme_dir(void) {
  if (mkdir(nvme_dir, 0755) != 0 && errno != EEXIST) fprintf(stderr, "mkdir %s: %s\n", nvme_dir, strerror(errno));
}

static void test_tier_files_removed(void) {
  if (!nvme_dir) return;
  DIR *d = opendir(nvme_dir);
  assert_true(d != NULL);
  for (struct dirent *e; (e = readdir(d));) {
    size_t n = strlen(e->d_name);
    if (n > 5 && !strcmp(e->d_name + n - 5, ".tier")) ZS_T_REPORT("%s/%s left behind", nvme_dir, e->d_name);
  }
  closedir(d);
}

/* --tp: every rank's parameters, activations and tp traffic equal the formulas
 * zs-membench prints beside them, and those equal closed forms computed here
 * from the model's flags (tp = 2, where every all-reduce's bytes divide):
 *   params = replicated + split/tp, replicated = wpe + 6C per layer + lnf's 2C;
 *   act/layer = 4 (4 Nr C + 4 Nr + 12 N C/tp + B NH/tp T^2), Nr = N (N/tp with sp);
 *   tp comm/step = 2(t-1)/t x 4NC x (4L+2) plain, (t-1)/t x 4NC x (10L+4) + the
 *   replicated gradients' all-reduce with sp; + the cross-entropy's 3 floats a
 *   token and the norm's buffer (1 + 2 tp fp64 with more than one data-parallel
 *   rank: step.c compares the ranks' calls in it), all-reduced. */
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
  /* the norm's buffer: its fp64 total and, with more than one data-parallel
   * rank, two fp64 per tp position comparing the ranks' calls (step.c) */
  const long long K = num(doc, "world") / t > 1 ? 1 + 2 * t : 1;
  comm += 2 * (t - 1) * (12 * N + 8 * K) / t;
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
  for (int i = 4; i < argc; i++) {
    units_model |= !strcmp(argv[i], "--units"), frozen |= !strcmp(argv[i], "--frozen");
    offload_param |= !strcmp(argv[i], "--offload-param"), compact_states |= !strcmp(argv[i], "--optim-state");
    if (!strcmp(argv[i], "--nvme") && i + 1 < argc) nvme_dir = argv[i + 1];
  }
  if (nvme_dir) make_nvme_dir();
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
  zs_test_run(test_tier_files_removed);
  cJSON_Delete(doc);
  free(out);
  int rc = zs_test_finish();
  return code ? 1 : rc;
}
