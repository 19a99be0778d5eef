/* zs-plan's ZeRO++ options checked from outside the program (plan_check.h's
 * helpers, as test_plan).
 *
 *   test_plan_zeropp ZS-PLAN
 *       --quantized-weights, --hpz and --quantized-grads: their options' bytes
 *       in closed form, which of them is picked
 *   test_plan_zeropp ZS-PLAN --membench MPIEXEC ZS-MEMBENCH
 *       their memory and traffic against zs-membench's measurement at 4 ranks,
 *       option by option, exactly: quantized weights (hybrid stage 3, with and
 *       without offload), hpZ (flat stage 3, partitions of 2), qgZ (flat stages
 *       2-3, groups of 2, with and without offload; int8 and int4; hybrid, shard
 *       groups of 2), and
 *       zs-membench's bytes inside and across (emulated) nodes in closed form */
#include <math.h>

#include "harness.h"
#include "plan_check.h"

/* --quantized-weights: stage 3 also with int8 gathers (ZeRO++'s qwZ). Its
 * comm bytes are the exact option's with each gather's P x 4 bytes replaced by
 * the packed shards, N x (4 x S/256 + S) (S = P/N); on 1 Gbit/s between 2
 * nodes of 4, with only flat stage 3 with offload fitting exactly (0.022 GiB,
 * 0.05 GiB of host memory a node, no disk: test_hybrid_or_flat), its quantized
 * twin fits as well (the packed shards of one gather, 1.06 MB, on top of 20.4
 * MB) and is picked; where the network is fast enough that the saving is below
 * 1%, the exact option is. */
static void test_quantized_weights(void) {
  int code;
  cJSON *d = plan_json(UNITS4 " --world 8 --ranks-per-node 4 --inter-gbps 1 --intra-gbps 100 --device-mem 0.022 "
                       "--host-mem 0.05 --nvme-bytes 0 --quantized-weights", &code);
  assert_true(d != NULL);
  const int64_t P = 1048576, N = 8, S = P / N, packed = N * (4 * (S / 256) + S);
  const cJSON *exact = option(d, 3, 8, 1);
  g_qw = 1;
  const cJSON *q = option(d, 3, 8, 1);
  g_qw = 0;
  assert_true(exact && q);
  /* per unit: two gathers, each (N-1)/N of the gathered bytes */
  int64_t saved = 4 * 2 * ((N - 1) * P * 4 / N - (N - 1) * packed / N);
  expect_int_eq(num(exact, "comm_bytes_per_step") - num(q, "comm_bytes_per_step"), saved);
  expect_true(num(q, "inter_link_bytes_per_step") < num(exact, "inter_link_bytes_per_step"));
  expect_int_eq(num(q, "device_peak_bytes") - num(exact, "device_peak_bytes"), packed);
  expect_true(flag(q, "fits"));
  const cJSON *b = best_of(d);
  if (b) {
    expect_int_eq(num(b, "stage"), 3);
    expect_true(flag(b, "quantized_weights"));
  }
  cJSON_Delete(d);
  d = plan_json(UNITS4 " --world 8 --ranks-per-node 4 --inter-gbps 100000 --intra-gbps 100000 --latency-us 0 "
                "--intra-latency-us 0 --device-mem 0.022 --quantized-weights=64 --compute-s 8", &code);
  assert_true(d != NULL);
  b = best_of(d);
  if (b) {
    expect_int_eq(num(b, "stage"), 3);
    expect_true(!flag(b, "quantized_weights"));
  }
  cJSON_Delete(d);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "%s " UNITS4 " --world 8 --ranks-per-node 4 --quantized-weights=48", plan);
  free(run(cmd, &code));
  expect_int_eq(code, 2);
  expect_str_contains(g_err, "power of two");
}

