/* zs-plan: which ZeRO stage, sharding layout and offload setting to train a
 * model with, before running it: per-rank memory from the engine's own
 * estimate, communication time per step from a model of the links, what fits,
 * and the fastest option that fits.
 *
 *   zs-plan (--model gpt [--layers L --channels C --heads H --vocab V --seq T] | --units N1,N2,...)
 *       --world N --ranks-per-node K --device-mem GiB --intra-gbps X --inter-gbps Y
 *       [--config FILE (a zeroshard JSON config or a DeepSpeed ds_config.json: "your config", below)]
 *       [--shard-group NS] [--dtype fp32|bf16|fp16] [--reduce-dtype fp32|bf16|fp16] [--optim adamw|adam|sgd|lion]
 *       [--momentum M] [--optim-state fp32|bf16|int8] [--optim-block B] [--persist-threshold N]
 *       [--grad-accum A] [--prefetch P] [--host-mem GiB] [--reserve-gib R] [--latency-us A]
 *       [--intra-latency-us A] [--frame-overhead F] [--compute-s T1] [--json]
 *       [--tp N [--sequence-parallel] [--batch B]]
 *       [--nvme-bytes N] [--nvme-chunk N] [--disk-bw-read MB/s] [--disk-bw-write MB/s]
 *
 * Options: stage 0; stages 1-3 flat (sharded over all N ranks) and hybrid
 * (sharded over groups of NS consecutive ranks, default K: a node, replicated
 * across the groups); each of stages 1-3 with and without the optimizer state
 * offloaded to the host; with --quantized-weights[=B] also stage 3 with int8
 * weights in its gathers (flat and hybrid, offload or not), whose gathers
 * carry each shard packed (Ns x (4 ceil(S/B) + S rounded up to 4) bytes, S =
 * P/Ns) and whose device peak the engine's estimate gives; at equal speed the
 * exact option wins. With --hpz K also flat stage 3 with ZeRO++'s hpZ (and
 * with both), whose backward gathers run among K consecutive ranks (exact
 * bytes, a comm of their own) and whose device state adds P pb / K a unit.
 * With --quantized-grads stages 2-3 with ZeRO++'s qgZ (flat and hybrid,
 * offload or not), and flat stage 3 with all three where the others are given.
 * ZeRO-Infinity's, flat and hybrid, after all of those: stages 1-3 with the
 * optimizer state in the NVMe tier, and stage 3 with the parameter shards in
 * host memory (the optimizer state in host memory or on disk) or on disk with
 * the optimizer state.
 *
 * Memory (exact): each option's model is declared in an engine over a one-rank
 * comm (zs_comm_create_mpi_world; no setup, nothing allocated) and
 * zs_engine_estimate(zs, Ns) gives what a rank holds, Ns = N when flat, the
 * shard group when hybrid (a rank then holds what it would in a flat layout of
 * Ns ranks). model_state_bytes = device params + grads + optimizer (+ persistent
 * gathered units), host_state_bytes the same on the host (offload). An option
 * fits when device_peak_bound (the estimate's bound on the device bytes during
 * a step) plus --reserve-gib (activations, workspace: the planner does not know
 * them) is at most --device-mem, and, with --host-mem (per node), when K ranks'
 * host state and pinned staging fit in it; with the NVMe tier, when a rank's
 * file (the estimate's nvme_model_state, nvme_state_bytes: every trainable
 * record twice, docs/design.md 3.3.1) fits in --nvme-bytes (no limit unless
 * given): such an option fits with the tier (fits_with_tier). --model gpt
 * declares exactly the example trainer's parameters (examples/gpt's table,
 * gpt.h, linked from zs_gpt_model). int8 optimizer states align each
 * parameter to their block when it is above 64 elements (the padding below too).
 *
 * Traffic (exact, what the engine's comm stats count per rank, = zs-membench's
 * comm_bytes_per_step): per unit, padded as the engine pads (each parameter
 * starts at a multiple of 64 elements, the unit is a multiple of 64 x Ns),
 * psi = its padded bytes; all_reduce sends 2(n-1)/n of its buffer, all_gather and
 * reduce_scatter (n-1)/n, over a comm of n ranks:
 *   stage 0   all_reduce of the gradients over the world (reduce dtype)
 *   stage 1-2 reduce_scatter of the gradients (reduce dtype; stage 2 every
 *             accumulation round, stage 1 the last), all_gather of the updated
 *             parameters in zs_step (param dtype)
 *   stage 3   all_gather in forward and again in backward (the example GPT
 *             gathers its embedding twice in forward, the second time for
 *             the tied LM head, and not in backward, which reads none of its
 *             parameters: ZS_PARAM_BACKWARD_UNREAD), a reduce_scatter per round
 *   stages 1-3 the gradient norm's all_reduce: its fp64 total and, with more
 *             than one rank, 2 tp fp64 comparing the ranks' calls (stage 0:
 *             those alone, over the world; hybrid: again across the replicas)
 *   hybrid    the above inside the shard group (n = Ns), plus an all_reduce of
 *             each gradient shard (psi/Ns) across the Nr = N/Ns replicas: once
 *             per step, or per round with offload
 *
 * Links (what crosses where; the algorithms zeroshard's mpi comm runs, ranks
 * placed by slot: K consecutive ranks per node):
 *   reduce_scatter, all_reduce of >= 256 KiB (the whole buffer;
 *     ZS_MPI_RING_MIN_BYTES, read here too): zeroshard's ring over the comm's
 *     ranks in rank order (src/comm/mpi_ring.c); rank i sends its share
 *     ((n-1)/n, all_reduce 2(n-1)/n of the buffer) to rank i+1. A flat ring
 *     crosses each node boundary once each way, so every node link carries one
 *     rank's share each way, at any node count; a replica ring (ranks Ns apart)
 *     crosses on every edge when Ns is a node.
 *   all_gather of >= 256 KiB over a comm that spans nodes: the same ring
 *     (n-1 blocks each way over every node link it crosses). Inside one node,
 *     and below the threshold: Open MPI's own (libnbc's default, linear): every
 *     rank sends its block to every other rank, so a node holding c of the n
 *     ranks sends c(n-c) blocks and receives as many (2 nodes x 2 ranks: 4
 *     blocks of psi/4 each way per gather, where the ring sends 3).
 *   all_reduce below the threshold (in place: libnbc's binomial tree from rank
 *     0, the whole buffer up each tree edge and back down), reduce_scatter below
 *     it (libnbc: binomial reduce to rank 0, then rank 0 sends each rank its block).
 * --backend nccl (the engine's nccl comm on GPUs): every collective is NCCL's
 * ring at every size (n-1 rounds per pass), in rank order, which with ranks
 * placed by slot is the node-contiguous ring NCCL builds: a flat ring crosses
 * each node boundary once each way, NVLink carries the rest (each rank's intra
 * link). NCCL may pick its tree for all_reduce across nodes where latency
 * decides; its bandwidth term is about the ring's, and it is not modelled.
 * Defaults: an H100/H200-class node (8 GPUs, 3600 Gbit/s NVLink each way per
 * GPU, 8 x 400 Gbit/s RDMA NICs: 3200 Gbit/s per node), frames 1, 10 us per
 * round across nodes and 2 us inside; every flag given wins. Not checked
 * against a run (no GPU cluster here).
 * Checked on scripts/cluster-sim's 2 hosts x 2 ranks (docs/planning.md): the
 * host links carried these bytes (as Ethernet frames, x 1514/1448) at stage 0,
 * flat stage 3 and hybrid stage 3.
 *
 * Time: per part of the step that follows the one before (forward: stage 3's
 * gathers; backward: gathers and reductions; zs_step: the norm and stages 1-2's
 * gather), the larger of
 *   the links' bound: the part's bytes over the busiest node link (either
 *     direction) x --frame-overhead / --inter-gbps, and over the busiest rank's
 *     intra-node link / --intra-gbps;
 *   the queues' bound: a comm runs its calls one after another (one progress
 *     thread, in call order), and so does each of the engine's two streams
 *     (gathers; reductions: hybrid's replica all-reduce of a unit waits for its
 *     reduce-scatter inside the group, the next unit's reduce-scatter for it);
 *     each call takes its own links' bound plus its message rounds x latency
 *     (--latency-us when it crosses nodes, --intra-latency-us otherwise; rounds:
 *     ring n-1 per pass, linear all-gather 1, binomial log2 n per pass).
 * comm_s_per_step is their sum: no overlap with compute. With --compute-s T1
 * (the compute time of one step of the global batch on one rank), step_s =
 * T1/N + comm_s and speedup = T1/step_s (the optimizer counted in T1, sharded
 * like the rest: stage 0 repeats it on every rank, so its speedup is optimistic).
 * The NVMe tier's disk (a rank's, --disk-bw-read and --disk-bw-write MB/s, 3000
 * and 1500): a step's optimizer phase reads every trainable record once (from
 * the committed region) and writes it once (to the other), half the records
 * each way, and reads the fp32 gradient shards, which each reduction in
 * backward wrote (stage 1 once a step, stages 2-3 once a round, reading them
 * back after the step's first round to add to); with the parameter shards on
 * disk each gather also reads its unit's shard (the chunks' parameter fields,
 * each padded to 4 KiB), twice a round at stage 3 (the GPT's embedding three
 * times), --grad-accum rounds a step. disk_s = read / the read rate + written
 * / the write rate, added to step_s (which is comm_s + disk_s without
 * --compute-s); the tier's two agreements a step (one int64 all-reduced over
 * the world each) are in the traffic.
 *
 * The choice: the fastest option that fits; options within 1% of each other
 * count as equally fast, and among them the exact one (no quantized weights or
 * gradients, no secondary copies), then the one with the fewest memory tiers,
 * memory before disk (none offloaded; the optimizer state in host memory; the
 * parameter shards there too; the optimizer state on disk; the parameter
 * shards in host memory beside it; both on disk), then the one with the
 * smallest device peak, wins. Hybrid sharding with the node as the group
 * moves fewer bytes over every node link than flat sharding (a flat ring
 * all-gather puts (N-1)/N of the buffer on each node link, hybrid's replica
 * all-reduce only the shard's) and, inside the node, no more than the flat
 * ring puts on each rank's link, so a flat layout wins where hybrid's
 * replicated shards do not fit.
 *
 * Tensor parallelism (--tp N [--sequence-parallel] [--batch B], --model gpt): the
 * GPT split Megatron-style over tp groups of N neighbouring ranks inside a node
 * (examples/gpt/gpt_tp.c; N must divide --ranks-per-node: a tp group's
 * all-reduces run on every layer and stay on the node's links). Each option is
 * then planned over the data-parallel ranks: world/N of them, K/N per node,
 * the declared model being one tp rank's part (replicated + split/tp: gpt_tp's
 * local shapes, ZS_PARAM_MP_REPLICATED on the replicated ones) through the same
 * zs_engine_estimate; the N tp groups' data-parallel traffic shares each node
 * link (its rate divided by N; inter_link_bytes is the link's total). The tp
 * traffic per step (zs-membench --tp's theory: per round of B sequences per data-
 * parallel rank, (4L+2) all-reduces of the B T C fp32 activations, or with sp
 * (10L+4) all-gathers / reduce-scatters of them plus the replicated gradients'
 * all-reduces, the vocab-parallel cross-entropy's 3 floats per token, and the
 * norm's buffer, 1 + 2 tp fp64) crosses each rank's intra-node link: tp_s = those bytes /
 * --intra-gbps + ring rounds x --intra-latency-us, added to comm_s (no overlap).
 * "tp" in the JSON gives the figures, with the activation bytes a layer keeps.
 *
 * A config file (--config FILE, zs_plan_config.c): a zeroshard JSON config or
 * a DeepSpeed ds_config.json, read by the library's loader
 * (zs_config_from_json_file, zeroshard/config_load.h's mapping). The engine
 * settings it fixes are the plan's, for every option: param and reduce dtypes
 * (bf16/fp16 sections, communication_data_type), the optimizer (its kind, SGD's
 * momentum, its state dtype and block), grad_accum
 * (gradient_accumulation_steps), prefetch, persist_threshold
 * (stage3_param_persistence_threshold), the shard group, ZeRO++'s weight block,
 * hpZ partition and gradient bits and group, the tier's chunk and buffer
 * counts, the delayed update (the options that can take it). Its stage, shard
 * group (flat or hybrid), offload_optimizer and offload_param devices and
 * ZeRO++ techniques are one option, "your config": the listed option with those
 * settings, or one more row after them (its figures computed as every row's);
 * shown before the table, marked '>' in it, and after it compared with the
 * fastest that fits (fits or why not, step time, device peak). A flag given on
 * the command line wins over the file for what it sets (--dtype, --reduce-dtype,
 * --optim, --momentum, --optim-state, --optim-block, --grad-accum, --prefetch,
 * --persist-threshold, --shard-group, --quantized-weights=B, --hpz,
 * --quantized-grads, --nvme-chunk; listed as overrides); no flag sets the stage
 * or the offload, and a technique's flag sets its parameter, the file whether
 * your config uses it (the flag still lists its options). The loader's messages
 * (unknown keys at any depth, keys accepted but not used, "auto" values) are
 * caught from the log sink and printed on stderr, the unknown keys in the table
 * too, all in the JSON's "config"; a file that cannot be read, parsed or
 * validated exits 2 with the loader's message, which names the file. What the
 * file sets that the model leaves out is a note: reshard_after_forward 0,
 * replica_overlap on/off, the delayed update's overlap, offload_optimizer cpu
 * with offload_param nvme (no option of zs-plan's, unchecked). Stage 3's
 * persistent units (at most persist_threshold elements) are modelled: no
 * gathers in forward and backward, an all-gather of the unit after the update
 * (the engine's regather), a reduce-scatter a round; the full copy in
 * model_state; their parameters never on disk. The engine's comm counters gave
 * the same bytes at 4 ranks (flat and hybrid, one and two rounds), by hand.
 *
 * Exit: 0 an option fits (JSON "best" is it; with --config whether yours fits
 * is "config"."fits"), 3 none fits ("best": null), 2 bad flags or a config file
 * that does not load, 77 --model gpt in a build without the example GPT, 1
 * failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zeroshard/comm.h"
#include "zeroshard/config.h"
#include "zeroshard/device.h"
#include "zeroshard/engine.h"
#include "zeroshard/log.h"
#include "zeroshard/status.h"
#include "kernels/wquant.h"
#include "zs_plan.h"


/* The option keeps state in the NVMe tier. */
static int uses_tier(const pl_option_t *x) { return x->opt == ZS_OFFLOAD_NVME || x->param == ZS_OFFLOAD_NVME; }

