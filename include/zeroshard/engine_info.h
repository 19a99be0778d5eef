/* An engine's counts, layout and statistics: steps taken, ranks, the declared
 * parameters and units, the memory accountant's figures, zs_engine_estimate,
 * the engine's traffic by comm group and the NVMe tier's figures. Included by
 * zeroshard/engine.h (the engine itself); may be included alone. */
#ifndef ZEROSHARD_ENGINE_INFO_H
#define ZEROSHARD_ENGINE_INFO_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard/comm.h"
#include "zeroshard/engine.h"
#include "zeroshard/memory.h"
#include "zeroshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Optimizer steps taken (restored by zs_checkpoint_load); -1 for NULL. Skipped
 * steps (inf/NaN gradients) do not count. */
int64_t zs_engine_step_count(const zs_engine_t *zs);
/* Deprecated: the old name of zs_engine_step_count (read beside zs_step, which
 * takes a step, it read as one). Same value; kept, as a real function, so that
 * programs built against it still compile and link. */
int64_t zs_engine_step(const zs_engine_t *zs);
/* Multiply the loss by this before backward (1 unless fp16 loss scaling). */
float zs_loss_scale(const zs_engine_t *zs);
/* This rank in the engine's (data-parallel) comm and its size; -1 and 0 for
 * a NULL engine. */
int zs_engine_rank(const zs_engine_t *zs);
int zs_engine_world(const zs_engine_t *zs);
/* The model-parallel group's size (zs_engine_set_model_parallel, or the
 * mesh's), 1 without one; *rank (may be NULL) this rank's place in it. */
int zs_engine_mp_size(const zs_engine_t *zs, int *rank);
/* Units and parameters declared so far (0 for a NULL engine); a parameter's
 * element count (0) and name (NULL: a NULL engine or an id out of range; else
 * the engine's copy, valid until zs_engine_destroy). */
int zs_engine_unit_count(const zs_engine_t *zs);
int zs_engine_param_count(const zs_engine_t *zs);
int64_t zs_param_numel(const zs_engine_t *zs, int param);
const char *zs_param_name(const zs_engine_t *zs, int param);
/* The parameter declared under `name` (names are unique), or -1: none, or a
 * NULL engine or name. For carrying tensors by name (a PyTorch state_dict's
 * keys) into zs_param_set / zs_param_state_set. */
int zs_param_find(const zs_engine_t *zs, const char *name);
/* A parameter's declared shape into shape[0..ndim) (ZS_MAX_DIMS entries; may
 * be NULL) and its ndim returned; -1 for a NULL engine or an id out of range.
 * To check a tensor from elsewhere against it before copying numel values
 * (a transposed [in, out] weight has the same numel). */
int zs_param_shape(const zs_engine_t *zs, int param, int64_t *shape);

/* Layout of a unit after setup (elements): numel, the unit's element count;
 * padded, its flat buffer (each parameter starting at a multiple of 64, the total
 * a multiple of 64 x ranks); shard, one rank's part (padded / ranks). */
zs_status_t zs_unit_layout(const zs_engine_t *zs, int unit, int64_t *numel, int64_t *padded,
                           int64_t *shard);

/* The device accountant's figures (bytes by domain and category): the
 * device's, whatever engines share it; an engine's own figures are those of a
 * device (and comm) of its own. */
zs_status_t zs_memory_stats(const zs_engine_t *zs, zs_memory_stats_t *out);

/* What the declared model will hold per rank at `world` ranks (any world size:
 * a what-if), from the declaration and config alone; callable before setup.
 * With hybrid sharding pass the shard group's size: a rank holds what it would
 * hold in a flat layout of that many ranks. world 0: this engine's own layout
 * (its shard group's size, the world's when flat).
 * model state = params + grads + optimizer (+ stage-3 persistent units, category
 * gather) between steps, exactly what the accountant will show per category and
 * domain. device_peak_bound bounds the device bytes during a step when the
 * trainer holds one unit at a time (each further unit held adds its gathered
 * size): the model state plus the transient buffers (gathered units within the
 * prefetch window; with reshard_after_forward off every unit, since each stays
 * gathered from its forward to its backward;
 * full gradient buffers, reduce-dtype and accumulation scratch, the mpi
 * comm's reduction scratch) at their most. */
