/* ZeRO-Offload's host pipeline: the unit-by-unit CPU step overlapped with
 * host-to-device copies of the updated parameters (gradient shards come to the
 * host through convert.c). Every copy goes through pinned memory on the copy
 * stream; no device synchronisation. */
#include <string.h>

#include "device/device_impl.h"
#include "offload/offload.h"

zs_status_t zs__offload_step(zs_device_t *dev, zs_stream_t *copy, const zs_optim_hyper_t *h,
                             const zs_offload_unit_t *units, int nunits, zs_event_t *slot_done[2],
                             zs_event_t *done) {
  for (int i = 0; i < nunits; i++) {
    const zs_offload_unit_t *u = &units[i];
    if (u->staging_slot >= 0) ZS_CHECK(zs_event_synchronize(dev, slot_done[u->staging_slot]));
    ZS_CHECK(zs__optim_step_cpu(h, u->segs, u->nseg));
    for (int k = 0; k < u->nseg; k++) {
      const zs_optim_seg_t *s = &u->segs[k];
      const void *src = s->param ? s->param : (const void *)s->master;
      ZS_CHECK(zs_memcpy_async(dev, u->dev_dst[k], src, s->n * u->elem_bytes, ZS_COPY_H2D, copy));
    }
    if (u->staging_slot >= 0) ZS_CHECK(zs_event_record(dev, slot_done[u->staging_slot], copy));
  }
  return zs_event_record(dev, done, copy);
}
