/* membench_formula.c: zs-membench's model (--units: a parameter a unit) and
 * what it measures against: docs/design.md's memory table per unit, with the
 * engine's padding written out from the shapes alone (not from the engine's
 * layout), and the ring traffic a rank sends per step. */
#include <stdlib.h>
#include <string.h>

#include "kernels/wquant.h"
#include "membench.h"

/* ============================================================================
 * the model, the formulas
 * ========================================================================== */

void mb_model_free(mb_model_t *m) {
  free(m->unit_first), free(m->unit_names), free(m->params);
  memset(m, 0, sizeof *m);
}

void mb_units_model(const mb_opts_t *o, mb_model_t *m) {
  memset(m, 0, sizeof *m);
  m->nunits = m->nparams = o->nunits;
  m->unit_first = calloc((size_t)o->nunits + 1, sizeof *m->unit_first);
  m->unit_names = calloc((size_t)o->nunits, sizeof *m->unit_names);
  m->params = calloc((size_t)o->nunits, sizeof *m->params);
  if (!m->unit_first || !m->unit_names || !m->params) mb_die_all(1, "%s", "out of host memory");
  int len = snprintf(m->desc, sizeof m->desc, "units");
  for (int u = 0; u < o->nunits; u++) {
    m->unit_first[u] = u;
    snprintf(m->unit_names[u], MB_NAME_MAX, "u%d", u);
    mb_param_t *p = &m->params[u];
    snprintf(p->name, sizeof p->name, "u%d.w", u);
    p->unit = u;
    p->ndim = 1;
    p->shape[0] = p->numel = o->units[u];
    p->flags = u < o->frozen ? ZS_PARAM_FROZEN : 0;
    m->numel += o->units[u];
    if (len > 0 && (size_t)len < sizeof m->desc - 24)
      len += snprintf(m->desc + len, sizeof m->desc - (size_t)len, "%s%lld", u ? "," : " ", (long long)o->units[u]);
  }
  m->unit_first[o->nunits] = o->nunits;
  if (o->frozen && len > 0 && (size_t)len < sizeof m->desc - 24)
    snprintf(m->desc + len, sizeof m->desc - (size_t)len, ", first %d frozen", o->frozen);
}

/* A unit whose parameters are all frozen holds its parameters only. */
static int unit_frozen(const mb_model_t *m, int u) {
  for (int i = m->unit_first[u]; i < m->unit_first[u + 1]; i++)
    if (!(m->params[i].flags & ZS_PARAM_FROZEN)) return 0;
  return m->unit_first[u + 1] > m->unit_first[u];
}

/* Padded elements of unit u at `n` ranks, from the shapes: every parameter
 * starts at a multiple of A elements; the unit is padded to a multiple of
 * A x n so that it cuts into n equal shards. */
int64_t mb_unit_padded(const mb_opts_t *o, const mb_model_t *m, int u, int n) {
  const int64_t A = o->align_elems;
  int64_t t = 0, q = A * (int64_t)n;
  for (int i = m->unit_first[u]; i < m->unit_first[u + 1]; i++) t += (m->params[i].numel + A - 1) / A * A;
  t = (t + q - 1) / q * q;
  return t ? t : q;
}

/* pad: up to a multiple of 4096 bytes, direct I/O's alignment (the tier's fields). */
static int64_t pad4k(int64_t b) { return (b + 4095) / 4096 * 4096; }

/* docs/design.md 3.3.1, the NVMe tier's file, per unit whose owned range has
 * `on` elements: cut into chunks of nvme_chunk elements (the last shorter), a
 * record per chunk of pad(4n) master + 2 pad(e n) m and v (+ 2 pad(4n/B) int8
 * scales) when the optimizer state is on disk (opt) and pad(pb n) parameters
 * when they are (param; none of their own for fp32 parameters with the
 * optimizer on disk: the master is the parameter); a trainable unit's records
 * twice (regions 0 and 1), a frozen unit's parameters once; with the optimizer
 * state on disk a trainable unit's fp32 gradient shard too, pad(4 on) once
 * (region 3). Into f (added). */