/* ============================================================================
 * memory: the engine's estimate of the declared model
 * ========================================================================== */

static zs_device_t *dev;
static zs_comm_t *comm;

static void estimate(const pl_opts_t *o, pl_option_t *x) {
  zs_config_t cfg = ZS_CONFIG_INIT;
  cfg.stage = x->stage;
  cfg.param_dtype = o->dtype;
  cfg.reduce_dtype = o->reduce_dtype;
  cfg.optim.kind = o->optim;
  cfg.optim.momentum = o->momentum;
  cfg.optim.state_dtype = o->optim_state;
  cfg.optim.state_block = o->optim_block;
  cfg.grad_accum = o->accum;
  cfg.prefetch = o->prefetch;
  cfg.persist_threshold = o->persist;
  cfg.offload_optimizer = x->opt;
  cfg.offload_param = x->param;
  /* a config file's delayed update, where the engine takes it: its host copies */
  cfg.delayed_param_update = o->dpu && x->opt == ZS_OFFLOAD_CPU && x->param == ZS_OFFLOAD_NONE;
  cfg.nvme_buffers = o->nvme_buffers;
  cfg.nvme_param_buffers = o->nvme_param_buffers;
  if (uses_tier(x)) { /* the estimate needs a path, never touched: nothing is set up */
    snprintf(cfg.nvme_path, sizeof cfg.nvme_path, "%s", "zs-plan");
    cfg.nvme_chunk = (size_t)o->nvme_chunk;
  }
  cfg.quantized_weights = x->qw;
  cfg.quantized_weights_block = o->qw_block;
  cfg.hpz_partition_size = x->hpz;
  cfg.quantized_gradients = x->qg ? o->qg : 0;
  cfg.quantized_gradients_group = x->qg ? pl_qg_group(o, x->shard) : 0; /* the device peak's sums: G = N / it */
  zs_engine_t *zs = NULL;
  zs_status_t st = zs_engine_create(&zs, &cfg, dev, comm);
  for (int u = 0; st == ZS_OK && u < o->m.nunits; u++) {
    int uid;
    st = zs_unit_add(zs, o->m.unit_names[u], &uid);
    for (int i = o->m.unit_first[u]; st == ZS_OK && i < o->m.unit_first[u + 1]; i++) {
      const pl_param_t *p = &o->m.params[i];
      st = zs_param_add(zs, uid, p->name, p->ndim, p->shape, p->flags, NULL, NULL, NULL);
    }
  }
  if (st == ZS_OK) st = zs_engine_estimate(zs, x->shard, &x->est);
  if (st != ZS_OK) {
    char msg[600];
    snprintf(msg, sizeof msg, "declaring the model for stage %d: %s: %s", x->stage, zs_status_name(st),
             zs ? zs_engine_last_error(zs) : zs_last_error());
    pl_die(1, msg);
  }
  zs_engine_destroy(zs);
}

