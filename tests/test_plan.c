/* zs-plan checked from outside the program.
 *
 *   test_plan ZS-PLAN
 *       the JSON contract, memory and traffic against docs/design.md's formulas in
 *       closed form, and the choices on given inputs (no network, no mpiexec:
 *       zs-plan is one process)
 *   test_plan ZS-PLAN --membench MPIEXEC ZS-MEMBENCH
 *       zs-plan's memory and traffic against zs-membench's measurement at 4 ranks
 *       on this machine (one node), option by option, exactly: model_state_bytes,
 *       host_state_bytes, comm_bytes_per_step and the bytes across the replicas,
 *       flat, hybrid (--shard-group 2), bf16 and the example GPT; ZeRO-Infinity's
 *       options (zs-membench --nvme, --offload-param) also nvme_state_bytes and
 *       the disk's bytes a step (the tier's files under ZS_TEST_NVME_DIR)
 *
 * ZeRO++'s options are checked alike in test_plan_zeropp.c; the helpers of
 * both are plan_check.h.
 *
 * zs-plan or zs-membench exiting 77 (no example GPT in this build) skips that
 * check. scripts/cluster-sim's timing check is tests/scripts/plan_cluster_test.sh. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "plan_check.h"

/* ============================================================================
 * the JSON contract
 * ========================================================================== */


static void test_contract(void) {
  int code;
  cJSON *d = plan_json(UNITS4 " --world 4 --ranks-per-node 2 --device-mem 1 --inter-gbps 1 --intra-gbps 20", &code);
  assert_true(d != NULL);
  expect_int_eq(code, 0);
  expect_int_eq(num(d, "world"), 4);
  expect_int_eq(num(d, "nodes"), 2);
  expect_int_eq(num(d, "params"), 4 << 20);
  const cJSON *opts = cJSON_GetObjectItemCaseSensitive(d, "options"), *o;
  assert_true(cJSON_IsArray(opts));
  /* stage 0; stages 1-3 x flat, hybrid x offload or not; then ZeRO-Infinity's: stages 1-3 x flat,
   * hybrid with the optimizer state on disk, and stage 3 x flat, hybrid with the parameter shards in
   * host memory (the optimizer state there or on disk) or on disk */
  expect_int_eq(cJSON_GetArraySize(opts), 13 + 12);
  const char *nums[] = {"stage", "shard_group", "model_state_bytes", "host_state_bytes", "nvme_state_bytes",
                        "device_peak_bytes", "comm_bytes_per_step", "replica_bytes_per_step",
                        "inter_link_bytes_per_step", "inter_link_wire_bytes_per_step", "intra_bytes_per_step",
                        "comm_s_per_step", "inter_s", "intra_s", "latency_s", "disk_read_bytes_per_step",
                        "disk_write_bytes_per_step", "disk_s", "step_s"};
  int i = 0;
  cJSON_ArrayForEach(o, opts) {
    for (size_t k = 0; k < sizeof nums / sizeof nums[0]; k++) expect_true(num(o, nums[k]) >= 0);
    flag(o, "offload"), flag(o, "fits"), flag(o, "hybrid");
    expect_true(num(o, "comm_s_per_step") > 0);
    expect_true(num(o, "device_peak_bytes") >= num(o, "model_state_bytes"));
    /* the tiers after the others; disk only for them; no limit on the disk: they fit with the tier */
    int tier = str_is(o, "offload_optimizer", "nvme") || str_is(o, "offload_param", "nvme");
    expect_int_eq(tier, i >= 13 && !(str_is(o, "offload_optimizer", "cpu") && str_is(o, "offload_param", "cpu")));
    expect_int_eq(flag(o, "offload"), !str_is(o, "offload_optimizer", "none"));
    expect_int_eq(flag(o, "fits_with_tier"), tier && flag(o, "fits"));
    if (!tier) expect_true(num(o, "nvme_state_bytes") == 0 && num(o, "disk_s") == 0);
    else expect_true(num(o, "nvme_state_bytes") > 0 && num(o, "disk_s") > 0);
    expect_near(num(o, "step_s"), num(o, "comm_s_per_step") + num(o, "disk_s"), 1e-9, 1e-5);
    i++;
  }
  expect_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(d, "nvme_bytes")));
  expect_int_eq(num(d, "disk_bw_read_mbps"), 3000);
  expect_int_eq(num(d, "disk_bw_write_mbps"), 1500);
  /* best: the option at best_index, the fastest that fits */
  int bi = (int)num(d, "best_index");
  const cJSON *best = cJSON_GetObjectItemCaseSensitive(d, "best");
  assert_true(cJSON_IsObject(best) && bi >= 0 && bi < cJSON_GetArraySize(opts));
  const cJSON *at = cJSON_GetArrayItem(opts, bi);
  expect_int_eq(num(best, "stage"), num(at, "stage"));
  expect_int_eq(num(best, "shard_group"), num(at, "shard_group"));
  expect_true(flag(best, "fits"));
  cJSON_ArrayForEach(o, opts) {
    if (flag(o, "fits")) expect_true(num(best, "step_s") <= num(o, "step_s") * 1.01);
  }
  cJSON_Delete(d);
}

