/* A checkpoint folder's writer, across processes. Two runs that save into one
 * folder (a job started twice, a requeued job whose first copy still runs)
 * replace each other's checkpoints: each save removes the folder's other saves
 * and leftovers, and a resume loads whichever was last. Within one process
 * the engines see each other (ckpt_save.c, folder_free); across processes,
 * the one process of a run that saves a folder's checkpoints first (data-
 * parallel rank 0 of model-parallel part 0) holds an exclusive flock(2) on
 * the folder's CK_LOCK_NAME from that save until zs_engine_destroy, and writes
 * who it is into the file. Another run's save into that folder finds the lock
 * taken and is refused on every rank (ZS_ERR_STATE) before it changes
 * anything; a load from it warns. The kernel drops the lock when its holder
 * exits or is killed, so no stale lock outlives a run. Where the file system
 * has no flock (some network file systems), nothing is detected (logged at
 * debug). A lock is the process's: its engines share it (their conflicts are
 * folder_free's), and it goes when the last engine that saved there is
 * destroyed (engine_impl.h, ck_locked: every folder it saved into or
 * claimed). A child forked without exec closes the process's locks (they
 * are its parent's, whose end must free them). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/ckpt_impl.h"

#define CK_LOCK_NAME ".zs-lock"


/* The process's locks: a folder's realpath, the locked descriptor, how many
 * engines hold it. */
typedef struct {
  char *dir;
  int fd, refs;
} held_t;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static held_t *g_held;
static int g_nheld, g_cap;

static held_t *find_locked(const char *real) {
  for (int i = 0; i < g_nheld; i++)
    if (!strcmp(g_held[i].dir, real)) return &g_held[i];
  return NULL;
}

/* One engine less holds `real`: the last one closes it (caller holds g_mu). */
static void unref_locked(const char *real) {
  held_t *h = find_locked(real);
  if (!h || --h->refs > 0) return;
  close(h->fd);
  free(h->dir);
  *h = g_held[--g_nheld];
}

static void drop_engine_locks(zs_engine_t *zs) {
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < zs->ck_nlocked; i++) {
    unref_locked(zs->ck_locked[i]);
    free(zs->ck_locked[i]);
  }
  free(zs->ck_locked);
  zs->ck_locked = NULL, zs->ck_nlocked = 0;
  pthread_mutex_unlock(&g_mu);
}

/* The engine holds `real` from now on (it saved there or claimed it), until
 * its destroy (caller holds g_mu). Without memory the lock stays the
 * process's until it exits. */
static void engine_keeps(zs_engine_t *zs, const char *real) {
  for (int i = 0; i < zs->ck_nlocked; i++)
    if (!strcmp(zs->ck_locked[i], real)) return;
  char *d = strdup(real), **n = d ? realloc(zs->ck_locked, (size_t)(zs->ck_nlocked + 1) * sizeof *n) : NULL;
  if (!n) {
    free(d);
    return;
  }
  zs->ck_locked = n;
  zs->ck_locked[zs->ck_nlocked++] = d;
  find_locked(real)->refs++;
  zs->ck_locks_drop = drop_engine_locks;
}

/* fork without exec: the child shares its parent's open file descriptions,
 * so a lock it kept open would outlive the parent (a data loader's workers):
 * the child closes them (g_mu held across the fork, so the table is whole). */
static void fork_prepare(void) { pthread_mutex_lock(&g_mu); }
static void fork_parent(void) { pthread_mutex_unlock(&g_mu); }
static void fork_child(void) {
  for (int i = 0; i < g_nheld; i++) {
    close(g_held[i].fd);
    free(g_held[i].dir);
  }
  g_nheld = 0;
  pthread_mutex_unlock(&g_mu);
}
static pthread_once_t g_atfork = PTHREAD_ONCE_INIT;
static void register_atfork(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }

static int lock_path(char *buf, size_t n, const char *dir) {
  return snprintf(buf, n, "%s/%s", dir, CK_LOCK_NAME) < (int)n;
}

/* The holder's line ("process P on host H since T"), read from fd into buf. */
static const char *holder(int fd, char *buf, size_t n) {
  ssize_t k = pread(fd, buf, n - 1, 0);
  if (k <= 0) return snprintf(buf, n, "a process that has not said who it is"), buf;
  buf[k] = 0;
  for (char *c = buf; *c; c++)
    if ((unsigned char)*c < 0x20) *c = ' ';
  while (k > 0 && buf[k - 1] == ' ') buf[--k] = 0;
  return buf;
}

