/* The nccl backend's comms: made (from MPI, a unique id, or the caller's
 * ncclComm_t), split and destroyed (nccl.c's header comment, items 1 and 4). */
#include "comm/mpi_f2c.h"
#include "comm/nccl_impl.h"

static const zs_comm_i nccl_iface;

/* ---- create / destroy ----------------------------------------------------------------- */

/* NCCL's version code as major.minor.patch (codes before 2.9 had another form). */
static void version_parts(int v, int *maj, int *min, int *pat) {
  if (v >= 10000) *maj = v / 10000, *min = v / 100 % 100, *pat = v % 100;
  else *maj = v / 1000, *min = v / 100 % 10, *pat = v % 100;
}

/* The libnccl loaded at run time may be older than the nccl.h we built with. */
static zs_status_t check_runtime(const char *fn) {
  static atomic_int warned;
  int v = 0, maj, min, pat;
  if (ncclGetVersion(&v) != ncclSuccess)
    return ZS_FAIL(NULL, ZS_ERR_COMM, "%s: ncclGetVersion failed: is libnccl.so.2 the library we built with?", fn);
  version_parts(v, &maj, &min, &pat);
  if (v < NCCL_VERSION(2, 18, 0))
    return ZS_FAIL(NULL, ZS_ERR_UNSUPPORTED,
                   "%s: the NCCL library loaded at run time is %d.%d.%d, but zeroshard needs 2.18 or newer "
                   "(non-blocking comms, ncclCommSplit; built with %d.%d.%d): put a newer libnccl.so.2 first "
                   "on LD_LIBRARY_PATH",
                   fn, maj, min, pat, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
  const char *b = getenv("NCCL_COMM_BLOCKING");
  if (b && !strcmp(b, "1") && !atomic_exchange(&warned, 1))
    ZS_LOG_W("NCCL_COMM_BLOCKING=1 makes NCCL comms blocking: a rank that never arrives can then hang NCCL "
             "init and calls; unset it to let ZS_COMM_TIMEOUT_S bound them");
  return ZS_OK;
}

/* A context around a ready NCCL comm (rank, size, GPU from NCCL), with its
 * watchdog; it joins family fam (may be NULL) with this id and fam_rank (owned,
 * may be NULL). On failure nc and fam are left to the caller. */
static zs_status_t ctx_create(zs_device_t *dev, ncclComm_t nc, int owns, zs__family_t *fam, uint64_t id,
                              int *fam_rank, zs_comm_t **out) {
  nccl_ctx_t *ctx = calloc(1, sizeof *ctx);
  if (!ctx) {
    free(fam_rank);
    return ZS_FAIL(NULL, ZS_ERR_NOMEM, "nccl comm: out of host memory");
  }
  ctx->dev = dev;
  ctx->nc = nc;
  ctx->owns = owns;
  ctx->limit = zs__settings()->comm_timeout_s;
  ncclResult_t r;
  int cudev = -1;
  if ((r = ncclCommUserRank(nc, &ctx->rank)) != ncclSuccess || (r = ncclCommCount(nc, &ctx->size)) != ncclSuccess ||
      (r = ncclCommCuDevice(nc, &cudev)) != ncclSuccess) {
    zs_status_t st = zs__nccl_fail(ctx, r, "querying the NCCL comm");
    free(fam_rank);
    free(ctx);
    return st;
  }
  ctx->ordinal = cudev;
  pthread_mutex_init(&ctx->mu, NULL);
  pthread_mutex_init(&ctx->bmu, NULL);
  zs_status_t st = zs__comm_wrap(out, &nccl_iface, ctx, dev, ctx->rank, ctx->size);
  if (st == ZS_OK) {
    ctx->comm = *out;
    st = zs__worker_start(&ctx->wk, &zs__nccl_watch_ops, ctx);
    if (st == ZS_OK) {
      /* the watchdog reads fm only for an op, which comes after we return */
      ctx->fm.ctx = ctx;
      ctx->fm.on_notice = zs__nccl_on_notice;
      ctx->fm.rank = ctx->rank;
      ctx->fm.size = ctx->size;
      zs__family_join(fam, &ctx->fm, id, fam_rank);
      zs__nccl_order_hold(ctx->ordinal);
      return ZS_OK;
    }
    st = ZS_FAIL(NULL, st, "nccl comm: %s", zs_last_error());
    zs__comm_unwrap(*out);
    *out = NULL;
  }
  pthread_mutex_destroy(&ctx->bmu);
  pthread_mutex_destroy(&ctx->mu);
  free(fam_rank);
  free(ctx);
  return st;
}

/* Waits, bounded, for the watchdog to retire every queued op. An op that stays
 * unfinished past the deadline (one that never started: the watchdog times only
 * started ones) breaks and aborts the comm, after which the list drains at once. */
static void drain(nccl_ctx_t *ctx) {
  double deadline = zs__nccl_deadline_after(ctx->limit);
  zs__worker_lock(&ctx->wk);
  while (zs__worker_busy_locked(&ctx->wk)) {
    if (deadline > 0 && zs__now() > deadline) {
      zs__worker_unlock(&ctx->wk);
      char msg[ZS_ERRBUF];
      snprintf(msg, sizeof msg,
               "nccl comm (rank %d of %d): zs_comm_destroy: queued operations did not finish within "
               "ZS_COMM_TIMEOUT_S=%g s (their streams wait on work that never came?); the NCCL comm was aborted",
               ctx->rank, ctx->size, ctx->limit);
      ZS_LOG_W("%s", msg);
      zs__nccl_set_broken(ctx, ZS_ERR_TIMEOUT, msg);
      zs__nccl_do_abort(ctx);
      zs__worker_lock(&ctx->wk);
      deadline = 0; /* aborted: the watchdog now retires everything */
      continue;
    }
    zs__worker_wait_locked(&ctx->wk, 0.05); /* wake to check the deadline every 50 ms */
  }
  zs__worker_unlock(&ctx->wk);
  zs__worker_stop(&ctx->wk);
}

static void nccl_destroy(void *vctx) {
  nccl_ctx_t *ctx = vctx;
  drain(ctx);
  zs__worker_join(&ctx->wk);
  zs__family_leave(&ctx->fm); /* no notice aborts the NCCL comm under the teardown below */

  int prev = zs__nccl_device_enter(ctx->ordinal);
  for (int k = 0; k < 2; k++)
    for (watch_t *w = k ? ctx->spare_timed : ctx->spare, *next; w; w = next) {
      next = w->next;
      cudaEventDestroy(w->start);
      cudaEventDestroy(w->end);
      free(w);
    }
  if (ctx->tref) cudaEventDestroy(ctx->tref);
  if (ctx->tstream) cudaStreamDestroy(ctx->tstream);
  if (ctx->barrier_buf) zs_device_free(ctx->dev, ctx->barrier_buf, sizeof(float), ZS_MEM_COMM);
  if (ctx->owns && !atomic_load(&ctx->aborted)) {
    /* healthy: finalize (flushes and quiesces with the peers, non-blocking),
     * polled, then destroy; broken, or not quiescent by the deadline: abort */
    ncclResult_t r = ncclSuccess, state = ncclSuccess;
    poll_end_t end = POLL_ERROR;
    if (!atomic_load(&ctx->broken)) {
      r = ncclCommFinalize(ctx->nc);
      if (r == ncclSuccess || r == ncclInProgress)
        end = zs__nccl_poll_ready(ctx->nc, zs__nccl_deadline_after(ctx->limit), NULL, &state);
      else state = r;
    }
    if (end == POLL_DONE) {
      r = ncclCommDestroy(ctx->nc);
      if (r != ncclSuccess && r != ncclInProgress)
        ZS_LOG_W("nccl comm (rank %d of %d): ncclCommDestroy failed: %s", ctx->rank, ctx->size, ncclGetErrorString(r));
    } else {
      if (!atomic_load(&ctx->broken))
        ZS_LOG_W("nccl comm (rank %d of %d): ncclCommFinalize %s; aborting the NCCL comm", ctx->rank, ctx->size,
                 end == POLL_TIMEOUT ? "did not finish within ZS_COMM_TIMEOUT_S (a peer is gone?)"
                                     : ncclGetErrorString(state));
      ncclCommAbort(ctx->nc);
    }
  }
  zs__nccl_order_drop(ctx->ordinal);
  zs__nccl_device_leave(ctx->ordinal, prev);
  pthread_mutex_destroy(&ctx->bmu);
  pthread_mutex_destroy(&ctx->mu);
  free(ctx);
}

/* ncclCommSplit on a non-blocking parent (NCCL 2.18+): the call returns
 * ncclInProgress and NCCL's thread runs the split, a collective over the parent;
 * the parent reports ncclInProgress until it is done, and the child handle is
 * written into split_out only at its end (NULL for NCCL_SPLIT_NOCOLOR). So: poll
 * the parent, then the child, against the deadline. On failure the parent is
 * broken (the ranks are out of step) and aborted, and so is a half-made child. */
static zs_status_t nccl_split(void *vctx, int color, int key, zs_comm_t **out) {
  nccl_ctx_t *ctx = vctx;
  static const char what[] = "zs_comm_split (ncclCommSplit)";
  if (atomic_load(&ctx->broken) || atomic_load(&ctx->aborted)) return zs__nccl_broken_status(ctx, "zs_comm_split");
  uint64_t id = zs__family_child_id(&ctx->fm, color); /* counted on every rank, whatever its color */
  double deadline = zs__nccl_deadline_after(ctx->limit);
  int prev = zs__nccl_device_enter(ctx->ordinal);
  pthread_mutex_lock(&ctx->mu);
  zs_status_t st;
  ncclComm_t nc = NULL;
  if (atomic_load(&ctx->aborted)) {
    st = zs__nccl_broken_status(ctx, "zs_comm_split");
  } else {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    __atomic_store_n(&ctx->split_out, NULL, __ATOMIC_RELEASE);
    ncclResult_t r = ncclCommSplit(ctx->nc, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &ctx->split_out, &cfg);
    st = zs__nccl_settle(ctx, r, what, deadline);
    if (st == ZS_OK && color >= 0) {
      /* the handle normally arrives with the parent's ncclSuccess; wait for it
       * (bounded) in case a release publishes it later, then for the child */
      long pause = 1000;
      while (!(nc = __atomic_load_n(&ctx->split_out, __ATOMIC_ACQUIRE)) && !(deadline > 0 && zs__now() > deadline)) {
        zs__nccl_sleep_ns(pause);
        if (pause < 1000000) pause *= 2;
      }
      ncclResult_t state = ncclSuccess;
      poll_end_t end = nc ? zs__nccl_poll_ready(nc, deadline, NULL, &state) : POLL_TIMEOUT;
      if (end == POLL_TIMEOUT)
        st = ZS_FAIL(ctx->comm->err, ZS_ERR_TIMEOUT,
                     "nccl comm (rank %d of %d): the comm made by %s was not ready within ZS_COMM_TIMEOUT_S=%g s; "
                     "the NCCL comm was aborted",
                     ctx->rank, ctx->size, what, ctx->limit);
      else if (end != POLL_DONE)
        st = ZS_FAIL(ctx->comm->err, ZS_ERR_COMM, "nccl comm (rank %d of %d): the comm made by %s failed: %s%s%s",
                     ctx->rank, ctx->size, what, ncclGetErrorString(state), *zs__nccl_last(nc) ? ": " : "",
                     zs__nccl_last(nc));
    }
    if (st != ZS_OK) {
      zs__nccl_set_broken(ctx, st, zs_last_error());
      zs__nccl_abort_locked(ctx); /* also ends NCCL's split thread, so split_out is final */
    }
    nc = __atomic_load_n(&ctx->split_out, __ATOMIC_ACQUIRE);
  }
  pthread_mutex_unlock(&ctx->mu);
  if (st == ZS_OK && nc) st = ctx_create(ctx->dev, nc, 1, ctx->fm.fam, id, NULL, out); /* members: unknown here */
  if (st != ZS_OK && nc) ncclCommAbort(nc);
  zs__nccl_device_leave(ctx->ordinal, prev);
  return st;
}

static const zs_comm_i nccl_iface = {
    .name = "nccl",
    .supports = NULL, /* every dtype and op */
    .coll = zs__nccl_coll,
    .split = nccl_split,
    .async_error = zs__nccl_async_error,
    .abort = zs__nccl_abort,
    .revoke = zs__nccl_revoke,
    .peers_told = zs__nccl_peers_told,
    .destroy = nccl_destroy,
};

static zs_status_t check_device(zs_device_t *dev, const char *fn) {
  if (!dev) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: dev is NULL", fn);
  if (zs_device_kind(dev) != ZS_DEVICE_CUDA)
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "%s: the nccl backend moves device buffers and needs a cuda device (got %s); use "
                   "zs_comm_create_mpi_world for a cpu device",
                   fn, zs_device_name(dev));
  return ZS_OK;
}