static void tier_unit(const mb_opts_t *o, int64_t on, int opt, int param, int trainable, int64_t pb,
                      int64_t f[MB_F_COUNT]) {
  const int64_t C = o->nvme_chunk ? o->nvme_chunk : (int64_t)ZS_NVME_CHUNK_DEFAULT, copies = trainable ? 2 : 1;
  opt = opt && trainable;
  for (int64_t lo = 0; lo < on; lo += C) {
    const int64_t n = on - lo < C ? on - lo : C;
    if (opt)
      f[MB_F_OPTIM] += copies * (pad4k(4 * n) + 2 * pad4k(o->state_esz * n) +
                                 (o->state_block ? 2 * pad4k(4 * (n / o->state_block)) : 0));
    if (param && !(opt && pb == 4)) f[MB_F_PARAMS] += copies * pad4k(pb * n);
  }
  if (opt) f[MB_F_GRADS] += pad4k(4 * on);
}

/* docs/design.md's tables per unit (3.1, 3.3, 3.3.1) with pb/rb bytes per
 * param/reduce element: fp32 master (none of its own when params are fp32), Adam
 * m and v. Offload moves master, m, v and an fp32 gradient shard (16 bytes per
 * shard element) to the host; the device keeps the parameters (full at stages
 * 1-2, a shard at 3) and stage 1's full gradient buffer. The optimizer state on
 * disk (run->nvme) takes master, m, v and the fp32 gradient shard from the host
 * into the tier. Stage 3's parameter offload (run->param)
 * moves each parameter shard from the device to the host (fp32 parameters there
 * are their own master) or to the tier. No unit is persistent here
 * (persist_threshold 0), so every unit's shard moves. */
void mb_formula(const mb_opts_t *o, const mb_model_t *m, const mb_result_t *run, size_t pb, size_t rb, int n,
                int64_t f_dev[MB_F_COUNT], int64_t f_host[MB_F_COUNT], int64_t f_nvme[MB_F_COUNT]) {
  const int stage = run->stage, offload = run->offload, nvme = offload && run->nvme;
  const int where = stage == 3 ? run->param : ZS_OFFLOAD_NONE; /* the parameter shards' */
  const int64_t b = (int64_t)pb;
  memset(f_dev, 0, sizeof(int64_t) * MB_F_COUNT);
  memset(f_host, 0, sizeof(int64_t) * MB_F_COUNT);
  memset(f_nvme, 0, sizeof(int64_t) * MB_F_COUNT);
  for (int u = 0; u < m->nunits; u++) {
    int64_t P = mb_unit_padded(o, m, u, n), S = P / n, on = stage == 0 ? P : S;
    const int frozen = unit_frozen(m, u);
    if (stage <= 2) f_dev[MB_F_PARAMS] += P * b;
    else if (where == ZS_OFFLOAD_NONE) f_dev[MB_F_PARAMS] += S * b;
    else if (where == ZS_OFFLOAD_CPU) f_host[MB_F_PARAMS] += S * b;
    if (stage == 3 && o->hpz > 1) f_dev[MB_F_PARAMS] += P / o->hpz * b; /* hpZ's secondary copy */
    tier_unit(o, on, nvme, where == ZS_OFFLOAD_NVME, !frozen, b, f_nvme);
    if (frozen) continue; /* its parameters are the truth: nothing else */
    if (!offload) {
      f_dev[MB_F_GRADS] += stage <= 1 ? P * b : S * (int64_t)rb;
      f_dev[MB_F_OPTIM] += (pb == 4 ? 0 : 4 * on) + 2 * o->state_esz * on + (o->state_block ? 8 * (on / o->state_block) : 0);
    } else {
      f_dev[MB_F_GRADS] += stage == 1 ? P * b : 0;
      if (!nvme) { /* else on disk; master: fp32 parameters in host memory are their own */
        f_host[MB_F_GRADS] += 4 * S;
        f_host[MB_F_OPTIM] += (pb == 4 && where == ZS_OFFLOAD_CPU ? 0 : 4 * S) + 2 * o->state_esz * S +
                              (o->state_block ? 8 * (S / o->state_block) : 0);
      }
      if (run->delayed) { /* a second fp32 grad shard; 16-bit params: the step's param copies */
        f_host[MB_F_GRADS] += 4 * S;
        f_host[MB_F_PARAMS] += pb == 4 ? 0 : S * b;
      }
    }
  }
}

