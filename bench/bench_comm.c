/* zs-bench-comm: collective bandwidth through zs_comm, reported like nccl-tests.
 *
 *   mpiexec -n 4 zs-bench-comm [--backend mpi|nccl] [--dtype fp32|bf16|fp16|int32|int64|uint8|fp64]
 *       [--min-bytes 1K] [--max-bytes 16M] [--factor 2|4] [--iters 20] [--warmup 5]
 *       [--colls all_reduce,all_gather,...] [--algo auto|mpi|ring[,...]] [--rounds 1]
 *       [--null-stream] [--json]
 *
 * "bytes" is nccl-tests' size: the whole buffer of the collective (all_reduce,
 * broadcast, reduce: the buffer; all_gather: the gathered buffer; reduce_scatter
 * and all_to_all: each rank's send buffer), rounded down to a multiple of
 * ranks x element size where the buffer is split into blocks. time_us is the
 * mean time per call, the maximum over ranks; algbw = bytes / time; busbw
 * applies nccl-tests' factors: all_reduce 2(n-1)/n; all_gather, reduce_scatter
 * and all_to_all (n-1)/n; broadcast and reduce 1. After timing each size runs
 * once more on known data and #wrong counts the wrong elements over all ranks.
 * Calls go on a stream made for the purpose (--null-stream: the NULL stream,
 * where each call waits for its completion).
 *
 * --algo (mpi backend): which algorithm the comm uses for reduce_scatter and
 * all_reduce (the other collectives always use MPI's): auto (ZS_MPI_RING_MIN_BYTES
 * as set, or its default), mpi (MPI's own: the variable set to off) or ring (set
 * to 0; comm.h). A list makes one comm per algorithm and measures them
 * interleaved, size by size, so their ratio comes from one run on a busy
 * machine; --rounds R repeats each (size, algorithm) measurement R times,
 * interleaved, and keeps the fastest.
 *
 * Rank 0 prints a table for people (stdout; stderr with --json) and, with
 * --json, one JSON document on stdout:
 *   {"backend","world","dtype","results":[{"coll","algo","bytes","count","time_us",
 *    "algbw_gbps","busbw_gbps","wrong"}]}
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "common/half.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#include "zeroshard/mpi.h"
#ifdef ZS_HAVE_NCCL
#include "zeroshard/nccl.h"
#endif

typedef enum { C_ALL_REDUCE, C_ALL_GATHER, C_REDUCE_SCATTER, C_BROADCAST, C_REDUCE, C_ALL_TO_ALL, C_N } coll_t;
static const char *const coll_names[C_N] = {"all_reduce", "all_gather", "reduce_scatter",
                                            "broadcast",  "reduce",     "all_to_all"};

typedef struct {
  const char *backend;
  zs_dtype_t dtype;
  size_t min_bytes, max_bytes;
  int factor, iters, warmup, json, null_stream, rounds;
  int colls[C_N];
  int nalgos;
  const char *algos[3]; /* "auto", "mpi", "ring" */
} opts_t;

static int rank, world;
static zs_comm_t *comm; /* the comm of the algorithm being measured */
static zs_device_t *dev;
static zs_stream_t *stream;

static void die(const char *fmt, const char *arg) {
  if (rank == 0) {
    fprintf(stderr, "zs-bench-comm: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
  }
  MPI_Finalize();
  exit(2);
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || v < 0) die("bad size '%s' (e.g. 1024, 64K, 16M)", s);
  if (*end == 'K' || *end == 'k') v *= 1024;
  else if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  else if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
  return (size_t)v;
}

static void usage(void) {
  if (rank == 0)
    fprintf(stderr,
            "usage: zs-bench-comm [--backend mpi|nccl] [--dtype fp32|bf16|fp16|int32|int64|uint8|fp64]\n"
            "       [--min-bytes 1K] [--max-bytes 16M] [--factor 2|4] [--iters 20] [--warmup 5]\n"
            "       [--colls all_reduce,all_gather,reduce_scatter,broadcast,reduce,all_to_all]\n"
            "       [--algo auto|mpi|ring[,...]] [--rounds 1] [--null-stream] [--json]\n");
}

