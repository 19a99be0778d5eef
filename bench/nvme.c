/* zs-bench-nvme: the NVMe tier's optimizer phase against the disk it runs on
 * (issue 28's "Speed" goal), in one process: mpiexec -n N zs-bench-nvme --dir
 * DIR [options] (--help lists them; 1 rank is the main case).
 *
 * 1. The disk: every rank at once writes a file of --disk-bytes in DIR and
 *    reads it back sequentially, with direct I/O through src/aio at the
 *    engine's block size and as many requests in flight as its step's ring
 *    (every chunk buffer's record at once; --buffers transfers queued, so the
 *    ring never drains); --rounds passes; MB/s a rank (its bytes over the
 *    slowest rank's time: what the ranks share), median, min, max.
 * 2. Two engines on one synthetic model (U units of P/U elements, AdamW):
 *    "mem", offload_optimizer cpu, and "nvme", offload_optimizer nvme in DIR
 *    (--offload-param: offload_param cpu and nvme). A step: forward
 *    gather/release and backward gather/gradient/reduce over the units, then
 *    zs_step; --compute-ms X busy-waits X ms a unit in forward, 2X in
 *    backward. Rounds of one step of each, the order alternating; per step the
 *    slowest rank's figures. With the disk's medians:
 *      t_disk   = bytes_read / read_bw + bytes_written / write_bw (optimizer phase)
 *      t_params = parameter shards read for gathers / read_bw (--offload-param)
 *      fraction = t_disk / optimizer phase seconds                  goal >= 0.8
 *      ratio    = step_nvme / (t_disk + t_params + step_mem)         goal <= 1.3
 *    rest: the phase less read_wait, update and write_wait (zs_engine_nvme_stats),
 *    i.e. the time blocked in zs__aio_submit on a full ring.
 * 3. Per rank: the tier file's size (fstat of the open file, zs_engine_nvme_stats'
 *    fs_bytes) == zs_engine_nvme_stats' file_bytes
 *    == zs_engine_estimate's nvme_model_state == the accountant's nvme domain.
 *
 * A table on stdout (stderr with --json); --json: one JSON document on stdout
 * {"bench","machine","settings","disk","configs","tier","goals"}. Exit codes:
 * usage(). A goal not met does not fail the run: the table and JSON say so. */
#include <errno.h>
#include <fcntl.h> // defines: O_DIRECT (the build defines _GNU_SOURCE)
#include <limits.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aio/aio.h" // defines: zs__aio_* (the tier's direct-I/O layer); zs__now (common.h)
#include "zeroshard/engine.h"

static const char prog[] = "zs-bench-nvme";
static int rank, world;
static zs_device_t *dev[2];   /* one device a config: each engine its own accountant */
static zs_comm_t *comm[2];
#define MAX_UNITS 4096

typedef struct {
  const char *dir;
  uint64_t disk_bytes, params, chunk, block;
  int rounds, units, stage, offload_param, buffers, depth, warmup, steps, json;
  double compute_ms;
  zs_dtype_t dt;
  zs_state_dtype_t state;
} opts_t;

/* ============================================================================
 * exits and checks
 * ========================================================================== */

static void finish(int code) {
  for (int k = 1; k >= 0; k--) {
    zs_comm_destroy(comm[k]); /* the last one finalises MPI */
    zs_device_destroy(dev[k]);
  }
  exit(code);
}

static void usage(FILE *f);
/* Same on every rank (flags, the directory): rank 0 says it (2: after the
 * usage), everyone exits. */
static void die_all(int code, const char *fmt, ...) {
  if (rank == 0) {
    if (code == 2) usage(stderr);
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
  }
  finish(code);
}

/* One rank failed: the others may wait for it in a collective. */
static void fail(const char *what, zs_status_t st) {
  fprintf(stderr, "%s [rank %d]: %s: %s (%s)\n", prog, rank, what, zs_status_name(st), zs_last_error());
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}
#define CK(x) do { zs_status_t st_ = (x); if (st_ != ZS_OK) fail(#x, st_); } while (0)

static double *xcalloc(size_t n) {
  double *p = calloc(n, sizeof *p);
  if (!p) fail("calloc", ZS_ERR_NOMEM);
  return p;
}

static double max_all(double v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return v;
}

/* ============================================================================
 * options
 * ========================================================================== */