typedef struct {
  int world;
  uint64_t device[ZS_MEM_CATEGORY_COUNT]; /* between steps, by category; the engine's own
                                             scalars and bookkeeping (8 (1 + 2P) bytes, the comm
                                             category's few hundred: design.md 3.9) are
                                             in device_peak_bound, not here */
  uint64_t host[ZS_MEM_CATEGORY_COUNT];   /* offloaded state (host domain); comm: its pinned
                                             staging and the engine's host scratch (544 bytes
                                             from 2 to 31 ranks without model parallelism
                                             in its data-parallel world, the
                                             larger of `world` and its comm's), exactly the
                                             accountant's */
  uint64_t device_model_state, host_model_state;
  uint64_t device_peak_bound;
  /* the NVMe tier's file (offload_* = ZS_OFFLOAD_NVME), by category: every
   * record twice for trainable units (the two regions), each field padded to
   * 4 KiB (docs/design.md, "The NVMe tier"); the accountant's nvme domain.
   * Its pinned chunk and read buffers are host comm above. */
  uint64_t nvme[ZS_MEM_CATEGORY_COUNT];
  uint64_t nvme_model_state;
} zs_mem_estimate_t;
zs_status_t zs_engine_estimate(const zs_engine_t *zs, int world, zs_mem_estimate_t *out);
/* Calls and bytes per collective kind that engine calls issued on the engine's
 * comms since setup or the last reset. The trainer's own collectives on those
 * comms (a loss average on the world comm) are not in them; zs_comm_stats
 * counts everything issued on a comm, the engine's traffic included, and
 * neither setup nor zs_engine_comm_stats_reset clears it. Engines sharing a
 * comm see each other's share (and reset it). Every group
 * (zs_engine_comm_stats), or one group: the world comm (the agreements of
 * calls between steps: zs_param_get/_set, checkpoints, the schedule's
 * setters), the shard group (gathers,
 * reduce-scatters, the norm; with flat sharding that is the world comm), the
 * replica group (hybrid: the gradient shards' all-reduce across replicas), the
 * hpZ partition (hpz_partition_size: backward's gathers; none without it), qgZ's
 * groups (quantized_gradients: the all-to-all inside a node, and across them), the
 * model-parallel comm (zs_engine_set_model_parallel: the norm's all-reduce; a
 * mesh engine's checkpoint agreements). */
typedef enum {
  ZS_GROUP_ALL = 0, ZS_GROUP_WORLD, ZS_GROUP_SHARD, ZS_GROUP_REPLICA, ZS_GROUP_HPZ, ZS_GROUP_QG_NODE, ZS_GROUP_QG_CROSS,
  ZS_GROUP_MODEL
} zs_group_t;
zs_status_t zs_engine_comm_stats(const zs_engine_t *zs, zs_comm_stats_t *out);
zs_status_t zs_engine_comm_stats_group(const zs_engine_t *zs, zs_group_t group, zs_comm_stats_t *out);
void zs_engine_comm_stats_reset(zs_engine_t *zs);
/* The NVMe tier (offload_optimizer or offload_param ZS_OFFLOAD_NVME): this
 * rank's file and what the last zs_step moved through it. The optimizer phase
 * streams the shard chunk by chunk (read chunk i+1 while updating chunk i and
 * writing chunk i-1): seconds runs from its first read to its last write,
 * read_wait_s is the time the update waited for reads (queuing them included),
 * update_s the CPU optimizer's, write_wait_s the time queuing writes and
 * waiting for the last ones. ZS_ERR_STATE without a tier or before setup,
 * its message in zs_engine_last_error but not logged (a monitor may ask every
 * step whether there is a tier). */
typedef struct {
  char path[320];             /* the tier's file: its name is removed once it is made and reserved (the
                                 data stays open, freed when the engine is destroyed or the process ends,
                                 a killed one too), so the name is for messages: nothing is there */
  uint64_t file_bytes;        /* its size: both regions (docs/design.md, "The NVMe tier") */
  uint64_t steps;             /* optimizer phases streamed since setup */
  uint64_t bytes_read, bytes_written; /* the last step's optimizer phase */
  double seconds, read_wait_s, update_s, write_wait_s; /* the last step's optimizer phase */
  uint64_t param_bytes_read;  /* parameter shards read for gathers since setup */
  uint64_t fs_bytes, fs_allocated_bytes; /* the file system's view of the open file (fstat): its size, and the
                                            bytes allocated to it (reserved at setup where the file
                                            system can fallocate: not sparse) */
} zs_nvme_stats_t;
zs_status_t zs_engine_nvme_stats(const zs_engine_t *zs, zs_nvme_stats_t *out);
/* Ranks in this engine's shard group (config shard_group; the world size when flat). */
int zs_engine_shard_group(const zs_engine_t *zs);

#ifdef __cplusplus
}
#endif
#endif