/* ============================================================================
 * traffic: the step's collectives, as the engine issues them
 * ========================================================================== */

/* qgZ's group at a shard group of Ns ranks, as the engine picks it (setup.c):
 * a config file's quantized_gradients_group, else the ranks per node, or the
 * whole shard group where it sits inside a node; 0 where that does not divide */
int pl_qg_group(const pl_opts_t *o, int Ns) {
  int K = o->qg_group > 0 ? o->qg_group : o->per_node > Ns && o->per_node % Ns == 0 ? Ns : o->per_node;
  return Ns % K == 0 ? K : 0;
}

/* Stage 3 keeps unit u gathered (persist_threshold compares its elements, as
 * the engine's zs__eng_unit_extent): no gathers in forward and backward, an
 * all-gather after the step (step.c's regather), its parameters on the device. */
static int persistent(const pl_opts_t *o, const pl_option_t *x, int u) {
  if (x->stage != 3 || o->persist == 0) return 0;
  int64_t n = 0;
  for (int i = o->m.unit_first[u]; i < o->m.unit_first[u + 1]; i++) n += o->m.params[i].numel;
  return (uint64_t)n <= (uint64_t)o->persist;
}

/* qgZ (src/zero/qgrad.c): the reduce-scatter of a unit of S a shard as an
 * all-to-all of G packed shards to each member of its group (K ranks of the
 * shard group's Ns), then one of a packed shard to each other group of the
 * shard group; a packed shard: a scale a block and o->qg bits an element
 * (kernels/wquant.h) */