/* ============================================================================
 * memory and traffic against the formulas (4 units of 1M fp32: psi = 16 MiB)
 * ========================================================================== */

static void test_formulas(void) {
  int code;
  cJSON *d = plan_json(UNITS4 " --world 4 --ranks-per-node 2 --inter-gbps 1 --intra-gbps 20", &code);
  assert_true(d != NULL);
  const long long P = 4 << 20, psi = 4 * P; /* elements, fp32 bytes */
  const cJSON *s0 = option(d, 0, 4, 0), *f3 = option(d, 3, 4, 0), *h3 = option(d, 3, 2, 0);
  const cJSON *f3o = option(d, 3, 4, 1), *f1 = option(d, 1, 4, 0), *h1 = option(d, 1, 2, 0);
  assert_true(s0 && f3 && h3 && f3o && f1 && h1);
  /* docs/design.md's table, fp32 (the master is the parameter): 16psi, 4P + 12P/N, 16P/N; hybrid at Ns */
  expect_int_eq(num(s0, "model_state_bytes"), 16 * P);
  expect_int_eq(num(f1, "model_state_bytes"), 8 * P + 8 * P / 4);
  expect_int_eq(num(f3, "model_state_bytes"), 16 * P / 4);
  expect_int_eq(num(h3, "model_state_bytes"), 16 * P / 2);
  expect_int_eq(num(h1, "model_state_bytes"), 8 * P + 8 * P / 2);
  expect_int_eq(num(f3o, "model_state_bytes"), 4 * P / 4); /* the parameter shard */
  expect_int_eq(num(f3o, "host_state_bytes"), 16 * P / 4); /* master (none of its own), m, v, grad shard */
  expect_int_eq(num(f3, "host_state_bytes"), 0);
  /* traffic per rank: 2psi(N-1)/N at stage 0 + the ranks' calls compared (step.c: 2 fp64, 16 bytes,
   * all-reduced: 2(N-1)/N x 16); 3psi(N-1)/N + the norm's 2(N-1)/N x 24 bytes (its fp64 total and
   * the calls' two) at stage 3; hybrid 3psi(Ns-1)/Ns + 2 (psi/Ns)(Nr-1)/Nr + the norm over the
   * shard group + the calls' 16 bytes across the replicas */
  expect_int_eq(num(s0, "comm_bytes_per_step"), 2 * psi * 3 / 4 + 24);
  expect_int_eq(num(f1, "comm_bytes_per_step"), 2 * psi * 3 / 4 + 36);
  expect_int_eq(num(f3, "comm_bytes_per_step"), 3 * psi * 3 / 4 + 36);
  expect_int_eq(num(h3, "comm_bytes_per_step"), 3 * psi / 2 + 2 * (psi / 2) / 2 + 24 + 16);
  expect_int_eq(num(h3, "replica_bytes_per_step"), psi / 2 + 16);
  expect_int_eq(num(f3, "replica_bytes_per_step"), 0);
  /* what crosses a host link each way at 2 x 2: the ring's one rank share at stage 0; stage 3's
   * two ring all-gathers 3 blocks of psi/4 each (Open MPI's linear one would put 4), its ring
   * reduce-scatter 3psi/4, the norm's binomial tree 24 bytes (stage 0: the calls' 16); hybrid:
   * both ranks' replica all-reduce of psi/2 and of the calls' 16 bytes */
  expect_int_eq(num(s0, "inter_link_bytes_per_step"), 2 * psi * 3 / 4 + 16);
  expect_int_eq(num(f3, "inter_link_bytes_per_step"), 3 * (psi * 3 / 4) + 24);
  expect_int_eq(num(h3, "inter_link_bytes_per_step"), psi + 2 * 16);
  /* time: the link dominates at 1 Gbit/s: wire bytes x 8 / 1e9 plus a little */
  double wire = num(h3, "inter_link_wire_bytes_per_step");
  expect_true(wire > psi * 1.045 && wire < psi * 1.046);
  expect_true(num(h3, "comm_s_per_step") >= wire * 8 / 1e9);
  expect_true(num(h3, "comm_s_per_step") < wire * 8 / 1e9 * 1.1);
  expect_true(num(f3, "comm_s_per_step") > 2.1 * num(h3, "comm_s_per_step")); /* 9/4 of its link bytes */
  cJSON_Delete(d);
}