/* Ring traffic a rank sends per step (comm.h's terms: all-gather and
 * reduce-scatter (N-1)B/N, all-reduce 2(N-1)B/N, B the full buffer): stage 0
 * all-reduces the gradients; 1-2 reduce-scatter them and all-gather the updated
 * parameters; 3 gathers the parameters in forward and again in backward and
 * reduce-scatters the gradients. With pb == rb that is 2psi(N-1)/N and
 * 3psi(N-1)/N, psi in bytes with padding. Stages 1-3 add the gradient norm's
 * all-reduce of `slots` fp64, its double total and the ranks' calls compared
 * (src/zero/step.c), stage 0 the calls' slots - 1 alone (returned apart in
 * *norm). */
void mb_comm_theory_groups(const mb_opts_t *o, const mb_model_t *m, int stage, size_t pb, size_t rb, int n, size_t qwb,
                           int hpz, int qgk, size_t qgb, int64_t g[MB_G_COUNT]) {
  const int64_t N = n;
  memset(g, 0, sizeof(int64_t) * MB_G_COUNT);
  for (int u = 0; u < m->nunits; u++) {
    int64_t P = mb_unit_padded(o, m, u, n), gp = (N - 1) * P * (int64_t)pb / N, gr = (N - 1) * P * (int64_t)rb / N;
    /* qgZ (groups of qgk): the all-to-all inside the group, (K-1) G Q, and across, (G-1) Q (src/zero/qgrad.c) */
    int64_t qnode = 0, qcross = 0;
    const int qg = qgk > 0 && stage >= 2;
    if (qg) {
      int64_t G = N / qgk, S = P / N; /* int4: two codes a byte (kernels/wquant.h) */
      int64_t Q = (int64_t)(o->qg == 4 ? zs_wq4_bytes((size_t)S, qgb) : zs_wq_bytes((size_t)S, qgb));
      qnode = (qgk - 1) * G * Q, qcross = (G - 1) * Q;
    }
    /* qwZ: a gather carries each shard packed (kernels/wquant.h) */
    if (qwb && stage == 3) gp = (N - 1) * (int64_t)zs_wq_bytes((size_t)(P / N), qwb);
    /* hpZ: backward's gather among K ranks, from the secondary copies (exact), on the partition's comm */
    const int hz = hpz > 1 && stage == 3;
    int64_t gb = hz ? (hpz - 1) * P * (int64_t)pb / hpz : gp;
    if (unit_frozen(m, u)) { /* never reduced nor regathered; gathered at stage 3 */
      if (stage == 3) g[MB_G_SHARD] += gp, g[hz ? MB_G_HPZ : MB_G_SHARD] += gb;
      continue;
    }
    if (stage == 0) {
      g[MB_G_SHARD] += 2 * gr;
      continue;
    }
    if (qg) g[MB_G_QG_NODE] += qnode, g[MB_G_QG_CROSS] += qcross;
    else g[MB_G_SHARD] += gr;
    g[MB_G_SHARD] += gp;
    if (stage == 3) g[hz ? MB_G_HPZ : MB_G_SHARD] += gb;
  }
}

int64_t mb_comm_theory(const mb_opts_t *o, const mb_model_t *m, int stage, size_t pb, size_t rb, int n, size_t qwb, int hpz,
                       int qgk, size_t qgb, int slots, int64_t *norm) {
  int64_t g[MB_G_COUNT], t = 0;
  mb_comm_theory_groups(o, m, stage, pb, rb, n, qwb, hpz, qgk, qgb, g);
  for (int k = 0; k < MB_G_COUNT; k++) t += g[k];
  *norm = n > 1 ? 2 * (int64_t)(n - 1) * 8 * (stage >= 1 ? slots : slots - 1) / n : 0;
  return t;
}

/* Hybrid sharding: what crosses the shard groups per step, one all-reduce of
 * each unit's shard (S = P/Ns elements) across the nr replicas, and zs_step's
 * slots - 1 fp64 comparing the ranks' calls. */
int64_t mb_comm_inter_theory(const mb_opts_t *o, const mb_model_t *m, size_t rb, int ns, int nr, int slots) {
  int64_t t = 2 * (int64_t)(nr - 1) * 8 * (slots - 1) / nr; /* the calls compared across the replicas (step.c) */
  for (int u = 0; u < m->nunits; u++)
    if (!unit_frozen(m, u)) t += 2 * (int64_t)(nr - 1) * (mb_unit_padded(o, m, u, ns) / ns) * (int64_t)rb / nr;
  return t;
}