static void usage(FILE *f) {
  fprintf(f, "usage: mpiexec -n N zs-bench-nvme --dir DIR [options]: the NVMe tier's optimizer phase against the\n"
             "disk of DIR (direct I/O), and its step against the in-memory offload's.\n"
             "  --dir DIR        the disk to measure, the tier's nvme_path (required)\n"
             "  --disk-bytes B   the disk test's file a rank (2G; less where the file system has less)\n"
             "  --rounds R       disk passes, write then read (3)   --warmup W (1)  --steps S (5)\n"
             "  --params P (64M) --units U (8)  --dtype bf16|fp32 (bf16)  --stage 1..3 (3)\n"
             "  --state fp32|bf16|int8 (AdamW's m and v: fp32)  --compute-ms X (busy X ms a unit forward, 2X back)\n"
             "  --offload-param  parameter shards offloaded too: nvme (the mem config: cpu); stage 3\n"
             "  --chunk N (nvme_chunk, elements)  --buffers N (nvme_buffers)  --depth N (aio_queue_depth)\n"
             "  --block BYTES (aio_block_size): the engine's defaults unless given\n"
             "  --json           one JSON document on stdout (the table goes to stderr)\n"
             "Sizes take a K, M or G suffix (1024-based). Exit: 0; 1 a failure or tier sizes that differ;\n"
             "2 bad flags; 77 no NVMe tier here (no liburing, io_uring refused, no direct I/O in DIR).\n");
}

static int parse_int(const char *s, long lo, long hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end || errno || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

/* "64M", "2G", "4096": 1024-based suffixes */
static int parse_size(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
  char *end;
  errno = 0;
  if (*s == '-') return -1;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s || errno) return -1;
  int sh = *end == 'K' || *end == 'k' ? 10 : *end == 'M' || *end == 'm' ? 20 : *end == 'G' || *end == 'g' ? 30 : 0;
  if (sh) end++;
  if (*end || v > (ULLONG_MAX >> sh)) return -1;
  *out = (uint64_t)v << sh;
  return *out < lo || *out > hi ? -1 : 0;
}

static opts_t parse(int argc, char **argv) {
  opts_t o = {.disk_bytes = 2ull << 30, .rounds = 3, .params = 64ull << 20, .units = 8, .stage = 3, .dt = ZS_BF16,
              .state = ZS_STATE_FP32, .warmup = 1, .steps = 5};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      if (rank == 0) usage(stdout);
      finish(0);
    }
    if (!strcmp(a, "--json") || !strcmp(a, "--offload-param")) {
      *(a[2] == 'j' ? &o.json : &o.offload_param) = 1;
      continue;
    }
    if (i + 1 >= argc || strncmp(a, "--", 2)) die_all(2, "'%s': unknown, or a flag without its value", a);
    v = argv[++i];
    int bad = 0;
    const char *want = NULL;
    if (!strcmp(a, "--dir")) o.dir = v;
    else if (!strcmp(a, "--disk-bytes")) bad = parse_size(v, 1u << 20, 1ull << 50, &o.disk_bytes), want = "1M or more";
    else if (!strcmp(a, "--rounds")) bad = parse_int(v, 1, 100, &o.rounds), want = "1..100";
    else if (!strcmp(a, "--params")) bad = parse_size(v, 1, 1ull << 50, &o.params), want = "elements, e.g. 64M";
    else if (!strcmp(a, "--units")) bad = parse_int(v, 1, MAX_UNITS, &o.units), want = "1..4096";
    else if (!strcmp(a, "--stage")) bad = parse_int(v, 1, 3, &o.stage), want = "1..3 (offload: stages 1-3)";
    else if (!strcmp(a, "--chunk"))
      bad = parse_size(v, 4096, 1ull << 30, &o.chunk) || o.chunk % 4096, want = "elements, a multiple of 4096 up to 1G";
    else if (!strcmp(a, "--buffers")) bad = parse_int(v, 2, 64, &o.buffers), want = "2..64";
    else if (!strcmp(a, "--depth")) bad = parse_int(v, 1, 1024, &o.depth), want = "1..1024";
    else if (!strcmp(a, "--block"))
      bad = parse_size(v, 4096, 64ull << 20, &o.block) || o.block % 4096, want = "bytes, a multiple of 4096 up to 64M";
    else if (!strcmp(a, "--warmup")) bad = parse_int(v, 0, 1000, &o.warmup), want = "0..1000";
    else if (!strcmp(a, "--steps")) bad = parse_int(v, 1, 10000, &o.steps), want = "1..10000";
    else if (!strcmp(a, "--dtype"))
      bad = !strcmp(v, "bf16") ? (o.dt = ZS_BF16, 0) : !strcmp(v, "fp32") ? (o.dt = ZS_FP32, 0) : 1, want = "bf16|fp32";
    else if (!strcmp(a, "--state")) {
      bad = 1, want = "fp32, bf16 or int8";
      for (int d = ZS_STATE_FP32; d <= ZS_STATE_INT8; d++)
        if (!strcmp(v, zs_state_dtype_name((zs_state_dtype_t)d))) o.state = (zs_state_dtype_t)d, bad = 0;
    } else if (!strcmp(a, "--compute-ms")) {
      char *end;
      o.compute_ms = strtod(v, &end);
      bad = end == v || *end || !(o.compute_ms >= 0 && o.compute_ms <= 1e5), want = "milliseconds, 0..1e5";
    } else die_all(2, "unknown flag '%s'", a);
    if (bad) die_all(2, "%s '%s': want %s", a, v, want);
  }
  if (!o.dir || !*o.dir) die_all(2, "give --dir DIR: a directory on the disk to measure (the tier's files go there)");
  if (strlen(o.dir) >= ZS_NVME_PATH_MAX) die_all(2, "--dir: at most %d bytes (nvme_path)", ZS_NVME_PATH_MAX - 1);
  if (o.params < (uint64_t)o.units)
    die_all(2, "--params %llu < --units %d: a unit needs an element", (unsigned long long)o.params, o.units);
  if (o.offload_param && o.stage != 3) die_all(2, "--offload-param offloads stage 3's shards: give --stage 3");
  /* the engine's defaults, named: the disk test uses the same */
  o.chunk = o.chunk ? o.chunk : ZS_NVME_CHUNK_DEFAULT, o.buffers = o.buffers ? o.buffers : ZS_NVME_BUFFERS_DEFAULT;
  o.depth = o.depth ? o.depth : ZS_AIO_QUEUE_DEPTH_DEFAULT, o.block = o.block ? o.block : ZS_AIO_BLOCK_SIZE_DEFAULT;
  return o;
}

