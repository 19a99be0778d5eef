/* zs-bench-ps: the parameter server (zeroshard/ps.h) against ring all-reduce
 * (the library's zs_comm_all_reduce), measured on the ranks of one mpiexec.
 *
 *   mpiexec -n N zs-bench-ps [--psi FLOATS] [--steps K] [--servers S] [--compute-ms X]
 *                            [--straggler-ms Y] [--staleness T] [--runs ring,sync,async] [--json]
 *
 * Three runs of K steps over a psi-float fp32 model: ring (all N ranks compute
 * and all-reduce), PS sync and PS async (S servers, W = N - S workers). A
 * step's "compute" is a sleep of X ms (so that ranks sharing a few cores do not
 * fight over them: what is measured is communication and waiting), and with
 * --straggler-ms the last worker (ring: the last rank) sleeps Y ms more.
 * Reported per run: bytes sent and received per step by the busiest rank,
 * counted by zs_comm_stats, beside the formulas (ring: 2 (N-1)/N x 4 psi each
 * way; PS: a server 4 psi W / S each way, a worker 4 psi); mean step time;
 * each worker's steps/s (PS: over its first K-1 steps, since the last pull
 * waits for every worker: it carries the final parameters); and for async the
 * staleness histogram. --runs picks some of the three (in that order; default
 * all), so that a run's traffic can be measured alone, e.g. on the links of
 * scripts/cluster-sim (scripts/ps-cluster). Exit 1 if a
 * count differs from its formula. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"
#include "zeroshard/comm.h"
#include "zeroshard/ps.h"

typedef struct {
  long psi;
  int steps, servers, staleness, json, runs; /* runs: bit 0 ring, 1 sync, 2 async */
  double compute_ms, straggler_ms;
} opts_t;

typedef struct {
  const char *name;
  uint64_t busiest_sent, busiest_recv, formula_each_way; /* per step */
  double step_s;                                         /* mean over the slowest rank's steps */
  double sps[256];                                       /* per worker (ring: per rank) */
  int workers;
  int64_t hist[ZS_PS_HIST_BINS], stale_max;
} result_t;

static void nap_ms(double ms) {
  if (ms <= 0) return;
  struct timespec ts = {(time_t)(ms / 1000), (long)((ms - 1000.0 * (long)(ms / 1000)) * 1e6)};
  nanosleep(&ts, NULL);
}

/* Every rank's (sent, recv, time) per step to rank 0; the busiest by sent + recv. */
static int gather(zs_comm_t *w, result_t *r, uint64_t sent, uint64_t recv, double secs, int first_worker,
                  const opts_t *o, int timed_steps) {
  int n = zs_comm_size(w), me = zs_comm_rank(w);
  double mine[3] = {(double)sent, (double)recv, secs}, *all = calloc((size_t)n * 3, sizeof(double));
  if (!all || zs_comm_all_gather(w, mine, all, 3 * sizeof(double), ZS_UINT8, NULL) != ZS_OK) return -1;
  double best = -1, slow = 0;
  for (int k = 0; k < n; k++) {
    double b = all[3 * k] + all[3 * k + 1];
    if (b > best) best = b, r->busiest_sent = (uint64_t)all[3 * k] / o->steps, r->busiest_recv = (uint64_t)all[3 * k + 1] / o->steps;
    if (k >= first_worker) {
      r->sps[k - first_worker] = all[3 * k + 2] > 0 ? timed_steps / all[3 * k + 2] : 0;
      slow = all[3 * k + 2] > slow ? all[3 * k + 2] : slow;
    }
  }
  r->workers = n - first_worker;
  r->step_s = slow / timed_steps;
  (void)me;
  free(all);
  return 0;
}

static int run_ring(zs_comm_t *world, const opts_t *o, result_t *r) {
  const int N = zs_comm_size(world), me = zs_comm_rank(world);
  float *g = calloc((size_t)o->psi, sizeof(float));
  zs_comm_t *c = NULL;
  if (!g || zs_comm_split(world, 0, me, &c) != ZS_OK) return -1;
  zs_comm_stats_reset(c);
  double t0 = zs__now();
  for (int s = 0; s < o->steps; s++) {
    nap_ms(o->compute_ms + (me == N - 1 ? o->straggler_ms : 0));
    if (zs_comm_all_reduce(c, g, g, (size_t)o->psi, ZS_FP32, ZS_SUM, NULL) != ZS_OK) return -1;
  }
  double secs = zs__now() - t0;
  zs_comm_stats_t st;
  zs_comm_stats(c, &st);
  r->name = "ring all-reduce";
  r->formula_each_way = 2ull * (uint64_t)(N - 1) * 4ull * (uint64_t)o->psi / (uint64_t)N;
  int rc = gather(world, r, st.bytes_sent[ZS_COLL_ALL_REDUCE], st.bytes_recv[ZS_COLL_ALL_REDUCE], secs, 0, o, o->steps);
  zs_comm_destroy(c);
  free(g);
  return rc;
}

