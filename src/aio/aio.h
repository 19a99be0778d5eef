/* Internal: file I/O for the NVMe tier (ZeRO-Infinity): direct I/O (O_DIRECT)
 * through io_uring (liburing), with a bounded number of requests in flight.
 *
 * A file (zs_aio_file_t) is one descriptor opened O_RDWR | O_DIRECT, its path
 * and its size. A ring (zs_aio_ring_t) is one io_uring instance; it is used by
 * one thread at a time (a submission queue is not thread-safe), and several
 * rings may share a file. A transfer, a read or a write of `bytes` at file
 * offset `off`, is cut into requests of at most the ring's `block` bytes; at
 * most `depth` requests are in flight per ring, so a submit that finds the ring
 * full reaps completions (blocking) before it queues more. Buffer address,
 * offset and size are multiples of ZS_AIO_ALIGN (direct I/O's rule on every
 * Linux file system that has it).
 *
 * Each transfer carries a tag (0 .. ZS_AIO_TAGS-1) chosen by the caller: the
 * ring counts the tag's outstanding requests and keeps the tag's first failure;
 * zs__aio_wait waits for all of a tag's requests and returns that failure,
 * clearing the tag for reuse. A request that fails (res < 0), or transfers
 * fewer bytes than asked (a short read past the end of the file, a short
 * write), is ZS_ERR_IO with a message naming the file, the byte offset and
 * size of the request, and the reason (strerror, or "short read: n of m
 * bytes"). A short transfer is not retried: on a regular file with O_DIRECT it
 * means the end of the file or a device error, both of which the caller must
 * hear about.
 *
 * Fault injection (common.h): ZS_FAULT_AIO_READ / ZS_FAULT_AIO_WRITE make a
 * request fail with EIO as if the device had returned it (each request of a
 * transfer counts once).
 *
 * Without liburing at build time (aio_none.c) every create returns
 * ZS_ERR_UNSUPPORTED saying so; where the kernel refuses io_uring_setup (an
 * old kernel, a seccomp profile) zs__aio_ring_create returns
 * ZS_ERR_UNSUPPORTED with the reason. Nothing here allocates after create. */
#ifndef ZS_AIO_AIO_H
#define ZS_AIO_AIO_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

#define ZS_AIO_ALIGN 4096
#define ZS_AIO_TAGS 128

typedef struct zs_aio_file zs_aio_file_t;
typedef struct zs_aio_ring zs_aio_ring_t;

typedef enum { ZS_AIO_READ = 0, ZS_AIO_WRITE = 1 } zs_aio_op_t;

/* 1 if this build has liburing (the NVMe tier can work here at all). */
int zs__aio_available(void);

/* Creates `path` (O_CREAT | O_EXCL: an existing file is an error naming it,
 * never overwritten), opened O_RDWR | O_DIRECT, mode 0600, and reserves
 * `bytes` (a multiple of ZS_AIO_ALIGN) with fallocate, so that a disk without
 * room fails here, not in the middle of a step. Errors, each naming the path:
 * ZS_ERR_IO (cannot create: errno's text; a file system without direct I/O,
 * open's EINVAL: "does not support direct I/O (O_DIRECT), as tmpfs before Linux 6.6 ...: put
 * nvme_path on a disk's file system"), ZS_ERR_NOMEM (ENOSPC or EDQUOT at
 * fallocate: "needs N bytes, the file system has M free"; the file is removed
 * again), ZS_ERR_INVALID (bytes not aligned). */
zs_status_t zs__aio_file_create(zs_aio_file_t **out, const char *path, uint64_t bytes);
/* Closes the file; removes it from the file system too when `remove`. NULL is
 * a no-op. No ring may have a request in flight on it. */
void zs__aio_file_close(zs_aio_file_t *f, int remove);
/* Removes the file's name now; its data stays the open descriptor's, freed
 * when it closes or the process ends, however it ends (a killed run leaves
 * nothing on the disk). ZS_ERR_IO when unlink fails (the file stays named). */
zs_status_t zs__aio_file_unlink(zs_aio_file_t *f);
/* The file system's view of the open file (fstat): its size, and the bytes
 * allocated to it (st_blocks x 512). */
zs_status_t zs__aio_file_fs(const zs_aio_file_t *f, uint64_t *size, uint64_t *allocated);
const char *zs__aio_file_path(const zs_aio_file_t *f);
uint64_t zs__aio_file_size(const zs_aio_file_t *f);

/* A ring for up to `depth` requests in flight (1..1024) of at most `block`
 * bytes each (a multiple of ZS_AIO_ALIGN, at least ZS_AIO_ALIGN; a block above
 * 1 GiB makes requests of 1 GiB, since Linux moves at most ~2 GiB in one read
 * or write). ZS_ERR_INVALID for a depth or block out of range. */
zs_status_t zs__aio_ring_create(zs_aio_ring_t **out, int depth, size_t block);
/* Waits for every request in flight (their failures are dropped), then frees
 * the ring. NULL is a no-op. */
void zs__aio_ring_destroy(zs_aio_ring_t *r);

/* Queues a transfer of `bytes` at `off` of f into (read) or from (write) buf
 * and submits its requests, reaping completions first while `depth` are in
 * flight. Returns at once once all its requests are submitted; the buffer
 * must stay untouched until zs__aio_wait(r, tag) returns. bytes may be 0 (a
 * no-op). ZS_ERR_INVALID for a misaligned buffer, offset or size, a transfer
 * past the file's size, or a bad tag (the message says which), with nothing
 * queued; ZS_ERR_IO if io_uring_submit fails (the requests already in flight
 * still complete; those it could not hand to the kernel fail their tag, so
 * zs__aio_wait(r, tag) still returns only once nothing of buf is in use). */
zs_status_t zs__aio_submit(zs_aio_ring_t *r, zs_aio_file_t *f, zs_aio_op_t op, void *buf, size_t bytes,
                           uint64_t off, int tag);
/* Waits until every request of `tag` submitted so far has completed; returns
 * ZS_OK or the tag's first failure, and clears the tag. */
zs_status_t zs__aio_wait(zs_aio_ring_t *r, int tag);
/* Reaps completions that are ready, without blocking; 1 if `tag` has no
 * request in flight (its failure, if any, stays for zs__aio_wait). 1 for a
 * NULL ring or a tag out of range (nothing of it can be in flight). */
int zs__aio_poll(zs_aio_ring_t *r, int tag);
/* Requests in flight on the ring (for tests: never above depth). */
int zs__aio_inflight(const zs_aio_ring_t *r);
/* Counters since the ring was made: bytes read and written, requests
 * completed, and the most requests ever in flight at once. */
typedef struct {
  uint64_t bytes_read, bytes_written, requests, max_inflight;
} zs_aio_stats_t;
void zs__aio_stats(const zs_aio_ring_t *r, zs_aio_stats_t *out);

/* A transfer and its wait in one call, on tag ZS_AIO_TAGS-1 (for cold paths:
 * checkpoints, parameter access, setup). */
zs_status_t zs__aio_sync(zs_aio_ring_t *r, zs_aio_file_t *f, zs_aio_op_t op, void *buf, size_t bytes, uint64_t off);

/* Bytes available to an unprivileged writer on the file system holding `dir`
 * (statvfs f_bavail x f_frsize), and whether `dir` is a directory this process
 * can create files in; ZS_ERR_IO naming dir otherwise. */
zs_status_t zs__aio_dir_room(const char *dir, uint64_t *free_bytes);

#endif
