/* Direct-I/O file transfers through io_uring (liburing); aio.h says the
 * contract. Built when CMake finds liburing; aio_none.c otherwise.
 *
 * A ring keeps one record per request slot (depth of them, made at create) and
 * hands the kernel the slot's index as the request's user_data, so a completion
 * finds its file, offset, size and tag without a lookup or an allocation. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <unistd.h>

#include "aio/aio.h"

/* One request is at most this many bytes whatever the ring's block: a CQE's res
 * is an int, and Linux moves at most 0x7ffff000 bytes in one read or write. */
#define AIO_MAX_REQ (1u << 30)
/* user_data of an SQE turned into a no-op after a failed io_uring_submit */
#define AIO_NOP_DATA UINT64_MAX
/* tries of io_uring_submit that consume nothing (EINTR, EAGAIN, EBUSY) before it counts as failed */
#define AIO_SUBMIT_TRIES 64

int zs__aio_available(void) { return 1; }

/* ---- files ------------------------------------------------------------------ */

struct zs_aio_file {
  int fd;
  int unlinked; /* the name is gone (zs__aio_file_unlink): nothing to remove at close */
  uint64_t size;
  char path[]; /* NUL-terminated */
};

static uint64_t fs_free(int fd) {
  struct statvfs sv;
  return fstatvfs(fd, &sv) == 0 ? (uint64_t)sv.f_bavail * sv.f_frsize : 0;
}

zs_status_t zs__aio_file_create(zs_aio_file_t **out, const char *path, uint64_t bytes) {
  ZS_CHECK_HANDLE(out, "zs__aio_file_create");
  *out = NULL;
  ZS_CHECK_HANDLE(path, "zs__aio_file_create");
  if (bytes % ZS_AIO_ALIGN)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "aio: file '%s' of %" PRIu64 " bytes: the size must be a multiple of %d",
                   path, bytes, ZS_AIO_ALIGN);
  size_t n = strlen(path);
  zs_aio_file_t *f = malloc(sizeof *f + n + 1);
  if (!f) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "aio: out of host memory for file '%s'", path);
  memcpy(f->path, path, n + 1);
  f->size = bytes;
  f->unlinked = 0;
  /* O_EXCL: never overwrite a file someone else owns. O_DIRECT comes after,
   * through fcntl, which makes the same check as open (the file system can do
   * direct I/O: EINVAL if not): an O_CREAT | O_DIRECT open that fails that
   * check has already created the file, and this way we know it is ours to
   * remove. */
  f->fd = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (f->fd < 0) {
    int e = errno;
    free(f);
    return ZS_FAIL(NULL, ZS_ERR_IO, "aio: cannot create '%s': %s%s", path, strerror(e),
                   e == EEXIST ? " (it is never overwritten: remove it, or choose another nvme_path)" : "");
  }
  int fl = fcntl(f->fd, F_GETFL);
  if (fl < 0 || fcntl(f->fd, F_SETFL, fl | O_DIRECT) != 0) {
    int e = errno;
    close(f->fd);
    unlink(path);
    free(f);
    if (e == EINVAL)
      return ZS_FAIL(NULL, ZS_ERR_IO,
                     "aio: '%s': the file system does not support direct I/O (O_DIRECT), as tmpfs before Linux 6.6 "
                     "and some network file systems: put nvme_path on a disk's file system",
                     path);
    return ZS_FAIL(NULL, ZS_ERR_IO, "aio: cannot turn on direct I/O (O_DIRECT) for '%s': %s", path, strerror(e));
  }
  /* Reserve the whole file now, so that a full disk fails here and not in the
   * middle of a step. */
  zs_status_t st = ZS_OK;
  if (bytes && fallocate(f->fd, 0, 0, (off_t)bytes) != 0) {
    int e = errno;
    if (e == EOPNOTSUPP) { /* no reservation on this file system: at least the size */
      if (ftruncate(f->fd, (off_t)bytes) != 0)
        st = ZS_FAIL(NULL, ZS_ERR_IO, "aio: cannot size '%s' to %" PRIu64 " bytes: %s", path, bytes,
                     strerror(errno));
    } else if (e == ENOSPC || e == EDQUOT) {
      st = ZS_FAIL(NULL, ZS_ERR_NOMEM,
                   "aio: '%s' needs %" PRIu64 " bytes, the file system has %" PRIu64 " free (%s): free room on "
                   "it or put nvme_path on a larger disk",
                   path, bytes, fs_free(f->fd), strerror(e));
    } else {
      st = ZS_FAIL(NULL, ZS_ERR_IO, "aio: cannot reserve %" PRIu64 " bytes for '%s': %s", bytes, path, strerror(e));
    }
  }
  if (st != ZS_OK) {
    close(f->fd);
    unlink(path);
    free(f);
    return st;
  }
  *out = f;
  return ZS_OK;
}