/* Makes this rank's NCCL comm, non-blocking, and polls it until it is ready or
 * the deadline passes (then it is aborted: ZS_ERR_TIMEOUT). */
static zs_status_t init_rank(const char *fn, zs_device_t *dev, ncclUniqueId id, int nranks, int rank,
                             double deadline, double limit, ncclComm_t *out) {
  *out = NULL;
  int prev = -1;
  cudaGetDevice(&prev);
  cudaError_t e = cudaSetDevice(dev->ordinal);
  if (e != cudaSuccess)
    return ZS_FAIL(NULL, ZS_ERR_DEVICE, "%s: cudaSetDevice(%d) failed: %s", fn, dev->ordinal, cudaGetErrorString(e));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t nc = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&nc, nranks, id, rank, &cfg), state = r;
  poll_end_t end = POLL_ERROR;
  if ((r == ncclSuccess || r == ncclInProgress) && nc) end = zs__nccl_poll_ready(nc, deadline, NULL, &state);
  zs_status_t st = ZS_OK;
  if (end == POLL_TIMEOUT) {
    st = ZS_FAIL(NULL, ZS_ERR_TIMEOUT,
                 "%s: NCCL init (rank %d of %d, GPU %d) did not complete within ZS_COMM_TIMEOUT_S=%g s: a rank "
                 "never called it, or cannot reach this one (check that every rank creates the comm, and "
                 "NCCL_SOCKET_IFNAME); the NCCL comm was aborted",
                 fn, rank, nranks, dev->ordinal, limit);
  } else if (end != POLL_DONE) {
    const char *last = zs__nccl_last(nc);
    st = ZS_FAIL(NULL, ZS_ERR_COMM, "%s: NCCL init (rank %d of %d, GPU %d) failed: %s%s%s%s", fn, rank, nranks,
                 dev->ordinal, ncclGetErrorString(state), *last ? ": " : "", last,
                 state == ncclInvalidUsage ? " (NCCL needs one GPU per rank: pick it with zs_mpi_local_gpu; with "
                                             "fewer GPUs than ranks use zs_comm_create_mpi with host staging)"
                                           : "");
  }
  if (st != ZS_OK && nc) ncclCommAbort(nc);
  if (prev >= 0 && prev != dev->ordinal) cudaSetDevice(prev);
  if (st == ZS_OK) *out = nc;
  return st;
}