static int run_ps(zs_comm_t *world, const opts_t *o, zs_ps_mode_t mode, result_t *r) {
  const int N = zs_comm_size(world), S = o->servers, W = N - S;
  float *p = calloc((size_t)o->psi, sizeof(float)), *g = calloc((size_t)o->psi, sizeof(float));
  zs_ps_config_t c = ZS_PS_CONFIG_INIT;
  c.servers = S, c.mode = mode, c.steps = o->steps, c.count = o->psi;
  c.staleness = mode == ZS_PS_ASYNC ? (o->staleness >= 0 ? o->staleness : o->steps) : 0;
  zs_ps_t *ps = NULL;
  if (!p || !g || zs_ps_create(&ps, &c, world, p) != ZS_OK) {
    fprintf(stderr, "zs_ps_create: %s\n", zs_last_error());
    return -1;
  }
  double t0 = zs__now(), secs = 0;
  zs_status_t st = ZS_OK;
  if (zs_ps_role(ps) == ZS_PS_SERVER) {
    st = zs_ps_serve(ps);
  } else {
    for (int s = 0; st == ZS_OK && s < o->steps; s++) {
      /* the last pull waits for every worker (it carries the final parameters):
       * a worker's own pace is its first steps - 1 steps */
      if (s == o->steps - 1) secs = zs__now() - t0;
      nap_ms(o->compute_ms + (zs_ps_index(ps) == W - 1 ? o->straggler_ms : 0));
      for (long i = 0; i < o->psi; i += 4096) g[i] = 1e-3f; /* a gradient worth applying */
      st = zs_ps_push_pull(ps, g, p);
    }
  }
  if (zs_ps_role(ps) == ZS_PS_SERVER || o->steps == 1) secs = zs__now() - t0;
  if (st != ZS_OK) {
    fprintf(stderr, "%s\n", zs_ps_last_error(ps));
    return -1;
  }
  zs_ps_stats_t ps_st;
  zs_ps_stats(ps, &ps_st);
  r->name = mode == ZS_PS_SYNC ? "PS sync" : "PS async";
  /* the busiest rank: the server with the largest shard (ceil(psi / S)), or a
   * worker (4 psi) when there are more servers than workers */
  uint64_t srv = 4ull * (uint64_t)W * (uint64_t)((o->psi + S - 1) / S), wrk = 4ull * (uint64_t)o->psi;
  r->formula_each_way = srv > wrk ? srv : wrk;
  memcpy(r->hist, ps_st.hist, sizeof r->hist); /* rank 0 is server 0 */
  r->stale_max = ps_st.staleness_max;
  int rc = gather(world, r, ps_st.bytes_sent, ps_st.bytes_recv, secs, S, o, o->steps > 1 ? o->steps - 1 : 1);
  zs_ps_destroy(ps);
  free(p), free(g);
  return rc;
}

static void print_table(const opts_t *o, int N, result_t *rs, int n) {
  printf("N = %d ranks (PS: %d server(s) + %d workers), psi = %ld floats (%.1f MiB), %d steps, compute %.0f ms, "
         "straggler +%.0f ms\n", N, o->servers, N - o->servers, o->psi, 4.0 * o->psi / 1048576.0, o->steps,
         o->compute_ms, o->straggler_ms);
  printf("| run | busiest rank sent/step (MiB) | recv/step (MiB) | formula each way (MiB) | step (ms) | worker steps/s |\n");
  printf("| --- | --- | --- | --- | --- | --- |\n");
  for (int k = 0; k < n; k++) {
    result_t *r = &rs[k];
    printf("| %s | %.3f | %.3f | %.3f | %.1f | ", r->name, r->busiest_sent / 1048576.0, r->busiest_recv / 1048576.0,
           r->formula_each_way / 1048576.0, 1e3 * r->step_s);
    for (int w = 0; w < r->workers; w++) printf("%s%.2f", w ? " " : "", r->sps[w]);
    printf(" |\n");
  }
  result_t *a = &rs[n - 1];
  if (strcmp(a->name, "PS async")) return;
  printf("PS async staleness histogram (updates behind: count):");
  for (int b = 0; b <= a->stale_max && b < ZS_PS_HIST_BINS; b++) printf(" %d:%lld", b, (long long)a->hist[b]);
  printf("\n");
}

