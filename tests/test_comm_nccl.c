/* The nccl backend cannot hang (issue 10.3): init, enqueue, kernels that wait
 * for a peer, split and destroy are all bounded by ZS_COMM_TIMEOUT_S. Label gpu:
 * skips (77) without a GPU or in a build without NCCL; scripts/gpu-check runs it.
 *
 * One rank (test_comm_nccl_np1, one GPU):
 *   init_timeout      rank 0 of a 2-rank comm whose rank 1 never exists
 *                     (zs_comm_create_nccl_id): ZS_ERR_TIMEOUT after T, not a
 *                     hang, and NCCL still works afterwards
 *   create_id         a 1-rank comm from an id; argument checks; destroy is prompt
 *   from_nonblocking  wrapping a non-blocking ncclComm_t that may still be initialising
 *   split             ncclCommSplit of a 1-rank comm gives a working comm (and
 *                     of that one too); a negative color gives none
 *   abort             zs_comm_abort on a healthy comm: later calls fail at once,
 *                     destroy is prompt
 * Two ranks (test_comm_nccl_np2):
 *   init_timeout_mpi  rank 1 never calls zs_comm_create_nccl_mpi: rank 0 gets
 *                     ZS_ERR_TIMEOUT (the ranks may share one GPU: rank 1 never
 *                     touches NCCL)
 *   stuck_later       after a warm-up all_reduce, rank 0 alone issues another:
 *                     the watchdog ends it (ZS_ERR_TIMEOUT as the comm's async
 *                     error, the stream moves on, later calls fail at once);
 *                     rank 1 destroys its comm, whose peer is gone, within T + 10 s
 *   stuck_first       the same with the comm's first collective, which is where
 *                     NCCL (2.22+) connects: either the call itself returns
 *                     ZS_ERR_TIMEOUT (the enqueue could not finish) or the
 *                     watchdog ends it; the test says which
 *   revoke            rank 1 revokes the comm (zs_comm_revoke) while rank 0's
 *                     all_reduce waits for it on the GPU: within 5 s (the
 *                     timeout is 8) rank 0's comm and a comm split from it
 *                     report ZS_ERR_PEER naming rank 1 and its reason, and the
 *                     stream moves on (the notice aborted the NCCL comm)
 * The stuck cases need 2 GPUs (NCCL refuses two ranks on one GPU of one host) and
 * skip with that reason on one. With ZS_TEST_NCCL_SHARE_GPU=1 and one GPU
 * (test_comm_nccl_shared_gpu_np2) they run on that GPU anyway: each rank poses as
 * a host of its own (NCCL_HOSTID), so NCCL connects them over sockets on lo; if
 * NCCL still refuses, they skip. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/common.h"
#include "harness.h"

#ifdef ZS_HAVE_NCCL
#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#include "zeroshard/mpi.h"
#include "zeroshard/nccl.h"

#define T1 3.0 /* ZS_COMM_TIMEOUT_S of the timeout cases */
#define T2 8.0 /* of the 2-rank stuck cases: their comms must also be made within it */
#define SLACK 10.0 /* what a timeout may take past its limit (abort, polling) */

static zs_device_t *dev;
static int rank, size, ndev, share, gpu = -1;

static void set_timeout(double t) {
  char v[32];
  snprintf(v, sizeof v, "%g", t);
  setenv("ZS_COMM_TIMEOUT_S", v, 1);
  zs__settings_reload();
}