static opts_t parse(int argc, char **argv) {
  opts_t o = {.backend = "mpi", .dtype = ZS_FP32, .min_bytes = 1024, .max_bytes = 16u << 20,
              .factor = 2, .iters = 20, .warmup = 5, .rounds = 1, .nalgos = 1, .algos = {"auto"}};
  for (int c = 0; c < C_N; c++) o.colls[c] = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--json")) { o.json = 1; continue; }
    if (!strcmp(a, "--null-stream")) { o.null_stream = 1; continue; }
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(); MPI_Finalize(); exit(0); }
    if (!v) { usage(); die("%s needs a value", a); }
    i++;
    if (!strcmp(a, "--backend")) {
      if (strcmp(v, "mpi") && strcmp(v, "nccl")) die("unknown backend '%s' (mpi or nccl)", v);
      o.backend = v;
    } else if (!strcmp(a, "--dtype")) {
      int found = 0;
      for (int d = 0; d < ZS_DTYPE_COUNT; d++)
        if (!strcmp(v, zs_dtype_name((zs_dtype_t)d))) o.dtype = (zs_dtype_t)d, found = 1;
      if (!found) die("unknown dtype '%s'", v);
    } else if (!strcmp(a, "--min-bytes")) o.min_bytes = parse_size(v);
    else if (!strcmp(a, "--max-bytes")) o.max_bytes = parse_size(v);
    else if (!strcmp(a, "--factor")) {
      o.factor = atoi(v);
      if (o.factor != 2 && o.factor != 4) die("--factor must be 2 or 4, not '%s'", v);
    } else if (!strcmp(a, "--iters")) o.iters = atoi(v) > 0 ? atoi(v) : 1;
    else if (!strcmp(a, "--warmup")) o.warmup = atoi(v) >= 0 ? atoi(v) : 0;
    else if (!strcmp(a, "--rounds")) o.rounds = atoi(v) > 0 ? atoi(v) : 1;
    else if (!strcmp(a, "--algo")) {
      static const char *const known[3] = {"auto", "mpi", "ring"};
      static char buf[64];
      snprintf(buf, sizeof buf, "%s", v);
      o.nalgos = 0;
      for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int found = -1;
        for (int k = 0; k < 3; k++)
          if (!strcmp(tok, known[k])) found = k;
        if (found < 0) die("unknown algorithm '%s' (auto, mpi or ring)", tok);
        if (o.nalgos == 3) die("%s", "--algo lists at most 3 algorithms");
        o.algos[o.nalgos++] = known[found];
      }
      if (o.nalgos == 0) die("%s", "--algo needs at least one algorithm");
    } else if (!strcmp(a, "--colls")) {
      for (int c = 0; c < C_N; c++) o.colls[c] = 0;
      char buf[256];
      snprintf(buf, sizeof buf, "%s", v);
      for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int found = 0;
        for (int c = 0; c < C_N; c++)
          if (!strcmp(tok, coll_names[c])) o.colls[c] = found = 1;
        if (!found) die("unknown collective '%s'", tok);
      }
    } else {
      usage();
      die("unknown option '%s'", a);
    }
  }
  if (o.min_bytes == 0) o.min_bytes = 1;
  if (o.max_bytes < o.min_bytes) o.max_bytes = o.min_bytes;
  return o;
}

/* ---- data for the correctness check ------------------------------------------------ */

/* Small integers, so sums over any rank count here are exact in every dtype. */
static double gen(int r, size_t i) { return (double)((r + i) % 7); }