/* ============================================================================
 * the machine
 * ========================================================================== */

static void cpu_model(char *out, size_t n) {
  snprintf(out, n, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[512], *c = NULL;
  while (f && !c && fgets(line, sizeof line, f))
    if (!strncmp(line, "model name", 10) && (c = strchr(line, ':')))
      snprintf(out, n, "%.*s", (int)strcspn(c + 2, "\n"), c + 2);
  if (f) fclose(f);
}

/* The mount holding dir: the longest mount point of /proc/mounts that prefixes its real path. */
static void fs_of(const char *dir, char *devname, size_t dn, char *type, size_t tn) {
  snprintf(devname, dn, "unknown");
  snprintf(type, tn, "unknown");
  char real[PATH_MAX], line[1024], d[512], m[512], t[64];
  if (!realpath(dir, real)) return;
  FILE *f = fopen("/proc/mounts", "r");
  size_t best = 0;
  while (f && fgets(line, sizeof line, f)) {
    if (sscanf(line, "%511s %511s %63s", d, m, t) != 3) continue;
    size_t ml = strlen(m);
    int under = !strcmp(m, "/") || (!strncmp(real, m, ml) && (real[ml] == '/' || real[ml] == 0));
    if (under && ml >= best) {
      best = ml;
      snprintf(devname, dn, "%s", d);
      snprintf(type, tn, "%s", t);
    }
  }
  if (f) fclose(f);
}

/* "key": "value" (escaped) and sep */
static void jstr(FILE *f, const char *key, const char *s, const char *sep) {
  fprintf(f, "\"%s\": \"", key);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fprintf(f, "\"%s", sep);
}

typedef struct {
  double med, min, max;
} st3_t;

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static st3_t stat3(const double *x, int n) {
  double *s = xcalloc((size_t)n);
  memcpy(s, x, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_d);
  st3_t r = {n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]), s[0], s[n - 1]};
  free(s);
  return r;
}
static void jst3(FILE *f, const char *key, st3_t s, const char *sep) {
  fprintf(f, "\"%s\": {\"median\": %.12g, \"min\": %.12g, \"max\": %.12g}%s", key, s.med, s.min, s.max, sep);
}

/* ============================================================================
 * 1. the disk
 * ========================================================================== */

/* Writes then reads the rank's file `rounds` times, all ranks at once;
 * w[r], rd[r]: MB/s a rank (its bytes / the slowest rank's seconds). */