/* all_reduce(sum) of rank+1 over c: 0 when the result is right. */
static int check_comm(zs_comm_t *c) {
  int32_t h = zs_comm_rank(c) + 1, g = -1, *d = NULL;
  int n = zs_comm_size(c), bad = 1;
  if (zs_device_alloc(dev, 4, ZS_MEM_OTHER, (void **)&d) != ZS_OK) return 1;
  if (zs_memcpy_async(dev, d, &h, 4, ZS_COPY_H2D, NULL) == ZS_OK &&
      zs_comm_all_reduce(c, d, d, 1, ZS_INT32, ZS_SUM, NULL) == ZS_OK &&
      zs_comm_barrier(c, NULL) == ZS_OK && zs_memcpy_async(dev, &g, d, 4, ZS_COPY_D2H, NULL) == ZS_OK &&
      zs_stream_synchronize(dev, NULL) == ZS_OK)
    bad = g != n * (n + 1) / 2;
  if (bad) fprintf(stderr, "[rank %d] check_comm: all_reduce gave %d (%s)\n", rank, (int)g, zs_last_error());
  zs_device_free(dev, d, 4, ZS_MEM_OTHER);
  return bad || zs_comm_async_error(c) != ZS_OK;
}

/* ---- one rank ------------------------------------------------------------------- */

static void test_init_timeout(void) {
  set_timeout(T1);
  ncclUniqueId id;
  assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  zs_comm_t *c = (zs_comm_t *)&c; /* must be reset */
  double t0 = zs__now();
  expect_status(zs_comm_create_nccl_id(&c, dev, id, 2, 0), ZS_ERR_TIMEOUT);
  double dt = zs__now() - t0;
  fprintf(stderr, "init_timeout: ZS_ERR_TIMEOUT after %.2f s (limit %g s)\n", dt, T1);
  expect_true(c == NULL);
  expect_true(dt >= T1 - 0.1 && dt < T1 + SLACK);
  expect_str_contains(zs_last_error(), "ZS_COMM_TIMEOUT_S=3");
  expect_str_contains(zs_last_error(), "NCCL init (rank 0 of 2");
  /* the abort left NCCL usable */
  set_timeout(60);
  assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  assert_ok(zs_comm_create_nccl_id(&c, dev, id, 1, 0));
  expect_int_eq(check_comm(c), 0);
  zs_comm_destroy(c);
}

static void test_create_id(void) {
  set_timeout(60);
  ncclUniqueId id;
  assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  zs_comm_t *c = NULL;
  expect_status(zs_comm_create_nccl_id(NULL, dev, id, 1, 0), ZS_ERR_INVALID);
  expect_status(zs_comm_create_nccl_id(&c, NULL, id, 1, 0), ZS_ERR_INVALID);
  expect_status(zs_comm_create_nccl_id(&c, dev, id, 0, 0), ZS_ERR_INVALID);
  expect_status(zs_comm_create_nccl_id(&c, dev, id, 1, 1), ZS_ERR_INVALID);
  expect_status(zs_comm_create_nccl_id(&c, dev, id, 2, -1), ZS_ERR_INVALID);
  zs_device_t *cpu = NULL;
  if (zs_device_create_cpu(&cpu) == ZS_OK) {
    expect_status(zs_comm_create_nccl_id(&c, cpu, id, 1, 0), ZS_ERR_INVALID);
    expect_str_contains(zs_last_error(), "cuda device");
    zs_device_destroy(cpu);
  }
  expect_true(c == NULL);
  assert_ok(zs_comm_create_nccl_id(&c, dev, id, 1, 0));
  expect_true(!strcmp(zs_comm_backend(c), "nccl"));
  expect_int_eq(zs_comm_size(c), 1);
  expect_int_eq(zs_comm_rank(c), 0);
  expect_int_eq(check_comm(c), 0);
  double t0 = zs__now();
  zs_comm_destroy(c); /* finalize + destroy of a healthy comm */
  expect_true(zs__now() - t0 < 5.0);
}

