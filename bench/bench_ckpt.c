/* zs-bench-ckpt: checkpoint save and load throughput against the file system's
 * own, in the same run.
 *
 *   mpiexec -n N zs-bench-ckpt [--params P (millions, 32)] [--units U (8)]
 *                              [--stage S (3)] [--dtype fp32|bf16] [--dir DIR]
 *                              [--iters I (3)] [--json]
 *
 * An engine with U units of P/U million parameters (AdamW: master, m and v are
 * saved, 12 bytes per parameter) at stage S on the cpu device; then, per rank:
 *   save_gbps   bytes this rank saved / time of zs_checkpoint_save (best of I)
 *   load_gbps   bytes this rank's layout needs / time of zs_checkpoint_load
 *   raw_write_gbps  the same bytes written with fwrite + fsync to one file in
 *                   the same directory (what the file system gives a plain
 *                   program), raw_read_gbps read back with fread
 * and the ratios save/raw_write and load/raw_read (max over ranks of the times,
 * as the collective waits for the slowest). Reads are from the page cache in
 * both cases. A save in the background (zs_checkpoint_save_async): the time
 * the trainer is held by the call (the copy into host memory), the time until
 * every rank's file is written, and the wait's (the manifest), against
 * zs_checkpoint_save's, the time it holds the trainer; stall_ratio is
 * save / async_call; the _kept figures with the copy kept between saves
 * (ZS_CKPT_KEEP_COPY=1). --dir defaults to a fresh directory under $TMPDIR or /tmp.
 * --json prints one document: {"world","stage","params","bytes_per_rank",
 *  "save_gbps","load_gbps","raw_write_gbps","raw_read_gbps","save_ratio","load_ratio",
 *  "save_s","async_call_s","async_written_s","async_wait_s","stall_ratio",
 *  "async_call_kept_s","stall_ratio_kept"}. */
#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "zeroshard/checkpoint.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#include "zeroshard/engine.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int init_fn(void *user, int param, int64_t offset, int64_t count, float *dst) {
  (void)user;
  for (int64_t i = 0; i < count; i++) dst[i] = 1e-3f * (float)((param * 131 + offset + i) % 997);
  return 0;
}

