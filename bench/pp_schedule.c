/* zs-bench-pp-schedule: the pipeline schedules measured by the simulator
 * (zeroshard/pipeline.h), beside the theory.
 *
 * usage: zs-bench-pp-schedule [--p 2,4,8] [--m 1,2,4,8,16,32] [--v 2,4]
 *                             [--cost F:B] [--latency L] [--json]
 *
 * For each p and m: GPipe, 1F1B and, where m is a multiple of p, interleaved
 * with each v. A forward of one chunk takes F time units and its backward B
 * (default 1:2; the schedules are built for those costs), a transfer L (default
 * 0). Columns: the makespan; the bubble, the idle fraction of a rank's makespan
 * (makespan - m*v*(F+B)) / makespan, exact and as a decimal; the theory,
 * (p-1)/(m+p-1) or (p-1)/(v*m+p-1); whether they are equal (with L = 0 they
 * must be; with L > 0 the bubble grows); the peak number of (micro-batch,
 * chunk) held on the first and the last rank (theory: m for GPipe, min(m, p-r)
 * 1F1B, min(mv, 2(p-r-1)+(v-1)p+1) interleaved); the most activation buffers a
 * rank's runtime pool holds; the transfers of the busiest rank per step.
 * --json prints one JSON document on stdout:
 *   {"fwd_cost":F,"bwd_cost":B,"latency":L,"rows":[{"kind","p","m","v","makespan",
 *    "bubble_num","bubble_den","bubble","theory_num","theory_den","theory","exact",
 *    "peak_in_flight_first","peak_in_flight_last","peak_buffers_max","transfers_max"}]}
 * Exit status 1 if a bubble differs from the theory at L = 0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zeroshard/pipeline.h"

#define MAXL 16

typedef struct {
  int p[MAXL], np, m[MAXL], nm, v[MAXL], nv;
  int fc, bc, lat, json;
} opts_t;

static int parse_list(const char *s, int *out, int *n) {
  *n = 0;
  while (s && *s && *n < MAXL) {
    char *end;
    long x = strtol(s, &end, 10);
    if (end == s || x < 1 || x > 4096) return -1;
    out[(*n)++] = (int)x;
    s = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return -1;
  }
  return *n ? 0 : -1;
}

static long gcd(long a, long b) { return b ? gcd(b, a % b) : a; }

static int first = 1;

/* One row; returns 1 if the bubble should have matched the theory and did not. */
static int row(const opts_t *o, zs_pp_kind_t kind, int p, int m, int v) {
  zs_pp_schedule_config_t c = ZS_PP_SCHEDULE_CONFIG_INIT;
  c.kind = kind, c.stages = p, c.microbatches = m, c.chunks = v, c.fwd_cost = o->fc, c.bwd_cost = o->bc;
  zs_pp_schedule_t *s = NULL;
  zs_pp_rank_stats_t *rs = calloc((size_t)p, sizeof *rs);
  zs_pp_sim_t sim;
  if (!rs || zs_pp_schedule_create(&s, &c) != ZS_OK ||
      zs_pp_schedule_simulate(s, o->fc, o->bc, o->lat, &sim, rs) != ZS_OK) {
    fprintf(stderr, "zs-bench-pp-schedule: %s p=%d m=%d v=%d: %s\n", zs_pp_kind_name(kind), p, m, v,
            zs_last_error());
    zs_pp_schedule_destroy(s);
    free(rs);
    return 1;
  }
  long tn = p - 1, td = (long)v * m + p - 1, g = gcd(tn, td);
  tn /= g, td /= g;
  int exact = sim.bubble_num == tn && sim.bubble_den == td;
  int bufs = 0, xfers = 0;
  for (int r = 0; r < p; r++) {
    int x = rs[r].send_act + rs[r].recv_act + rs[r].send_grad + rs[r].recv_grad;
    bufs = rs[r].peak_buffers > bufs ? rs[r].peak_buffers : bufs;
    xfers = x > xfers ? x : xfers;
  }
  if (o->json) {
    printf("%s\n  {\"kind\":\"%s\",\"p\":%d,\"m\":%d,\"v\":%d,\"makespan\":%lld,\"bubble_num\":%lld,"
           "\"bubble_den\":%lld,\"bubble\":%.6f,\"theory_num\":%ld,\"theory_den\":%ld,\"theory\":%.6f,"
           "\"exact\":%s,\"peak_in_flight_first\":%d,\"peak_in_flight_last\":%d,\"peak_buffers_max\":%d,"
           "\"transfers_max\":%d}",
           first ? "" : ",", zs_pp_kind_name(kind), p, m, v, (long long)sim.makespan, (long long)sim.bubble_num,
           (long long)sim.bubble_den, sim.bubble, tn, td, (double)tn / (double)td, exact ? "true" : "false",
           rs[0].peak_in_flight, rs[p - 1].peak_in_flight, bufs, xfers);
  } else {
    char b[48], t[48];
    snprintf(b, sizeof b, "%lld/%lld", (long long)sim.bubble_num, (long long)sim.bubble_den);
    snprintf(t, sizeof t, "%ld/%ld", tn, td);
    printf("%-11s %3d %3d %2d %8lld %9s %7.4f %9s %5s %8d %8d %7d %9d\n", zs_pp_kind_name(kind), p, m, v,
           (long long)sim.makespan, b, sim.bubble, t, exact ? "yes" : "no", rs[0].peak_in_flight,
           rs[p - 1].peak_in_flight, bufs, xfers);
  }
  first = 0;
  zs_pp_schedule_destroy(s);
  free(rs);
  return !exact && o->lat == 0;
}