static void qg_reduce(pl_sched_t *s, const pl_opts_t *o, int Ns, int64_t S, int times) {
  const int K = pl_qg_group(o, Ns), G = Ns / K;
  const size_t B = o->qw_block ? (size_t)o->qw_block : ZS_WQ_BLOCK_DEFAULT;
  const int64_t Q = (int64_t)(o->qg == 4 ? zs_wq4_bytes((size_t)S, B) : zs_wq_bytes((size_t)S, B));
  if (K > 1) pl_sched_add(s, PL_BACKWARD, PL_ALL_TO_ALL, PL_QG_NODE, G * Q, times);
  if (G > 1) pl_sched_add(s, PL_BACKWARD, PL_ALL_TO_ALL, PL_QG_CROSS, Q, times);
}

static void traffic(const pl_opts_t *o, pl_option_t *x) {
  pl_net_t net = o->net;
  net.shard = x->shard;
  net.hpz = x->hpz;
  net.qg = x->qg ? pl_qg_group(o, x->shard) : 0;
  pl_sched_t *s = pl_sched_create(&net);
  if (!s) pl_die(1, "out of host memory for the link model");
  const int64_t pb = (int64_t)zs_dtype_size(o->dtype), rb = (int64_t)zs_dtype_size(o->reduce_dtype);
  const int A = o->accum, hybrid = x->shard < o->world;
  for (int u = 0; u < o->m.nunits; u++) {
    int64_t P = pl_unit_padded(&o->m, u, x->stage == 0 ? o->world : x->shard), S = P / x->shard;
    switch (x->stage) {
      case 0: pl_sched_add(s, PL_BACKWARD, PL_ALL_REDUCE, PL_WORLD, P * rb, 1); break;
      case 1:
      case 2:
        if (x->qg) qg_reduce(s, o, x->shard, P / x->shard, x->stage == 2 ? A : 1);
        else pl_sched_add(s, PL_BACKWARD, PL_REDUCE_SCATTER, PL_SHARD, P * rb, x->stage == 2 ? A : 1);
        pl_sched_add(s, PL_STEP, PL_ALL_GATHER, PL_SHARD, P * pb, 1);
        break;
      case 3: {
        if (persistent(o, x, u)) { /* gathered for good: reduced each round, gathered after the update */
          if (x->qg) qg_reduce(s, o, x->shard, S, A);
          else pl_sched_add(s, PL_BACKWARD, PL_REDUCE_SCATTER, PL_SHARD, P * rb, A);
          pl_sched_add(s, PL_STEP, PL_ALL_GATHER, PL_SHARD, P * pb, 1);
          break;
        }
        int fwd = o->m.gpt && u == 0 ? 2 : 1; /* the tied LM head gathers the embedding again */
        int bwd = o->m.gpt && u == 0 ? 0 : 1; /* its backward reads no parameters (ZS_PARAM_BACKWARD_UNREAD) */
        /* qwZ: each shard packed, int8 codes and a scale a block (kernels/wquant.h) */
        int64_t g = x->qw ? (int64_t)x->shard * (int64_t)zs_wq_bytes((size_t)S, (size_t)o->qw_block) : P * pb;
        pl_sched_add(s, PL_FORWARD, PL_ALL_GATHER, PL_SHARD, g, fwd * A);
        /* hpZ: backward gathers the secondary copies among K ranks (exact) */
        if (bwd && x->hpz > 1) pl_sched_add(s, PL_BACKWARD, PL_ALL_GATHER, PL_HPZ, P * pb, A);
        else if (bwd) pl_sched_add(s, PL_BACKWARD, PL_ALL_GATHER, PL_SHARD, g, A);
        if (x->qg) qg_reduce(s, o, x->shard, S, A);
        else pl_sched_add(s, PL_BACKWARD, PL_REDUCE_SCATTER, PL_SHARD, P * rb, A);
        break;
      }
    }
    /* hybrid: each gradient shard across the replicas, once per step (stage 1:
     * its one reduction; offload: every round, before the shard leaves) */
    if (hybrid && x->stage > 0)
      pl_sched_add(s, PL_BACKWARD, PL_ALL_REDUCE, PL_REPLICA, S * rb, x->offload && x->stage >= 2 ? A : 1);
  }
  /* zs_step's norm buffer (src/zero/step.c): its double total and, with more than one data-parallel
   * rank, two slots per tp position comparing the ranks' calls; stages 1-3 all-reduce it whole over
   * the shard group, stage 0 the slots alone over the world, hybrid the slots again across replicas */
  const int64_t K = o->world > 1 ? 1 + 2 * (int64_t)o->tp : 1;
  if (x->stage > 0) pl_sched_add(s, PL_STEP, PL_ALL_REDUCE, PL_SHARD, 8 * K, 1);
  else if (K > 1) pl_sched_add(s, PL_STEP, PL_ALL_REDUCE, PL_WORLD, 8 * (K - 1), 1);
  if (hybrid && K > 1) pl_sched_add(s, PL_STEP, PL_ALL_REDUCE, PL_REPLICA, 8 * (K - 1), 1);
  /* the tier's two agreements (zs__eng_agree): this step's data arrived (before the norm), every chunk written */
  if (uses_tier(x)) pl_sched_add(s, PL_STEP, PL_ALL_REDUCE, PL_WORLD, 8, 2);
  pl_sched_result(s, &x->net);
  pl_sched_destroy(s);
  /* with tp the engine's comm stats also count the norm's all-reduce across the tp ranks (its
   * bytes and time are the tp comm's, tp_bytes and tp_s: not scheduled here) */
  if (o->tp > 1) x->net.comm_bytes += (int64_t)((uint64_t)(8 * K) * 2 * (o->tp - 1) / o->tp);
}

