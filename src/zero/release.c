/* Releasing what setup made: every buffer, event and table of
 * zs_engine_setup, back to the declared state (after a failed setup, and in
 * zs_engine_destroy). */
#include <stdlib.h>
#include <string.h>

#include "zero/engine_impl.h"
#include "zero/tier.h"

static void unit_free_buffers(zs_engine_t *zs, zs_unit_t *u) {
  size_t P = (size_t)u->padded, S = (size_t)u->shard;
  for (int i = 0; i < u->nowned; i++) {
    if (u->owned[i].host) zs__eng_host_free(zs, &u->owned[i].p, u->owned[i].bytes, u->owned[i].cat);
    else zs__eng_free(zs, &u->owned[i].p, u->owned[i].bytes, u->owned[i].cat);
  }
  u->nowned = 0;
  /* transient buffers still alive (a step abandoned midway; the streams are
   * idle here) go back to the device's cache */
  if (zs->cfg.stage == 3 && !u->persistent) zs__eng_free_on(zs, &u->full, P * zs->pb, ZS_MEM_GATHER, NULL);
  if (zs->cfg.stage >= 2) {
    zs__eng_free_on(zs, &u->gfull, P * zs->pb, ZS_MEM_GRADS, NULL);
    if (zs->offload) zs__eng_free_on(zs, &u->gshard, S * zs->rb, ZS_MEM_GRADS, NULL);
  }
  zs__eng_free_on(zs, &u->gtemp, P * zs->rb, ZS_MEM_COMM, NULL);
  zs_event_t **evs[] = {&u->ev_gathered, &u->ev_computed, &u->ev_reduced};
  for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++) {
    if (*evs[i]) zs_event_destroy(zs->dev, *evs[i]);
    *evs[i] = NULL;
  }
  /* back to what the declaration made */
  zs_unit_t keep = *u;
  memset(u, 0, sizeof *u);
  memcpy(u->name, keep.name, sizeof u->name);
  u->first_param = keep.first_param;
  u->nparams = keep.nparams;
}

void zs__eng_release_setup(zs_engine_t *zs) {
  zs__offload_worker_destroy(zs->worker); /* waits for a running delayed update */
  zs->worker = NULL;
  /* errors here are the streams' sticky ones, already reported */
  if (zs->ag_stream) zs_stream_synchronize(zs->dev, zs->ag_stream);
  if (zs->rs_stream) zs_stream_synchronize(zs->dev, zs->rs_stream);
  if (zs->rep_stream) zs_stream_synchronize(zs->dev, zs->rep_stream);
  if (zs->copy_stream) zs_stream_synchronize(zs->dev, zs->copy_stream);
  if (zs->conv) zs__offload_conv_wait(zs->conv); /* it writes the host grad shards */
  zs_stream_synchronize(zs->dev, zs->compute);
  zs__tier_release(zs); /* its reader's copies first, then the file goes */
  zs__eng_free_held(zs, 1);
  free(zs->held);
  zs->held = NULL;
  zs->held_cap = 0;
  for (int i = 0; i < zs->nunits; i++) unit_free_buffers(zs, &zs->units[i]);
  zs__eng_free(zs, (void **)&zs->scalar, (size_t)zs->nslots * sizeof(double), ZS_MEM_COMM);
  zs__sumsq_plan_destroy(zs->norm_plan); /* compute is idle: its last run is done */
  zs->norm_plan = NULL;
  zs__eng_free(zs, &zs->norm_mem, zs->norm_mem_bytes, ZS_MEM_COMM);
  zs->norm_mem_bytes = 0;
  zs__eng_host_free(zs, (void **)&zs->hscalar, (size_t)zs->nslots * sizeof(double), ZS_MEM_COMM);
  zs__eng_host_free(zs, &zs->hstage_grad, zs->hstage_grad_bytes, ZS_MEM_COMM);
  for (int k = 0; k < 2; k++) zs__eng_host_free(zs, &zs->hstage_param[k], zs->hstage_param_bytes, ZS_MEM_COMM);
  zs->hstage_grad_bytes = zs->hstage_param_bytes = 0;
  free(zs->ounits);
  free(zs->seg_dst);
  free(zs->seg_lo);
  free(zs->seg_sumsq);
  zs->seg_lo = NULL;
  zs->seg_sumsq = NULL;
  free(zs->segs);
  free(zs->segs2);
  free(zs->seg_in_norm);
  zs->seg_in_norm = NULL;
  zs->ounits = NULL;
  zs->seg_dst = NULL;
  zs->segs = zs->segs2 = NULL;
  zs->nsegs = 0;
  if (zs->ev_applied)
    for (int i = 0; i < zs->nunits; i++)
      if (zs->ev_applied[i]) zs_event_destroy(zs->dev, zs->ev_applied[i]);
  free(zs->ev_applied);
  zs->ev_applied = NULL;
  for (int p = 0; p < 3; p++) {
    free(zs->order[p]);
    free(zs->rec[p]);
    zs->order[p] = zs->rec[p] = NULL;
    zs->order_len[p] = zs->rec_len[p] = 0;
  }
  zs->phase = ZS_PH_IDLE;
  zs->round = 0;
  zs->dpu_running = zs->dpu_unapplied = 0;
  zs->setup_done = 0;
  /* no slot may point into freed memory */
  for (int i = 0; i < zs->nparams; i++) {
    if (zs->params[i].pslot) *zs->params[i].pslot = NULL;
    if (zs->params[i].gslot) *zs->params[i].gslot = NULL;
  }
}
