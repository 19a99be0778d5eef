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
 *       2-3, groups of 2; int8 and int4; hybrid, shard groups of 2) */
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
 * and the reduce-scatter at 7/8 P 4 each plus 3/4 P 4, with the norm's 7; the
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
  expect_int_eq(num(h, "comm_bytes_per_step"), 4 * (2 * (P * 7 / 8) + P * 3 / 4) + 7);
  expect_int_eq(num(h, "inter_link_bytes_per_step"), 4 * 2 * (P * 7 / 8) + 4);
  expect_int_eq(num(flat, "inter_link_bytes_per_step"), 4 * 3 * (P * 7 / 8) + 4);
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
  /* hybrid, shard groups of 2 with qgZ groups of 1 (the cross all-to-all inside each shard group) */
  against_membench("--units 1000,300000,517 --stages 2,3 --shard-group 2 --quantized-grads 8 --quantized-grads-group 1",
                   "--units 1000,300000,517 --world 4 --ranks-per-node 1 --shard-group 2 --quantized-grads", 2, 4);
  g_qg = 0;
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
    return zs_test_finish();
  }
  zs_test_run(test_quantized_weights);
  zs_test_run(test_hpz);
  zs_test_run(test_quantized_grads);
  return zs_test_finish();
}