/* ============================================================================
 * choices
 * ========================================================================== */

/* One node of 4: 64 MiB of state at stage 0 does not fit in 0.0345 GiB (37 MB),
 * stage 3's 16 MiB plus its transients does; offloading is ruled out by a host
 * memory that holds none of it. */
static void test_fits_only_at_stage3(void) {
  int code;
  cJSON *d = plan_json(UNITS4 " --world 4 --ranks-per-node 4 --device-mem 0.0345 --host-mem 0.01", &code);
  assert_true(d != NULL);
  expect_int_eq(code, 0);
  expect_true(!flag(option(d, 0, 4, 0), "fits"));
  expect_true(!flag(option(d, 2, 4, 0), "fits"));
  expect_true(!flag(option(d, 2, 4, 1), "fits")); /* host memory */
  expect_true(flag(option(d, 3, 4, 0), "fits"));
  const cJSON *b = best_of(d);
  if (b) {
    expect_int_eq(num(b, "stage"), 3);
    expect_true(!flag(b, "offload"));
  }
  cJSON_Delete(d);
  /* nothing fits: exit 3, best null */
  d = plan_json(UNITS4 " --world 4 --ranks-per-node 4 --device-mem 0.001", &code);
  assert_true(d != NULL);
  expect_int_eq(code, 3);
  expect_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(d, "best")));
  cJSON_Delete(d);
  /* why not, in units that show the numbers: a toy model's "0.000 GiB of 0.000" */
  d = plan_json("--units 3007,1000,2500 --world 4 --device-mem 0.00001", &code);
  assert_true(d != NULL);
  const cJSON *why = cJSON_GetObjectItemCaseSensitive(option(d, 1, 4, 0), "why");
  expect_true(cJSON_IsString(why));
  if (cJSON_IsString(why)) expect_str_contains(why->valuestring, " KiB of 10.486");
  cJSON_Delete(d);
}

/* 2 nodes of 4 ranks. A slow network: hybrid (the group a node) keeps gathers
 * and reduce-scatters inside the nodes and wins. A network far faster than the
 * nodes' own links: hybrid still wins, since flat's ring all-gather (the comm
 * spans the nodes) puts 7/8 of the buffer on each rank's link where hybrid's
 * all-gather inside the node puts 3/4; flat wins where hybrid does not fit. */
static void test_hybrid_or_flat(void) {
  int code;
  cJSON *d = plan_json(UNITS4 " --world 8 --ranks-per-node 4 --inter-gbps 1 --intra-gbps 100", &code);
  assert_true(d != NULL);
  const cJSON *b = best_of(d);
  if (b) {
    expect_true(flag(b, "hybrid"));
    expect_int_eq(num(b, "shard_group"), 4);
  }
  cJSON_Delete(d);
  d = plan_json(UNITS4 " --world 8 --ranks-per-node 4 --inter-gbps 10000 --intra-gbps 100 --latency-us 0 "
                "--intra-latency-us 0", &code);
  assert_true(d != NULL);
  b = best_of(d);
  if (b) expect_true(flag(b, "hybrid"));
  cJSON_Delete(d);
  /* 0.022 GiB (23.6 MB): only flat stage 3 with offload (a peak of 20.4 MB) fits; hybrid's
   * (24.1 MB offloaded) and every stage 2's do not; nor, in 0.05 GiB of host memory a node and
   * no disk, hybrid's with its parameter shards in host memory too (a peak of 19.9 MB, but 4 x
   * 16.8 MB of host state) or any option with the NVMe tier */
  d = plan_json(UNITS4 " --world 8 --ranks-per-node 4 --inter-gbps 10000 --intra-gbps 100 --latency-us 0 "
                "--intra-latency-us 0 --device-mem 0.022 --host-mem 0.05 --nvme-bytes 0", &code);
  assert_true(d != NULL);
  b = best_of(d);
  if (b) {
    expect_true(!flag(b, "hybrid"));
    expect_int_eq(num(b, "shard_group"), 8);
    expect_int_eq(num(b, "stage"), 3);
  }
  cJSON_Delete(d);
  /* 2 ranks per node, 1 Gbit/s: docs/planning.md's emulated cluster */
  d = plan_json(UNITS4 " --world 4 --ranks-per-node 2 --inter-gbps 1 --intra-gbps 20", &code);
  assert_true(d != NULL);
  b = best_of(d);
  if (b) expect_true(flag(b, "hybrid"));
  cJSON_Delete(d);
}