void zs__aio_file_close(zs_aio_file_t *f, int remove) {
  if (!f) return;
  close(f->fd);
  if (remove && !f->unlinked && unlink(f->path) != 0 && errno != ENOENT)
    ZS_LOG_W("aio: cannot remove '%s': %s", f->path, strerror(errno));
  free(f);
}

zs_status_t zs__aio_file_unlink(zs_aio_file_t *f) {
  if (!f) return ZS_FAIL(NULL, ZS_ERR_INVALID, "aio: unlink of a NULL file");
  if (f->unlinked) return ZS_OK;
  if (unlink(f->path) != 0)
    return ZS_FAIL(NULL, ZS_ERR_IO, "aio: cannot remove the name of '%s' (its data stays open): %s", f->path,
                   strerror(errno));
  f->unlinked = 1;
  return ZS_OK;
}

zs_status_t zs__aio_file_fs(const zs_aio_file_t *f, uint64_t *size, uint64_t *allocated) {
  struct stat sb;
  if (!f || fstat(f->fd, &sb) != 0)
    return ZS_FAIL(NULL, ZS_ERR_IO, "aio: cannot stat '%s': %s", f ? f->path : "(null)", strerror(f ? errno : EINVAL));
  *size = (uint64_t)sb.st_size;
  *allocated = (uint64_t)sb.st_blocks * 512;
  return ZS_OK;
}

const char *zs__aio_file_path(const zs_aio_file_t *f) { return f ? f->path : NULL; }
uint64_t zs__aio_file_size(const zs_aio_file_t *f) { return f ? f->size : 0; }

/* ---- rings -------------------------------------------------------------------- */

typedef struct {
  zs_aio_file_t *f;
  uint64_t off;
  uint32_t size;
  uint8_t op;
  int16_t tag;
} aio_req_t;

struct zs_aio_ring {
  struct io_uring uring;
  int depth;
  size_t block;
  aio_req_t *req;  /* [depth]: the request in each slot */
  int *free_slot;  /* [depth]: a stack of the free slots */
  int nfree;
  /* SQEs prepared but not yet consumed by the kernel, oldest first (slot, or
   * -1 for a no-op), so that a failed submit knows which requests it left. */
  int *sq_slot;                  /* [sq_cap] */
  struct io_uring_sqe **sq_sqe;  /* [sq_cap] */
  int sq_cap, sq_head, sq_count, sq_real;
  zs_aio_stats_t stats;
  int pending[ZS_AIO_TAGS];            /* requests of the tag not yet completed */
  zs_status_t tag_st[ZS_AIO_TAGS];     /* the tag's first failure */
  char tag_msg[ZS_AIO_TAGS][ZS_ERRBUF];
};

