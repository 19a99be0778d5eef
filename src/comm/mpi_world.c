/* The mpi backend's process-wide state: MPI's own initialisation and
 * finalisation when zeroshard made it, the count of live mpi comms, the guard
 * on MPI_COMM_WORLD's error handler, and the polled wait used where no progress
 * thread runs yet (mpi_impl.h, "mpi_world.c"). The comms themselves: mpi.c. */
#include <stdio.h>
#include <time.h>

#include "comm/mpi_impl.h"

/* ---- process-wide MPI state ----------------------------------------------------- */

/* Live mpi-backend comms, and whether zeroshard initialised MPI (then the last
 * comm's destroy finalises it; MPI cannot be initialised again afterwards).
 *
 * Finalising after a failure: MPI_Finalize waits for every rank, so once a comm
 * has broken (a rank stopped or died, a timeout, zs_comm_abort) it could wait
 * forever, and the process could never exit. So the last destroy first runs a
 * barrier on g_fence (a duplicate of MPI_COMM_WORLD made at MPI_Init) on every
 * rank: a rank whose comms are healthy waits for it as MPI_Finalize would; a
 * rank that saw a failure waits at most min(ZS_COMM_TIMEOUT_S, 10 s). If the
 * barrier completes, every rank is there and MPI_Finalize is safe; if not, MPI
 * is left unfinalised (a warning says so) and the process can exit: mpiexec
 * then ends the job, the lost rank included. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_live, g_we_init;
static MPI_Comm g_fence = MPI_COMM_NULL;
static atomic_int g_broken;

void zs__mpi_note_broken(void) { atomic_store(&g_broken, 1); }

_Thread_local int zs__mpi_ours;

/* MPI_COMM_WORLD's handler while zeroshard uses MPI in a program that
 * initialised it itself (mpi_impl.h, zs__mpi_ours): an error raised inside
 * zeroshard's own request tests returns (zeroshard reports it, ZS_ERR_COMM on
 * the comm); any other goes to the handler the program had, kept on a
 * duplicate of MPI_COMM_SELF (g_shadow), which MPI_Comm_call_errhandler runs:
 * the default MPI_ERRORS_ARE_FATAL still ends the job (a line on stderr first
 * names the error and MPI_COMM_WORLD, since MPI then names the duplicate), a
 * function of the program's is called with the duplicate instead of
 * MPI_COMM_WORLD. Held while an mpi comm lives or is being made, and while an
 * NCCL comm is made over MPI (zs__mpi_guard_hold/_drop, counted); the
 * program's handler is restored when the last holder drops it, unless the
 * program set another meanwhile. The handler and the duplicate are made once
 * and never freed: communicators the program made from MPI_COMM_WORLD while
 * the guard was on inherited it, and keep reaching the program's handler
 * through them; a guard held again after the program put the guard's handler
 * back on MPI_COMM_WORLD (saved while it was on) is not wrapped twice. */
static pthread_mutex_t g_guard_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_guards, g_prog_fatal;
static MPI_Errhandler g_world_eh = MPI_ERRHANDLER_NULL; /* made once */
static MPI_Errhandler g_prog_eh = MPI_ERRHANDLER_NULL;  /* the handler replaced, to restore; NULL: none */
static MPI_Comm g_shadow = MPI_COMM_NULL;                /* made once; carries the program's handler */

static void world_eh(MPI_Comm *comm, int *code, ...) {
  if (zs__mpi_ours || *comm == g_shadow) return;
  if (g_prog_fatal) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(*code, msg, &len);
    fprintf(stderr, "zeroshard: an MPI error on MPI_COMM_WORLD (or a communicator made from it), not in a "
                    "zeroshard call: %s; the program's handler MPI_ERRORS_ARE_FATAL ends the job (MPI names "
                    "zeroshard's duplicate of MPI_COMM_SELF that carries it)\n",
            msg);
  }
  MPI_Comm_call_errhandler(g_shadow, *code);
}

static void guard_install(void) {
  MPI_Errhandler cur = MPI_ERRHANDLER_NULL;
  if (MPI_Comm_get_errhandler(MPI_COMM_WORLD, &cur) != MPI_SUCCESS) return;
  if (g_world_eh != MPI_ERRHANDLER_NULL && cur == g_world_eh) { /* put back by the program: on already */
    MPI_Errhandler_free(&cur);
    return;
  }
  if (g_world_eh == MPI_ERRHANDLER_NULL &&
      (MPI_Comm_dup(MPI_COMM_SELF, &g_shadow) != MPI_SUCCESS ||
       MPI_Comm_create_errhandler(world_eh, &g_world_eh) != MPI_SUCCESS)) {
    g_world_eh = MPI_ERRHANDLER_NULL;
    MPI_Errhandler_free(&cur);
    return;
  }
  if (MPI_Comm_set_errhandler(g_shadow, cur) != MPI_SUCCESS ||
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, g_world_eh) != MPI_SUCCESS) {
    MPI_Errhandler_free(&cur);
    return;
  }
  g_prog_fatal = cur == MPI_ERRORS_ARE_FATAL;
  g_prog_eh = cur;
}

static void guard_remove(void) {
  if (g_prog_eh == MPI_ERRHANDLER_NULL) return;
  MPI_Errhandler cur = MPI_ERRHANDLER_NULL;
  if (MPI_Comm_get_errhandler(MPI_COMM_WORLD, &cur) == MPI_SUCCESS) {
    if (cur == g_world_eh) MPI_Comm_set_errhandler(MPI_COMM_WORLD, g_prog_eh);
    MPI_Errhandler_free(&cur);
  }
  MPI_Errhandler_free(&g_prog_eh);
  g_prog_eh = MPI_ERRHANDLER_NULL;
}