/* ZeRO-Infinity. One node of 4 ranks, 4 units of 1M fp32 (S = 2^20 elements a
 * rank, chunks of 4096). 0.025 GiB of device memory holds only stage 3 with the
 * optimizer state off the device (a peak of 24.1 MB) or the parameter shards
 * too (19.9 MB); 0.02 GiB of host memory a node holds none of what offload to
 * host memory puts there (4 ranks x 16S, 0.066 GiB) nor the parameter shards
 * (4S) or their read buffers beside the tier's, but does hold the tier's own
 * buffers (the chunk buffers, the conversion thread's). The one option that
 * fits is flat stage 3 with the optimizer state on disk, marked fitting with
 * the tier; its file (docs/design.md 3.3.1, no field padded) is 2 x (4 + 4 +
 * 4) S + the gradients' 4S = 28S, and a step reads and writes 16S (one
 * region's records, 12S, read and the other's written; the gradient shards
 * written in backward and read by the step), at 3000 and 1500 MB/s; with 2
 * rounds a step the second round reads and writes them again: 20S each way.
 * With the parameter shards on disk too each of a step's two gathers reads the
 * shard (4S). With less disk than the file nothing fits; with room everywhere
 * and a disk fast enough to tie, memory wins over disk. */
static void test_tier(void) {
  int code;
  const char *m = UNITS4 " --world 4 --ranks-per-node 4 --nvme-chunk 4096 --device-mem 0.025";
  char args[512];
  snprintf(args, sizeof args, "%s --host-mem 0.02", m);
  cJSON *d = plan_json(args, &code);
  assert_true(d != NULL);
  expect_int_eq(code, 0);
  const long long S = 4 << 20 >> 2, file = 28 * S, step = 16 * S;
  const cJSON *o;
  int fit = 0;
  cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(d, "options")) {
    int tier = str_is(o, "offload_optimizer", "nvme") || str_is(o, "offload_param", "nvme");
    if (!tier) expect_true(!flag(o, "fits")); /* without the tier nothing fits */
    fit += flag(o, "fits");
  }
  expect_int_eq(fit, 1);
  const cJSON *b = best_of(d);
  if (b) {
    expect_int_eq(num(b, "stage"), 3);
    expect_true(!flag(b, "hybrid"));
    expect_true(str_is(b, "offload_optimizer", "nvme") && str_is(b, "offload_param", "none"));
    expect_true(flag(b, "fits_with_tier"));
    expect_int_eq(num(b, "nvme_state_bytes"), file);
    expect_int_eq(num(b, "host_state_bytes"), 0); /* buffers only (host comm, not model state) */
    expect_int_eq(num(b, "model_state_bytes"), 4 * S); /* the parameter shard */
    expect_int_eq(num(b, "disk_read_bytes_per_step"), step);
    expect_int_eq(num(b, "disk_write_bytes_per_step"), step);
    expect_near(num(b, "disk_s"), step / 3000e6 + step / 1500e6, 1e-9, 0);
    expect_near(num(b, "step_s"), num(b, "comm_s_per_step") + num(b, "disk_s"), 1e-9, 1e-5);
  }
  g_opt = "nvme", g_param = "nvme";
  const cJSON *nn = option(d, 3, 4, 1);
  g_opt = g_param = NULL;
  if (nn) {
    expect_int_eq(num(nn, "nvme_state_bytes"), file); /* fp32: the parameter is the master on disk */
    expect_int_eq(num(nn, "model_state_bytes"), 0);
    expect_int_eq(num(nn, "disk_read_bytes_per_step"), step + 2 * 4 * S);
    expect_int_eq(num(nn, "disk_write_bytes_per_step"), step);
  }
  cJSON_Delete(d);
  /* two rounds a step: the gradient shards written twice, read back once more */
  snprintf(args, sizeof args, "%s --host-mem 0.02 --grad-accum 2", m);
  d = plan_json(args, &code);
  assert_true(d != NULL);
  g_opt = "nvme";
  o = option(d, 3, 4, 1);
  g_opt = NULL;
  if (o) {
    expect_int_eq(num(o, "disk_read_bytes_per_step"), 20 * S);
    expect_int_eq(num(o, "disk_write_bytes_per_step"), 20 * S);
  }
  cJSON_Delete(d);
  /* a disk smaller than the file: nothing fits */
  snprintf(args, sizeof args, "%s --host-mem 0.02 --nvme-bytes 20M", m);
  d = plan_json(args, &code);
  assert_true(d != NULL);
  expect_int_eq(code, 3);
  expect_int_eq(num(d, "nvme_bytes"), 20 << 20);
  g_opt = "nvme";
  o = option(d, 3, 4, 1);
  g_opt = NULL;
  if (o) {
    expect_true(!flag(o, "fits") && !flag(o, "fits_with_tier"));
    const cJSON *why = cJSON_GetObjectItemCaseSensitive(o, "why");
    expect_true(cJSON_IsString(why) && !strncmp(why->valuestring, "disk:", 5));
  }
  cJSON_Delete(d);
  /* 0.02 GiB of device memory: only the parameter shards off the device fit; with host memory for
   * all of them and a disk this fast the disk's time is below 1%: host memory before disk */
  d = plan_json(UNITS4 " --world 4 --ranks-per-node 4 --nvme-chunk 4096 --device-mem 0.02 --host-mem 1 "
                "--disk-bw-read 1e9 --disk-bw-write 1e9", &code);
  assert_true(d != NULL);
  b = best_of(d);
  if (b) {
    expect_int_eq(num(b, "stage"), 3);
    expect_true(str_is(b, "offload_optimizer", "cpu") && str_is(b, "offload_param", "cpu"));
    expect_true(!flag(b, "fits_with_tier"));
    expect_int_eq(num(b, "nvme_state_bytes"), 0);
  }
  g_opt = "nvme", g_param = "nvme";
  o = option(d, 3, 4, 1);
  g_opt = g_param = NULL;
  if (o) expect_true(flag(o, "fits_with_tier"));
  cJSON_Delete(d);
  char cmd[512];
  const char *bad[] = {"--nvme-bytes 12Q", "--nvme-chunk 5000", "--disk-bw-read 0"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(cmd, sizeof cmd, "%s %s %s", plan, m, bad[i]);
    free(run(cmd, &code));
    if (code != 2) ZS_T_REPORT("zs-plan %s: exit %d, want 2 (stderr: %s)", bad[i], code, g_err);
    /* one line that says what is wrong, not the whole usage */
    if (strstr(g_err, "usage:")) ZS_T_REPORT("zs-plan %s: the usage instead of one line (stderr: %s)", bad[i], g_err);
  }
  snprintf(cmd, sizeof cmd, "%s %s --world 4 --bogus 1", plan, UNITS4);
  free(run(cmd, &code));
  expect_str_contains(g_err, "unknown flag '--bogus'");
  snprintf(cmd, sizeof cmd, "%s %s", plan, UNITS4);
  free(run(cmd, &code));
  expect_str_contains(g_err, "give --world N");
}