/* The NVMe tier's bytes on a rank's disk a step: the optimizer phase reads
 * every trainable record once from the committed region and writes it once to
 * the other (the file, nvme_model_state, holds each twice; zs-plan's models
 * have no frozen unit, whose parameters would be a third, unread region) and
 * reads the fp32 gradient shards (the file's grads, once); those the
 * conversion thread wrote in backward, each reduction (stage 1: one a step;
 * 2-3: one a round) writing them and, after a step's first, reading them back
 * to add to. With the parameter shards on disk each gather reads its unit's
 * shard, twice a round at stage 3 (forward and backward; the example GPT's
 * embedding twice in forward and not in backward, as traffic() gathers it). */
static void disk(const pl_opts_t *o, pl_option_t *x) {
  x->disk_read = x->disk_write = x->disk_s = 0;
  if (!uses_tier(x)) return;
  const double records = (double)(x->est.nvme[ZS_MEM_PARAMS] + x->est.nvme[ZS_MEM_OPTIMIZER]) / 2;
  const double grads = (double)x->est.nvme[ZS_MEM_GRADS], reductions = x->stage == 1 ? 1 : o->accum;
  x->disk_read = records + grads + (reductions - 1) * grads;
  x->disk_write = records + reductions * grads;
  if (x->param == ZS_OFFLOAD_NVME) {
    const int64_t pb = (int64_t)zs_dtype_size(o->dtype);
    const int64_t chunk = o->nvme_chunk ? o->nvme_chunk : (int64_t)ZS_NVME_CHUNK_DEFAULT;
    for (int u = 0; u < o->m.nunits; u++) {
      if (persistent(o, x, u)) continue; /* its parameters stay on the device */
      const int64_t S = pl_unit_padded(&o->m, u, x->shard) / x->shard;
      const int gathers = 2 * o->accum;
      x->disk_read += (double)gathers * (double)pl_disk_param_read(S, pb, chunk);
    }
  }
  x->disk_s = pl_disk_time(o, x->disk_read, x->disk_write);
}