static void test_from_nonblocking(void) {
  set_timeout(60);
  ncclUniqueId id;
  assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t nc = NULL;
  assert_int_eq(cudaSetDevice(gpu), cudaSuccess); /* NCCL takes the current device */
  ncclResult_t r = ncclCommInitRankConfig(&nc, 1, id, 0, &cfg);
  assert_true(r == ncclSuccess || r == ncclInProgress);
  zs_comm_t *c = NULL;
  assert_ok(zs_comm_create_nccl_from(&c, dev, nc)); /* waits for the init */
  expect_int_eq(check_comm(c), 0);
  zs_comm_destroy(c);
  /* still the caller's: finalize, poll, destroy */
  r = ncclCommFinalize(nc);
  expect_true(r == ncclSuccess || r == ncclInProgress);
  ncclResult_t state = ncclInProgress;
  double t0 = zs__now();
  while (state == ncclInProgress && zs__now() - t0 < 30) ncclCommGetAsyncError(nc, &state);
  expect_int_eq(state, ncclSuccess);
  expect_int_eq(ncclCommDestroy(nc), ncclSuccess);
}

static void test_split(void) {
  set_timeout(60);
  zs_comm_t *p = NULL, *child = NULL, *none = (zs_comm_t *)&none, *grand = NULL;
  assert_ok(zs_comm_create_nccl_mpi(&p, dev, MPI_COMM_WORLD));
  expect_ok(zs_comm_split(p, 0, 0, &child));
  if (child) {
    expect_true(!strcmp(zs_comm_backend(child), "nccl"));
    expect_int_eq(zs_comm_size(child), 1);
    expect_int_eq(zs_comm_rank(child), 0);
    expect_int_eq(check_comm(child), 0);
    expect_ok(zs_comm_split(child, 5, 0, &grand)); /* a split of a split */
    if (grand) expect_int_eq(check_comm(grand), 0);
    else ZS_T_REPORT("%s", "the split of the split gave no comm");
  } else {
    ZS_T_REPORT("%s", "zs_comm_split(color 0) gave no comm");
  }
  expect_ok(zs_comm_split(p, -1, 0, &none)); /* this rank joins none */
  expect_true(none == NULL);
  expect_int_eq(check_comm(p), 0); /* the parent still works */
  zs_comm_destroy(grand);
  zs_comm_destroy(child);
  zs_comm_destroy(p);
}

static void test_abort(void) {
  set_timeout(60);
  ncclUniqueId id;
  assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  zs_comm_t *c = NULL, *x = (zs_comm_t *)&x;
  assert_ok(zs_comm_create_nccl_id(&c, dev, id, 1, 0));
  expect_int_eq(check_comm(c), 0);
  expect_ok(zs_comm_abort(c));
  expect_int_eq(zs_comm_async_error(c), ZS_ERR_COMM);
  double t0 = zs__now();
  float *d = NULL;
  if (zs_device_alloc(dev, 4, ZS_MEM_OTHER, (void **)&d) == ZS_OK) {
    expect_status(zs_comm_all_reduce(c, d, d, 1, ZS_FP32, ZS_SUM, NULL), ZS_ERR_COMM);
    expect_str_contains(zs_last_error(), "broken");
    zs_device_free(dev, d, 4, ZS_MEM_OTHER);
  }
  expect_status(zs_comm_split(c, 0, 0, &x), ZS_ERR_COMM);
  expect_true(x == NULL);
  expect_ok(zs_comm_abort(c)); /* again: nothing more to do */
  zs_comm_destroy(c);
  expect_true(zs__now() - t0 < 2.0);
}

/* ---- two ranks ------------------------------------------------------------------ */