/* --backend nccl: NCCL's rings for every collective, its defaults (an 8-GPU
 * NVLink node with 8 x 400G NICs) unless a flag is given. 2 nodes x 8: flat
 * stage 3's two gathers and reduce-scatter put 15psi/16 each on a node link,
 * the norm's ring all-reduce of 8 bytes 15 bytes a rank (mpi: its binomial tree,
 * 8 bytes); NVLink carries the other 14 edges of the ring. */
static void test_nccl(void) {
  int code;
  cJSON *n = plan_json(UNITS4 " --world 16 --ranks-per-node 8 --backend nccl", &code);
  cJSON *m = plan_json(UNITS4 " --world 16 --ranks-per-node 8", &code);
  cJSON *g = plan_json(UNITS4 " --world 16 --ranks-per-node 8 --backend nccl --inter-gbps 100 --frame-overhead 1.01", &code);
  assert_true(n && m && g);
  const cJSON *b = cJSON_GetObjectItemCaseSensitive(n, "backend");
  expect_true(cJSON_IsString(b) && !strcmp(b->valuestring, "nccl"));
  b = cJSON_GetObjectItemCaseSensitive(m, "backend");
  expect_true(cJSON_IsString(b) && !strcmp(b->valuestring, "mpi"));
  expect_int_eq(num(n, "inter_gbps"), 3200);
  expect_int_eq(num(n, "intra_gbps"), 3600);
  expect_true(num(n, "frame_overhead") == 1.0);
  expect_int_eq(num(g, "inter_gbps"), 100);
  expect_true(num(g, "frame_overhead") == 1.01);
  const int64_t psi = 4 * 4194304; /* the 4 units' fp32 bytes, 64 x 16 aligned already */
  const cJSON *nf3 = option(n, 3, 16, 0), *mf3 = option(m, 3, 16, 0), *ns0 = option(n, 0, 16, 0);
  assert_true(nf3 && mf3 && ns0);
  /* the norm's 24 bytes (its fp64 total, the ranks' calls compared): nccl's ring 45, mpi's tree 24;
   * stage 0: the calls' 16 bytes alone, 30 over nccl's ring */
  expect_int_eq(num(nf3, "inter_link_bytes_per_step"), 3 * (psi * 15 / 16) + 45);
  expect_int_eq(num(mf3, "inter_link_bytes_per_step"), 3 * (psi * 15 / 16) + 24);
  expect_int_eq(num(ns0, "inter_link_bytes_per_step"), 2 * psi * 15 / 16 + 30);
  /* one all-reduce per unit (4) and the calls' one, each the ring's 2 x 15 rounds at 10 us, after
   * one another, and the bytes over a node link at 3200 Gbit/s: 5 x 2 x 15 x 10 us + 2psi x 15/16
   * / 400 GB/s */
  double want = 5 * 2 * 15 * 10e-6 + 2.0 * psi * 15 / 16 / 400e9;
  expect_true(fabs(num(ns0, "comm_s_per_step") - want) < 0.02 * want);
  cJSON_Delete(n), cJSON_Delete(m), cJSON_Delete(g);
}