static zs_status_t create_nccl_mpi(zs_comm_t **out, zs_device_t *dev, MPI_Comm mpi_comm, const char *fn);
/* With MPI_COMM_WORLD's guard (mpi.c) held through its MPI collectives. */
static zs_status_t create_nccl_mpi_guarded(zs_comm_t **out, zs_device_t *dev, MPI_Comm mpi_comm, const char *fn) {
  zs__mpi_guard_hold();
  const zs_status_t st = create_nccl_mpi(out, dev, mpi_comm, fn);
  zs__mpi_guard_drop();
  return st;
}

zs_status_t zs_comm_create_nccl_mpi(zs_comm_t **out, zs_device_t *dev, MPI_Comm mpi_comm) {
  return create_nccl_mpi_guarded(out, dev, mpi_comm, "zs_comm_create_nccl_mpi");
}

zs_status_t zs_comm_create_nccl_mpi_f(zs_comm_t **out, zs_device_t *dev, MPI_Fint fortran_comm) {
  return create_nccl_mpi_guarded(out, dev, zs__mpi_comm_f2c(fortran_comm), "zs_comm_create_nccl_mpi_f");
}

static zs_status_t create_nccl_mpi(zs_comm_t **out, zs_device_t *dev, MPI_Comm mpi_comm, const char *fn) {
  if (!out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: out is NULL", fn);
  *out = NULL;
  ZS_CHECK(check_device(dev, fn));
  int init = 0, fin = 0, rank = 0, size = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin) return ZS_FAIL(NULL, ZS_ERR_STATE, "%s: MPI is not initialized (call MPI_Init first)", fn);
  if (mpi_comm == MPI_COMM_NULL) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: mpi_comm is MPI_COMM_NULL", fn);
  ZS_CHECK(check_runtime(fn));
  MPI_Comm_rank(mpi_comm, &rank);
  MPI_Comm_size(mpi_comm, &size);
  const double limit = zs__settings()->comm_timeout_s, deadline = zs__nccl_deadline_after(limit);

  /* rank 0 makes the id; one broadcast also says whether it could, so that no
   * rank waits in NCCL init for an id that never comes. The buffer is on the
   * heap: after a timeout MPI may still write it when a late rank arrives
   * (MPI cannot cancel a collective), so then it is left to MPI, never freed. */
  struct idmsg {
    int ok;
    ncclUniqueId id;
  } *msg = calloc(1, sizeof *msg);
  if (!msg) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  ncclResult_t r = ncclSuccess;
  if (rank == 0) {
    r = ncclGetUniqueId(&msg->id);
    msg->ok = r == ncclSuccess;
  }
  MPI_Request req;
  char what[96];
  snprintf(what, sizeof what, "%s: MPI_Ibcast of the NCCL unique id", fn);
  if (MPI_Ibcast(msg, (int)sizeof *msg, MPI_BYTE, 0, mpi_comm, &req) != MPI_SUCCESS) {
    free(msg);
    return ZS_FAIL(NULL, ZS_ERR_COMM, "%s failed", what);
  }
  zs_status_t st = zs__mpi_poll(&req, 0, what); /* bounded by ZS_COMM_TIMEOUT_S */
  if (st == ZS_ERR_TIMEOUT) return st; /* msg stays MPI's */
  if (st == ZS_OK && !msg->ok)
    st = ZS_FAIL(NULL, ZS_ERR_COMM, "%s: ncclGetUniqueId failed on rank 0%s%s", fn, rank == 0 ? ": " : "",
                 rank == 0 ? ncclGetErrorString(r) : "");
  ncclUniqueId id = msg->id;
  free(msg);
  ZS_CHECK(st);

  /* the family's error channel (mpi_family.h), made before NCCL init so that
   * every rank makes it whatever init does on the others. The watchdog and the
   * caller's threads use it beside the program's own MPI calls: only with
   * MPI_THREAD_MULTIPLE (every rank has the same level, so all or none make it) */
  zs__family_t *fam = NULL;
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  if (level == MPI_THREAD_MULTIPLE) ZS_CHECK(zs__family_create(mpi_comm, fn, &fam));
  else ZS_LOG_I("%s: MPI was initialized without MPI_THREAD_MULTIPLE: the comm has no channel to tell the other "
                "ranks of a failure (zeroshard/comm.h)", fn);
  ncclComm_t nc = NULL;
  st = init_rank(fn, dev, id, size, rank, deadline, limit, &nc);
  if (st == ZS_OK) {
    st = ctx_create(dev, nc, 1, fam, ZS__FAMILY_ROOT_ID, zs__family_ranks(fam, mpi_comm, size), out);
    if (st != ZS_OK) ncclCommAbort(nc);
  }
  if (st != ZS_OK) {
    zs__family_drop(fam);
    return st;
  }
  int wrank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
  zs__log_set_rank(wrank);
  return ZS_OK;
}