static void print_json(const opts_t *o, int N, result_t *rs, int n) {
  printf("{\"ranks\": %d, \"servers\": %d, \"psi\": %ld, \"steps\": %d, \"compute_ms\": %g, \"straggler_ms\": %g, "
         "\"runs\": [", N, o->servers, o->psi, o->steps, o->compute_ms, o->straggler_ms);
  for (int k = 0; k < n; k++) {
    result_t *r = &rs[k];
    printf("%s{\"name\": \"%s\", \"busiest_sent\": %llu, \"busiest_recv\": %llu, \"formula_each_way\": %llu, "
           "\"step_s\": %.6g, \"worker_steps_per_s\": [", k ? ", " : "", r->name, (unsigned long long)r->busiest_sent,
           (unsigned long long)r->busiest_recv, (unsigned long long)r->formula_each_way, r->step_s);
    for (int w = 0; w < r->workers; w++) printf("%s%.6g", w ? ", " : "", r->sps[w]);
    printf("], \"staleness_hist\": [");
    for (int b = 0; b <= r->stale_max && b < ZS_PS_HIST_BINS; b++) printf("%s%lld", b ? ", " : "", (long long)r->hist[b]);
    printf("]}");
  }
  printf("]}\n");
}

int main(int argc, char **argv) {
  opts_t o = {.psi = 1 << 20, .steps = 20, .servers = 1, .staleness = -1, .compute_ms = 20, .straggler_ms = 0, .runs = 7};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--json")) o.json = 1;
    else if (!strcmp(a, "--psi") && v) o.psi = atol(v), i++;
    else if (!strcmp(a, "--steps") && v) o.steps = atoi(v), i++;
    else if (!strcmp(a, "--servers") && v) o.servers = atoi(v), i++;
    else if (!strcmp(a, "--staleness") && v) o.staleness = atoi(v), i++;
    else if (!strcmp(a, "--compute-ms") && v) o.compute_ms = atof(v), i++;
    else if (!strcmp(a, "--straggler-ms") && v) o.straggler_ms = atof(v), i++;
    else if (!strcmp(a, "--runs") && v) {
      o.runs = 0, i++;
      for (const char *q = v; *q;) {
        size_t l = strcspn(q, ",");
        if (l == 4 && !strncmp(q, "ring", 4)) o.runs |= 1;
        else if (l == 4 && !strncmp(q, "sync", 4)) o.runs |= 2;
        else if (l == 5 && !strncmp(q, "async", 5)) o.runs |= 4;
        else o.runs = -1;
        if (o.runs < 0) break;
        q += l + (q[l] == ',');
      }
      if (o.runs <= 0) {
        fprintf(stderr, "zs-bench-ps: --runs takes ring, sync, async, comma-separated\n");
        return 2;
      }
    } else {
      fprintf(stderr, "usage: mpiexec -n N zs-bench-ps [--psi FLOATS] [--steps K] [--servers S] [--compute-ms X] "
                      "[--straggler-ms Y] [--staleness T] [--runs ring,sync,async] [--json]\n");
      return 2;
    }
  }
  zs_device_t *dev;
  zs_comm_t *world;
  if (zs_device_create_cpu(&dev) != ZS_OK || zs_comm_create_mpi_world(&world, dev) != ZS_OK) {
    fprintf(stderr, "setup failed: %s\n", zs_last_error());
    return 1;
  }
  const int N = zs_comm_size(world), me = zs_comm_rank(world);
  if (N < 2 || o.servers < 1 || o.servers >= N || o.psi < o.servers || o.steps < 1 || N - o.servers > 256) {
    if (me == 0) fprintf(stderr, "zs-bench-ps: needs 2+ ranks, 1 <= servers < ranks, psi >= servers, steps >= 1\n");
    zs_comm_destroy(world);
    zs_device_destroy(dev);
    return 2;
  }
  result_t rs[3];
  memset(rs, 0, sizeof rs);
  int n = 0, rc = 0;
  if (!rc && (o.runs & 1)) rc = run_ring(world, &o, &rs[n++]);
  if (!rc && (o.runs & 2)) rc = run_ps(world, &o, ZS_PS_SYNC, &rs[n++]);
  if (!rc && (o.runs & 4)) rc = run_ps(world, &o, ZS_PS_ASYNC, &rs[n++]);
  int bad = 0;
  if (!rc && me == 0) {
    for (int k = 0; k < n; k++)
      if (rs[k].busiest_sent != rs[k].formula_each_way || rs[k].busiest_recv != rs[k].formula_each_way) {
        fprintf(stderr, "%s: busiest rank moved %llu / %llu bytes per step, the formula says %llu\n", rs[k].name,
                (unsigned long long)rs[k].busiest_sent, (unsigned long long)rs[k].busiest_recv,
                (unsigned long long)rs[k].formula_each_way);
        bad = 1;
      }
    if (o.json) print_json(&o, N, rs, n);
    else print_table(&o, N, rs, n);
  }
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return rc ? 1 : bad;
}