int main(int argc, char **argv) {
  opts_t o = {{2, 4, 8}, 3, {1, 2, 4, 8, 16, 32}, 6, {2, 4}, 2, 1, 2, 0, 0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    int bad = 0;
    if (!strcmp(a, "--json")) o.json = 1;
    else if (!strcmp(a, "--p") && val) bad = parse_list(val, o.p, &o.np), i++;
    else if (!strcmp(a, "--m") && val) bad = parse_list(val, o.m, &o.nm), i++;
    else if (!strcmp(a, "--v") && val) bad = parse_list(val, o.v, &o.nv), i++;
    else if (!strcmp(a, "--cost") && val) bad = sscanf(val, "%d:%d", &o.fc, &o.bc) != 2 || o.fc < 1 || o.bc < 1, i++;
    else if (!strcmp(a, "--latency") && val) bad = sscanf(val, "%d", &o.lat) != 1 || o.lat < 0, i++;
    else bad = 1;
    if (bad) {
      fprintf(stderr, "usage: zs-bench-pp-schedule [--p 2,4,8] [--m 1,2,4,8,16,32] [--v 2,4] [--cost F:B] "
                      "[--latency L] [--json]\n");
      return 2;
    }
  }
  if (o.json) printf("{\"fwd_cost\":%d,\"bwd_cost\":%d,\"latency\":%d,\"rows\":[", o.fc, o.bc, o.lat);
  else
    printf("# pipeline schedules in the simulator: forward %d, backward %d, transfer %d time units\n"
           "%-11s %3s %3s %2s %8s %9s %7s %9s %5s %8s %8s %7s %9s\n",
           o.fc, o.bc, o.lat, "kind", "p", "m", "v", "makespan", "bubble", "", "theory", "equal", "held_r0",
           "held_last", "buffers", "transfers");
  int bad = 0;
  for (int i = 0; i < o.np; i++)
    for (int j = 0; j < o.nm; j++) {
      int p = o.p[i], m = o.m[j];
      bad += row(&o, ZS_PP_GPIPE, p, m, 1);
      bad += row(&o, ZS_PP_1F1B, p, m, 1);
      for (int k = 0; k < o.nv && p >= 2 && m % p == 0; k++) bad += row(&o, ZS_PP_INTERLEAVED, p, m, o.v[k]);
    }
  if (o.json) printf("\n]}\n");
  if (bad) fprintf(stderr, "zs-bench-pp-schedule: %d schedules differ from the theory\n", bad);
  return bad ? 1 : 0;
}
