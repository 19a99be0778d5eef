/* Checkpoints in the background (zs_checkpoint_save_async, zs_checkpoint_wait).
 *
 * The save's steps are zs_checkpoint_save's (ckpt_save.c), run apart: the
 * call agrees, makes the manifest and copies this rank's whole file into host
 * memory (zs__ck_snapshot), then a thread of its own writes that copy under
 * the temporary name, fsyncs it, frees the copy and renames the file into
 * place, while the trainer goes on. zs_checkpoint_wait (or the next save or
 * load) joins the thread and runs the rest collectively: the outcome agreed,
 * the manifest put in place last, older saves removed. The thread touches
 * nothing of the engine: only its own record below and the device's host
 * allocator (which may be used from several threads, device.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ckpt/ckpt_impl.h"
#include "zeroshard/log.h" /* zs_log_rank */
#include "common/worker.h"

typedef struct ck_async {
  zs_device_t *dev;
  zs__worker_t w; /* the writer's thread, one job */
  zs__job_t job;
  int started;    /* w runs (else the call wrote the file itself) */
  char *top, *dir;
  ck_save_t s;
  ck_copy_t c; /* this rank's file, until written */
  int blk;     /* the int8 state block (0: none), for the CRCs */
  int rank, proc; /* in the writer's message: the engine's rank and the process's (zs_log_rank) */
  int direct;  /* the writer uses direct I/O (ZS_CKPT_DIRECT, on by default, and the file system's) */
  int keep;    /* ZS_CKPT_KEEP_COPY: the copy stays for the next save instead of going back to the kernel */
  char final[CK_PATH], tmp[CK_PATH + 8];
  int fd; /* tmp, opened by the call (a folder this rank cannot write into fails there) */
  atomic_int done; /* the writer has finished: st and err are its outcome */
  zs_status_t st;
  char err[ZS_ERRBUF];
} ck_async_t;

/* Writes bytes of buf (n, a multiple of CK_DIRECT_ALIGN when direct) to fd
 * from offset 0; 0 or errno. */
static int write_all(int fd, const unsigned char *buf, int64_t n) {
  for (int64_t off = 0; off < n;) {
    ssize_t k = pwrite(fd, buf + off, (size_t)(n - off < ((int64_t)64 << 20) ? n - off : ((int64_t)64 << 20)), off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return k < 0 ? errno : ENOSPC;
    off += k;
  }
  return 0;
}

/* The writer: the copy's CRCs, then the copy into tmp, fsynced, renamed to
 * final; the copy freed as soon as it is written. The file is written with
 * direct I/O (O_DIRECT: the disk reads the copy itself, no second copy into
 * the page cache, which here costs more CPU than the write: ext4 on the
 * development VM, 746 MB, 1.4 s of system time buffered against 0.06 s direct),
 * padded to CK_DIRECT_ALIGN and cut to its size; buffered with
 * ZS_CKPT_DIRECT=0, or where the file system has no direct I/O or refuses it
 * for this write. */
static void writer_held(ck_async_t *a);
static void writer(ck_async_t *a) {
  ck_xfsz_t x;
  zs__ck_xfsz_hold(&x);
  writer_held(a);
  zs__ck_xfsz_release(&x);
}

/* The call's part: tmp created (direct I/O where asked and the file system
 * takes it). ZS_ERR_IO naming it when this rank cannot create it. */
static zs_status_t open_tmp(zs_engine_t *zs, ck_async_t *a, const char *fn) {
  a->fd = a->direct ? open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0666) : -1;
  if (!a->direct || (a->fd < 0 && errno == EINVAL))
    a->direct = 0, a->fd = open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (a->fd >= 0) return ZS_OK;
  return ZS_FAIL(zs->err, ZS_ERR_IO, "%s: cannot create %s: %s", fn, a->tmp, strerror(errno));
}