/* --hpz 4 at 2 nodes of 4 (flat stage 3, backward's gathers inside the node):
 * per unit of P = 1M fp32 two gathers become one over the 8 ranks and one over
 * the 4 of a node, (K-1)/K P 4 bytes, so the comm bytes are forward's gather
 * and the reduce-scatter at 7/8 P 4 each plus 3/4 P 4, with the norm's 14; the
 * busiest node link carries only forward's gather and the reduce-scatter; the
 * device state gains P 4 / 4 a unit. With --quantized-weights too, the
 * combined option is listed. */
static void test_hpz(void) {
  int code;
  cJSON *d = plan_json(UNITS4 " --world 8 --ranks-per-node 4 --inter-gbps 1 --intra-gbps 100 --hpz 4 "
                       "--quantized-weights", &code);
  assert_true(d != NULL);
  const int64_t P = 1048576 * 4;
  const cJSON *flat = option(d, 3, 8, 0);
  g_hpz = 4;
  const cJSON *h = option(d, 3, 8, 0);
  g_qw = 1;
  const cJSON *hq = option(d, 3, 8, 0);
  g_qw = g_hpz = 0;
  assert_true(flat && h && hq);
  /* + the norm's 3 fp64 (its total, the ranks' calls compared: step.c), 2 x 7/8 x 24 on the ring */
  expect_int_eq(num(h, "comm_bytes_per_step"), 4 * (2 * (P * 7 / 8) + P * 3 / 4) + 42);
  expect_int_eq(num(h, "inter_link_bytes_per_step"), 4 * 2 * (P * 7 / 8) + 24);
  expect_int_eq(num(flat, "inter_link_bytes_per_step"), 4 * 3 * (P * 7 / 8) + 24);
  expect_int_eq(num(h, "model_state_bytes") - num(flat, "model_state_bytes"), 4 * P / 4);
  expect_true(num(hq, "inter_link_bytes_per_step") < num(h, "inter_link_bytes_per_step"));
  cJSON_Delete(d);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "%s " UNITS4 " --world 8 --ranks-per-node 4 --hpz 3", plan);
  free(run(cmd, &code));
  expect_int_eq(code, 2);
  expect_str_contains(g_err, "--hpz");
}

/* --quantized-grads at 2 nodes of 4 (K = 4, G = 2): flat stage 3's
 * reduce-scatter of each 1M fp32 unit becomes an all-to-all of G packed
 * shards to each of the 3 others in the node and one of a packed shard to the
 * other node: 3 x 2Q + 1 x Q bytes a rank (Q = 4 x 512 + 131072), the
 * gathers as before; with all three options the busiest node link carries
 * less than a fifth of flat stage 3's. */
static void test_quantized_grads(void) {
  int code;
  cJSON *d = plan_json(UNITS4 " --world 8 --ranks-per-node 4 --inter-gbps 1 --quantized-grads --quantized-weights "
                       "--hpz 4", &code);
  assert_true(d != NULL);
  const int64_t P = 1048576 * 4, S = 1048576 / 8, Q = 4 * (S / 256) + S;
  const cJSON *flat = option(d, 3, 8, 0);
  g_qg = 1;
  const cJSON *q = option(d, 3, 8, 0);
  g_qw = 1, g_hpz = 4;
  const cJSON *all = option(d, 3, 8, 0);
  g_qg = g_qw = g_hpz = 0;
  assert_true(flat && q && all);
  expect_int_eq(num(flat, "comm_bytes_per_step") - num(q, "comm_bytes_per_step"), 4 * (P * 7 / 8 - (3 * 2 * Q + Q)));
  expect_true(num(all, "inter_link_bytes_per_step") < 0.2 * num(flat, "inter_link_bytes_per_step"));
  /* the device peak holds G = N / K shards of node sums (qgrad.c): at one rank a
   * node (K = 1, G = 8) 6 shards of S fp32 more than at 4 (K = 4, G = 2); the
   * plan's engine was given no group and counted G = 8 at every node size */
  cJSON *d1 = plan_json(UNITS4 " --world 8 --ranks-per-node 1 --inter-gbps 1 --quantized-grads", &code);
  assert_true(d1 != NULL);
  g_qg = 1;
  const cJSON *q1 = option(d1, 3, 8, 0);
  g_qg = 0;
  assert_true(q1 != NULL);
  expect_int_eq(num(q1, "device_peak_bytes") - num(q, "device_peak_bytes"), (8 - 2) * S * 4);
  cJSON_Delete(d1);
  cJSON_Delete(d);
}