zs_status_t zs__aio_ring_create(zs_aio_ring_t **out, int depth, size_t block) {
  ZS_CHECK_HANDLE(out, "zs__aio_ring_create");
  *out = NULL;
  if (depth < 1 || depth > 1024)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "aio: queue depth %d is not in 1..1024", depth);
  if (block < ZS_AIO_ALIGN || block % ZS_AIO_ALIGN)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "aio: block size %zu is not a positive multiple of %d", block,
                   ZS_AIO_ALIGN);
  zs_aio_ring_t *r = calloc(1, sizeof *r);
  if (!r) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "aio: out of host memory for a ring");
  int ret = io_uring_queue_init((unsigned)depth, &r->uring, 0);
  if (ret < 0) {
    free(r);
    if (ret == -ENOMEM)
      return ZS_FAIL(NULL, ZS_ERR_NOMEM,
                     "aio: io_uring_queue_init(%d): %s (before Linux 5.12 rings count against the locked-memory "
                     "limit, ulimit -l)",
                     depth, strerror(-ret));
    return ZS_FAIL(NULL, ZS_ERR_UNSUPPORTED,
                   "aio: the kernel refused io_uring (io_uring_queue_init(%d): %s): the NVMe tier needs io_uring "
                   "(Linux 5.6 or later, not disabled by kernel.io_uring_disabled or a seccomp profile)",
                   depth, strerror(-ret));
  }
  r->depth = depth;
  r->block = block < AIO_MAX_REQ ? block : AIO_MAX_REQ;
  r->sq_cap = (int)r->uring.sq.ring_entries;
  r->req = calloc((size_t)depth, sizeof *r->req);
  r->free_slot = malloc((size_t)depth * sizeof *r->free_slot);
  r->sq_slot = malloc((size_t)r->sq_cap * sizeof *r->sq_slot);
  r->sq_sqe = malloc((size_t)r->sq_cap * sizeof *r->sq_sqe);
  if (!r->req || !r->free_slot || !r->sq_slot || !r->sq_sqe) {
    io_uring_queue_exit(&r->uring);
    free(r->req);
    free(r->free_slot);
    free(r->sq_slot);
    free(r->sq_sqe);
    free(r);
    return ZS_FAIL(NULL, ZS_ERR_NOMEM, "aio: out of host memory for a ring of depth %d", depth);
  }
  for (int i = 0; i < depth; i++) r->free_slot[i] = depth - 1 - i;
  r->nfree = depth;
  *out = r;
  return ZS_OK;
}

/* A request is done (completed by the kernel, failed by fault injection or left
 * by a failed submit): count it, keep its tag's first failure, free its slot. */
static void req_done(zs_aio_ring_t *r, int slot, int res, const char *via) {
  aio_req_t *q = &r->req[slot];
  int t = q->tag, rd = q->op == ZS_AIO_READ;
  r->stats.requests++;
  if (res > 0) *(rd ? &r->stats.bytes_read : &r->stats.bytes_written) += (uint64_t)res;
  if ((res < 0 || (uint32_t)res != q->size) && r->tag_st[t] == ZS_OK) {
    char why[96];
    if (res < 0) snprintf(why, sizeof why, "%s%s", via, strerror(-res));
    else snprintf(why, sizeof why, "short %s: %d of %" PRIu32 " bytes", rd ? "read" : "write", res, q->size);
    r->tag_st[t] = ZS_ERR_IO;
    snprintf(r->tag_msg[t], ZS_ERRBUF, "aio: %s of %" PRIu32 " bytes at offset %" PRIu64 " of '%s' failed: %s",
             rd ? "read" : "write", q->size, q->off, q->f->path, why);
  }
  r->pending[t]--;
  r->free_slot[r->nfree++] = slot;
}

/* Requests the kernel holds (submitted, not yet reaped). */
static int in_kernel(const zs_aio_ring_t *r) { return r->depth - r->nfree - r->sq_real; }