static void test_bad_flags(void) {
  int code;
  char cmd[512];
  const char *bad[] = {"--world 4", UNITS4, UNITS4 " --world 6 --ranks-per-node 4", UNITS4 " --world 4 --shard-group 3",
                       UNITS4 " --world 4 --dtype fp64", UNITS4 " --world 4 --bogus 1", "--units 10,-3 --world 2",
                       UNITS4 " --world 4 --backend gloo"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(cmd, sizeof cmd, "%s %s", plan, bad[i]);
    free(run(cmd, &code));
    if (code != 2) ZS_T_REPORT("zs-plan %s: exit %d, want 2 (stderr: %s)", bad[i], code, g_err);
  }
}

/* The example GPT: the trainer's table (120,576 parameters at its defaults). */
static void test_gpt(void) {
  int code;
  cJSON *d = plan_json("--model gpt --world 2", &code);
  if (code == 77) {
    cJSON_Delete(d);
    zs_test_skip("this build has no example GPT");
    return;
  }
  assert_true(d != NULL);
  expect_int_eq(num(d, "params"), 120576);
  expect_int_eq(num(d, "units"), 4);
  cJSON_Delete(d);
}

/* --tp: the data-parallel world is world/tp, one tp rank's part is declared
 * (replicated + split/tp), the tp traffic per step equals the closed form
 * (tp = 2: every all-reduce's bytes divide), its time is in comm_s, and tp groups
 * that would leave a node are refused. */