static void test_init_timeout_mpi(void) {
  set_timeout(T1);
  MPI_Comm mc;
  MPI_Comm_dup(MPI_COMM_WORLD, &mc); /* rank 0's broadcast may stay pending on it: never freed */
  if (rank == 0) {
    zs_comm_t *c = (zs_comm_t *)&c;
    double t0 = zs__now();
    expect_status(zs_comm_create_nccl_mpi(&c, dev, mc), ZS_ERR_TIMEOUT);
    double dt = zs__now() - t0;
    const char *e = zs_last_error();
    fprintf(stderr, "init_timeout_mpi: ZS_ERR_TIMEOUT after %.2f s (limit %g s) in %s\n", dt, T1,
            strstr(e, "MPI_Ibcast") ? "the id broadcast" : strstr(e, "NCCL init") ? "NCCL init" : "?");
    expect_true(c == NULL);
    expect_true(dt >= T1 - 0.1 && dt < T1 + SLACK);
    expect_str_contains(e, "ZS_COMM_TIMEOUT_S=3");
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/* A 2-rank NCCL comm over MPI_COMM_WORLD, made with timeout T2 on every rank, or
 * NULL on every rank (and a reason) if it could not be made on some. */
static zs_comm_t *pair_comm(char *why, size_t whylen) {
  set_timeout(T2);
  zs_comm_t *c = NULL;
  zs_status_t st = zs_comm_create_nccl_mpi(&c, dev, MPI_COMM_WORLD);
  int ok = st == ZS_OK, all = 0;
  if (!ok)
    snprintf(why, whylen, "rank %d: zs_comm_create_nccl_mpi: %s (%s)", rank, zs_status_name(st), zs_last_error());
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all) {
    if (ok) snprintf(why, whylen, "another rank could not make the comm");
    if (c) zs_comm_abort(c);
    zs_comm_destroy(c);
    return NULL;
  }
  return c;
}

/* Polls the comm's async error until it is not ZS_OK or `limit` seconds pass. */
static zs_status_t wait_async(zs_comm_t *c, double limit) {
  double t0 = zs__now();
  zs_status_t st;
  while ((st = zs_comm_async_error(c)) == ZS_OK && zs__now() - t0 < limit) {
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
  }
  return st;
}

/* Rank 0 alone issues an all_reduce on c (after `warm` all_reduces on both). */
static void stuck_case(const char *name, int warm) {
  char why[ZS_ERRBUF + 128] = "";
  zs_comm_t *c = pair_comm(why, sizeof why);
  if (!c) {
    /* NCCL refusing two ranks on one GPU (NCCL_HOSTID not honoured) is a skip;
     * anything else is a failure */
    if (share && ndev < 2) zs_test_skip("NCCL would not put 2 ranks on this one GPU (see stderr): needs 2 GPUs");
    ZS_T_REPORT("%s: %s", name, why);
    return;
  }
  float *d = NULL;
  if (zs_device_alloc(dev, 4096, ZS_MEM_OTHER, (void **)&d) != ZS_OK) d = NULL;
  if (warm) { /* the same call as the stuck one below: its connections are made here */
    expect_int_eq(check_comm(c), 0);
    if (d) expect_ok(zs_comm_all_reduce(c, d, d, 1024, ZS_FP32, ZS_SUM, NULL));
    expect_ok(zs_stream_synchronize(dev, NULL));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    zs_stream_t *s = NULL;
    if (d && zs_stream_create(dev, &s) == ZS_OK) {
      double t0 = zs__now();
      zs_status_t st = zs_comm_all_reduce(c, d, d, 1024, ZS_FP32, ZS_SUM, s);
      double dt = zs__now() - t0;
      if (st == ZS_ERR_TIMEOUT) { /* the enqueue could not finish: NCCL was connecting */
        fprintf(stderr, "%s: the call returned ZS_ERR_TIMEOUT after %.2f s (NCCL could not finish enqueuing)\n",
                name, dt);
        expect_true(!warm); /* with connections up, the enqueue needs no peer */
        expect_true(dt >= T2 - 0.1 && dt < T2 + SLACK);
        expect_str_contains(zs_last_error(), "still in progress");
        expect_int_eq(zs_comm_async_error(c), ZS_ERR_TIMEOUT);
      } else if (st == ZS_OK) { /* on the GPU: the watchdog must end it */
        st = wait_async(c, T2 + SLACK + 5);
        dt = zs__now() - t0;
        fprintf(stderr, "%s: enqueued; the watchdog reported %s after %.2f s\n", name, zs_status_name(st), dt);
        expect_int_eq(st, ZS_ERR_TIMEOUT);
        expect_true(dt >= T2 - 0.1 && dt < T2 + SLACK);
        expect_str_contains(zs_comm_last_error(c), "did not complete within ZS_COMM_TIMEOUT_S=8");
        expect_str_contains(zs_comm_last_error(c), "a rank died (exited or was killed)");
        /* the abort ended the kernel: the stream moves on */
        double t1 = zs__now();
        expect_ok(zs_stream_synchronize(dev, s));
        expect_true(zs__now() - t1 < SLACK);
      } else {
        ZS_T_REPORT("%s: the lone all_reduce returned %s (%s)", name, zs_status_name(st), zs_last_error());
      }
      /* later calls fail at once, with the first failure */
      double t1 = zs__now();
      expect_status(zs_comm_all_gather(c, d, d, 1, ZS_FP32, s), ZS_ERR_TIMEOUT);
      expect_str_contains(zs_last_error(), "broken");
      expect_status(zs_comm_barrier(c, NULL), ZS_ERR_TIMEOUT);
      expect_true(zs__now() - t1 < 0.5);
      expect_ok(zs_comm_abort(c));
      expect_int_eq(zs_comm_async_error(c), ZS_ERR_TIMEOUT); /* the first failure stays */
      t1 = zs__now();
      zs_comm_destroy(c);
      expect_true(zs__now() - t1 < 2.0);
      zs_stream_synchronize(dev, s);
    } else {
      ZS_T_REPORT("%s: stream or buffer: %s", name, zs_last_error());
      zs_comm_abort(c);
      zs_comm_destroy(c);
    }
    zs_stream_destroy(dev, s);
    MPI_Barrier(MPI_COMM_WORLD);
  } else {
    MPI_Barrier(MPI_COMM_WORLD); /* rank 0 is done with its comm */
    double t0 = zs__now();
    zs_comm_destroy(c); /* healthy here, but its peer is gone: bounded */
    double dt = zs__now() - t0;
    fprintf(stderr, "%s: rank 1 destroyed its comm (peer aborted) in %.2f s\n", name, dt);
    expect_true(dt < T2 + SLACK);
  }
  if (d) zs_device_free(dev, d, 4096, ZS_MEM_OTHER);
  MPI_Barrier(MPI_COMM_WORLD);
}

static void test_revoke(void) {
  if (ndev < 2 && !share)
    zs_test_skip("needs 2 GPUs (NCCL puts one rank on each); 1 visible: test_comm_nccl_shared_gpu_np2 tries one");
  char why[ZS_ERRBUF + 128] = "";
  zs_comm_t *c = pair_comm(why, sizeof why), *sub = NULL;
  if (!c) {
    if (share && ndev < 2) zs_test_skip("NCCL would not put 2 ranks on this one GPU (see stderr): needs 2 GPUs");
    ZS_T_REPORT("revoke: %s", why);
    return;
  }
  static const char reason[] = "stage 1 cannot read micro-batch 3";
  expect_ok(zs_comm_split(c, 0, rank, &sub));
  float *d = NULL;
  if (zs_device_alloc(dev, 4096, ZS_MEM_OTHER, (void **)&d) != ZS_OK) d = NULL;
  expect_int_eq(check_comm(c), 0); /* connections up */
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    zs_stream_t *s = NULL;
    if (d && zs_stream_create(dev, &s) == ZS_OK) {
      double t0 = zs__now();
      expect_ok(zs_comm_all_reduce(c, d, d, 1024, ZS_FP32, ZS_SUM, s)); /* rank 1 never joins */
      zs_status_t st = wait_async(c, T2 + SLACK);
      double dt = zs__now() - t0;
      fprintf(stderr, "revoke: rank 0's comm reported %s after %.3f s\n", zs_status_name(st), dt);
      expect_int_eq(st, ZS_ERR_PEER);
      expect_true(dt < 5.0);
      expect_str_contains(zs_comm_last_error(c), "world rank 1 (rank 1 of this comm) failed with ZS_ERR_IO");
      expect_str_contains(zs_comm_last_error(c), reason);
      expect_int_eq(zs_comm_async_error(sub), ZS_ERR_PEER); /* the whole family */
      expect_str_contains(zs_comm_last_error(sub), "world rank 1");
      double t1 = zs__now();
      expect_ok(zs_stream_synchronize(dev, s)); /* the abort ended the kernel */
      expect_true(zs__now() - t1 < SLACK);
      zs_stream_destroy(dev, s);
    } else {
      ZS_T_REPORT("revoke: stream or buffer: %s", zs_last_error());
    }
  } else {
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);
    expect_ok(zs_comm_revoke(c, ZS_ERR_IO, reason));
    expect_int_eq(zs_comm_async_error(c), ZS_ERR_COMM);
    expect_int_eq(zs_comm_async_error(sub), ZS_ERR_COMM);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double t2 = zs__now();
  zs_comm_destroy(sub);
  zs_comm_destroy(c);
  expect_true(zs__now() - t2 < 2.0);
  if (d) zs_device_free(dev, d, 4096, ZS_MEM_OTHER);
  MPI_Barrier(MPI_COMM_WORLD);
}