/* Reaps the completions that are ready; with `block`, first waits for one. */
static zs_status_t ring_reap(zs_aio_ring_t *r, int block) {
  struct io_uring_cqe *cqe;
  if (block) {
    int ret;
    do ret = io_uring_wait_cqe(&r->uring, &cqe);
    while (ret == -EINTR);
    if (ret < 0) return ZS_FAIL(NULL, ZS_ERR_IO, "aio: io_uring_wait_cqe failed: %s", strerror(-ret));
  }
  while (io_uring_peek_cqe(&r->uring, &cqe) == 0) {
    uint64_t data = io_uring_cqe_get_data64(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(&r->uring, cqe);
    if (data != AIO_NOP_DATA) req_done(r, (int)data, res, "");
  }
  return ZS_OK;
}

/* Hands every prepared SQE to the kernel. If io_uring_submit keeps failing,
 * the requests it left fail their tags (the reason named) and their SQEs
 * become no-ops, so that a later submit cannot start them on reused slots;
 * requests the kernel already holds complete as usual. */
static zs_status_t ring_flush(zs_aio_ring_t *r) {
  int ret = 0;
  for (int tries = 0; r->sq_count && tries < AIO_SUBMIT_TRIES;) {
    ret = io_uring_submit(&r->uring);
    if (ret > 0) {
      for (int k = 0; k < ret && r->sq_count; k++) {
        if (r->sq_slot[r->sq_head] >= 0) r->sq_real--;
        r->sq_head = (r->sq_head + 1) % r->sq_cap;
        r->sq_count--;
      }
      tries = 0;
      continue;
    }
    if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) break;
    tries++; /* nothing consumed: let the kernel finish some of what it holds */
    if (in_kernel(r) > 0) ZS_CHECK(ring_reap(r, 1));
    else sched_yield();
  }
  if (!r->sq_count) return ZS_OK;
  if (ret >= 0) ret = -EAGAIN;
  int left = r->sq_real;
  for (int k = 0, i = r->sq_head; k < r->sq_count; k++, i = (i + 1) % r->sq_cap) {
    int slot = r->sq_slot[i];
    if (slot < 0) continue;
    io_uring_prep_nop(r->sq_sqe[i]);
    io_uring_sqe_set_data64(r->sq_sqe[i], AIO_NOP_DATA);
    r->sq_slot[i] = -1;
    r->sq_real--;
    req_done(r, slot, ret, "not submitted, io_uring_submit: ");
  }
  return ZS_FAIL(NULL, ZS_ERR_IO, "aio: io_uring_submit failed: %s (%d requests were not submitted)",
                 strerror(-ret), left);
}

static zs_status_t check_tag(const char *fn, int tag) {
  if (tag < 0 || tag >= ZS_AIO_TAGS)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: tag %d is not in 0..%d", fn, tag, ZS_AIO_TAGS - 1);
  return ZS_OK;
}

zs_status_t zs__aio_submit(zs_aio_ring_t *r, zs_aio_file_t *f, zs_aio_op_t op, void *buf, size_t bytes,
                           uint64_t off, int tag) {
  static const char fn[] = "zs__aio_submit";
  ZS_CHECK_HANDLE(r, fn);
  ZS_CHECK_HANDLE(f, fn);
  ZS_CHECK(check_tag(fn, tag));
  if (op != ZS_AIO_READ && op != ZS_AIO_WRITE)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: op %d is neither ZS_AIO_READ nor ZS_AIO_WRITE", fn, (int)op);
  if (!bytes) return ZS_OK;
  ZS_CHECK_PTR(NULL, fn, buf, bytes);
  if ((uintptr_t)buf % ZS_AIO_ALIGN)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: buffer %p is not aligned to %d bytes (direct I/O)", fn, buf,
                   ZS_AIO_ALIGN);
  if (off % ZS_AIO_ALIGN)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: offset %" PRIu64 " of '%s' is not a multiple of %d (direct I/O)", fn,
                   off, f->path, ZS_AIO_ALIGN);
  if (bytes % ZS_AIO_ALIGN)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: size %zu is not a multiple of %d (direct I/O)", fn, bytes,
                   ZS_AIO_ALIGN);
  if (off > f->size || bytes > f->size - off)
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "%s: %s of %zu bytes at offset %" PRIu64 " is past the end of '%s' (%" PRIu64 " bytes)", fn,
                   op == ZS_AIO_READ ? "read" : "write", bytes, off, f->path, f->size);
  const zs_fault_t fault = op == ZS_AIO_READ ? ZS_FAULT_AIO_READ : ZS_FAULT_AIO_WRITE;
  char *p = buf;
  for (size_t done = 0; done < bytes;) {
    uint32_t n = (uint32_t)(bytes - done < r->block ? bytes - done : r->block);
    while (!r->nfree) { /* depth requests in flight: hand them over and wait for one */
      ZS_CHECK(ring_flush(r));
      ZS_CHECK(ring_reap(r, 1));
    }
    int slot = r->free_slot[--r->nfree];
    r->req[slot] = (aio_req_t){.f = f, .off = off + done, .size = n, .op = (uint8_t)op, .tag = (int16_t)tag};
    r->pending[tag]++;
    if (zs__fault_hit(fault)) { /* as if the device had failed it */
      req_done(r, slot, -EIO, "");
    } else {
      struct io_uring_sqe *sqe = io_uring_get_sqe(&r->uring);
      if (!sqe) { /* the SQ holds no-ops left by a failed submit: hand them over */
        zs_status_t st = ring_flush(r);
        sqe = st == ZS_OK ? io_uring_get_sqe(&r->uring) : NULL;
        if (!sqe) {
          req_done(r, slot, -EBUSY, "no submission queue entry: ");
          return st != ZS_OK ? st : ZS_FAIL(NULL, ZS_ERR_IO, "aio: the submission queue stays full");
        }
      }
      if (op == ZS_AIO_READ) io_uring_prep_read(sqe, f->fd, p + done, n, off + done);
      else io_uring_prep_write(sqe, f->fd, p + done, n, off + done);
      io_uring_sqe_set_data64(sqe, (uint64_t)slot);
      int i = (r->sq_head + r->sq_count) % r->sq_cap;
      r->sq_slot[i] = slot;
      r->sq_sqe[i] = sqe;
      r->sq_count++;
      r->sq_real++;
      uint64_t now = (uint64_t)(r->depth - r->nfree);
      if (now > r->stats.max_inflight) r->stats.max_inflight = now;
    }
    done += n;
  }
  return ring_flush(r);
}