static void test_tp(void) {
  int code;
  const long long L = 2, C = 64, T = 64, B = 2, N = B * T, rep = T * C + 6 * C * L + 2 * C;
  const char *m = "--model gpt --layers 2 --channels 64 --heads 4 --vocab 256 --seq 64 --world 8 --ranks-per-node 4";
  char args[512];
  snprintf(args, sizeof args, "%s --batch 2", m);
  cJSON *d1 = plan_json(args, &code);
  if (code == 77) {
    cJSON_Delete(d1);
    zs_test_skip("this build has no example GPT");
    return;
  }
  for (int sp = 0; sp <= 1; sp++) {
    snprintf(args, sizeof args, "%s --batch 2 --tp 2%s", m, sp ? " --sequence-parallel" : "");
    cJSON *d = plan_json(args, &code);
    assert_true(d && d1);
    const cJSON *tp = cJSON_GetObjectItemCaseSensitive(d, "tp");
    assert_true(cJSON_IsObject(tp));
    expect_int_eq(num(d, "world"), 8);
    expect_int_eq(num(tp, "size"), 2);
    expect_int_eq(num(tp, "dp_world"), 4);
    expect_int_eq(num(tp, "dp_per_node"), 2);
    expect_int_eq(num(tp, "replicated_params"), rep);
    expect_int_eq(num(tp, "replicated_params") + num(tp, "split_params"), num(d1, "params"));
    expect_int_eq(num(tp, "params_per_rank"), rep + num(tp, "split_params") / 2);
    expect_int_eq(num(d, "params"), num(tp, "params_per_rank"));
    long long comm = sp ? (10 * L + 4) * 2 * N * C + 4 * rep : (4 * L + 2) * 4 * N * C;
    /* + the norm's buffer: its fp64 total and, over 4 data-parallel ranks, two fp64 per tp position
     * comparing the ranks' calls (step.c): 5 fp64 */
    expect_int_eq(num(tp, "comm_bytes_per_step"), comm + 12 * N + 40);
    const long long Nr = sp ? N / 2 : N;
    expect_int_eq(num(tp, "act_bytes_per_layer"), 4 * (4 * Nr * C + 4 * Nr + 12 * N * C / 2 + B * 2 * T * T));
    /* stage 0 holds 16 bytes per parameter of the part (with padding); the
     * flat options are the data-parallel world's */
    const cJSON *o0 = option(d, 0, 4, 0), *w0 = option(d1, 0, 8, 0), *o3 = option(d, 3, 4, 0);
    assert_true(o0 && w0 && o3);
    expect_int_ge(num(o0, "model_state_bytes"), 16 * num(tp, "params_per_rank"));
    expect_true(num(o0, "model_state_bytes") < num(w0, "model_state_bytes"));
    expect_true(num(o3, "tp_s") > 0);
    expect_true(num(o3, "comm_s_per_step") >= num(o3, "tp_s"));
    expect_true(num(o3, "intra_bytes_per_step") >= (double)num(tp, "comm_bytes_per_step"));
    cJSON_Delete(d);
  }
  cJSON_Delete(d1);
  const char *bad[] = {"--tp 8", "--tp 3", "--sequence-parallel"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char cmd[640];
    snprintf(cmd, sizeof cmd, "%s %s %s", plan, m, bad[i]);
    free(run(cmd, &code));
    if (code != 2) ZS_T_REPORT("zs-plan %s: exit %d, want 2 (stderr: %s)", bad[i], code, g_err);
  }
  char cmd[640];
  snprintf(cmd, sizeof cmd, "%s %s --tp 2", plan, UNITS4 " --world 4");
  free(run(cmd, &code));
  if (code != 2) ZS_T_REPORT("zs-plan --units --tp 2: exit %d, want 2 (stderr: %s)", code, g_err);
}

static void test_membench_flat(void) {
  against_membench("--units 1000,3000,517 --stages 0,1,2,3 --offload", "--units 1000,3000,517 --world 4 --ranks-per-node 4", 4, 4);
}

static void test_membench_hybrid(void) {
  against_membench("--units 1000,300000,517 --stages 1,2,3 --offload --shard-group 2",
                   "--units 1000,300000,517 --world 4 --ranks-per-node 2", 2, 4);
}

static void test_membench_bf16(void) {
  against_membench("--units 1000,3000,517 --stages 0,1,2,3 --dtype bf16 --reduce-dtype fp32 --offload",
                   "--units 1000,3000,517 --world 4 --ranks-per-node 4 --dtype bf16 --reduce-dtype fp32", 4, 4);
}

