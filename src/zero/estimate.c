/* What a declared model will hold per rank (zs_engine_estimate, docs/design.md
 * section 3) and, before setup allocates anything, whether the host and the
 * NVMe tier's disk have room for it (design.md 8.6). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aio/aio.h"
#include "kernels/wquant.h"
#include "memory/memory.h"
#include "zero/engine_impl.h"
#include "zero/tier.h"

/* Element alignment of parameters in a unit: ZS_ALIGN, or the int8 state block
 * when larger, so that no block of a parameter straddles a shard. */
int64_t zs__eng_align(const zs_config_t *c) {
  int b = c->optim.state_dtype == ZS_STATE_INT8 ? zs__optim_state_block(&c->optim) : 0;
  return b > ZS_ALIGN ? b : ZS_ALIGN;
}

/* Bytes of one optimizer moment (m or v) over `on` elements: the elements in the
 * state dtype, and for int8 one fp32 scale per block (on is a multiple of it). */
uint64_t zs__eng_state_bytes(const zs_config_t *c, uint64_t on) {
  uint64_t b = on * zs__state_elem_bytes(c->optim.state_dtype);
  if (c->optim.state_dtype == ZS_STATE_INT8) b += on / (uint64_t)zs__optim_state_block(&c->optim) * 4;
  return b;
}

/* A unit's flat size at `world` ranks: its parameters each aligned to A =
 * zs__eng_align (extent), padded to a multiple of world * A (padded); its element
 * count (numel) and whether it stays gathered at stage 3 (persist_threshold
 * compares the element count). Sets the parameters' flat offsets when `place`. */
void zs__eng_unit_extent(const zs_engine_t *zs, const zs_unit_t *u, int64_t world, int place, int64_t *numel,
                        int64_t *padded, int *persistent) {
  const int64_t A = zs__eng_align(&zs->cfg);
  int64_t quantum = world * A, off = 0, n = 0;
  for (int k = 0; k < u->nparams; k++) {
    zs_param_t *p = &zs->params[u->first_param + k];
    if (place) p->flat_off = off;
    off += (p->numel + A - 1) / A * A;
    n += p->numel;
  }
  *numel = n;
  *padded = off ? (off + quantum - 1) / quantum * quantum : quantum;
  *persistent = zs->cfg.stage == 3 && zs->cfg.persist_threshold > 0 && (uint64_t)n <= zs->cfg.persist_threshold;
}

/* A unit whose parameters are all frozen holds its parameters only. */
int zs__eng_unit_frozen(const zs_engine_t *zs, const zs_unit_t *u) {
  for (int k = 0; k < u->nparams; k++)
    if (!(zs->params[u->first_param + k].flags & ZS_PARAM_FROZEN)) return 0;
  return u->nparams > 0;
}

/* Device bytes of the gradient norm's plan (setup.c's norm_plan_setup), by
 * zs__sumsq_plan_bytes itself over a bound on its segments: one a trainable
 * parameter that is not a tied copy, of its elements or at most the owned
 * range's `on` (a segment is a parameter's part of that range). The plan's
 * bytes grow with the segments and with each one's length, so the bound holds
 * whichever rank owns what; 0 with offload (no plan) and on the cpu device.
 * ZS_ERR_NOMEM if its list of segments cannot be made (a bound left low would
 * let setup start what it cannot finish). */
static zs_status_t norm_plan_bound(const zs_engine_t *zs, int world, uint64_t *out) {
  *out = 0;
  if (zs->offload || zs->nparams < 1) return ZS_OK;
  const zs_config_t *c = &zs->cfg;
  zs__sumsq_seg_t *segs = malloc((size_t)zs->nparams * sizeof *segs);
  if (!segs)
    return ZS_FAIL((char *)zs->err, ZS_ERR_NOMEM, "zs_engine_estimate: no memory for the %d segments of the norm's plan",
                   zs->nparams);
  int n = 0;
  const zs_dtype_t dt = c->stage <= 1 ? c->param_dtype : c->reduce_dtype; /* setup's grad_dtype */
  for (int i = 0; i < zs->nunits; i++) {
    const zs_unit_t *u = &zs->units[i];
    int64_t numel, padded;
    int persistent;
    zs__eng_unit_extent(zs, u, world, 0, &numel, &padded, &persistent);
    const uint64_t on = c->stage == 0 ? (uint64_t)padded : (uint64_t)padded / (uint64_t)world;
    for (int k = 0; k < u->nparams; k++) {
      const zs_param_t *p = &zs->params[u->first_param + k];
      if (p->flags & (ZS_PARAM_FROZEN | ZS_PARAM_TIED_COPY) || p->numel < 1) continue;
      segs[n++] = (zs__sumsq_seg_t){NULL, dt, (uint64_t)p->numel < on ? (size_t)p->numel : (size_t)on};
    }
  }
  *out = n > 0 ? zs__sumsq_plan_bytes(zs->dev, segs, n) : 0;
  free(segs);
  return ZS_OK;
}