static void put(void *b, zs_dtype_t dt, size_t i, double v) {
  switch (dt) {
    case ZS_FP32: ((float *)b)[i] = (float)v; break;
    case ZS_BF16: ((uint16_t *)b)[i] = zs_f32_to_bf16((float)v); break;
    case ZS_FP16: ((uint16_t *)b)[i] = zs_f32_to_f16((float)v); break;
    case ZS_INT32: ((int32_t *)b)[i] = (int32_t)v; break;
    case ZS_INT64: ((int64_t *)b)[i] = (int64_t)v; break;
    case ZS_FP64: ((double *)b)[i] = v; break;
    default: ((uint8_t *)b)[i] = (uint8_t)v; break;
  }
}
static double get(const void *b, zs_dtype_t dt, size_t i) {
  switch (dt) {
    case ZS_FP32: return ((const float *)b)[i];
    case ZS_BF16: return zs_bf16_to_f32(((const uint16_t *)b)[i]);
    case ZS_FP16: return zs_f16_to_f32(((const uint16_t *)b)[i]);
    case ZS_INT32: return ((const int32_t *)b)[i];
    case ZS_INT64: return (double)((const int64_t *)b)[i];
    case ZS_FP64: return ((const double *)b)[i];
    default: return ((const uint8_t *)b)[i];
  }
}
static double sum_over_ranks(size_t i) {
  double s = 0;
  for (int r = 0; r < world; r++) s += gen(r, i);
  return s;
}

/* ---- one collective ------------------------------------------------------------------ */

/* count: the per-call count argument (per rank block for all_gather,
 * reduce_scatter, all_to_all). */
static zs_status_t run_once(coll_t c, void *s, void *r, size_t count, zs_dtype_t dt) {
  switch (c) {
    case C_ALL_REDUCE: return zs_comm_all_reduce(comm, s, r, count, dt, ZS_SUM, stream);
    case C_ALL_GATHER: return zs_comm_all_gather(comm, s, r, count, dt, stream);
    case C_REDUCE_SCATTER: return zs_comm_reduce_scatter(comm, s, r, count, dt, ZS_SUM, stream);
    case C_BROADCAST: return zs_comm_broadcast(comm, s, r, count, dt, 0, stream);
    case C_REDUCE: return zs_comm_reduce(comm, s, r, count, dt, ZS_SUM, 0, stream);
    default: return zs_comm_all_to_all(comm, s, r, count, dt, stream);
  }
}