/* int8 states align each parameter to their block (256): the padding, hence the traffic */
static void test_membench_int8(void) {
  against_membench("--units 1000,3000,517 --stages 0,1,2,3 --offload --optim-state int8",
                   "--units 1000,3000,517 --world 4 --ranks-per-node 4 --optim-state int8", 4, 4);
}

static void test_membench_gpt(void) {
  const char *m = "--model gpt --layers 1 --channels 32 --heads 2 --seq 16";
  char a[256], b[256];
  snprintf(a, sizeof a, "%s --stages 0,1,2,3 --no-compute", m);
  snprintf(b, sizeof b, "%s --world 4 --ranks-per-node 4", m);
  against_membench(a, b, 4, 4);
}

/* --tp 2 at 4 ranks (dp 2 x tp 2), with sequence parallelism: memory and dp
 * traffic per option over the data-parallel ranks, tp traffic and activations */
static void test_membench_gpt_tp(void) {
  const char *m = "--model gpt --layers 1 --channels 32 --heads 2 --seq 16 --tp 2 --batch 2 --sequence-parallel";
  char a[256], b[256];
  snprintf(a, sizeof a, "%s --stages 0,1,2,3", m);
  snprintf(b, sizeof b, "%s --world 4 --ranks-per-node 4", m);
  against_membench(a, b, 2, 2);
}

/* ZeRO-Infinity against zs-membench: the optimizer state on disk at stages 1-3,
 * stage 3's parameter shards on disk (flat fp32, chunks of 4096; hybrid bf16)
 * or in host memory (bf16); the example GPT's embedding read a third time. */
static void tier_membench(const char *flags, const char *plan_args, int shard) {
  const char *root = getenv("ZS_TEST_NVME_DIR");
  if (!root) {
    zs_test_skip("ZS_TEST_NVME_DIR (a directory on a disk's file system) not set");
    return;
  }
  char dir[512], a[1024];
  snprintf(dir, sizeof dir, "%s/plan_nvme", root);
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) ZS_T_REPORT("mkdir %s: %s", dir, strerror(errno));
  snprintf(a, sizeof a, "%s --nvme %s", flags, dir);
  against_membench(a, plan_args, shard, 4);
}

static void test_membench_tier(void) {
  tier_membench("--units 1000,300000,517 --stages 1,2,3 --offload --offload-param --nvme-chunk 4096",
                "--units 1000,300000,517 --world 4 --ranks-per-node 4 --nvme-chunk 4096", 4);
  tier_membench("--units 1000,300000,517 --stages 1,2,3 --offload-param --dtype bf16 --shard-group 2",
                "--units 1000,300000,517 --world 4 --ranks-per-node 2 --dtype bf16", 2);
  tier_membench("--model gpt --layers 1 --channels 32 --heads 2 --seq 16 --stages 3 --no-compute --offload-param",
                "--model gpt --layers 1 --channels 32 --heads 2 --seq 16 --world 4 --ranks-per-node 4", 4);
}

static void test_membench_param_cpu(void) {
  against_membench("--units 1000,300000,517 --stages 3 --offload-param --dtype bf16",
                   "--units 1000,300000,517 --world 4 --ranks-per-node 4 --dtype bf16", 4, 4);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_plan ZS-PLAN [--membench MPIEXEC ZS-MEMBENCH]\n");
    return 2;
  }
  plan = argv[1];
  if (argc >= 5 && !strcmp(argv[2], "--membench")) {
    mpiexec = argv[3], membench = argv[4];
    zs_test_run(test_membench_flat);
    zs_test_run(test_membench_hybrid);
    zs_test_run(test_membench_bf16);
    zs_test_run(test_membench_gpt);
    zs_test_run(test_membench_gpt_tp);
    zs_test_run(test_membench_int8);
    zs_test_run(test_membench_param_cpu);
    zs_test_run(test_membench_tier);
    return zs_test_finish();
  }
  zs_test_run(test_contract);
  zs_test_run(test_formulas);
  zs_test_run(test_tp);
  zs_test_run(test_fits_only_at_stage3);
  zs_test_run(test_hybrid_or_flat);
  zs_test_run(test_tier);
  zs_test_run(test_bad_flags);
  zs_test_run(test_nccl);
  zs_test_run(test_gpt);
  return zs_test_finish();
}