/* ============================================================================
 * the options, what fits, the fastest
 * ========================================================================== */

/* "<what> needs A U of B": in GiB, or MiB / KiB where both are small (a toy
 * model's 0.000 GiB of 0.000 said nothing) */
static void needs(char *why, size_t n, const char *what, double need, double have) {
  const double top = need > have ? need : have;
  const double u = top >= 0.1 * GIB ? GIB : top >= 0.1 * 1048576.0 ? 1048576.0 : 1024.0;
  snprintf(why, n, "%s needs %.3f %s of %.3f", what, need / u, u == GIB ? "GiB" : u == 1024.0 ? "KiB" : "MiB",
           have / u);
}

static void judge(const pl_opts_t *o, pl_option_t *x) {
  double dev_need = (double)x->est.device_peak_bound + o->reserve;
  double host_need = o->per_node * (double)(x->est.host_model_state + x->est.host[ZS_MEM_COMM]);
  x->fits = 1;
  if (o->device_mem > 0 && dev_need > o->device_mem) {
    x->fits = 0;
    needs(x->why, sizeof x->why, "device:", dev_need, o->device_mem);
  } else if (o->host_mem > 0 && host_need > o->host_mem) {
    x->fits = 0;
    needs(x->why, sizeof x->why, "host: a node", host_need, o->host_mem);
  } else if (uses_tier(x) && o->nvme_bytes >= 0 && (double)x->est.nvme_model_state > o->nvme_bytes) {
    x->fits = 0;
    needs(x->why, sizeof x->why, "disk: a rank", (double)x->est.nvme_model_state, o->nvme_bytes);
  }
  x->tier_fit = x->fits && uses_tier(x);
  if (o->tp > 1) { /* the tp comm on the intra-node links, after the data-parallel traffic */
    x->tp_s = (double)o->tp_bytes / o->net.intra_Bps +
              (double)(2 * o->tp_calls_ar + o->tp_calls_half) * (o->tp - 1) * o->net.alpha_intra;
    x->net.comm_s += x->tp_s;
    x->net.intra_bytes += (double)o->tp_bytes;
    x->net.inter_link_bytes *= o->tp; /* every tp coordinate's data-parallel group crosses the link */
  }
  x->step_s = (o->compute_s > 0 ? o->compute_s / (o->world * o->tp) : 0) + x->net.comm_s + x->disk_s;
  x->speedup = o->compute_s > 0 && x->step_s > 0 ? o->compute_s / x->step_s : 0;
}