zs_status_t zs_comm_create_nccl_id(zs_comm_t **out, zs_device_t *dev, ncclUniqueId id, int nranks, int rank) {
  static const char fn[] = "zs_comm_create_nccl_id";
  if (!out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: out is NULL", fn);
  *out = NULL;
  ZS_CHECK(check_device(dev, fn));
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: rank %d of %d ranks: need nranks >= 1 and 0 <= rank < nranks", fn, rank,
                   nranks);
  ZS_CHECK(check_runtime(fn));
  const double limit = zs__settings()->comm_timeout_s;
  ncclComm_t nc = NULL;
  ZS_CHECK(init_rank(fn, dev, id, nranks, rank, zs__nccl_deadline_after(limit), limit, &nc));
  zs_status_t st = ctx_create(dev, nc, 1, NULL, 0, NULL, out);
  if (st != ZS_OK) {
    ncclCommAbort(nc);
    return st;
  }
  zs__log_set_rank(rank);
  return ZS_OK;
}

zs_status_t zs_comm_create_nccl_from(zs_comm_t **out, zs_device_t *dev, ncclComm_t nccl_comm) {
  static const char fn[] = "zs_comm_create_nccl_from";
  if (!out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: out is NULL", fn);
  *out = NULL;
  ZS_CHECK(check_device(dev, fn));
  if (!nccl_comm) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: nccl_comm is NULL", fn);
  ZS_CHECK(check_runtime(fn));
  /* a non-blocking comm may still be initialising: wait for it (bounded), since
   * nothing else may be asked of it before */
  const double limit = zs__settings()->comm_timeout_s;
  ncclResult_t state = ncclSuccess;
  poll_end_t end = zs__nccl_poll_ready(nccl_comm, zs__nccl_deadline_after(limit), NULL, &state);
  if (end == POLL_TIMEOUT)
    return ZS_FAIL(NULL, ZS_ERR_TIMEOUT,
                   "%s: the NCCL comm was still initialising after ZS_COMM_TIMEOUT_S=%g s: a rank never called "
                   "ncclCommInitRank(Config)?",
                   fn, limit);
  if (end != POLL_DONE)
    return ZS_FAIL(NULL, ZS_ERR_COMM, "%s: the NCCL comm reports an error: %s", fn, ncclGetErrorString(state));
  int cudev = -1;
  if (ncclCommCuDevice(nccl_comm, &cudev) == ncclSuccess && cudev != dev->ordinal)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: the NCCL comm is on GPU %d but the device is GPU %d", fn, cudev,
                   dev->ordinal);
  ZS_CHECK(ctx_create(dev, nccl_comm, 0, NULL, 0, NULL, out));
  zs__log_set_rank(zs_comm_rank(*out));
  return ZS_OK;
}