zs_status_t zs__aio_wait(zs_aio_ring_t *r, int tag) {
  ZS_CHECK_HANDLE(r, "zs__aio_wait");
  ZS_CHECK(check_tag("zs__aio_wait", tag));
  /* A failed flush has failed the requests it left, in their tags: this tag's
   * own failure, if any, is what the caller hears. */
  if (r->sq_count) (void)ring_flush(r);
  while (r->pending[tag] > 0 && in_kernel(r) > 0) {
    zs_status_t st = ring_reap(r, 1);
    if (st != ZS_OK) return st; /* the tag keeps its requests: the ring cannot wait for them */
  }
  zs_status_t st = r->tag_st[tag];
  r->tag_st[tag] = ZS_OK;
  if (st != ZS_OK) return ZS_FAIL(NULL, st, "%s", r->tag_msg[tag]);
  return ZS_OK;
}

int zs__aio_poll(zs_aio_ring_t *r, int tag) {
  if (!r || tag < 0 || tag >= ZS_AIO_TAGS) return 1;
  if (r->sq_count) (void)ring_flush(r);
  (void)ring_reap(r, 0);
  return r->pending[tag] == 0;
}

int zs__aio_inflight(const zs_aio_ring_t *r) { return r ? r->depth - r->nfree : 0; }

void zs__aio_stats(const zs_aio_ring_t *r, zs_aio_stats_t *out) {
  if (!out) return;
  if (r) *out = r->stats;
  else memset(out, 0, sizeof *out);
}

zs_status_t zs__aio_sync(zs_aio_ring_t *r, zs_aio_file_t *f, zs_aio_op_t op, void *buf, size_t bytes,
                         uint64_t off) {
  zs_status_t st = zs__aio_submit(r, f, op, buf, bytes, off, ZS_AIO_TAGS - 1);
  if (!r) return st;
  /* wait even after a failed submit: what it queued must be done before buf goes back */
  zs_status_t ws = zs__aio_wait(r, ZS_AIO_TAGS - 1);
  return ws != ZS_OK ? ws : st;
}

void zs__aio_ring_destroy(zs_aio_ring_t *r) {
  if (!r) return;
  if (r->sq_count) (void)ring_flush(r);
  while (in_kernel(r) > 0 && ring_reap(r, 1) == ZS_OK) {
  }
  io_uring_queue_exit(&r->uring);
  free(r->req);
  free(r->free_slot);
  free(r->sq_slot);
  free(r->sq_sqe);
  free(r);
}
