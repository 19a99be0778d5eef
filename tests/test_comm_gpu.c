/* The comm checks of test_comm_checks.h over NCCL on cuda devices, one GPU per
 * rank, plus wrapping a NCCL comm the caller made and the nccl comm's trace
 * events (test_trace); then the same checks over the mpi comm on cuda devices
 * (host staging; ranks may share a GPU). Skips (77) without a GPU or in a
 * build without NCCL. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <unistd.h>

#include "gpu_start.h"
#ifdef ZS_HAVE_NCCL
#include "test_comm_checks.h"
#include "trace/trace_impl.h" // defines: zs__trace_label

/* A comm from an ncclComm_t we made ourselves: the wrapper leaves it to us. */
static void test_from(void) {
  ncclUniqueId id;
  if (E.rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t nc;
  assert_int_eq(ncclCommInitRank(&nc, E.size, id, E.rank), ncclSuccess);
  zs_comm_t *c = NULL;
  assert_ok(zs_comm_create_nccl_from(&c, E.dev, nc));
  expect_true(!strcmp(zs_comm_backend(c), "nccl"));
  expect_int_eq(zs_comm_rank(c), E.rank);
  expect_int_eq(zs_comm_size(c), E.size);
  int32_t h = E.rank + 1, g = 0, *d = tc_dalloc(4);
  tc_h2d(d, &h, 4);
  expect_ok(zs_comm_all_reduce(c, d, d, 1, ZS_INT32, ZS_SUM, NULL));
  tc_d2h(&g, d, 4);
  expect_int_eq(g, E.size * (E.size + 1) / 2);
  tc_dfree(d, 4);
  zs_comm_destroy(c);
  expect_int_eq(ncclCommDestroy(nc), ncclSuccess);
}

/* ---- the nccl comm's trace events ------------------------------------------------------ */

typedef struct {
  char name[64], kind[32];
  long long ts, dur, sent, recv;
  int pid, tid, ranks;
} tev_t;

static long long num(const cJSON *obj, const char *key) { /* -1 when absent */
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  return cJSON_IsNumber(v) ? (long long)v->valuedouble : -1;
}
static void str(char *dst, size_t n, const cJSON *obj, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  snprintf(dst, n, "%s", cJSON_IsString(v) ? v->valuestring : "");
}

/* The "comm" events of trace file `path`, in file order, into ev[0..max-1];
 * their count (all of them, also past max), or -1 if the file cannot be read
 * or an event line is not valid JSON. The writer puts one event a line, as
 * zs-trace reads them. */
static int read_comm_events(const char *path, tev_t *ev, int max) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[2048];
  int n = 0;
  while (n >= 0 && fgets(line, sizeof line, f)) {
    size_t len = strcspn(line, "\n");
    if (len && line[len - 1] == ',') len--;
    line[len] = '\0';
    if (line[0] != '{' || !strcmp(line, "{\"traceEvents\":[")) continue; /* the opening line */
    cJSON *e = cJSON_Parse(line);
    char cat[16];
    str(cat, sizeof cat, e, "cat");
    if (!e) n = -1;
    else if (!strcmp(cat, "comm") && n++ < max) {
      tev_t *t = &ev[n - 1];
      const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
      str(t->name, sizeof t->name, e, "name");
      str(t->kind, sizeof t->kind, args, "kind");
      t->ts = num(e, "ts"), t->dur = num(e, "dur"), t->pid = (int)num(e, "pid"), t->tid = (int)num(e, "tid");
      t->sent = num(args, "bytes_sent"), t->recv = num(args, "bytes_recv"), t->ranks = (int)num(args, "ranks");
    }
    cJSON_Delete(e);
  }
  fclose(f);
  return n;
}

/* With tracing on, the nccl comm's calls are "comm" events at their GPU times:
 * an all_reduce of 1001 fp32 under a layer's label and an all_gather of 100
 * bf16 a rank under its kind's name, on a comm split off for the check (its
 * destroy waits for the watchdog's events). FILE.rank<r> holds exactly those
 * two, in order, with comm.h's bytes, durations >= 0, starts inside the window
 * of the calls and ends at most 1 ms past it (the watchdog may place a time up
 * to a poll of the reference event late, never early). */
