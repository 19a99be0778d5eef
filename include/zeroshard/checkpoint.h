/* zeroshard/checkpoint.h: save and load the engine's training state, and export
 * the parameters for other tools.
 *
 * A checkpoint is a directory:
 *   manifest.json            what it holds: format version, world size, stage,
 *                            step, loss scale, param dtype, optimizer, which
 *                            optimizer state it has, every tensor (name, unit,
 *                            shape), and the rank files with their sizes; its
 *                            last member is a checksum of all the text before it
 *   <id>.rank<r>.zsr         rank r's shard of every tensor: blocks of fp32 values
 *                            (master weights, Adam m and v / SGD momentum), each
 *                            with the tensor, the element offset, the count and a
 *                            CRC-32 of its header and of its data; the header
 *                            names the save (id, rank, world, size, block count)
 *                            and records the manifest's checksum
 * Every file is written under a temporary name, fsynced and renamed; the manifest
 * goes last, so a directory whose manifest exists holds a complete checkpoint,
 * and a save that fails midway leaves the previous one loadable. After a
 * successful save, rank files of earlier saves in the directory are removed.
 * The ranks must see the same directory (one machine, or a shared file system).
 *
 * The manifest is not to be edited: any change to it, even of white space, makes
 * the checkpoint ZS_ERR_CORRUPT (it fails its own checksum, or, with that
 * recomputed, every rank file's record of it). Beyond the checksums, every field
 * the loader uses is checked before it is used: numbers in range and without
 * overflow, rank-file names and headers that belong to this save and rank,
 * known dtype, optimizer and state names, unique tensor names, and blocks that
 * cover every element once (no overlap, no gap). This is format version 2;
 * version 1 checkpoints (whose manifest had no checksum) are refused with
 * ZS_ERR_UNSUPPORTED.
 *
 * Loading reads, on each rank, only the blocks that overlap the ranges it stores
 * in its own layout, so a checkpoint saved at one world size and stage loads at
 * any other (and with or without offload, or another param dtype: parameters are
 * rounded from the fp32 master). Everything is read and checked before anything
 * in the engine changes: a missing, truncated, corrupt or edited file, or a
 * checkpoint of another model, is an error on every rank and leaves the engine as
 * it was.
 *
 * All three calls are collective over the engine's comm and allowed between
 * steps only (ZS_ERR_STATE otherwise); a delayed parameter update is landed first.
 * Errors: ZS_ERR_IO (file system), ZS_ERR_CORRUPT (a file fails its checks),
 * ZS_ERR_MISMATCH (tensors or optimizer state differ from the engine's),
 * ZS_ERR_UNSUPPORTED (another format version), with a message naming the file,
 * block or tensor; on every rank (a rank whose own part went well reports which
 * rank failed). */
#ifndef ZEROSHARD_CHECKPOINT_H
#define ZEROSHARD_CHECKPOINT_H

#include <stdint.h>

#include "zeroshard/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Saves into `dir` (created if missing; its parent must exist). */
zs_status_t zs_checkpoint_save(zs_engine_t *zs, const char *dir);
/* Loads the checkpoint in `dir` into an engine that was set up with the same
 * parameters (names, shapes, order); restores the step count and loss scale. */
zs_status_t zs_checkpoint_load(zs_engine_t *zs, const char *dir);
/* Writes every parameter's full fp32 master values to `path` in the safetensors
 * format (tensor names as declared, "__metadata__" with the step), from rank 0. */
zs_status_t zs_export_safetensors(zs_engine_t *zs, const char *path);

/* Offline, on one process, without an engine or MPI (build/bin/zs-ckpt wraps
 * these; messages in zs_last_error()): */
typedef struct {
  int world;          /* ranks that saved it */
  int64_t step;       /* optimizer steps taken */
  int ntensors;
  int64_t params;     /* elements over all tensors */
  int64_t bytes;      /* rank files' bytes */
  char optimizer[16]; /* "adamw", "adam", "sgd" */
} zs_checkpoint_info_t;
/* Everything a load checks, for every rank at once: the manifest (its checksum
 * and every field), every rank file's header against it, every block's header
 * and CRC, and that each tensor's every element is present exactly once per kind
 * of state. The same statuses as the load (ZS_ERR_CORRUPT, ZS_ERR_UNSUPPORTED,
 * ZS_ERR_IO). info may be NULL. */
zs_status_t zs_checkpoint_verify(const char *dir, zs_checkpoint_info_t *info);
/* Assembles the full fp32 master tensors from the rank files and writes them to
 * `path` in the safetensors format: the same file zs_export_safetensors writes
 * at the step of the checkpoint, with no training job running. One tensor at a
 * time (an index of the blocks first), so it needs memory for the largest
 * tensor, not the model. */
zs_status_t zs_checkpoint_to_safetensors(const char *dir, const char *path);

#ifdef __cplusplus
}
#endif
#endif