static void test_membench_qw(void) {
  g_qw = 1;
  against_membench("--units 1000,300000,517 --stages 3 --offload --shard-group 2 --quantized-weights",
                   "--units 1000,300000,517 --world 4 --ranks-per-node 2 --quantized-weights", 2, 4);
  g_qw = 0;
}

static void test_membench_hpz(void) {
  g_hpz = 2;
  against_membench("--units 1000,300000,517 --stages 3 --offload --hpz 2", "--units 1000,300000,517 --world 4 "
                   "--ranks-per-node 2 --hpz 2", 4, 4);
  g_hpz = 0;
}

static void test_membench_qg(void) {
  g_qg = 1;
  against_membench("--units 1000,300000,517 --stages 2,3 --quantized-grads 8 --quantized-grads-group 2",
                   "--units 1000,300000,517 --world 4 --ranks-per-node 2 --quantized-grads", 4, 4);
  against_membench("--units 1000,300000,517 --stages 2,3 --quantized-grads 4 --quantized-grads-group 2",
                   "--units 1000,300000,517 --world 4 --ranks-per-node 2 --quantized-grads=4", 4, 4);
  /* with the optimizer offloaded: the same bytes, the host's state */
  against_membench("--units 1000,300000,517 --stages 2,3 --offload --quantized-grads 8 --quantized-grads-group 2",
                   "--units 1000,300000,517 --world 4 --ranks-per-node 2 --quantized-grads", 4, 4);
  /* hybrid, shard groups of 2 with qgZ groups of 1 (the cross all-to-all inside each shard group) */
  against_membench("--units 1000,300000,517 --stages 2,3 --shard-group 2 --quantized-grads 8 --quantized-grads-group 1",
                   "--units 1000,300000,517 --world 4 --ranks-per-node 1 --shard-group 2 --quantized-grads", 2, 4);
  g_qg = 0;
}

/* zs-membench's bytes inside a node and across nodes (the comm groups that
 * carry them, membench_links.c) at 4 ranks in 2 emulated nodes of 2
 * (--ranks-per-node 2), in closed form: units of P = 64Ki and 128Ki fp32
 * elements (no padding; S = P/4; a packed shard Q = 4 S/256 + S).
 *   flat, qgZ (groups of 2 = a node), hpZ 2, qwZ, stages 2-3 with and without
 *   offload: inside the node qgZ's first all-to-all, (K-1) G sum Q, and at
 *   stage 3 hpZ's backward gathers, (K-1)/K sum P 4; across, the world comm's
 *   regather (stage 2: 3/4 sum P 4) or forward's int8 gathers (stage 3: 3 sum
 *   Q) with the norm's 12, and qgZ's cross all-to-all, (G-1) sum Q;
 *   int4 codes: Q = 4 S/256 + S/2;
 *   hybrid (shard groups of 2 = a node), stages 1-3 with offload: the shard
 *   group's traffic inside (stages 1-2: 1/2 sum P 4 twice, stage 3 three
 *   times, and the norm's 8), the replica all-reduce across, 2 (1/2) sum S' 4
 *   (S' = P/2);
 *   the same hybrid run on one node (MPI's: 4 ranks here) has nothing across.
 * Every result: intra + inter = the comm bytes, each measured = its theory. */
static cJSON *membench_json(const char *flags) {
  char cmd[1024];
  int code;
  snprintf(cmd, sizeof cmd, "%s -n 4 --oversubscribe %s --units 65536,131072 %s --steps 2 --json", mpiexec, membench,
           flags);
  char *out = run(cmd, &code);
  cJSON *m = out && code == 0 ? cJSON_Parse(out) : NULL;
  if (!m) ZS_T_REPORT("zs-membench %s: no JSON (exit %d; stderr: %s)", flags, code, g_err);
  free(out);
  return m;
}