zs_status_t zs_engine_estimate(const zs_engine_t *zs, int world, zs_mem_estimate_t *out) {
  if (!zs || !out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_engine_estimate: engine and out must not be NULL");
  if (world == 0) world = zs->nshard; /* this engine's own: its shard group (the world when flat) */
  if (world < 1)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, /* the thread's message only: any thread may call it */
                   "zs_engine_estimate: world %d must be >= 1, or 0 for this engine's own shard group", world);
  const zs_config_t *c = &zs->cfg;
  memset(out, 0, sizeof *out);
  out->world = world;
  /* the data-parallel ranks the engine's scratch and norm buffer are sized by:
   * the larger of `world` and its comm's (a shard group may be smaller) */
  const int dpw = world > zs->world ? world : zs->world;
  uint64_t pb = zs->pb, rb = zs->rb;
  int off = zs->offload, has_m = zs__optim_has_m(&c->optim), has_v = zs__optim_has_v(&c->optim);
  uint64_t *opt = off ? out->host : out->device;
  /* the largest units (maxP, maxS) and the largest trainable ones (maxPt,
   * maxSt: only they have gradients), the largest gathered units */
  uint64_t maxP = 0, maxS = 0, maxPt = 0, maxSt = 0, gathered[3] = {0}, gathered_all = 0;
  /* the NVMe tier (tier.h): its chunk buffers, the gathers' read buffers, and
   * the largest shard whose 16-bit parameters the CPU step stages for the device */
  uint64_t tier_buf = 0, tier_pbuf = 0, maxStage = 0;
  const int opt_nvme = zs->opt_nvme;
  for (int i = 0; i < zs->nunits; i++) {
    int64_t numel, padded;
    int persistent;
    zs__eng_unit_extent(zs, &zs->units[i], world, 0, &numel, &padded, &persistent);
    uint64_t P = (uint64_t)padded, S = P / (uint64_t)world, on = c->stage == 0 ? P : S;
    const int frozen = zs__eng_unit_frozen(zs, &zs->units[i]);
    const int pw = c->stage == 3 && !persistent ? (int)c->offload_param : ZS_OFFLOAD_NONE;
    if (c->stage <= 2) out->device[ZS_MEM_PARAMS] += P * pb;
    else if (pw == ZS_OFFLOAD_NONE) out->device[ZS_MEM_PARAMS] += S * pb;
    else if (pw == ZS_OFFLOAD_CPU) out->host[ZS_MEM_PARAMS] += S * pb;
    zs__tier_unit_bytes(c, (int64_t)on, opt_nvme, pw == ZS_OFFLOAD_NVME, !frozen, out->nvme);
    uint64_t bb = zs__tier_buf_bytes(c, (int64_t)on, opt_nvme, pw == ZS_OFFLOAD_NVME, !frozen, pw == ZS_OFFLOAD_NONE);
    tier_buf = bb > tier_buf ? bb : tier_buf;
    if (pw == ZS_OFFLOAD_NVME && on * pb > tier_pbuf) tier_pbuf = on * pb;
    if (persistent) out->device[ZS_MEM_GATHER] += P * pb;
    else if (c->stage == 3 && zs->nhpz > 1) out->device[ZS_MEM_PARAMS] += P / (uint64_t)zs->nhpz * pb; /* hpZ */
    maxP = P > maxP ? P : maxP;
    maxS = S > maxS ? S : maxS;
    if (c->stage == 3 && !persistent) { /* keep the three largest, and the sum */
      gathered_all += P;
      uint64_t x = P;
      for (int j = 0; j < 3; j++)
        if (x > gathered[j]) {
          uint64_t t = gathered[j];
          gathered[j] = x;
          x = t;
        }
    }
    if (frozen) continue; /* its parameters are all it has */
    maxPt = P > maxPt ? P : maxPt;
    maxSt = S > maxSt ? S : maxSt;
    if (pw == ZS_OFFLOAD_NONE && S > maxStage) maxStage = S;
    if (!opt_nvme) { /* else master, m, v are on disk */
      /* master: fp32 params are their own, on the device or (offload_param cpu) in host memory */
      if (pb != 4 || (off && pw != ZS_OFFLOAD_CPU)) opt[ZS_MEM_OPTIMIZER] += on * 4;
      if (has_m) opt[ZS_MEM_OPTIMIZER] += zs__eng_state_bytes(c, on);
      if (has_v) opt[ZS_MEM_OPTIMIZER] += zs__eng_state_bytes(c, on);
    }
    if (c->stage <= 1) out->device[ZS_MEM_GRADS] += P * pb;
    else if (!off) out->device[ZS_MEM_GRADS] += S * rb;
    if (zs__eng_fp32_accum(zs)) out->device[ZS_MEM_GRADS] += S * 4;
    if (zs__eng_full_accum(zs)) out->device[ZS_MEM_GRADS] += P * 4;
    if (off && !opt_nvme) out->host[ZS_MEM_GRADS] += on * 4; /* with the tier: on disk */
    if (zs->dpu) {
      out->host[ZS_MEM_GRADS] += on * 4;
      if (pb != 4) out->host[ZS_MEM_PARAMS] += on * pb;
    }
  }
  for (int k = ZS_MEM_PARAMS; k <= ZS_MEM_OPTIMIZER; k++) {
    out->device_model_state += out->device[k];
    out->host_model_state += out->host[k];
    out->nvme_model_state += out->nvme[k];
  }
  /* the engine's own host scratch: the small collectives' (create) and the
   * norm's buffer (setup), in every configuration */
  out->host[ZS_MEM_COMM] += zs__eng_scratch_bytes(dpw) + (uint64_t)zs__eng_norm_slots(zs, dpw) * sizeof(double);
  /* offload's pinned staging: a gradient shard, and two parameter slots for
   * 16-bit params (the delayed update writes into its own host param copies) */
  if (off) {
    out->host[ZS_MEM_COMM] += maxSt * (pb > rb ? pb : rb);
    if (pb != 4 && !zs->dpu && !opt_nvme) out->host[ZS_MEM_COMM] += 2 * maxStage * pb;
  }
  /* the tier's pinned buffers, each region aligned to 4 KiB inside an
   * allocation one alignment larger (tier.c) */
  if (zs__eng_has_tier(c)) {
    const uint64_t A = ZS_AIO_ALIGN;
    out->host[ZS_MEM_COMM] += (uint64_t)zs__tier_nbuf(c) * (tier_buf ? tier_buf : A) + A;
    if (opt_nvme) { /* the conversion thread's buffer: the largest trainable shard's fp32 gradients */
      uint64_t g = zs__tier_grad_bytes((int64_t)maxSt);
      out->host[ZS_MEM_COMM] += (g > A ? g : A) + A;
    }
    if (c->stage == 3 && c->offload_param == ZS_OFFLOAD_NVME) {
      uint64_t pbb = (tier_pbuf + A - 1) / A * A;
      int n = c->nvme_param_buffers ? c->nvme_param_buffers : ZS_NVME_PARAM_BUFFERS_DEFAULT;
      out->host[ZS_MEM_COMM] += (uint64_t)n * (pbb ? pbb : A) + A;
    }
  }
  out->device_model_state += out->device[ZS_MEM_GATHER];
  /* transients at their most: gathered units (the held one plus the prefetch
   * window; without reshard_after_forward every unit, kept from its forward to
   * its backward), two units' full gradients (the one computing, the one
   * reducing), their reduce-dtype copies, reduced shards awaiting the copy to
   * the host, and the engine's scalars */
  uint64_t t = 0;
  int window = c->prefetch + 1 < 3 ? c->prefetch + 1 : 3;
  if (c->stage == 3 && !c->reshard_after_forward) {
    t += gathered_all * pb;
  } else if (c->stage == 3) {
    for (int j = 0; j < window; j++) t += gathered[j] * pb;
    for (int j = window; j < c->prefetch + 1; j++) t += gathered[0] * pb;
  }
  if (c->stage >= 2) t += 2 * maxPt * pb;
  if (rb != (zs__eng_full_accum(zs) ? 4 : pb)) t += 2 * maxPt * rb; /* the reduce source's dtype differs */
  if (c->stage >= 2 && off) t += 2 * maxSt * rb;
  t += maxS * rb; /* the mpi comm's scratch for an in-place or ring reduction: one block */
  /* qgZ: one reduction's packed shards (two of N), node sums (G shards) and
   * result (qgrad.c); G = N / the group: setup's, else the config's where it
   * divides N, else N (before setup, a group from the node's ranks is not known) */
  if (c->quantized_gradients && maxSt) {
    const int K = zs->nqg ? zs->nqg
                  : c->quantized_gradients_group > 0 && world % c->quantized_gradients_group == 0
                      ? c->quantized_gradients_group
                      : 1;
    uint64_t Q = zs__eng_qg_bytes(c, (size_t)maxSt), G = (uint64_t)world / (uint64_t)K;
    t += 2 * (uint64_t)world * Q + G * maxSt * 4 + maxSt * 4;
  }
  /* qwZ: a gather's packed shards, one gather at a time (freed once decoded) */
  if (c->stage == 3 && c->quantized_weights && gathered[0])
    t += (uint64_t)world * zs_wq_bytes((size_t)(gathered[0] / (uint64_t)world), zs__eng_wq_block(c));
  uint64_t norm_plan;
  ZS_CHECK(norm_plan_bound(zs, world, &norm_plan));
  /* the norm's buffer: its double total and the ranks' calls compared (step.c) */
  t += 8 * (uint64_t)zs__eng_norm_slots(zs, dpw) + zs__eng_scratch_bytes(dpw) + norm_plan;
  out->device_peak_bound = out->device_model_state + out->device[ZS_MEM_COMM] + t;
  return ZS_OK;
}

