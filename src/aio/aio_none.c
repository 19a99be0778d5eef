/* aio.h in a build without liburing: nothing can be created, so nothing else is
 * ever reached with a real handle; the rest accept NULL as aio.c does. */
#include "aio/aio.h"

#define AIO_NONE_MSG \
  "zeroshard was built without liburing: the NVMe tier needs it (install liburing-dev and rebuild)"

int zs__aio_available(void) { return 0; }

zs_status_t zs__aio_file_create(zs_aio_file_t **out, const char *path, uint64_t bytes) {
  if (out) *out = NULL;
  return ZS_FAIL(NULL, ZS_ERR_UNSUPPORTED, "aio: cannot create '%s': " AIO_NONE_MSG, path ? path : "(null)");
}

void zs__aio_file_close(zs_aio_file_t *f, int remove) {}
zs_status_t zs__aio_file_unlink(zs_aio_file_t *f) { return ZS_FAIL(NULL, ZS_ERR_UNSUPPORTED, "aio: " AIO_NONE_MSG); }
zs_status_t zs__aio_file_fs(const zs_aio_file_t *f, uint64_t *size, uint64_t *allocated) {
  return ZS_FAIL(NULL, ZS_ERR_UNSUPPORTED, "aio: " AIO_NONE_MSG);
}
const char *zs__aio_file_path(const zs_aio_file_t *f) { return NULL; }
uint64_t zs__aio_file_size(const zs_aio_file_t *f) { return 0; }

zs_status_t zs__aio_ring_create(zs_aio_ring_t **out, int depth, size_t block) {
  if (out) *out = NULL;
  return ZS_FAIL(NULL, ZS_ERR_UNSUPPORTED, "aio: " AIO_NONE_MSG);
}

void zs__aio_ring_destroy(zs_aio_ring_t *r) {}

zs_status_t zs__aio_submit(zs_aio_ring_t *r, zs_aio_file_t *f, zs_aio_op_t op, void *buf, size_t bytes,
                           uint64_t off, int tag) {
  return ZS_FAIL(NULL, ZS_ERR_UNSUPPORTED, "aio: " AIO_NONE_MSG);
}

zs_status_t zs__aio_wait(zs_aio_ring_t *r, int tag) {
  return ZS_FAIL(NULL, ZS_ERR_UNSUPPORTED, "aio: " AIO_NONE_MSG);
}

int zs__aio_poll(zs_aio_ring_t *r, int tag) { return 1; }
int zs__aio_inflight(const zs_aio_ring_t *r) { return 0; }

void zs__aio_stats(const zs_aio_ring_t *r, zs_aio_stats_t *out) {
  if (out) *out = (zs_aio_stats_t){0};
}

zs_status_t zs__aio_sync(zs_aio_ring_t *r, zs_aio_file_t *f, zs_aio_op_t op, void *buf, size_t bytes,
                         uint64_t off) {
  return ZS_FAIL(NULL, ZS_ERR_UNSUPPORTED, "aio: " AIO_NONE_MSG);
}