static void test_stuck_later(void) {
  if (ndev < 2 && !share)
    zs_test_skip("needs 2 GPUs (NCCL puts one rank on each); 1 visible: test_comm_nccl_shared_gpu_np2 tries one");
  stuck_case("stuck_later", 1);
}

static void test_stuck_first(void) {
  if (ndev < 2 && !share)
    zs_test_skip("needs 2 GPUs (NCCL puts one rank on each); 1 visible: test_comm_nccl_shared_gpu_np2 tries one");
  stuck_case("stuck_first", 0);
}

/* Two ranks on one GPU as two "hosts" (see the header): before any NCCL call. */
static void share_gpu_env(int r) {
  char id[32];
  snprintf(id, sizeof id, "zs-test-host-%d", r);
  setenv("NCCL_HOSTID", id, 1);
  setenv("NCCL_NET", "Socket", 0);
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
}
#endif

int main(int argc, char **argv) {
  const char *r = getenv("OMPI_COMM_WORLD_RANK");
  if (!r) r = getenv("PMI_RANK");
  zs_t_rank = r ? atoi(r) : 0;
#ifndef ZS_HAVE_NCCL
  (void)argc, (void)argv, (void)zs_t_failed_checks;
  ZS_SKIP("build without NCCL");
#else
  ndev = zs_device_cuda_count();
  if (ndev == 0) ZS_SKIP("no CUDA device");
  const char *sh = getenv("ZS_TEST_NCCL_SHARE_GPU");
  share = sh && !strcmp(sh, "1");
  if (share && ndev >= 2) ZS_SKIP("2 or more GPUs: test_comm_nccl_np2 runs the 2-rank cases on separate GPUs");
  if (share) share_gpu_env(zs_t_rank);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  zs_t_rank = rank;
  if (size > 2 || (share && size != 2)) {
    MPI_Finalize();
    ZS_SKIP(share ? "the shared-GPU cases run on 2 ranks" : "runs on 1 or 2 ranks");
  }
  if (zs_mpi_local_gpu(MPI_COMM_WORLD, &gpu) != ZS_OK || zs_device_create_cuda(&dev, gpu) != ZS_OK) {
    fprintf(stderr, "setup failed: %s\n", zs_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (size == 1) {
    zs_test_run(test_init_timeout);
    zs_test_run(test_create_id);
    zs_test_run(test_from_nonblocking);
    zs_test_run(test_split);
    zs_test_run(test_abort);
  } else {
    if (!share) zs_test_run(test_init_timeout_mpi);
    zs_test_run(test_stuck_later);
    zs_test_run(test_stuck_first);
    zs_test_run(test_revoke);
  }
  int rc = zs_test_finish();
  zs_device_destroy(dev);
  MPI_Finalize();
  return rc;
#endif
}
