/* src/aio (aio.h): direct-I/O transfers through io_uring. Files live in a
 * temporary folder on a disk's file system (not tmpfs), removed at the end
 * whatever the checks found. In a build without liburing, or where the kernel
 * refuses io_uring, the test checks the refusal and skips. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "aio/aio.h"
#include "harness.h"

#define KB 1024u
#define BLK ZS_AIO_ALIGN
#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif

static char g_dir[PATH_MAX];

/* A path in the test's folder (one of two buffers, so two may be live). */
static const char *tpath(const char *name) {
  static char buf[2][PATH_MAX + 64];
  static int k;
  k ^= 1;
  snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
  return buf[k];
}

static int exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

static void *alloc_aligned(size_t bytes) {
  void *p = NULL;
  return posix_memalign(&p, ZS_AIO_ALIGN, bytes) == 0 ? p : NULL;
}

/* The bytes a file holds at offset `off`: a word a distinct function of its
 * offset, so that a block written to or read from the wrong place shows. */
static void pattern(void *buf, uint64_t off, size_t bytes, uint64_t seed) {
  uint64_t *w = buf;
  for (size_t i = 0; i < bytes / 8; i++) {
    uint64_t s = (off + 8 * i) ^ seed;
    w[i] = zs_t_rand_u64(&s);
  }
}

/* Offset of the first byte where a and b differ, or -1. */
static long long first_diff(const void *a, const void *b, size_t n) {
  const unsigned char *x = a, *y = b;
  for (size_t i = 0; i < n; i++)
    if (x[i] != y[i]) return (long long)i;
  return -1;
}

static int rm_entry(const char *p, const struct stat *sb, int type, struct FTW *ftw) {
  return remove(p);
}