static void writer_held(ck_async_t *a) {
  a->st = zs__ck_seal_snapshot(a->c.buf, a->c.bytes, a->blk, a->err, sizeof a->err);
  const char *what = "writing";
  int err = 0, fd = a->fd;
  a->fd = -1;
  if (a->st != ZS_OK) close(fd);
  else {
    err = a->direct ? write_all(fd, a->c.buf, a->c.padded) : write_all(fd, a->c.buf, a->c.bytes);
    if (err == EINVAL && a->direct) { /* opened, then refused: the same file, buffered */
      int fl = fcntl(fd, F_GETFL);
      a->direct = 0;
      err = fl < 0 || fcntl(fd, F_SETFL, fl & ~O_DIRECT) != 0 ? errno : write_all(fd, a->c.buf, a->c.bytes);
    }
    /* the padding written (direct I/O, or a direct write that reached it before a fallback) goes */
    if (!err && ftruncate(fd, (off_t)a->c.bytes) != 0) err = errno, what = "cutting to its size";
    if (!err && fsync(fd) != 0) err = errno, what = "syncing";
    if (close(fd) != 0 && !err) err = errno, what = "closing";
  }
  /* its pages back to the kernel: the host allocator keeps large freed
   * extents resident for reuse, and the copy is the size of this rank's whole
   * optimizer state (it would stay counted by the kernel, not the accountant);
   * kept whole with ZS_CKPT_KEEP_COPY, for the next save (zs__ck_async_finish) */
  if (!a->keep) {
    madvise(a->c.buf, (size_t)a->c.padded, MADV_DONTNEED);
    zs_device_host_free(a->dev, a->c.mem, a->c.mem_bytes, ZS_MEM_OTHER);
    memset(&a->c, 0, sizeof a->c);
  }
  if (a->st == ZS_OK && !err && rename(a->tmp, a->final) != 0) err = errno, what = "renaming";
  if (err || a->st != ZS_OK) unlink(a->tmp);
  if (err) {
    snprintf(a->err, sizeof a->err, "data-parallel rank %d (process rank %d): %s %.400s failed: %s", a->rank,
             a->proc, what, a->tmp, strerror(err));
    a->st = ZS_ERR_IO;
  }
  atomic_store_explicit(&a->done, 1, memory_order_release);
}

static int writer_run(void *ctx, zs__job_t *job) {
  (void)job;
  writer(ctx);
  return ZS__JOB_DONE;
}

static const zs__worker_ops_t writer_ops = {.name = "the checkpoint writer", .run = writer_run};

/* The writer finished, its thread gone. */
static void async_join(ck_async_t *a) {
  if (!a->started) return;
  zs__worker_stop(&a->w); /* after its one job */
  zs__worker_join(&a->w);
  a->started = 0;
}

/* The pending save's folder, counted as this engine's while it is pending
 * (zs__eng_folder_taken): another engine's save there would otherwise remove
 * its files, or have its own replaced by the wait. */
static void pending_folder(zs_engine_t *zs, const char *dir) {
  char real[PATH_MAX];
  if (dir && realpath(dir, real)) snprintf(zs->ck_pending, sizeof zs->ck_pending, "%s", real);
  else zs->ck_pending[0] = '\0';
}

static void async_free(ck_async_t *a) {
  if (a->fd >= 0) { /* made by the call, never written: the save failed before its writer */
    close(a->fd);
    unlink(a->tmp);
  }
  if (a->c.mem) zs_device_host_free(a->dev, a->c.mem, a->c.mem_bytes, ZS_MEM_OTHER);
  free(a->s.text);
  free(a->top);
  free(a->dir);
  free(a);
}

/* zs_engine_destroy's: a save never finished. Its file is removed (no
 * manifest names it; the directory's previous checkpoint stays). */
static void async_drop(zs_engine_t *zs) {
  ck_async_t *a = zs->ck_async;
  zs->ck_async = NULL;
  zs->ck_async_drop = NULL;
  if (zs->ck_keep) zs_device_host_free(zs->dev, zs->ck_keep, zs->ck_keep_bytes, ZS_MEM_OTHER);
  zs->ck_keep = NULL;
  if (!a) return;
  async_join(a);
  if (a->st == ZS_OK) unlink(a->final);
  ZS_LOG_W("zs_engine_destroy (rank %d): the background checkpoint save of step %lld into %s was not finished with "
           "zs_checkpoint_wait: %s; the previous checkpoint there is the one that loads",
           zs->rank, a->s.step, a->dir,
           a->st == ZS_OK ? "this rank's file of it is removed" : "this rank's write of it had failed, nothing is left");
  pending_folder(zs, NULL);
  async_free(a);
}

zs_status_t zs__ck_async_finish(zs_engine_t *zs, const char *fn) {
  ck_async_t *a = zs->ck_async;
  if (!a) return ZS_OK;
  zs->ck_async = NULL;
  zs->ck_async_drop = NULL;
  async_join(a);
  pending_folder(zs, NULL); /* the commit records the folder as this engine's once it is in place */
  if (a->keep && a->c.mem) { /* for the next save (save_async); destroy frees it */
    zs->ck_keep = a->c.mem, zs->ck_keep_bytes = a->c.mem_bytes;
    memset(&a->c, 0, sizeof a->c);
    zs->ck_async_drop = async_drop;
  }
  if (a->st != ZS_OK) ZS_FAIL(zs->err, a->st, "%s", a->err); /* this rank's message, for the agreement */
  zs_status_t st = zs__ck_save_commit(zs, a->top, a->dir, &a->s, a->st, a->st == ZS_OK);
  if (st != ZS_OK && strcmp(fn, "zs_checkpoint_wait")) {
    char why[ZS_ERRBUF];
    snprintf(why, sizeof why, "%s", zs->err);
    st = ZS_FAIL(zs->err, st,
                 "%s: the background save of step %lld into %s, still pending, was finished first and failed "
                 "(nothing else was done): %s",
                 fn, a->s.step, a->top, why);
  }
  async_free(a);
  return st;
}