/* Memory before disk, and fewer tiers before more: the state on the device;
 * the optimizer state in host memory; the parameter shards there too; the
 * optimizer state on disk; the parameter shards in host memory beside it;
 * both on disk. */
static int tier_level(const pl_option_t *x) {
  if (x->opt == ZS_OFFLOAD_NONE) return 0;
  if (x->opt == ZS_OFFLOAD_CPU) return x->param == ZS_OFFLOAD_CPU ? 2 : 1;
  return x->param == ZS_OFFLOAD_NONE ? 3 : x->param == ZS_OFFLOAD_CPU ? 4 : 5;
}

/* a before b: faster by more than 1% (latency terms of a few rounds are below
 * what the model can tell apart); within that, exact options, then the fewest
 * memory tiers, memory before disk (offload's copies and its CPU step are not
 * modelled), then the smaller device peak (room for activations). */
static int better(const pl_option_t *a, const pl_option_t *b) {
  if (a->step_s < b->step_s * 0.99) return 1;
  if (b->step_s < a->step_s * 0.99) return 0;
  if (a->qw != b->qw) return !a->qw; /* exact weights, where they cost nothing */
  if (a->hpz != b->hpz) return !a->hpz; /* no secondary copies, where they gain nothing */
  if (a->qg != b->qg) return !a->qg;   /* exact gradients, where they cost nothing */
  if (tier_level(a) != tier_level(b)) return tier_level(a) < tier_level(b);
  return a->est.device_peak_bound < b->est.device_peak_bound;
}

/* ============================================================================
 * main
 * ========================================================================== */