static void links_of(const cJSON *r, double *intra, double *inter) {
  *intra = num(r, "comm_bytes_intra"), *inter = num(r, "comm_bytes_inter");
  expect_int_eq(*intra, num(r, "comm_bytes_intra_theory"));
  expect_int_eq(*inter, num(r, "comm_bytes_inter_theory"));
  expect_int_eq(*intra + *inter, num(r, "comm_bytes_per_step"));
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(r, "comm_bytes_inter_formula");
  expect_true(cJSON_IsString(f) && strlen(f->valuestring) > 0);
}

static void test_membench_links(void) {
  const int64_t P = 65536 + 131072, S1 = 65536 / 4, S2 = 131072 / 4;
  for (int bits = 8; bits >= 4; bits -= 4) {
    char flags[256];
    snprintf(flags, sizeof flags, "--stages 2,3 --offload --ranks-per-node 2 --quantized-grads %d "
             "--quantized-grads-group 2 --hpz 2 --quantized-weights", bits);
    cJSON *m = membench_json(flags);
    assert_true(m != NULL);
    const int64_t Q = 4 * (S1 + S2) / 256 + (bits == 8 ? S1 + S2 : (S1 + S2) / 2), Qw = 4 * (S1 + S2) / 256 + S1 + S2;
    int n = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(m, "results")) {
      int stage = (int)num(r, "stage");
      double intra, inter;
      links_of(r, &intra, &inter);
      expect_int_eq(num(r, "ranks_per_node"), 2);
      fprintf(stderr, "  int%d stage %d offload %d: intra %.0f, inter %.0f bytes a step\n", bits, stage,
              flag(r, "offload"), intra, inter);
      expect_int_eq(intra, 1 * 2 * Q + (stage == 3 ? P * 4 / 2 : 0));
      expect_int_eq(inter, (stage == 3 ? 3 * Qw : 3 * P * 4 / 4) + 36 + 1 * Q); /* the norm: 3 fp64 */
      n++;
    }
    expect_int_eq(n, 4);
    cJSON_Delete(m);
  }
  for (int rpn = 2; rpn <= 4; rpn += 2) {
    char flags[160];
    snprintf(flags, sizeof flags, "--stages 1,2,3 --offload --shard-group 2%s", rpn == 2 ? " --ranks-per-node 2" : "");
    cJSON *m = membench_json(flags);
    assert_true(m != NULL);
    const cJSON *r;
    int n = 0;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(m, "results")) {
      int stage = (int)num(r, "stage");
      double intra, inter;
      links_of(r, &intra, &inter);
      expect_int_eq(num(r, "ranks_per_node"), rpn);
      /* the norm's 3 fp64 in the shard group, the calls' 2 across the replicas (step.c) */
      int64_t shard = (stage == 3 ? 3 : 2) * P * 4 / 2 + 24, replica = 2 * (P / 2) * 4 / 2 + 16;
      fprintf(stderr, "  hybrid, %d a node, stage %d offload %d: intra %.0f, inter %.0f bytes a step\n", rpn, stage,
              flag(r, "offload"), intra, inter);
      expect_int_eq(intra, rpn == 2 ? shard : shard + replica);
      expect_int_eq(inter, rpn == 2 ? replica : 0);
      n++;
    }
    expect_int_eq(n, 6);
    cJSON_Delete(m);
  }
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_plan_zeropp ZS-PLAN [--membench MPIEXEC ZS-MEMBENCH]\n");
    return 2;
  }
  plan = argv[1];
  if (argc >= 5 && !strcmp(argv[2], "--membench")) {
    mpiexec = argv[3], membench = argv[4];
    zs_test_run(test_membench_qw);
    zs_test_run(test_membench_hpz);
    zs_test_run(test_membench_qg);
    zs_test_run(test_membench_links);
    return zs_test_finish();
  }
  zs_test_run(test_quantized_weights);
  zs_test_run(test_hpz);
  zs_test_run(test_quantized_grads);
  return zs_test_finish();
}