static zs_status_t save_async(zs_engine_t *zs, const char *top) {
  static const char fn[] = "zs_checkpoint_save_async";
  char *dir = NULL, what[96];
  ZS_CHECK(zs__ck_save_start(zs, top, fn, &dir));
  ck_async_t *a = calloc(1, sizeof *a);
  if (a) a->fd = -1;
  zs_status_t st = a && (a->top = strdup(top)) ? ZS_OK : ZS_FAIL(zs->err, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  st = zs__ck_agree(zs, st, fn);
  if (st == ZS_OK) {
    a->dev = zs->dev;
    a->rank = zs->rank, a->proc = zs_log_rank();
    a->direct = zs__env_flag("ZS_CKPT_DIRECT", 1);
    a->keep = zs__env_flag("ZS_CKPT_KEEP_COPY", 0);
    if (zs->ck_keep) { /* the last save's copy: this one's, or gone */
      if (a->keep) a->c.mem = zs->ck_keep, a->c.mem_bytes = zs->ck_keep_bytes;
      else zs_device_host_free(zs->dev, zs->ck_keep, zs->ck_keep_bytes, ZS_MEM_OTHER);
      zs->ck_keep = NULL;
    }
    a->blk = zs->cfg.optim.state_dtype == ZS_STATE_INT8 ? zs__optim_state_block(&zs->cfg.optim) : 0;
    a->dir = dir;
    dir = NULL;
    a->s.fn = fn;
    st = zs__ck_save_prepare(zs, top, a->dir, &a->s);
  }
  if (st == ZS_OK) {
    char name[64];
    zs__ck_rank_file_name(name, sizeof name, a->s.id, zs->rank);
    snprintf(a->final, sizeof a->final, "%s/%s", a->dir, name);
    snprintf(a->tmp, sizeof a->tmp, "%s.tmp", a->final);
    st = open_tmp(zs, a, fn);
    if (st == ZS_OK) st = zs__ck_snapshot(zs, a->dir, &a->s, &a->c);
    snprintf(what, sizeof what, "%s: creating this rank's file and copying the state into host memory", fn);
    st = zs__ck_agree(zs, st, what);
  }
  if (st != ZS_OK) {
    free(dir);
    if (a) async_free(a);
    return st;
  }
  /* every rank has its copy: from here the save fails only in zs_checkpoint_wait */
  pending_folder(zs, a->dir);
  if (zs__worker_start(&a->w, &writer_ops, a) == ZS_OK) {
    a->started = 1;
    zs__worker_push(&a->w, &a->job);
  } else {
    ZS_LOG_W("%s (rank %d): %s: this rank writes its file now, before returning", fn, zs->rank, zs_last_error());
    writer(a);
  }
  zs->ck_async = a;
  zs->ck_async_drop = async_drop;
  return ZS_OK;
}

/* One call at a time on the engine (zs__eng_enter), as the step's calls. */
static zs_status_t save_async_held(zs_engine_t *zs, const char *dir) { ZS__CK_WRITES(save_async(zs, dir)); }

zs_status_t zs_checkpoint_save_async(zs_engine_t *zs, const char *dir) {
  ZS__ENG_ONE_CALL(zs, "zs_checkpoint_save_async", save_async_held(zs, dir));
}

static zs_status_t checkpoint_wait(zs_engine_t *zs) {
  if (!zs->ck_async) return ZS_OK;
  if (zs->phase != ZS_PH_IDLE)
    return ZS_FAIL(zs->err, ZS_ERR_STATE,
                   "zs_checkpoint_wait during a step: call it between zs_step and the next zs_forward_begin");
  ZS__CK_WRITES(zs__ck_async_finish(zs, "zs_checkpoint_wait"));
}

zs_status_t zs_checkpoint_wait(zs_engine_t *zs) {
  ZS__ENG_ONE_CALL(zs, "zs_checkpoint_wait", checkpoint_wait(zs));
}

int zs_checkpoint_writing(const zs_engine_t *zs) {
  const ck_async_t *a = zs ? zs->ck_async : NULL;
  return a && !atomic_load_explicit(&a->done, memory_order_acquire);
}