static void disk_measure(const opts_t *o, uint64_t bytes, double *w, double *rd) {
  const size_t block = (size_t)o->block;
  char path[ZS_NVME_PATH_MAX + 80];
  snprintf(path, sizeof path, "%s/zs-bench-nvme.%d.rank%d.disk", o->dir, (int)getpid(), rank);
  zs_aio_file_t *f = NULL;
  zs_aio_ring_t *r = NULL;
  /* as many requests in flight as the engine's step ring holds: at least
   * every chunk buffer's record at once (src/zero/tier.c; a record is at most
   * ~22 bytes an element: master, m, v, parameters, gradients) */
  uint64_t need = ((uint64_t)o->buffers * o->chunk * 22 + block - 1) / block + 1;
  int depth = need > 1024 ? 1024 : need > (uint64_t)o->depth ? (int)need : o->depth;
  zs_status_t st = zs__aio_ring_create(&r, depth, block);
  if (st == ZS_OK) st = zs__aio_file_create(&f, path, bytes);
  int code = st == ZS_OK ? 0 : st == ZS_ERR_UNSUPPORTED ? 77 : 1;
  if (code) fprintf(stderr, "%s [rank %d]: the disk test: %s (%s)\n", prog, rank, zs_last_error(), zs_status_name(st));
  if ((code = (int)max_all(code))) {
    zs__aio_file_close(f, 1);
    zs__aio_ring_destroy(r);
    die_all(code, code == 77 ? "no direct I/O through io_uring here: skipped" : "the disk test could not start");
  }
  /* `buffers` transfers in flight, as the engine's chunk buffers, each cut
   * into `block` requests: while one drains the others keep the ring full */
  enum { NB = 64 };
  const int nb = o->buffers < NB ? o->buffers : NB;
  uint64_t xfer = (uint64_t)depth * block / (uint64_t)nb;
  xfer = xfer < (16u << 20) ? (16u << 20) : xfer / ZS_AIO_ALIGN * ZS_AIO_ALIGN;
  if (xfer > bytes) xfer = bytes;
  void *buf[NB];
  for (int b = 0; b < nb; b++) {
    if (posix_memalign(&buf[b], ZS_AIO_ALIGN, (size_t)xfer)) fail("posix_memalign", ZS_ERR_NOMEM);
    uint64_t x = 0x9e3779b97f4a7c15ull ^ (uint64_t)(rank * 2 + b), *p = buf[b];
    for (size_t i = 0; i < xfer / 8; i++) x ^= x << 13, x ^= x >> 7, x ^= x << 17, p[i] = x;
  }
  for (int round = 0; round < o->rounds; round++)
    for (int op = ZS_AIO_WRITE; op >= ZS_AIO_READ; op--) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = zs__now();
      uint64_t off = 0;
      for (int i = 0; off < bytes; i++) {
        int b = i % nb;
        uint64_t n = bytes - off < xfer ? bytes - off : xfer;
        if (i >= nb) CK(zs__aio_wait(r, b));
        CK(zs__aio_submit(r, f, (zs_aio_op_t)op, buf[b], (size_t)n, off, b));
        off += n;
      }
      for (int b = 0; b < nb; b++) CK(zs__aio_wait(r, b));
      double mbps = (double)bytes / 1e6 / max_all(zs__now() - t0);
      (op == ZS_AIO_WRITE ? w : rd)[round] = mbps;
      if (rank == 0)
        fprintf(stderr, "%s: disk pass %d/%d: %s %.1f MB/s a rank\n", prog, round + 1, o->rounds,
                op == ZS_AIO_WRITE ? "write" : "read", mbps);
    }
  zs__aio_file_close(f, 1);
  zs__aio_ring_destroy(r);
  for (int b = 0; b < nb; b++) free(buf[b]);
}

/* ============================================================================
 * 2. the engines
 * ========================================================================== */

static int init_fn(void *user, int param, int64_t offset, int64_t count, float *dst) {
  (void)user;
  for (int64_t i = 0; i < count; i++) dst[i] = 1e-3f * (float)((param * 131 + offset + i) % 997) - 0.5f;
  return 0;
}

