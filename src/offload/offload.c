/* ZeRO-Offload's host pipeline: gradient shards device-to-host as reductions
 * finish, and the unit-by-unit CPU step overlapped with host-to-device copies of
 * the updated parameters. Every copy goes through pinned memory on the copy
 * stream; no device synchronisation. */
#include <string.h>

#include "device/device_impl.h"
#include "offload/offload.h"

static zs_status_t grad_to_fp32(void *arg) {
  zs_offload_grad_task_t *t = arg;
  if (t->first) zs__cast_cpu(t->dst, ZS_FP32, t->staging, t->dtype, t->n);
  else zs__accumulate_cpu(t->dst, t->staging, t->dtype, t->n);
  return ZS_OK;
}

zs_status_t zs__offload_grad_d2h(zs_device_t *dev, zs_stream_t *copy, zs_event_t *reduced,
                                 const void *src, zs_offload_grad_task_t *task) {
  ZS_CHECK(zs_stream_wait_event(dev, copy, reduced));
  ZS_CHECK(zs_memcpy_async(dev, (void *)task->staging, src, task->n * zs_dtype_size(task->dtype), ZS_COPY_D2H,
                           copy));
  /* the staging buffer is reused by the next unit's copy, which is queued after
   * this host task on the same stream: no extra event needed */
  return zs__device_enqueue(dev, copy, grad_to_fp32, task);
}

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
