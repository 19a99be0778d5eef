/* Memory helpers: every engine buffer goes through the device's accountant,
 * counted by category: device memory kept for the engine's life, transient
 * buffers of a step from the device's stream-ordered cache (_on), and pinned
 * host memory (host_). A failure names the size, the category and the rank. */
#include <string.h>

#include "zero/engine_impl.h"

zs_status_t zs__eng_alloc(zs_engine_t *zs, size_t bytes, zs_mem_category_t cat, void **out) {
  *out = NULL;
  if (bytes == 0) return ZS_OK;
  zs_status_t st = zs_device_alloc(zs->dev, bytes, cat, out);
  if (st != ZS_OK)
    return ZS_FAIL(zs->err, st, "allocating %zu bytes of %s on rank %d failed: %s", bytes,
                   zs_mem_category_name(cat), zs->rank, zs_device_last_error(zs->dev));
  return ZS_OK;
}

void zs__eng_free(zs_engine_t *zs, void **p, size_t bytes, zs_mem_category_t cat) {
  if (*p) zs_device_free(zs->dev, *p, bytes, cat);
  *p = NULL;
}

zs_status_t zs__eng_alloc_on(zs_engine_t *zs, size_t bytes, zs_mem_category_t cat, zs_stream_t *s, void **out) {
  *out = NULL;
  if (bytes == 0) return ZS_OK;
  zs_status_t st = zs_device_alloc_async(zs->dev, bytes, cat, s, out);
  if (st != ZS_OK)
    return ZS_FAIL(zs->err, st, "allocating %zu bytes of %s on rank %d failed: %s", bytes,
                   zs_mem_category_name(cat), zs->rank, zs_device_last_error(zs->dev));
  return ZS_OK;
}

void zs__eng_free_on(zs_engine_t *zs, void **p, size_t bytes, zs_mem_category_t cat, zs_stream_t *s) {
  if (*p) zs_device_free_async(zs->dev, *p, bytes, cat, s);
  *p = NULL;
}

zs_status_t zs__eng_host_alloc(zs_engine_t *zs, size_t bytes, zs_mem_category_t cat, void **out) {
  *out = NULL;
  if (bytes == 0) return ZS_OK;
  unsigned flags = ZS_HOST_PINNED | (zs->cfg.offload_strict ? ZS_HOST_STRICT : 0u);
  zs_status_t st = zs_device_host_alloc(zs->dev, bytes, cat, flags, out);
  if (st != ZS_OK)
    return ZS_FAIL(zs->err, st, "allocating %zu bytes of pinned host memory (%s) on rank %d failed: %s", bytes,
                   zs_mem_category_name(cat), zs->rank, zs_device_last_error(zs->dev));
  memset(*out, 0, bytes);
  return ZS_OK;
}

void zs__eng_host_free(zs_engine_t *zs, void **p, size_t bytes, zs_mem_category_t cat) {
  if (*p) zs_device_host_free(zs->dev, *p, bytes, cat);
  *p = NULL;
}