void zs__mpi_guard_hold(void) {
  int init = 0, fin = 0; /* callable before the caller checks MPI's state (zs_comm_create_nccl_mpi) */
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  pthread_mutex_lock(&g_guard_mu);
  if (g_guards++ == 0 && !g_we_init && init && !fin) guard_install();
  pthread_mutex_unlock(&g_guard_mu);
}

void zs__mpi_guard_drop(void) {
  int fin = 0;
  MPI_Finalized(&fin);
  pthread_mutex_lock(&g_guard_mu);
  if (--g_guards == 0 && !fin) guard_remove();
  pthread_mutex_unlock(&g_guard_mu);
}

zs_status_t zs__mpi_poll(MPI_Request *req, double limit_s, const char *what) {
  double limit = limit_s > 0 ? limit_s : zs__settings()->comm_timeout_s, t0 = zs__now();
  long pause = 1000;
  for (;;) {
    int flag = 0;
    zs__mpi_ours++;
    int rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
    zs__mpi_ours--;
    if (rc != MPI_SUCCESS) {
      char msg[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, msg, &len);
      return ZS_FAIL(NULL, ZS_ERR_COMM, "%s failed: %s", what, msg);
    }
    if (flag) return ZS_OK;
    if (limit > 0 && zs__now() - t0 > limit)
      return ZS_FAIL(NULL, ZS_ERR_TIMEOUT,
                     "%s did not complete within ZS_COMM_TIMEOUT_S=%g s: a rank died (exited or was killed), "
                     "is stuck, or never reached this call",
                     what, limit);
    struct timespec ts = {0, pause};
    nanosleep(&ts, NULL);
    if (pause < 1000000) pause *= 2;
  }
}

/* The last comm is gone and zeroshard initialised MPI: finalise it unless a
 * rank is lost (see above). Caller holds g_mu. */
static void finalize_mpi(void) {
  int fin = 0;
  MPI_Finalized(&fin);
  if (fin) return;
  int ok = 1;
  if (g_fence != MPI_COMM_NULL) {
    MPI_Request req;
    double t = zs__settings()->comm_timeout_s;
    double limit = atomic_load(&g_broken) ? (t > 0 && t < 10 ? t : 10) : -1;
    zs_status_t st = MPI_Ibarrier(g_fence, &req) == MPI_SUCCESS
                         ? zs__mpi_poll(&req, limit < 0 ? 1e300 : limit, "the barrier before MPI_Finalize")
                         : ZS_ERR_COMM;
    ok = st == ZS_OK;
    if (ok) MPI_Comm_free(&g_fence);
  }
  if (ok) {
    MPI_Finalize();
  } else {
    ZS_LOG_W("MPI is not finalized: a comm failed earlier and not every rank reached the end (%s); "
             "MPI_Finalize would wait for them forever. The process can exit; mpiexec ends the job.",
             zs_last_error());
  }
}

/* ---- live comms, MPI_Init and MPI_Finalize ------------------------------------------ */

void zs__mpi_live_add(void) {
  pthread_mutex_lock(&g_mu);
  g_live++;
  pthread_mutex_unlock(&g_mu);
}

void zs__mpi_live_drop(void) {
  pthread_mutex_lock(&g_mu);
  if (--g_live == 0 && g_we_init) finalize_mpi();
  pthread_mutex_unlock(&g_mu);
}

zs_status_t zs__mpi_world_init(const char *fn) {
  pthread_mutex_lock(&g_mu);
  int init = 0, fin = 0, provided = 0;
  zs_status_t st = ZS_OK;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (fin) {
    st = ZS_FAIL(NULL, ZS_ERR_STATE,
                 "%s: MPI was already finalized (zeroshard finalizes the MPI it initialized when its "
                 "last comm is destroyed): keep one comm alive for the whole program",
                 fn);
  } else if (!init) {
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) st = ZS_FAIL(NULL, ZS_ERR_COMM, "%s: MPI_Init_thread failed (%d)", fn, rc);
    else if (provided < MPI_THREAD_MULTIPLE) {
      MPI_Finalize();
      st = ZS_FAIL(NULL, ZS_ERR_UNSUPPORTED,
                   "%s: this MPI library does not provide MPI_THREAD_MULTIPLE (got level %d); "
                   "the mpi backend needs it",
                   fn, provided);
    } else {
      g_we_init = 1;
      /* we own MPI: its errors return instead of ending the job, and the fence
       * for finalising (see g_fence) */
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
      MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
      if (MPI_Comm_dup(MPI_COMM_WORLD, &g_fence) != MPI_SUCCESS) g_fence = MPI_COMM_NULL;
    }
  } else {
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE)
      st = ZS_FAIL(NULL, ZS_ERR_UNSUPPORTED,
                   "%s: MPI was initialized without MPI_THREAD_MULTIPLE (level %d): call "
                   "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)",
                   fn, provided);
  }
  pthread_mutex_unlock(&g_mu);
  return st;
}

void zs__mpi_world_init_undo(void) {
  pthread_mutex_lock(&g_mu);
  if (g_live == 0 && g_we_init) MPI_Finalize();
  pthread_mutex_unlock(&g_mu);
}