static double gib(uint64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

/* Between steps, at stages 1-3, zs_param_get and zs_param_set gather a
 * trainable unit in fp32 into a device buffer of the unit (padded; a frozen
 * one's at stage 3 in param dtype, none at stages 1-2), and
 * zs_param_state_get/_set stage this rank's part of a parameter on the host
 * (its shard at most); zs_param_set with 16-bit parameters at stages 0-2
 * stages the values it writes on the host in param dtype (the parameter at
 * most). The largest of them, on the device (*dev) and the host (*host). Not
 * in the estimate's step peak (a trial's program, within its room check by
 * under 1 MiB, was killed in a zs_param_get loop that took 4.1 MB more). */
static void between_steps(const zs_engine_t *zs, int world, uint64_t *dev, uint64_t *host) {
  *dev = *host = 0;
  const int stage = zs->cfg.stage;
  const uint64_t pb = zs->pb;
  for (int i = 0; i < zs->nunits; i++) {
    int64_t numel, padded;
    int persistent;
    zs__eng_unit_extent(zs, &zs->units[i], world, 0, &numel, &padded, &persistent);
    const int frozen = zs__eng_unit_frozen(zs, &zs->units[i]);
    const uint64_t P = (uint64_t)padded, S = P / (uint64_t)world;
    const uint64_t d = stage == 0 ? 0 : !frozen ? P * 4 : stage == 3 ? P * pb : 0;
    uint64_t h = stage > 0 && !frozen ? S * 4 : 0;
    if (stage <= 2 && pb != 4 && P * pb > h) h = P * pb;
    *dev = d > *dev ? d : *dev;
    *host = h > *host ? h : *host;
  }
}

/* Before anything is allocated, what setup will take from the host (the
 * estimate: host-domain state and staging, and on a device whose memory is the
 * host's, its peak too) against what the kernel will give this process before it
 * refuses or kills (zs__host_room; a limit the node's processes share is split
 * among this node's ranks): a model larger than memory is ZS_ERR_NOMEM with the
 * numbers, not a process the OOM killer picks (maybe another job's). */
zs_status_t zs__eng_check_room(zs_engine_t *zs) {
  if (!zs__settings()->mem_check) return ZS_OK;
  zs_mem_estimate_t e;
  ZS_CHECK(zs_engine_estimate(zs, zs->nshard, &e));
  size_t dfree, dtotal;
  char keep[ZS_ERRBUF]; /* a probe: its "no memory of its own" is no failure of the caller's */
  snprintf(keep, sizeof keep, "%s", zs_last_error());
  int device_is_host = zs_device_mem_info(zs->dev, &dfree, &dtotal) == ZS_ERR_UNSUPPORTED;
  zs_set_last_error("%s", keep);
  uint64_t state = e.host_model_state + (device_is_host ? e.device_model_state : 0);
  uint64_t bdev, bhost; /* the calls between steps: the step's transients are freed by then */
  between_steps(zs, zs->nshard, &bdev, &bhost);
  uint64_t dev_peak = e.device_peak_bound, dev_between = bdev + bhost; /* + what stays between steps */
  for (int k = 0; k < ZS_MEM_CATEGORY_COUNT; k++) dev_between += e.device[k];
  if (dev_between > dev_peak) dev_peak = dev_between;
  uint64_t need = e.host_model_state + e.host[ZS_MEM_COMM] + (device_is_host ? dev_peak : bhost);
  zs_host_room_t r;
  zs__host_room(&r);
  zs_node_ranks_t nr = zs__node_ranks();
  int share = r.shared && nr.local_size > 1 ? nr.local_size : 1;
  uint64_t room = r.bytes == UINT64_MAX ? r.bytes : r.bytes / (uint64_t)share;
  if (need <= room) return ZS_OK;
  char split[64] = "";
  if (share > 1) snprintf(split, sizeof split, ", split among this node's %d ranks", share);
  return ZS_FAIL(zs->err, ZS_ERR_NOMEM,
                 "zs_engine_setup: rank %d would allocate %.3f GiB of host memory (model state %.3f GiB, staging and "
                 "transients at their peak %.3f GiB%s) but may use %.3f GiB: %s%s. Raise the stage, offload, use "
                 "more ranks or a smaller model; or set ZS_MEM_CHECK=0 to allocate anyway",
                 zs->rank, gib(need), gib(state), gib(need - state),
                 device_is_host ? "; the device's memory is the host's" : "", gib(room), r.what, split);
}

/* The NVMe tier's file against the room on its file system (shared by the
 * node's ranks, each making its own file there): too little is ZS_ERR_NOMEM
 * with the numbers, before anything is allocated. fallocate reserves the
 * space itself at setup, so a disk that fills later cannot fail a step. */
zs_status_t zs__eng_check_disk(zs_engine_t *zs) {
  if (!zs__eng_has_tier(&zs->cfg)) return ZS_OK;
  if (!zs__aio_available())
    return ZS_FAIL(zs->err, ZS_ERR_UNSUPPORTED,
                   "zs_engine_setup: offload to nvme: this zeroshard was built without liburing (install "
                   "liburing-dev and rebuild), or use offload \"cpu\"");
  zs_mem_estimate_t e;
  ZS_CHECK(zs_engine_estimate(zs, zs->nshard, &e));
  uint64_t free_b = 0;
  zs_status_t st = zs__aio_dir_room(zs->cfg.nvme_path, &free_b);
  if (st != ZS_OK) return ZS_FAIL(zs->err, st, "zs_engine_setup: nvme_path: %s", zs_last_error());
  zs_node_ranks_t nr = zs__node_ranks();
  uint64_t share = nr.local_size > 1 ? (uint64_t)nr.local_size : 1;
  if (e.nvme_model_state <= free_b / share) return ZS_OK;
  return ZS_FAIL(zs->err, ZS_ERR_NOMEM,
                 "zs_engine_setup: rank %d's NVMe tier needs %.3f GiB in %s, but its file system has %.3f GiB free%s: "
                 "free room there, point nvme_path at a larger disk, or use more ranks",
                 zs->rank, gib(e.nvme_model_state), zs->cfg.nvme_path, gib(free_b / share),
                 share > 1 ? " for each of this node's ranks" : "");
}