static void cleanup(void) {
  if (g_dir[0]) nftw(g_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  g_dir[0] = 0;
}

/* ---- transfers ---------------------------------------------------------------- */

/* Writes a pattern through several transfers larger than the block on many
 * tags, reads it back on others, and checks the bytes (also through the page
 * cache, independently of the ring), the depth bound and the counters. */
static void test_roundtrip(void) {
  const size_t fsize = 1024 * KB, xfer = 128 * KB, block = 16 * KB;
  const char *path = tpath("roundtrip");
  zs_aio_file_t *f = NULL;
  zs_aio_ring_t *r = NULL;
  char *src = alloc_aligned(fsize), *dst = alloc_aligned(fsize), *chk = malloc(fsize);
  assert_true(src && dst && chk);
  pattern(src, 0, fsize, 1);
  memset(dst, 0xee, fsize);
  expect_ok(zs__aio_file_create(&f, path, fsize));
  expect_ok(zs__aio_ring_create(&r, 2, block));
  if (!f || !r) goto out;
  expect_str_contains(zs__aio_file_path(f), path);
  expect_u64_eq(zs__aio_file_size(f), fsize);
  int max_seen = 0;
  /* writes on tags 0..7, waited for in reverse order */
  for (int t = 0; t < (int)(fsize / xfer); t++) {
    expect_ok(zs__aio_submit(r, f, ZS_AIO_WRITE, src + t * xfer, xfer, t * xfer, t));
    if (zs__aio_inflight(r) > max_seen) max_seen = zs__aio_inflight(r);
  }
  for (int t = (int)(fsize / xfer) - 1; t >= 0; t--) expect_ok(zs__aio_wait(r, t));
  expect_int_le(max_seen, 2);
  expect_int_eq(zs__aio_inflight(r), 0);
  zs_aio_stats_t s;
  zs__aio_stats(r, &s);
  expect_u64_eq(s.bytes_written, fsize);
  expect_u64_eq(s.bytes_read, 0);
  expect_u64_eq(s.requests, fsize / block);
  expect_u64_eq(s.max_inflight, 2);
  /* the file as the page cache sees it */
  int fd = open(path, O_RDONLY);
  expect_true(fd >= 0);
  if (fd >= 0) {
    expect_int_eq(pread(fd, chk, fsize, 0), (long long)fsize);
    expect_int_eq(first_diff(chk, src, fsize), -1);
    close(fd);
  }
  /* read back on tags 100..107, in the opposite order, polling before waiting */
  for (int t = 0; t < (int)(fsize / xfer); t++) {
    size_t o = fsize - (size_t)(t + 1) * xfer;
    expect_ok(zs__aio_submit(r, f, ZS_AIO_READ, dst + o, xfer, o, 100 + t));
    expect_int_le(zs__aio_inflight(r), 2);
  }
  for (int t = 0; t < (int)(fsize / xfer); t++) {
    int spins = 0;
    while (!zs__aio_poll(r, 100 + t) && spins < 100000000) spins++;
    expect_int_eq(zs__aio_poll(r, 100 + t), 1);
    expect_ok(zs__aio_wait(r, 100 + t));
  }
  expect_int_eq(first_diff(dst, src, fsize), -1);
  expect_int_eq(zs__aio_poll(r, 5), 1); /* nothing on it */
  zs__aio_stats(r, &s);
  expect_u64_eq(s.bytes_read, fsize);
  expect_u64_eq(s.requests, 2 * fsize / block);
  /* a window that does not start or end on a block: 16 + 16 + 8 KiB */
  memset(dst, 0, fsize);
  expect_ok(zs__aio_sync(r, f, ZS_AIO_READ, dst, 40 * KB, 12 * KB));
  expect_int_eq(first_diff(dst, src + 12 * KB, 40 * KB), -1);
  zs__aio_stats(r, &s);
  expect_u64_eq(s.requests, 2 * fsize / block + 3);
  /* bytes == 0 is a no-op */
  expect_ok(zs__aio_submit(r, f, ZS_AIO_READ, dst, 0, 0, 3));
  expect_ok(zs__aio_wait(r, 3));
  zs__aio_stats(r, &s);
  expect_u64_eq(s.bytes_read, fsize + 40 * KB);
out:
  zs__aio_ring_destroy(r);
  zs__aio_file_close(f, 1);
  expect_true(!exists(path));
  free(src), free(dst), free(chk);
}

/* Many small transfers on 64 tags through a deeper ring: the ring fills to
 * exactly its depth and every tag's bytes land where they belong. */
static void test_many_tags(void) {
  const int depth = 8, tags = 64;
  const size_t xfer = 3 * BLK, fsize = (size_t)tags * xfer;
  const char *path = tpath("tags");
  zs_aio_file_t *f = NULL;
  zs_aio_ring_t *r = NULL;
  char *src = alloc_aligned(fsize), *dst = alloc_aligned(fsize);
  assert_true(src && dst);
  pattern(src, 0, fsize, 7);
  memset(dst, 0, fsize);
  expect_ok(zs__aio_file_create(&f, path, fsize));
  expect_ok(zs__aio_ring_create(&r, depth, BLK));
  if (!f || !r) goto out;
  /* one transfer of many blocks: depth requests in flight at once, never more */
  expect_ok(zs__aio_submit(r, f, ZS_AIO_WRITE, src, fsize, 0, 9));
  expect_int_le(zs__aio_inflight(r), depth);
  expect_ok(zs__aio_wait(r, 9));
  zs_aio_stats_t s;
  zs__aio_stats(r, &s);
  expect_u64_eq(s.max_inflight, depth);
  expect_u64_eq(s.requests, fsize / BLK);
  /* reads interleaved on 64 tags (tag t reads transfer (t * 37) % 64), waited
   * for in a shuffled order */
  for (int t = 0; t < tags; t++) {
    size_t o = (size_t)((t * 37) % tags) * xfer;
    expect_ok(zs__aio_submit(r, f, ZS_AIO_READ, dst + o, xfer, o, t));
    expect_int_le(zs__aio_inflight(r), depth);
  }
  for (int k = 0; k < tags; k++) expect_ok(zs__aio_wait(r, (k * 23 + 5) % tags));
  expect_int_eq(zs__aio_inflight(r), 0);
  expect_int_eq(first_diff(dst, src, fsize), -1);
  zs__aio_stats(r, &s);
  expect_u64_eq(s.bytes_read, fsize);
  expect_u64_eq(s.bytes_written, fsize);
  expect_u64_eq(s.max_inflight, depth);
out:
  zs__aio_ring_destroy(r);
  zs__aio_file_close(f, 1);
  free(src), free(dst);
}

/* The name removed once the file is made (the NVMe tier does it at setup): a
 * process killed after that leaves nothing in the folder (a trial's killed
 * runs left their files, 353-706 MB, which the next run's disk check counted
 * as used); the open file keeps its size and reservation, as fstat shows. */
static void test_killed(void) {
  const char *path = tpath("killed");
  const pid_t pid = fork();
  if (pid == 0) {
    zs_aio_file_t *f = NULL;
    if (zs__aio_file_create(&f, path, 1024 * KB) != ZS_OK || zs__aio_file_unlink(f) != ZS_OK) _exit(3);
    raise(SIGKILL);
    _exit(4);
  }
  int status = 0;
  assert_true(pid > 0 && waitpid(pid, &status, 0) == pid);
  expect_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  expect_int_eq(access(path, F_OK), -1);
  zs_aio_file_t *f = NULL;
  uint64_t size = 0, allocated = 0;
  assert_ok(zs__aio_file_create(&f, path, 512 * KB));
  expect_ok(zs__aio_file_unlink(f));
  expect_int_eq(access(path, F_OK), -1);
  expect_ok(zs__aio_file_fs(f, &size, &allocated));
  expect_u64_eq(size, 512 * KB);
  expect_true(allocated >= 512 * KB); /* reserved, not sparse */
  zs__aio_file_close(f, 1);
}

/* A ring destroyed with requests in flight waits for them first. */
static void test_destroy_busy(void) {
  const size_t fsize = 512 * KB;
  zs_aio_file_t *f = NULL;
  zs_aio_ring_t *r = NULL;
  char *buf = alloc_aligned(fsize);
  assert_true(buf != NULL);
  pattern(buf, 0, fsize, 3);
  expect_ok(zs__aio_file_create(&f, tpath("busy"), fsize));
  expect_ok(zs__aio_ring_create(&r, 4, 8 * KB));
  if (f && r) expect_ok(zs__aio_submit(r, f, ZS_AIO_WRITE, buf, fsize, 0, 1));
  zs__aio_ring_destroy(r);
  zs__aio_file_close(f, 1);
  free(buf);
}

/* ---- argument checks ------------------------------------------------------------ */

static void test_invalid(void) {
  const size_t fsize = 64 * KB;
  const char *path = tpath("invalid");
  zs_aio_file_t *f = NULL;
  zs_aio_ring_t *r = NULL;
  char *buf = alloc_aligned(fsize + BLK);
  assert_true(buf != NULL);
  expect_status(zs__aio_ring_create(&r, 0, BLK), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "depth 0");
  expect_status(zs__aio_ring_create(&r, 1025, BLK), ZS_ERR_INVALID);
  expect_status(zs__aio_ring_create(&r, 4, 1000), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "block size 1000");
  expect_status(zs__aio_ring_create(&r, 4, 0), ZS_ERR_INVALID);
  expect_true(r == NULL);
  expect_status(zs__aio_file_create(&f, path, 5000), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "multiple of 4096");
  expect_true(!exists(path));
  expect_ok(zs__aio_file_create(&f, path, fsize));
  expect_ok(zs__aio_ring_create(&r, 4, 16 * KB));
  if (!f || !r) goto out;
  expect_status(zs__aio_submit(r, f, ZS_AIO_READ, buf + 512, BLK, 0, 0), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "buffer");
  expect_str_contains(zs_last_error(), "not aligned");
  expect_status(zs__aio_submit(r, f, ZS_AIO_WRITE, buf, BLK, 512, 0), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "offset 512");
  expect_status(zs__aio_submit(r, f, ZS_AIO_READ, buf, 512, 0, 0), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "size 512");
  /* past the end: the last block and one more; an offset beyond the end */
  expect_status(zs__aio_submit(r, f, ZS_AIO_READ, buf, 2 * BLK, fsize - BLK, 0), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "past the end");
  expect_str_contains(zs_last_error(), path);
  expect_status(zs__aio_submit(r, f, ZS_AIO_WRITE, buf, BLK, fsize, 0), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "past the end");
  expect_status(zs__aio_submit(r, f, ZS_AIO_READ, buf, BLK, 0, ZS_AIO_TAGS), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "tag 128");
  expect_status(zs__aio_submit(r, f, ZS_AIO_READ, buf, BLK, 0, -1), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "tag -1");
  expect_status(zs__aio_wait(r, ZS_AIO_TAGS), ZS_ERR_INVALID);
  expect_status(zs__aio_submit(r, f, (zs_aio_op_t)7, buf, BLK, 0, 0), ZS_ERR_INVALID);
  expect_status(zs__aio_submit(NULL, f, ZS_AIO_READ, buf, BLK, 0, 0), ZS_ERR_INVALID);
  /* nothing of the refused calls was queued; the exact end still works */
  expect_int_eq(zs__aio_inflight(r), 0);
  zs_aio_stats_t s;
  zs__aio_stats(r, &s);
  expect_u64_eq(s.requests, 0);
  expect_ok(zs__aio_sync(r, f, ZS_AIO_WRITE, buf, BLK, fsize - BLK));
out:
  zs__aio_ring_destroy(r);
  zs__aio_file_close(f, 1);
  free(buf);
}

/* ---- failures ------------------------------------------------------------------- */

/* The file shrinks behind the ring's back: a read past its new end is short. */
static void test_short_read(void) {
  const size_t fsize = 4 * BLK;
  const char *path = tpath("short");
  zs_aio_file_t *f = NULL;
  zs_aio_ring_t *r = NULL;
  char *src = alloc_aligned(fsize), *dst = alloc_aligned(fsize);
  assert_true(src && dst);
  pattern(src, 0, fsize, 11);
  expect_ok(zs__aio_file_create(&f, path, fsize));
  expect_ok(zs__aio_ring_create(&r, 4, BLK));
  if (!f || !r) goto out;
  expect_ok(zs__aio_sync(r, f, ZS_AIO_WRITE, src, fsize, 0));
  int fd = open(path, O_RDWR);
  expect_true(fd >= 0);
  if (fd < 0) goto out;
  expect_int_eq(ftruncate(fd, 2 * BLK + 2048), 0); /* 2.5 blocks */
  close(fd);
  zs_aio_stats_t s0, s1;
  zs__aio_stats(r, &s0);
  expect_status(zs__aio_sync(r, f, ZS_AIO_READ, dst, BLK, 2 * BLK), ZS_ERR_IO);
  expect_str_contains(zs_last_error(), path);
  expect_str_contains(zs_last_error(), "read of 4096 bytes at offset 8192 of");
  expect_str_contains(zs_last_error(), "short read: 2048 of 4096 bytes");
  expect_int_eq(first_diff(dst, src + 2 * BLK, 2048), -1);
  zs__aio_stats(r, &s1);
  expect_u64_eq(s1.bytes_read - s0.bytes_read, 2048);
  /* past the end altogether, on a tag of its own */
  expect_ok(zs__aio_submit(r, f, ZS_AIO_READ, dst, BLK, 3 * BLK, 6));
  expect_status(zs__aio_wait(r, 6), ZS_ERR_IO);
  expect_str_contains(zs_last_error(), "at offset 12288 of");
  expect_str_contains(zs_last_error(), "short read: 0 of 4096 bytes");
  /* the failures were cleared with their tags */
  expect_ok(zs__aio_wait(r, 6));
  memset(dst, 0, fsize);
  expect_ok(zs__aio_sync(r, f, ZS_AIO_READ, dst, 2 * BLK, 0));
  expect_int_eq(first_diff(dst, src, 2 * BLK), -1);
out:
  zs__aio_ring_destroy(r);
  zs__aio_file_close(f, 1);
  free(src), free(dst);
}

/* ZS_FAULT_AIO_WRITE / _READ: the third request of a four-request transfer
 * fails with EIO; the message names its offset, and the next transfer works. */
static void fault_case(zs_aio_op_t op) {
  const int rd = op == ZS_AIO_READ;
  const size_t fsize = 8 * BLK;
  const char *path = tpath(rd ? "fault_read" : "fault_write");
  zs_aio_file_t *f = NULL;
  zs_aio_ring_t *r = NULL;
  char *src = alloc_aligned(fsize), *dst = alloc_aligned(fsize);
  assert_true(src && dst);
  pattern(src, 0, fsize, 5);
  memset(dst, 0, fsize);
  expect_ok(zs__aio_file_create(&f, path, fsize));
  expect_ok(zs__aio_ring_create(&r, 2, BLK));
  if (!f || !r) goto out;
  expect_ok(zs__aio_sync(r, f, ZS_AIO_WRITE, src, fsize, 0));
  zs_aio_stats_t s0, s1;
  zs__aio_stats(r, &s0);
  zs__fault_arm(rd ? ZS_FAULT_AIO_READ : ZS_FAULT_AIO_WRITE, 2, 1);
  /* four requests at 8192, 12288, 16384, 20480 */
  expect_ok(zs__aio_submit(r, f, op, rd ? dst : src + 2 * BLK, 4 * BLK, 2 * BLK, 17));
  expect_status(zs__aio_wait(r, 17), ZS_ERR_IO);
  const char *msg = zs_last_error();
  expect_str_contains(msg, path);
  expect_str_contains(msg, rd ? "read of 4096 bytes at offset 16384 of" : "write of 4096 bytes at offset 16384 of");
  expect_str_contains(msg, strerror(EIO));
  expect_true(!strstr(msg, "offset 8192 ") && !strstr(msg, "offset 12288 ") && !strstr(msg, "offset 20480 "));
  zs__aio_stats(r, &s1);
  expect_u64_eq(s1.requests - s0.requests, 4);
  expect_u64_eq(rd ? s1.bytes_read - s0.bytes_read : s1.bytes_written - s0.bytes_written, 3 * BLK);
  expect_int_eq(zs__aio_inflight(r), 0);
  /* the fault is spent: the same transfer again succeeds */
  expect_ok(zs__aio_submit(r, f, op, rd ? dst : src + 2 * BLK, 4 * BLK, 2 * BLK, 17));
  expect_ok(zs__aio_wait(r, 17));
  if (rd) expect_int_eq(first_diff(dst, src + 2 * BLK, 4 * BLK), -1);
  else {
    expect_ok(zs__aio_sync(r, f, ZS_AIO_READ, dst, fsize, 0));
    expect_int_eq(first_diff(dst, src, fsize), -1);
  }
  /* two failures in one tag (the second and third requests): the first is kept */
  zs__fault_arm(rd ? ZS_FAULT_AIO_READ : ZS_FAULT_AIO_WRITE, 1, 2);
  expect_ok(zs__aio_submit(r, f, op, rd ? dst : src, 4 * BLK, 0, 18));
  expect_status(zs__aio_wait(r, 18), ZS_ERR_IO);
  expect_str_contains(zs_last_error(), "bytes at offset 4096 of");
  expect_ok(zs__aio_wait(r, 18));
out:
  zs__fault_arm(rd ? ZS_FAULT_AIO_READ : ZS_FAULT_AIO_WRITE, 0, 0);
  zs__aio_ring_destroy(r);
  zs__aio_file_close(f, 1);
  free(src), free(dst);
}
static void test_fault_write(void) { fault_case(ZS_AIO_WRITE); }
static void test_fault_read(void) { fault_case(ZS_AIO_READ); }

/* ---- files ---------------------------------------------------------------------- */

static void test_exclusive(void) {
  const char *path = tpath("excl");
  zs_aio_file_t *f = NULL, *g = NULL;
  expect_ok(zs__aio_file_create(&f, path, 3 * BLK));
  if (!f) return;
  struct stat sb;
  expect_int_eq(stat(path, &sb), 0);
  expect_int_eq(sb.st_size, 3 * BLK);
  expect_int_eq(sb.st_mode & 0777, 0600);
  expect_status(zs__aio_file_create(&g, path, BLK), ZS_ERR_IO);
  expect_true(g == NULL);
  expect_str_contains(zs_last_error(), path);
  expect_str_contains(zs_last_error(), strerror(EEXIST));
  zs__aio_file_close(f, 0); /* kept */
  expect_true(exists(path));
  expect_int_eq(stat(path, &sb), 0);
  expect_int_eq(sb.st_size, 3 * BLK);
  expect_status(zs__aio_file_create(&g, path, BLK), ZS_ERR_IO);
  expect_int_eq(unlink(path), 0);
  expect_ok(zs__aio_file_create(&g, path, BLK));
  zs__aio_file_close(g, 1); /* removed */
  expect_true(!exists(path));
  zs__aio_file_close(NULL, 1);
  /* a folder that is not there */
  expect_status(zs__aio_file_create(&g, tpath("no/such/file"), BLK), ZS_ERR_IO);
  expect_str_contains(zs_last_error(), "no/such/file");
}

/* /dev/shm's file system if it is a tmpfs with a size limit, with `direct` set
 * to whether it takes O_DIRECT (Linux 6.6 and later); 0 otherwise. */
static int shm_tmpfs(int *direct, uint64_t *total) {
  struct statfs sf;
  if (statfs("/dev/shm", &sf) != 0 || sf.f_type != TMPFS_MAGIC) return 0;
  char probe[64];
  snprintf(probe, sizeof probe, "/dev/shm/zs_aio_probe.%d", (int)getpid());
  int fd = open(probe, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return 0;
  close(fd);
  fd = open(probe, O_RDWR | O_DIRECT);
  *direct = fd >= 0;
  if (fd >= 0) close(fd);
  unlink(probe);
  *total = (uint64_t)sf.f_blocks * (uint64_t)sf.f_bsize;
  return 1;
}

/* A tmpfs without direct I/O: create fails with the O_DIRECT message, and
 * leaves no file. */
static void test_tmpfs(void) {
  int direct = 0;
  uint64_t total = 0;
  if (!shm_tmpfs(&direct, &total)) zs_test_skip("/dev/shm is not a tmpfs this test can write");
  if (direct) zs_test_skip("this kernel's tmpfs takes O_DIRECT (Linux 6.6+): nothing to refuse");
  char path[64];
  snprintf(path, sizeof path, "/dev/shm/zs_aio_test.%d", (int)getpid());
  zs_aio_file_t *f = NULL;
  expect_status(zs__aio_file_create(&f, path, BLK), ZS_ERR_IO);
  expect_str_contains(zs_last_error(), path);
  expect_str_contains(zs_last_error(), "does not support direct I/O (O_DIRECT), as tmpfs before Linux 6.6");
  expect_true(!exists(path));
  if (f) zs__aio_file_close(f, 1);
}

/* A file larger than its file system: ZS_ERR_NOMEM with the numbers, and no
 * file left. On a size-limited tmpfs, which refuses an fallocate larger than
 * the whole file system at once: on a disk's file system (ext4, xfs) an
 * impossible fallocate first fills the disk, under every other writer's feet,
 * and a root process may even get the reserved blocks. */
static void test_enospc(void) {
  int direct = 0;
  uint64_t total = 0;
  if (!shm_tmpfs(&direct, &total)) zs_test_skip("/dev/shm is not a tmpfs this test can write");
  if (!direct) zs_test_skip("this kernel's tmpfs refuses O_DIRECT (test_tmpfs covers it)");
  if (!total) zs_test_skip("/dev/shm has no size limit: fallocate would take the memory");
  uint64_t want = (total + (1ull << 30)) / ZS_AIO_ALIGN * ZS_AIO_ALIGN;
  char path[64], needs[64];
  snprintf(path, sizeof path, "/dev/shm/zs_aio_test.%d", (int)getpid());
  snprintf(needs, sizeof needs, "needs %llu bytes", (unsigned long long)want);
  zs_aio_file_t *f = NULL;
  expect_status(zs__aio_file_create(&f, path, want), ZS_ERR_NOMEM);
  expect_str_contains(zs_last_error(), path);
  expect_str_contains(zs_last_error(), needs);
  expect_str_contains(zs_last_error(), "free");
  expect_true(!exists(path));
  if (f) zs__aio_file_close(f, 1);
}

static void test_dir_room(void) {
  uint64_t room = 0;
  expect_ok(zs__aio_dir_room(g_dir, &room));
  struct statvfs sv;
  assert_int_eq(statvfs(g_dir, &sv), 0);
  uint64_t now = (uint64_t)sv.f_bavail * sv.f_frsize;
  expect_true(room > 0);
  /* other writers move it; within 1 GiB */
  expect_true(room + (1ull << 30) > now && now + (1ull << 30) > room);
  const char *file = tpath("plain");
  FILE *fp = fopen(file, "w");
  expect_true(fp != NULL);
  if (fp) fclose(fp);
  expect_status(zs__aio_dir_room(file, &room), ZS_ERR_IO);
  expect_str_contains(zs_last_error(), "not a directory");
  expect_str_contains(zs_last_error(), file);
  expect_status(zs__aio_dir_room(tpath("missing"), &room), ZS_ERR_IO);
  expect_str_contains(zs_last_error(), "missing");
}

/* ---- main ------------------------------------------------------------------------- */

/* A folder for the files on a file system with direct I/O: TMPDIR, /tmp or the
 * working directory (ctest's: the build tree), the first that is not a tmpfs. */
static int make_dir(void) {
  const char *cand[] = {getenv("TMPDIR"), "/tmp", "."};
  for (size_t i = 0; i < sizeof cand / sizeof *cand; i++) {
    struct statfs sf;
    if (!cand[i] || !*cand[i] || statfs(cand[i], &sf) != 0 || sf.f_type == TMPFS_MAGIC) continue;
    snprintf(g_dir, sizeof g_dir, "%s/zs_aio.XXXXXX", cand[i]);
    if (mkdtemp(g_dir)) return 1;
  }
  g_dir[0] = 0;
  return 0;
}

int main(void) {
  if (!zs__aio_available()) {
    /* the refusal is what there is to check here */
    zs_aio_file_t *f = (zs_aio_file_t *)1;
    zs_aio_ring_t *r = (zs_aio_ring_t *)1;
    expect_status(zs__aio_file_create(&f, "/tmp/zs_aio_none", BLK), ZS_ERR_UNSUPPORTED);
    expect_str_contains(zs_last_error(), "built without liburing");
    expect_true(f == NULL);
    expect_status(zs__aio_ring_create(&r, 4, BLK), ZS_ERR_UNSUPPORTED);
    expect_true(r == NULL);
    uint64_t room = 0;
    expect_ok(zs__aio_dir_room("/tmp", &room));
    if (zs_t_failed_checks) return 1;
    ZS_SKIP("built without liburing: src/aio refuses every file and ring");
  }
  zs_aio_ring_t *probe = NULL;
  zs_status_t st = zs__aio_ring_create(&probe, 1, BLK);
  if (st == ZS_ERR_UNSUPPORTED) ZS_SKIP("the kernel refuses io_uring here");
  zs__aio_ring_destroy(probe);
  if (!make_dir()) ZS_SKIP("no folder on a file system with direct I/O (TMPDIR, /tmp, .)");
  atexit(cleanup);
  zs_test_run(test_roundtrip);
  zs_test_run(test_many_tags);
  zs_test_run(test_destroy_busy);
  zs_test_run(test_killed);
  zs_test_run(test_invalid);
  zs_test_run(test_short_read);
  zs_test_run(test_fault_write);
  zs_test_run(test_fault_read);
  zs_test_run(test_exclusive);
  zs_test_run(test_tmpfs);
  zs_test_run(test_enospc);
  zs_test_run(test_dir_room);
  cleanup();
  return zs_test_finish();
}