static zs_engine_t *make_engine(const opts_t *o, int k, int64_t per, void **ps, void **gs) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = o->stage, c.param_dtype = c.reduce_dtype = o->dt;
  c.optim.kind = ZS_ADAMW, c.optim.weight_decay = 0.01f, c.optim.state_dtype = o->state;
  c.offload_optimizer = k ? ZS_OFFLOAD_NVME : ZS_OFFLOAD_CPU;
  if (o->offload_param) c.offload_param = k ? ZS_OFFLOAD_NVME : ZS_OFFLOAD_CPU;
  if (k) {
    snprintf(c.nvme_path, sizeof c.nvme_path, "%s", o->dir);
    c.nvme_chunk = (size_t)o->chunk, c.nvme_buffers = o->buffers;
    c.aio_block_size = (size_t)o->block, c.aio_queue_depth = o->depth;
  }
  zs_engine_t *zs;
  CK(zs_engine_create(&zs, &c, dev[k], comm[k]));
  for (int u = 0; u < o->units; u++) {
    char name[48];
    int uid;
    snprintf(name, sizeof name, "unit%d", u);
    CK(zs_unit_add(zs, name, &uid));
    snprintf(name, sizeof name, "unit%d.w", u);
    CK(zs_param_add(zs, uid, name, 1, (int64_t[]){per}, ZS_PARAM_DEFAULT, &ps[u], &gs[u], NULL));
  }
  CK(zs_engine_setup(zs, init_fn, NULL));
  return zs;
}

static void busy_ms(double ms) { /* the emulated compute: a CPU busy, as a trainer's would be */
  for (double end = zs__now() + ms / 1e3; ms > 0 && zs__now() < end;) continue;
}

/* One step; *step_s: all of it, *zstep_s: zs_step and the wait for its work. */
static void run_step(zs_engine_t *zs, int k, const opts_t *o, void **gs, const void *grad, size_t gbytes,
                     double *step_s, double *zstep_s) {
  double t0 = zs__now();
  CK(zs_forward_begin(zs));
  for (int u = 0; u < o->units; u++) {
    CK(zs_gather(zs, u));
    busy_ms(o->compute_ms);
    CK(zs_release(zs, u));
  }
  CK(zs_backward_begin(zs));
  for (int u = o->units - 1; u >= 0; u--) {
    CK(zs_gather(zs, u));
    memcpy(gs[u], grad, gbytes); /* the engine zeroed it: adding is copying */
    busy_ms(2 * o->compute_ms);
    CK(zs_reduce(zs, u));
  }
  double t1 = zs__now();
  CK(zs_step(zs, NULL));
  CK(zs_stream_synchronize(dev[k], NULL));
  double t2 = zs__now();
  *step_s = t2 - t0;
  *zstep_s = t2 - t1;
}

/* per measured step, the slowest rank's figures; rest_s: the phase less its
 * three parts (the time blocked in zs__aio_submit while the ring is full) */
enum { M_STEP, M_ZSTEP, N_STEP, N_ZSTEP, N_PHASE, N_RWAIT, N_UPDATE, N_WWAIT, N_REST, N_READ, N_WRITTEN, N_PARAMS,
       NMET };
static const char *const met_key[NMET] = {"step_s", "zs_step_s", "step_s", "zs_step_s", "phase_s", "read_wait_s",
                                          "update_s", "write_wait_s", "rest_s", "bytes_read", "bytes_written",
                                          "param_bytes_read"};

/* --dir: a writable directory on a file system with direct I/O (77 where it
 * has none, 2 where it is not a directory we may write); its free room */
static uint64_t check_dir(const char *dir) {
  uint64_t room = 0;
  char probe[ZS_NVME_PATH_MAX + 80];
  int code = 0, fd = -1;
  snprintf(probe, sizeof probe, "%s/zs-bench-nvme.%d.rank%d.probe", dir, (int)getpid(), rank);
  if (zs__aio_dir_room(dir, &room) != ZS_OK)
    code = 2, fprintf(stderr, "%s [rank %d]: --dir: %s\n", prog, rank, zs_last_error());
  else if ((fd = open(probe, O_CREAT | O_EXCL | O_RDWR | O_DIRECT, 0600)) < 0)
    code = errno == EINVAL ? 77 : 2, fprintf(stderr, "%s [rank %d]: --dir: %s: %s%s\n", prog, rank, probe,
                                             strerror(errno), code == 77 ? ": no direct I/O there: skipped" : "");
  if (fd >= 0) close(fd), unlink(probe);
  if ((code = (int)max_all(code))) finish(code);
  return room;
}

/* ============================================================================
 * main
 * ========================================================================== */