/* The bench's own check: a failure stops every rank (MPI_Abort). */
#define CHECK_ABORT(x)                                                                       \
  do {                                                                                       \
    zs_status_t st_ = (x);                                                                   \
    if (st_ != ZS_OK) {                                                                      \
      fprintf(stderr, "zs-bench-ckpt: %s failed: %s\n", #x, zs_last_error());              \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                          \
    }                                                                                        \
  } while (0)

/* seconds of the slowest rank */
static double max_time(double t) {
  double m;
  MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

int main(int argc, char **argv) {
  double mparams = 32;
  int units = 8, stage = 3, iters = 3, json = 0;
  zs_dtype_t dt = ZS_FP32;
  const char *dir = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--json")) json = 1;
    else if (!strcmp(a, "--params") && v) mparams = atof(argv[++i]);
    else if (!strcmp(a, "--units") && v) units = atoi(argv[++i]);
    else if (!strcmp(a, "--stage") && v) stage = atoi(argv[++i]);
    else if (!strcmp(a, "--iters") && v) iters = atoi(argv[++i]);
    else if (!strcmp(a, "--dtype") && v) dt = !strcmp(argv[++i], "bf16") ? ZS_BF16 : ZS_FP32;
    else if (!strcmp(a, "--dir") && v) dir = argv[++i];
    else {
      fprintf(stderr, "usage: mpiexec -n N zs-bench-ckpt [--params MILLIONS] [--units U] [--stage S] "
                      "[--dtype fp32|bf16] [--dir DIR] [--iters I] [--json]\n");
      return 2;
    }
  }
  if (mparams <= 0 || units <= 0 || stage < 0 || stage > 3 || iters <= 0) {
    fprintf(stderr, "zs-bench-ckpt: bad values\n");
    return 2;
  }
  zs_device_t *dev;
  zs_comm_t *comm;
  CHECK_ABORT(zs_device_create_cpu(&dev));
  CHECK_ABORT(zs_comm_create_mpi_world(&comm, dev));
  int rank = zs_comm_rank(comm), world = zs_comm_size(comm);
  char base[512] = {0};
  if (rank == 0) {
    if (dir) {
      snprintf(base, sizeof base, "%s", dir);
    } else {
      const char *t = getenv("TMPDIR");
      snprintf(base, sizeof base, "%s/zs-bench-ckpt-XXXXXX", t && *t ? t : "/tmp");
      if (!mkdtemp(base)) base[0] = 0;
    }
  }
  MPI_Bcast(base, sizeof base, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (!base[0]) {
    fprintf(stderr, "zs-bench-ckpt: cannot make a directory\n");
    return 1;
  }

  zs_config_t cfg = ZS_CONFIG_INIT;
  cfg.stage = stage;
  cfg.param_dtype = cfg.reduce_dtype = dt;
  zs_engine_t *zs;
  CHECK_ABORT(zs_engine_create(&zs, &cfg, dev, comm));
  int64_t per = (int64_t)(mparams * 1e6 / units);
  void **slots = calloc((size_t)units, sizeof *slots);
  for (int u = 0; u < units; u++) {
    int uid;
    char name[32];
    snprintf(name, sizeof name, "unit%d", u);
    CHECK_ABORT(zs_unit_add(zs, name, &uid));
    snprintf(name, sizeof name, "unit%d.w", u);
    CHECK_ABORT(zs_param_add(zs, uid, name, 1, (int64_t[]){per}, ZS_PARAM_DEFAULT, &slots[u], NULL, NULL));
  }
  CHECK_ABORT(zs_engine_setup(zs, init_fn, NULL));

  char ck[600];
  snprintf(ck, sizeof ck, "%s/ckpt", base);
  double save = 1e30, load = 1e30, wr = 1e30, rd = 1e30;
  for (int it = 0; it < iters; it++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_s();
    CHECK_ABORT(zs_checkpoint_save(zs, ck));
    double t = max_time(now_s() - t0);
    save = t < save ? t : save;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = now_s();
    CHECK_ABORT(zs_checkpoint_load(zs, ck));
    t = max_time(now_s() - t0);
    load = t < load ? t : load;
  }
  /* in the background: the call, the writing (polled), the wait; best of iters
   * each; then the call again with the copy kept between saves
   * (ZS_CKPT_KEEP_COPY=1: no fresh pages to fault in) */
  double acall = 1e30, awrite = 1e30, await_ = 1e30, kcall = 1e30;
  for (int it = 0; it < 2 * iters + 1; it++) {
    const int kept = it >= iters;
    if (it == iters) setenv("ZS_CKPT_KEEP_COPY", "1", 1); /* its first save makes the copy it keeps: not timed */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_s();
    CHECK_ABORT(zs_checkpoint_save_async(zs, ck));
    double t1 = now_s();
    for (int i = 0; i < 600000 && zs_checkpoint_writing(zs); i++) {
      struct timespec ts = {0, 200000};
      nanosleep(&ts, NULL);
    }
    double t2 = now_s();
    MPI_Barrier(MPI_COMM_WORLD); /* every rank's file written */
    double t3 = now_s();
    CHECK_ABORT(zs_checkpoint_wait(zs));
    double t4 = now_s();
    double c = max_time(t1 - t0), w = max_time(t2 - t1), x = max_time(t4 - t3);
    if (kept) {
      if (it > iters) kcall = c < kcall ? c : kcall;
      continue;
    }
    acall = c < acall ? c : acall;
    awrite = w < awrite ? w : awrite;
    await_ = x < await_ ? x : await_;
  }
  unsetenv("ZS_CKPT_KEEP_COPY");
  /* bytes: every rank saves (and at the same layout loads) 12 bytes per element
   * of its shard; the raw file moves the same */
  int64_t total = per * units, bytes = 12 * ((total + world - 1) / world);
  char raw[640];
  snprintf(raw, sizeof raw, "%s/raw.%d", base, rank);
  size_t chunk = (size_t)8 << 20;
  char *buf = malloc(chunk);
  memset(buf, 7, chunk);
  for (int it = 0; it < iters; it++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_s();
    FILE *f = fopen(raw, "wb");
    if (!f) {
      fprintf(stderr, "zs-bench-ckpt: cannot write %s: %s\n", raw, strerror(errno));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int64_t o = 0; o < bytes; o += (int64_t)chunk)
      fwrite(buf, 1, (size_t)(bytes - o < (int64_t)chunk ? bytes - o : (int64_t)chunk), f);
    fflush(f);
    fsync(fileno(f));
    fclose(f);
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.done", raw);
    rename(raw, tmp); /* the checkpoint renames too */
    rename(tmp, raw);
    double t = max_time(now_s() - t0);
    wr = t < wr ? t : wr;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = now_s();
    f = fopen(raw, "rb");
    for (int64_t o = 0; f && o < bytes; o += (int64_t)chunk)
      if (fread(buf, 1, chunk, f) == 0) break;
    if (f) fclose(f);
    t = max_time(now_s() - t0);
    rd = t < rd ? t : rd;
  }
  unlink(raw);
  free(buf);
  double gb = (double)bytes / 1e9;
  if (rank == 0) {
    FILE *out = json ? stderr : stdout;
    fprintf(out, "# zs-bench-ckpt: %d rank(s), stage %d, %s, %.1fM params in %d units, %.3f GB per rank, best of %d\n",
            world, stage, zs_dtype_name(dt), (double)total / 1e6, units, gb, iters);
    fprintf(out, "%-10s %10s %10s %8s\n", "", "ckpt GB/s", "raw GB/s", "ratio");
    fprintf(out, "%-10s %10.3f %10.3f %8.3f\n", "save", gb / save, gb / wr, wr / save);
    fprintf(out, "%-10s %10.3f %10.3f %8.3f\n", "load", gb / load, gb / rd, rd / load);
    fprintf(out, "\n%-34s %10s\n", "the trainer is held by", "seconds");
    fprintf(out, "%-34s %10.4f\n", "zs_checkpoint_save", save);
    fprintf(out, "%-34s %10.4f  (%.1fx less)\n", "zs_checkpoint_save_async (copy)", acall, save / acall);
    fprintf(out, "%-34s %10.4f  (%.1fx less)\n", "  the copy kept (ZS_CKPT_KEEP_COPY)", kcall, save / kcall);
    fprintf(out, "%-34s %10.4f\n", "  then writing, in the background", awrite);
    fprintf(out, "%-34s %10.4f\n", "  zs_checkpoint_wait, once written", await_);
    if (json)
      printf("{\"world\": %d, \"stage\": %d, \"params\": %lld, \"bytes_per_rank\": %lld, \"save_gbps\": %.6g, "
             "\"load_gbps\": %.6g, \"raw_write_gbps\": %.6g, \"raw_read_gbps\": %.6g, \"save_ratio\": %.6g, "
             "\"load_ratio\": %.6g, \"save_s\": %.6g, \"async_call_s\": %.6g, \"async_written_s\": %.6g, "
             "\"async_wait_s\": %.6g, \"stall_ratio\": %.6g, \"async_call_kept_s\": %.6g, "
             "\"stall_ratio_kept\": %.6g}\n",
             world, stage, (long long)total, (long long)bytes, gb / save, gb / load, gb / wr, gb / rd, wr / save,
             rd / load, save, acall, awrite, await_, save / acall, kcall, save / kcall);
  }
  zs_engine_destroy(zs);
  free(slots);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0 && !dir) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    if (system(cmd) != 0) fprintf(stderr, "zs-bench-ckpt: could not remove %s\n", base);
  }
  zs_comm_destroy(comm);
  zs_device_destroy(dev);
  return 0;
}