int main(int argc, char **argv) {
  pl_opts_t o = pl_parse(argc, argv);
  zs_log_set_level(ZS_LOG_ERROR);
  zs_status_t st;
  if ((st = zs_device_create_cpu(&dev)) != ZS_OK || (st = zs_comm_create_mpi_world(&comm, dev)) != ZS_OK) {
    char msg[600];
    snprintf(msg, sizeof msg, "a one-rank comm for the declaration: %s: %s", zs_status_name(st), zs_last_error());
    pl_die(1, msg);
  }
  int me = zs_comm_rank(comm);

  pl_option_t x[48];
  int nx = 0, hybrid = o.hybrid;
  memset(x, 0, sizeof x);
  x[nx++] = (pl_option_t){.stage = 0, .shard = o.world};
  for (int stage = 1; stage <= 3; stage++)
    for (int h = 0; h <= hybrid; h++)
      for (int off = 0; off <= 1; off++)
        x[nx++] = (pl_option_t){.stage = stage, .shard = h ? o.shard_group : o.world, .offload = off};
  for (int h = 0; o.qw_block && h <= hybrid; h++) /* listed after the others: their indices stay */
    for (int off = 0; off <= 1; off++)
      x[nx++] = (pl_option_t){.stage = 3, .shard = h ? o.shard_group : o.world, .offload = off, .qw = 1};
  for (int q = 0; o.hpz > 1 && q <= (o.qw_block != 0); q++) /* hpZ: flat stage 3 (hybrid gathers in-group already) */
    for (int off = 0; off <= 1; off++)
      x[nx++] = (pl_option_t){.stage = 3, .shard = o.world, .offload = off, .qw = q, .hpz = o.hpz};
  for (int off = 0; o.qg && off <= 1; off++) { /* qgZ: stages 2-3, flat and hybrid, offload or not */
    x[nx++] = (pl_option_t){.stage = 2, .shard = o.world, .offload = off, .qg = 1};
    x[nx++] = (pl_option_t){.stage = 3, .shard = o.world, .offload = off, .qg = 1};
    for (int stage = 2; hybrid && pl_qg_group(&o, o.shard_group) && stage <= 3; stage++)
      x[nx++] = (pl_option_t){.stage = stage, .shard = o.shard_group, .offload = off, .qg = 1};
  }
  if (o.qg && o.qw_block && o.hpz > 1) /* flat stage 3 with the other two */
    x[nx++] = (pl_option_t){.stage = 3, .shard = o.world, .qw = 1, .hpz = o.hpz, .qg = 1};
  /* ZeRO-Infinity, flat and hybrid (listed after the others: their indices stay): the optimizer
   * state on disk at stages 1-3; at stage 3 the parameter shards in host memory beside the
   * optimizer state there or on disk, and both on disk */
  for (int stage = 1; stage <= 3; stage++)
    for (int h = 0; h <= hybrid; h++) {
      const int sh = h ? o.shard_group : o.world;
      x[nx++] = (pl_option_t){.stage = stage, .shard = sh, .opt = ZS_OFFLOAD_NVME};
      if (stage < 3) continue;
      x[nx++] = (pl_option_t){.stage = 3, .shard = sh, .opt = ZS_OFFLOAD_CPU, .param = ZS_OFFLOAD_CPU};
      x[nx++] = (pl_option_t){.stage = 3, .shard = sh, .opt = ZS_OFFLOAD_NVME, .param = ZS_OFFLOAD_CPU};
      x[nx++] = (pl_option_t){.stage = 3, .shard = sh, .opt = ZS_OFFLOAD_NVME, .param = ZS_OFFLOAD_NVME};
    }
  for (int i = 0; i < nx; i++) {
    if (x[i].offload && x[i].opt == ZS_OFFLOAD_NONE) x[i].opt = ZS_OFFLOAD_CPU; /* the options above: host memory */
    x[i].offload = x[i].opt != ZS_OFFLOAD_NONE;
  }
  /* --config: your config is the option listed with its settings, or one more after them */
  int mine = -1;
  if (o.config) {
    const pl_config_t *c = o.config;
    pl_option_t y = {.stage = c->stage, .shard = c->shard, .offload = c->opt != ZS_OFFLOAD_NONE, .opt = c->opt,
                     .param = c->param, .qw = c->qw, .hpz = c->hpz ? o.hpz : 0, .qg = c->qg};
    for (int i = 0; i < nx && mine < 0; i++)
      if (x[i].stage == y.stage && x[i].shard == y.shard && x[i].opt == y.opt && x[i].param == y.param &&
          x[i].qw == y.qw && x[i].hpz == y.hpz && x[i].qg == y.qg)
        mine = i;
    if (mine < 0) x[mine = nx++] = y;
  }
  int best = -1;
  for (int i = 0; i < nx; i++) {
    estimate(&o, &x[i]);
    traffic(&o, &x[i]);
    disk(&o, &x[i]);
    judge(&o, &x[i]);
    if (x[i].fits && (best < 0 || better(&x[i], &x[best]))) best = i;
  }
  if (me == 0) {
    pl_print_table(&o, x, nx, best, mine, o.json ? stderr : stdout);
    if (o.json) pl_print_json(&o, x, nx, best, mine, stdout);
    fflush(stdout);
  }
  zs_comm_destroy(comm);
  zs_device_destroy(dev);
  pl_model_free(&o.m);
  free(o.config);
  return best >= 0 ? 0 : 3;
}