static void check(zs_status_t st) {
  if (st != ZS_OK) {
    fprintf(stderr, "zs-bench-comm [rank %d]: %s: %s\n", rank, zs_status_name(st), zs_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

/* Fills the send buffer with gen(), runs once, counts wrong elements here. */
static uint64_t verify(coll_t c, void *ds, void *dr, size_t count, zs_dtype_t dt, void *hs, void *hr) {
  size_t es = zs_dtype_size(dt), N = (size_t)world, me = (size_t)rank;
  size_t send_elems = (c == C_REDUCE_SCATTER || c == C_ALL_TO_ALL) ? count * N : count;
  size_t recv_elems = (c == C_ALL_GATHER || c == C_ALL_TO_ALL) ? count * N : count;
  for (size_t i = 0; i < send_elems; i++) put(hs, dt, i, gen(rank, i));
  check(zs_memcpy_async(dev, ds, hs, send_elems * es, ZS_COPY_H2D, stream));
  check(zs_memset_async(dev, dr, 0, recv_elems * es, stream));
  check(run_once(c, ds, dr, count, dt));
  check(zs_memcpy_async(dev, hr, dr, recv_elems * es, ZS_COPY_D2H, stream));
  check(zs_stream_synchronize(dev, stream));
  uint64_t wrong = 0;
  if (c == C_REDUCE && rank != 0) return 0;
  for (size_t i = 0; i < recv_elems; i++) {
    double want;
    switch (c) {
      case C_ALL_REDUCE: case C_REDUCE: want = sum_over_ranks(i); break;
      case C_ALL_GATHER: want = gen((int)(i / count), i % count); break;
      case C_REDUCE_SCATTER: want = sum_over_ranks(me * count + i); break;
      case C_BROADCAST: want = gen(0, i); break;
      default: want = gen((int)(i / count), me * count + i % count); break; /* all_to_all */
    }
    if (get(hr, dt, i) != want) wrong++;
  }
  return wrong;
}

/* ---- main ----------------------------------------------------------------------------- */

typedef struct {
  coll_t coll;
  const char *algo;
  size_t bytes, count;
  double time_us, algbw, busbw;
  uint64_t wrong;
} result_t;

/* The mpi comm for one --algo: the algorithm is read from ZS_MPI_RING_MIN_BYTES
 * when the comm is created (and made the same on every rank). */
static zs_comm_t *create_mpi_comm(const char *algo) {
  const char *env = "ZS_MPI_RING_MIN_BYTES", *old = getenv(env);
  char *saved = old ? strdup(old) : NULL;
  if (!strcmp(algo, "mpi")) setenv(env, "off", 1);
  else if (!strcmp(algo, "ring")) setenv(env, "0", 1);
  zs_comm_t *c = NULL;
  check(zs_comm_create_mpi(&c, dev, MPI_COMM_WORLD));
  if (saved) setenv(env, saved, 1);
  else unsetenv(env);
  free(saved);
  return c;
}

/* Mean seconds per call of one (collective, size) on `comm`, the maximum over ranks. */
static double time_coll(coll_t c, void *ds, void *dr, size_t count, const opts_t *o) {
  for (int i = 0; i < o->warmup; i++) check(run_once(c, ds, dr, count, o->dtype));
  check(zs_stream_synchronize(dev, stream));
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = zs__now();
  for (int i = 0; i < o->iters; i++) check(run_once(c, ds, dr, count, o->dtype));
  check(zs_stream_synchronize(dev, stream));
  double mean = (zs__now() - t0) / o->iters, tmax = 0;
  MPI_Allreduce(&mean, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return tmax;
}

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  opts_t o = parse(argc, argv);
  if (provided < MPI_THREAD_MULTIPLE) die("%s", "this MPI does not provide MPI_THREAD_MULTIPLE");

  zs_comm_t *comms[3] = {NULL, NULL, NULL};
  if (!strcmp(o.backend, "nccl")) {
#ifdef ZS_HAVE_NCCL
    if (zs_device_cuda_count() == 0) die("%s", "--backend nccl needs a GPU");
    if (o.nalgos != 1 || strcmp(o.algos[0], "auto")) die("%s", "--algo is for the mpi backend");
    int gpu = -1; /* the node-local rank's GPU */
    check(zs_mpi_local_gpu(MPI_COMM_WORLD, &gpu));
    check(zs_device_create_cuda(&dev, gpu));
    check(zs_comm_create_nccl_mpi(&comms[0], dev, MPI_COMM_WORLD));
#else
    die("%s", "this build has no NCCL");
#endif
  } else {
    check(zs_device_create_cpu(&dev));
    for (int k = 0; k < o.nalgos; k++) comms[k] = create_mpi_comm(o.algos[k]);
  }
  if (!o.null_stream) check(zs_stream_create(dev, &stream));

  size_t es = zs_dtype_size(o.dtype), N = (size_t)world;
  size_t cap = o.max_bytes + N * es; /* room for the largest buffer of any collective */
  void *ds = NULL, *dr = NULL, *hs = malloc(cap), *hr = malloc(cap);
  check(zs_device_alloc(dev, cap, ZS_MEM_COMM, &ds));
  check(zs_device_alloc(dev, cap, ZS_MEM_COMM, &dr));
  if (!hs || !hr) die("%s", "out of host memory");
  memset(hs, 0, cap);
  check(zs_memcpy_async(dev, ds, hs, cap, ZS_COPY_H2D, stream));
  check(zs_memcpy_async(dev, dr, hs, cap, ZS_COPY_H2D, stream));

  size_t nsizes = 0;
  for (size_t b = o.min_bytes; b <= o.max_bytes; b *= (size_t)o.factor) nsizes++;
  result_t *res = calloc(nsizes * C_N * (size_t)o.nalgos, sizeof *res);
  size_t nres = 0;
  FILE *tab = o.json ? stderr : stdout;
  if (rank == 0) {
    fprintf(tab, "# zs-bench-comm: backend %s, %d ranks, dtype %s, iters %d, warmup %d, rounds %d\n", o.backend,
            world, zs_dtype_name(o.dtype), o.iters, o.warmup, o.rounds);
    fprintf(tab, "# %-15s %-5s %12s %12s %12s %12s %12s %8s\n", "coll", "algo", "bytes", "count", "time(us)",
            "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  }
  for (int c = 0; c < C_N; c++) {
    if (!o.colls[c]) continue;
    int blocked = c == C_ALL_GATHER || c == C_REDUCE_SCATTER || c == C_ALL_TO_ALL;
    for (size_t b = o.min_bytes; b <= o.max_bytes; b *= (size_t)o.factor) {
      /* count argument and the buffer size that is reported */
      size_t count = blocked ? b / (N * es) : b / es;
      size_t bytes = blocked ? count * N * es : count * es;
      if (count == 0) continue;
      double best[3] = {0, 0, 0};
      for (int round = 0; round < o.rounds; round++)
        for (int k = 0; k < o.nalgos; k++) {
          comm = comms[k];
          double t = time_coll((coll_t)c, ds, dr, count, &o);
          if (round == 0 || t < best[k]) best[k] = t;
        }
      for (int k = 0; k < o.nalgos; k++) {
        comm = comms[k];
        uint64_t wrong = verify((coll_t)c, ds, dr, count, o.dtype, hs, hr), wsum = 0;
        MPI_Allreduce(&wrong, &wsum, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
        result_t *r = &res[nres++];
        r->coll = (coll_t)c;
        r->algo = o.algos[k];
        r->bytes = bytes;
        r->count = count;
        r->time_us = best[k] * 1e6;
        r->algbw = (double)bytes / best[k] / 1e9;
        double f = 1.0;
        if (c == C_ALL_REDUCE) f = 2.0 * (world - 1) / world;
        else if (blocked) f = (double)(world - 1) / world;
        r->busbw = r->algbw * f;
        r->wrong = wsum;
        if (rank == 0)
          fprintf(tab, "  %-15s %-5s %12zu %12zu %12.1f %12.3f %12.3f %8llu\n", coll_names[c], r->algo, bytes,
                  count, r->time_us, r->algbw, r->busbw, (unsigned long long)wsum);
      }
    }
  }
  uint64_t total_wrong = 0;
  for (size_t i = 0; i < nres; i++) total_wrong += res[i].wrong;
  if (rank == 0 && o.json) {
    printf("{\"backend\":\"%s\",\"world\":%d,\"dtype\":\"%s\",\"results\":[", o.backend, world,
           zs_dtype_name(o.dtype));
    for (size_t i = 0; i < nres; i++)
      printf("%s{\"coll\":\"%s\",\"algo\":\"%s\",\"bytes\":%zu,\"count\":%zu,\"time_us\":%.3f,"
             "\"algbw_gbps\":%.6f,\"busbw_gbps\":%.6f,\"wrong\":%llu}",
             i ? "," : "", coll_names[res[i].coll], res[i].algo, res[i].bytes, res[i].count, res[i].time_us,
             res[i].algbw, res[i].busbw, (unsigned long long)res[i].wrong);
    printf("]}\n");
  }
  if (rank == 0 && total_wrong) fprintf(stderr, "zs-bench-comm: %llu wrong elements\n", (unsigned long long)total_wrong);

  zs_device_free(dev, ds, cap, ZS_MEM_COMM);
  zs_device_free(dev, dr, cap, ZS_MEM_COMM);
  free(hs), free(hr), free(res);
  if (stream) zs_stream_destroy(dev, stream);
  for (int k = 0; k < 3; k++)
    if (comms[k]) zs_comm_destroy(comms[k]);
  zs_device_destroy(dev);
  MPI_Finalize();
  return total_wrong ? 1 : 0;
}