int main(int argc, char **argv) {
  if (zs_device_create_cpu(&dev[0]) != ZS_OK || zs_device_create_cpu(&dev[1]) != ZS_OK ||
      zs_comm_create_mpi_world(&comm[0], dev[0]) != ZS_OK) {
    fprintf(stderr, "%s: cannot start: %s\n", prog, zs_last_error());
    return 1;
  }
  rank = zs_comm_rank(comm[0]), world = zs_comm_size(comm[0]);
  opts_t o = parse(argc, argv);
  if (!zs__aio_available()) die_all(77, "this zeroshard was built without liburing: no NVMe tier (skipped)");
  CK(zs_comm_create_mpi_world(&comm[1], dev[1]));
  uint64_t room = check_dir(o.dir);

  /* the disk test's file: at most 90% of the room split among this node's ranks */
  MPI_Comm node;
  int node_ranks = 1;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &node_ranks);
  MPI_Comm_free(&node);
  uint64_t disk = o.disk_bytes, share = room / (uint64_t)node_ranks / 10 * 9;
  disk = (share < disk ? share : disk) / ZS_AIO_ALIGN * ZS_AIO_ALIGN;
  MPI_Allreduce(MPI_IN_PLACE, &disk, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  if (disk < (1u << 20)) die_all(1, "%s: too little free room for the disk test (%llu bytes a rank)", o.dir,
                                 (unsigned long long)disk);
  if (disk < o.disk_bytes && rank == 0)
    fprintf(stderr, "%s: --disk-bytes lowered to %llu: the file system has %llu bytes free for %d rank(s)\n", prog,
            (unsigned long long)disk, (unsigned long long)room, node_ranks);

  /* ---- 1. the disk ---- */
  double *wr = xcalloc((size_t)o.rounds), *rd = xcalloc((size_t)o.rounds);
  disk_measure(&o, disk, wr, rd);
  st3_t dw = stat3(wr, o.rounds), dr = stat3(rd, o.rounds);
  const double wbw = dw.med * 1e6, rbw = dr.med * 1e6; /* bytes/s a rank */

  /* ---- 2. the engines, round by round ---- */
  const int64_t per = (int64_t)(o.params / (uint64_t)o.units);
  const size_t pb = o.dt == ZS_BF16 ? 2 : 4, gbytes = (size_t)per * pb;
  static void *ps[2][MAX_UNITS], *gs[2][MAX_UNITS]; /* the engines' pointer slots */
  uint16_t *grad = malloc(gbytes);                   /* the same gradient for every unit and step */
  if (!grad) fail("malloc", ZS_ERR_NOMEM);
  for (int64_t i = 0; i < per; i++) { /* bf16: fp32's upper half (little-endian) */
    float g = 1e-6f * (float)((int)((uint64_t)i * 2654435761u % 2001) - 1000);
    memcpy((char *)grad + (size_t)i * pb, (char *)&g + 4 - pb, pb);
  }
  zs_engine_t *zs[2];
  for (int k = 0; k < 2; k++) {
    if (rank == 0) fprintf(stderr, "%s: setting up the %s config\n", prog, k ? "nvme" : "mem");
    zs[k] = make_engine(&o, k, per, ps[k], gs[k]);
  }
  double *met[NMET], *met_mem = xcalloc((size_t)NMET * (size_t)o.steps);
  for (int m = 0; m < NMET; m++) met[m] = met_mem + (size_t)m * (size_t)o.steps;
  zs_nvme_stats_t ns;
  CK(zs_engine_nvme_stats(zs[1], &ns));
  uint64_t pread0 = ns.param_bytes_read;
  for (int r = 0; r < o.warmup + o.steps; r++) {
    double s[2], z[2];
    for (int j = 0; j < 2; j++) { /* mem first in even rounds, nvme first in odd ones */
      int k = (r + j) % 2;
      run_step(zs[k], k, &o, gs[k], grad, gbytes, &s[k], &z[k]);
    }
    CK(zs_engine_nvme_stats(zs[1], &ns));
    double v[NMET] = {s[0], z[0], s[1], z[1], ns.seconds, ns.read_wait_s, ns.update_s, ns.write_wait_s,
                      ns.seconds - ns.read_wait_s - ns.update_s - ns.write_wait_s, (double)ns.bytes_read,
                      (double)ns.bytes_written, (double)(ns.param_bytes_read - pread0)};
    pread0 = ns.param_bytes_read;
    MPI_Allreduce(MPI_IN_PLACE, v, NMET, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
      fprintf(stderr, "%s: %s %d: mem step %.3f s, nvme step %.3f s (optimizer phase %.3f s, %.0f MB read, %.0f MB "
                      "written)\n", prog, r < o.warmup ? "warmup" : "step", r < o.warmup ? r + 1 : r - o.warmup + 1,
              v[M_STEP], v[N_STEP], v[N_PHASE], v[N_READ] / 1e6, v[N_WRITTEN] / 1e6);
    for (int m = 0; m < NMET && r >= o.warmup; m++) met[m][r - o.warmup] = v[m];
  }

  /* ---- 3. the tier's bytes, four ways, every rank's at rank 0 ---- */
  CK(zs_engine_nvme_stats(zs[1], &ns));
  zs_mem_estimate_t est;
  CK(zs_engine_estimate(zs[1], zs_engine_shard_group(zs[1]), &est));
  zs_memory_stats_t ms;
  CK(zs_memory_stats(zs[1], &ms));
  /* [0]: the file system's size of the open file (fstat: its name is removed at setup) */
  unsigned long long mine[5] = {ns.fs_bytes, ns.file_bytes, est.nvme_model_state, 0, 0}, *all = malloc(40 * (size_t)world);
  if (!all) fail("malloc", ZS_ERR_NOMEM);
  for (int c = 0; c < ZS_MEM_CATEGORY_COUNT; c++) mine[3] += ms.current[ZS_DOMAIN_NVME][c];
  mine[4] = mine[0] == mine[1] && mine[1] == mine[2] && mine[2] == mine[3]; /* [4]: all equal */
  MPI_Gather(mine, 5, MPI_UNSIGNED_LONG_LONG, all, 5, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  const int consistent = max_all(!mine[4]) == 0;

  /* ---- figures: per step, then median, min, max ---- */
  const int S = o.steps;
  double *tdisk = xcalloc(4 * (size_t)S), *tpar = tdisk + S, *frac = tpar + S, *ratio = frac + S;
  st3_t sm[NMET];
  for (int m = 0; m < NMET; m++) sm[m] = stat3(met[m], S);
  for (int i = 0; i < S; i++) {
    tdisk[i] = met[N_READ][i] / rbw + met[N_WRITTEN][i] / wbw;
    tpar[i] = met[N_PARAMS][i] / rbw;
    frac[i] = met[N_PHASE][i] > 0 ? tdisk[i] / met[N_PHASE][i] : 0;
    ratio[i] = met[N_STEP][i] / (tdisk[i] + tpar[i] + sm[M_STEP].med);
  }
  st3_t sd = stat3(tdisk, S), sp = stat3(tpar, S), sf = stat3(frac, S), sr = stat3(ratio, S);
  const int frac_ok = sf.med >= 0.8, ratio_ok = sr.med <= 1.3;

  if (rank == 0) {
    char cpu[256], fsdev[512], fstype[64], host[256] = "";
    cpu_model(cpu, sizeof cpu);
    fs_of(o.dir, fsdev, sizeof fsdev, fstype, sizeof fstype);
    gethostname(host, sizeof host - 1);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    FILE *t = o.json ? stderr : stdout;
    fprintf(t, "# %s: %d rank(s) on %s (%ld cores); --dir %s: %s on %s\n", prog, world, cpu, cores, o.dir, fstype,
            fsdev);
    fprintf(t, "# %.1fM %s parameters in %d units, stage %d, AdamW %s state; optimizer nvme, parameters %s; "
               "chunk %llu, %d buffers, depth %d, block %llu, compute %g ms a unit\n",
            (double)per * o.units / 1e6, zs_dtype_name(o.dt), o.units, o.stage, zs_state_dtype_name(o.state),
            o.offload_param ? "nvme" : "device", (unsigned long long)o.chunk, o.buffers, o.depth,
            (unsigned long long)o.block, o.compute_ms);
    fprintf(t, "disk, direct I/O, %6.0f MiB a rank, %d passes      median      min      max\n",
            (double)disk / 1048576.0, o.rounds);
    fprintf(t, "  write                  MB/s a rank %18.1f %8.1f %8.1f\n  read                   MB/s a rank %18.1f "
               "%8.1f %8.1f\n", dw.med, dw.min, dw.max, dr.med, dr.min, dr.max);
    fprintf(t, "%d steps, a step's slowest rank                 median      min      max\n", S);
    for (int m = 0; m < NMET; m++) { /* bytes in MB */
      double x = m >= N_READ ? 1e-6 : 1;
      fprintf(t, "  %-5s %-16s %-5s %18.3f %8.3f %8.3f\n", m < N_STEP ? "mem" : "nvme", met_key[m], x < 1 ? "MB" : "s",
              sm[m].med * x, sm[m].min * x, sm[m].max * x);
    }
    for (unsigned long long *a = all; a < all + 5 * world; a += 5)
      fprintf(t, "tier file rank %d: stat %llu, nvme_stats %llu, estimate %llu, accountant %llu: %s\n",
              (int)(a - all) / 5, a[0], a[1], a[2], a[3], a[4] ? "equal" : "DIFFER");
    fprintf(t, "fraction = t_disk %.3f s / phase %.3f s = %.3f (min %.3f, max %.3f), goal >= 0.8: %s\n", sd.med,
            sm[N_PHASE].med, sf.med, sf.min, sf.max, frac_ok ? "met" : "NOT met");
    fprintf(t, "ratio = step_nvme %.3f s / (t_disk %.3f + t_params %.3f + t_mem %.3f s) = %.3f (min %.3f, max %.3f), "
               "goal <= 1.3: %s\n", sm[N_STEP].med, sd.med, sp.med, sm[M_STEP].med, sr.med, sr.min, sr.max,
            ratio_ok ? "met" : "NOT met");
    if (!consistent) fprintf(stderr, "%s: the tier's sizes differ (see the table)\n", prog);
    if (o.json) {
      FILE *j = stdout;
      fprintf(j, "{\"bench\": \"zs-bench-nvme\", \"machine\": {");
      jstr(j, "host", host, ", \"cores\": ");
      fprintf(j, "%ld, ", cores);
      jstr(j, "cpu", cpu, ", ");
      jstr(j, "dir", o.dir, ", ");
      jstr(j, "fs_type", fstype, ", ");
      jstr(j, "fs_device", fsdev, ", \"fs_free_bytes\": ");
      fprintf(j, "%llu}, ", (unsigned long long)room);
      fprintf(j, "\"settings\": {\"world\": %d, \"params\": %lld, \"units\": %d, \"dtype\": \"%s\", \"stage\": %d, "
                 "\"state\": \"%s\", \"optimizer\": \"nvme\", \"offload_param\": \"%s\", \"chunk\": %llu, "
                 "\"buffers\": %d, \"depth\": %d, \"block\": %llu, \"compute_ms\": %.6g, \"warmup\": %d, "
                 "\"steps\": %d, \"rounds\": %d, \"disk_bytes\": %llu}, ",
              world, (long long)per * o.units, o.units, zs_dtype_name(o.dt), o.stage, zs_state_dtype_name(o.state),
              o.offload_param ? "nvme" : "none", (unsigned long long)o.chunk, o.buffers, o.depth,
              (unsigned long long)o.block, o.compute_ms, o.warmup, o.steps, o.rounds, (unsigned long long)disk);
      fprintf(j, "\"disk\": {\"bytes_per_rank\": %llu, ", (unsigned long long)disk);
      jst3(j, "write_mbps", dw, ", ");
      jst3(j, "read_mbps", dr, ", ");
      fprintf(j, "\"aggregate_write_mbps\": %.6g, \"aggregate_read_mbps\": %.6g}, \"configs\": {\"mem\": {",
              dw.med * world, dr.med * world);
      for (int m = 0; m < NMET; m++) jst3(j, met_key[m], sm[m], m == M_ZSTEP ? "}, \"nvme\": {" : ", ");
      double moved = (sm[N_READ].med + sm[N_WRITTEN].med) / 1e6;
      fprintf(j, "\"phase_mbps\": %.6g}}, \"tier\": {\"consistent\": %s, \"ranks\": [",
              sm[N_PHASE].med > 0 ? moved / sm[N_PHASE].med : 0, consistent ? "true" : "false");
      for (unsigned long long *a = all; a < all + 5 * world; a += 5)
        fprintf(j, "%s{\"rank\": %d, \"stat_bytes\": %llu, \"file_bytes\": %llu, \"estimate_bytes\": %llu, "
                   "\"accountant_bytes\": %llu, \"equal\": %s}", a > all ? ", " : "", (int)(a - all) / 5, a[0], a[1],
                a[2], a[3], a[4] ? "true" : "false");
      fprintf(j, "]}, \"goals\": {");
      jst3(j, "t_disk_s", sd, ", ");
      jst3(j, "t_params_s", sp, ", ");
      fprintf(j, "\"t_mem_s\": %.9g, \"fraction\": {\"value\": %.9g, \"min\": %.9g, \"max\": %.9g, \"goal\": 0.8, "
                 "\"met\": %s}, \"ratio\": {\"value\": %.9g, \"min\": %.9g, \"max\": %.9g, \"goal\": 1.3, "
                 "\"met\": %s}}}\n", sm[M_STEP].med, sf.med, sf.min, sf.max, frac_ok ? "true" : "false", sr.med,
              sr.min, sr.max, ratio_ok ? "true" : "false");
    }
  }

  for (int k = 0; k < 2; k++) zs_engine_destroy(zs[k]); /* removes the tier's file */
  free(met_mem), free(grad), free(all), free(wr), free(rd), free(tdisk);
  MPI_Barrier(MPI_COMM_WORLD);
  finish(consistent ? 0 : 1);
}