static void test_trace(void) {
  int N = E.size;
  zs_comm_t *c = NULL;
  assert_ok(zs_comm_split(E.comm, 0, E.rank, &c));
  char file[96], path[112];
  snprintf(file, sizeof file, "/tmp/zs_test_comm_gpu.%d.trace", (int)getpid());
  snprintf(path, sizeof path, "%s.rank%d", file, E.rank);
  size_t bytes = 4004 > 200 * (size_t)N ? 4004 : 200 * (size_t)N;
  uint8_t *d1 = tc_dalloc(bytes), *d2 = tc_dalloc(bytes);
  expect_ok(zs_trace_start(file));
  int64_t t0 = zs_trace_now_us();
  zs__trace_label("grad 3");
  expect_ok(zs_comm_all_reduce(c, d1, d2, 1001, ZS_FP32, ZS_SUM, NULL));
  expect_ok(zs_comm_all_gather(c, d1, d2, 100, ZS_BF16, NULL));
  expect_ok(zs_stream_synchronize(E.dev, NULL));
  int64_t t1 = zs_trace_now_us();
  zs_comm_destroy(c); /* the watchdog has recorded both */
  expect_ok(zs_trace_stop());
  tc_dfree(d1, bytes), tc_dfree(d2, bytes);

  tev_t ev[4];
  int n = read_comm_events(path, ev, 4);
  remove(path);
  expect_int_eq(n, 2);
  if (n != 2) return;
  const char *name[2] = {"grad 3", "all_gather"}, *kind[2] = {"all_reduce", "all_gather"};
  long long each[2] = {(long long)(4004ull * 2 * (unsigned)(N - 1) / (unsigned)N), 200ll * (N - 1)};
  for (int k = 0; k < 2; k++) {
    const tev_t *e = &ev[k];
    if (strcmp(e->name, name[k]) || strcmp(e->kind, kind[k]))
      ZS_T_REPORT("comm event %d is '%s' (%s), wanted '%s' (%s)", k, e->name, e->kind, name[k], kind[k]);
    expect_int_eq(e->tid, 2);
    expect_int_eq(e->pid, E.rank);
    expect_int_eq(e->ranks, N);
    expect_int_eq(e->sent, each[k]);
    expect_int_eq(e->recv, each[k]);
    expect_int_ge(e->dur, 0);
    expect_int_ge(e->ts, t0);
    expect_int_le(e->ts, t1);
    expect_int_le(e->ts + e->dur, t1 + 1000);
  }
  expect_int_le(ev[0].ts + ev[0].dur, ev[1].ts); /* one stream: the all_gather's work follows the all_reduce's */
}

static char nccl_skip_why[160];
static void nccl_checks(void) { zs_test_skip(nccl_skip_why); }
#endif

int main(int argc, char **argv) {
#ifndef ZS_HAVE_NCCL
  gpu_rank_from_env();
  (void)argc, (void)argv, (void)zs_t_failed_checks;
  ZS_SKIP("build without NCCL");
#else
  gpu_start_t g = gpu_start(&argc, &argv);
  E = (tc_env_t){.dev = g.dev, .rank = g.rank, .size = g.size, .approx_avg = 1};
  char why[120];
  zs_comm_t *comm = gpu_comm_nccl(&g, why, sizeof why);
  if (comm) {
    E.comm = comm;
    expect_true(!strcmp(zs_comm_backend(comm), "nccl"));
    tc_run_all();
    zs_test_run(test_from);
    zs_test_run(test_trace);
    zs_comm_destroy(comm);
  } else {
    snprintf(nccl_skip_why, sizeof nccl_skip_why, "%s (the mpi comm's checks below still run)", why);
    zs_test_run(nccl_checks);
  }
  /* the mpi comm on cuda devices: device buffers through pinned host staging
   * (ranks may share a GPU) */
  zs_comm_t *mc = gpu_comm_mpi(&g);
  E.comm = mc;
  E.approx_avg = 0; /* MPI averages on the host, like the cpu path */
  int failed = zs_t_tests_failed;
  tc_run_all();
  if (zs_t_tests_failed > failed) fprintf(stderr, "[rank %d] (the failures above are on the staged mpi comm)\n", g.rank);
  zs_comm_destroy(mc);
  return gpu_finish(&g);
#endif
}