zs_status_t zs__ck_lock_folder(zs_engine_t *zs, const char *top, const char *fn) {
  char real[PATH_MAX], path[PATH_MAX + 16], who[256];
  if (!realpath(top, real) || !lock_path(path, sizeof path, real)) return ZS_OK; /* not there: the save says why */
  pthread_once(&g_atfork, register_atfork);
  pthread_mutex_lock(&g_mu);
  zs_status_t st = ZS_OK;
  held_t *h = find_locked(real);
  struct stat was, cur;
  if (h && fstat(h->fd, &was) == 0 && stat(path, &cur) == 0 && was.st_ino == cur.st_ino && was.st_dev == cur.st_dev) {
    engine_keeps(zs, real); /* this process's already */
    goto out;
  }
  /* h: the file this process locked was removed or replaced since (a program
   * emptied the folder): the one there now is locked instead */
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) {
    ZS_LOG_D("%s: cannot open %s (%s): another run saving into %s would not be detected", fn, path, strerror(errno),
             top);
    goto out;
  }
  int locked = flock(fd, LOCK_EX | LOCK_NB) == 0;
  /* a load's or a check's brief look (zs__ck_lock_peek, the load's fix-ups)
   * holds it for moments: tried again for up to 0.5 s before refusing */
  for (int k = 0; !locked && errno == EWOULDBLOCK && k < 50; k++) {
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
    locked = flock(fd, LOCK_EX | LOCK_NB) == 0;
  }
  if (!locked) {
    int e = errno;
    if (e == EWOULDBLOCK) {
      holder(fd, who, sizeof who);
      st = ZS_FAIL(zs->err, ZS_ERR_STATE,
                   "%s: %s is another run's checkpoint folder: %s saves there and still runs (it holds %s). Two "
                   "runs saving into one folder replace each other's checkpoints; give this run a folder of its "
                   "own, or end the other run first. Nothing was written",
                   fn, top, who, path);
    } else {
      ZS_LOG_D("%s: no flock on %s (%s): another run saving into %s would not be detected", fn, path, strerror(e),
               top);
    }
    close(fd);
    goto out;
  }
  char host[128] = "?", when[64] = "?";
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = 0;
  time_t now = time(NULL);
  struct tm tm;
  if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
  int k = snprintf(who, sizeof who, "process %ld on host %s since %s\n", (long)getpid(), host, when);
  if (ftruncate(fd, 0) != 0 || pwrite(fd, who, (size_t)k, 0) != k)
    ZS_LOG_D("%s: writing who holds %s failed: %s", fn, path, strerror(errno));
  if (h) {
    close(h->fd);
    h->fd = fd;
    engine_keeps(zs, real);
    goto out;
  }
  char *dir = strdup(real);
  if (g_nheld == g_cap) {
    int cap = g_cap ? 2 * g_cap : 8;
    held_t *n = realloc(g_held, (size_t)cap * sizeof *n);
    if (n) g_held = n, g_cap = cap;
  }
  if (!dir || g_nheld == g_cap) { /* no memory: held by the process until it exits */
    free(dir);
    goto out;
  }
  g_held[g_nheld++] = (held_t){dir, fd, 0};
  engine_keeps(zs, real);
out:
  pthread_mutex_unlock(&g_mu);
  return st;
}

int zs__ck_lock_peek(const zs_engine_t *zs, const char *top, const char *fn) {
  char real[PATH_MAX], path[PATH_MAX + 16], who[256];
  (void)zs;
  if (!realpath(top, real) || !lock_path(path, sizeof path, real)) return 0;
  pthread_mutex_lock(&g_mu);
  const int ours = find_locked(real) != NULL;
  pthread_mutex_unlock(&g_mu);
  if (ours) return 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const int held = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  if (held) {
    holder(fd, who, sizeof who);
    ZS_LOG_W("%s: %s is the checkpoint folder of a run that still runs (%s): this run's saves into it will be "
               "refused while that one runs",
               fn, top, who);
  }
  close(fd); /* a shared lock taken here goes with it */
  return held;
}

int zs__ck_lock_fixups(const char *top, int *fd, const char *fn) {
  char real[PATH_MAX], path[PATH_MAX + 16], who[256];
  *fd = -1;
  if (!realpath(top, real) || !lock_path(path, sizeof path, real)) return 0;
  pthread_mutex_lock(&g_mu);
  const int ours = find_locked(real) != NULL;
  pthread_mutex_unlock(&g_mu);
  if (ours) return 1; /* this process saves there: its own saves are not running now (one call at a time) */
  int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (f < 0) return 0; /* a folder it cannot write into: nothing to fix there either */
  if (flock(f, LOCK_EX | LOCK_NB) == 0) {
    *fd = f; /* closed by the caller: the lock goes with it */
    return 1;
  }
  const int e = errno;
  if (e == EWOULDBLOCK) {
    holder(f, who, sizeof who);
    ZS_LOG_W("%s: %s is the checkpoint folder of a run that still runs (%s): this run's saves into it will be "
             "refused while that one runs",
             fn, top, who);
  }
  close(f);
  return e != EWOULDBLOCK; /* no flock on this file system: fixed as before, unguarded */
}

/* ---- zs_checkpoint_claim -------------------------------------------------------- */

static zs_status_t checkpoint_claim(zs_engine_t *zs, const char *top) {
  static const char fn[] = "zs_checkpoint_claim";
  zs_status_t st = zs__ck_check_call(zs, top, fn);
  if (st == ZS_ERR_STATE) return st; /* as a save: no collective then */
  if (st == ZS_OK && zs->rank == 0 && zs->mp_rank == 0) {
    struct stat sb;
    if (mkdir(top, 0777) != 0 && errno != EEXIST)
      st = ZS_FAIL(zs->err, ZS_ERR_IO, "%s: cannot create directory %s: %s", fn, top, strerror(errno));
    else if (stat(top, &sb) != 0 || !S_ISDIR(sb.st_mode))
      st = ZS_FAIL(zs->err, ZS_ERR_IO, "%s: %s exists and is not a directory", fn, top);
    else
      st = zs__ck_lock_folder(zs, top, fn);
  }
  return zs__ck_agree(zs, st, fn);
}

zs_status_t zs_checkpoint_claim(zs_engine_t *zs, const char *dir) {
  ZS__ENG_ONE_CALL(zs, "zs_checkpoint_claim", checkpoint_claim(zs, dir));
}
