/* zeroshard/checkpoint.h: save and load the engine's training state, and export
 * the parameters for other tools.
 *
 * A checkpoint is a directory:
 *   manifest.json            what it holds: format version, world size, stage,
 *                            step, loss scale, param dtype, optimizer, which
 *                            optimizer state it has, every tensor (name, unit,
 *                            shape), and the rank files with their sizes; for a
 *                            model-parallel part its place (mp_size, mp_rank),
 *                            and the layout zs_checkpoint_set_layout named (an
 *                            optional member: manifests without it still load);
 *                            its last member is a checksum of all the text before it
 *   <id>.rank<r>.zsr         rank r's shard of every tensor: blocks of fp32 values
 *                            (master weights, Adam m and v / SGD momentum), each
 *                            with the tensor, the element offset, the count and a
 *                            CRC-32 of its header and of its data; the header
 *                            names the save (id, rank, world, size, block count)
 *                            and records the manifest's checksum
 * Every file is written under a temporary name, fsynced and renamed; the manifest
 * goes last, so a directory whose manifest exists holds a complete checkpoint,
 * and a save that fails midway leaves the previous one loadable (and removes
 * the files it wrote, so a full disk does not stay full); rank files no
 * manifest names (a crash before the manifest) are removed by the folder's
 * next save before it writes. A file size limit (RLIMIT_FSIZE) is ZS_ERR_IO:
 * calls that write files hold SIGXFSZ off their thread while they write. After a successful
 * save, rank files of earlier saves in the directory are removed, and so is an
 * earlier save of another layout there (model-parallel parts dir/mp<k>, or the
 * single part in dir), which a run in that layout would otherwise load as the
 * latest. The ranks must see the same directory (one machine, or a shared file
 * system): rank 0 finds every rank's file in place before it writes the
 * manifest, else the save is ZS_ERR_IO on every rank and the previous one stays.
 * Model-parallel parts of different saves (a part copied from another) are
 * ZS_ERR_CORRUPT, in a load in their own layout and in zs_checkpoint_verify.
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
 * ZS_ERR_MISMATCH (tensors or optimizer state differ from the engine's; a
 * checkpoint of another optimizer loads only into an engine that keeps no
 * state besides the master, plain SGD: its m or v would mean something else;
 * Adam and AdamW load into each other, with a warning: the same m and v, but
 * with weight decay Adam's hold its L2 term),
 * ZS_ERR_UNSUPPORTED (another format version), with a message naming the file,
 * block or tensor; on every rank (a rank whose own part went well reports which
 * rank failed). */
#ifndef ZEROSHARD_CHECKPOINT_H
#define ZEROSHARD_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Saves into `dir` (created if missing; its parent must exist).
 * Model parallelism (an engine with a model-parallel group of 2+ ranks:
 * zs_engine_set_model_parallel, or a mesh with tp/pp dimensions): each part of
 * the model is a whole checkpoint of its own in dir/mp<r> (r = the part's rank
 * in the model-parallel group), its manifest recording the group's size and r;
 * every save, load and their agreements then span the whole mesh (call them on
 * every rank of it). One folder per engine: a save replaces the folder's
 * earlier saves, so saving into a folder another live engine of this process
 * saved into or loaded from (and this one did not) is ZS_ERR_INVALID, saving
 * nothing (two models' engines in one folder left only the second's, which
 * both then loaded). Across processes, a run that saved into a folder holds
 * it (an flock(2) on dir/.zs-lock, taken by one process of the run at its
 * first save there and held until its engine is destroyed or it exits):
 * another run's save there is ZS_ERR_STATE on every rank, naming the process
 * and host that holds it, before anything in the folder changes (a job started
 * twice replaced its own checkpoints); a load from such a folder warns. Where
 * the file system has no flock, nothing is detected. */
zs_status_t zs_checkpoint_save(zs_engine_t *zs, const char *dir);
/* Claims `dir` for this run's saves before the first one (created if missing;
 * its parent must exist): the lock zs_checkpoint_save takes (above), without
 * saving. ZS_ERR_STATE on every rank when another live run holds it, so a
 * trainer learns before its steps, not at its first save; a program that
 * manages files of its own there (slots, a pointer to the newest) claims the
 * folder before it touches them. Collective like a save; between steps. */
zs_status_t zs_checkpoint_claim(zs_engine_t *zs, const char *dir);
/* zs_checkpoint_save in the background, for saves that should not stop
 * training. Collective and between steps, as zs_checkpoint_save, with its
 * checks; it returns once every rank has copied its rank file (its shard of the
 * master, m and v: the bytes zs_checkpoint_save writes) into host memory, and a
 * thread of the library writes, fsyncs and renames that file while the
 * trainer goes on. zs_checkpoint_wait then puts the manifest in place (last,
 * as ever): until it returns ZS_OK the directory's previous checkpoint is the
 * one that loads, and a crash or failure leaves that one. The copy takes host
 * memory of the rank file's size (counted ZS_MEM_OTHER, its pages given back
 * to the kernel once the file is written, or with ZS_CKPT_KEEP_COPY=1 kept,
 * counted, for the next background save); a rank that cannot have it (the
 * host room setup's check uses, split among the node's ranks; ZS_MEM_CHECK=0
 * skips that check) makes the call ZS_ERR_NOMEM on every rank, nothing saved
 * (zs_checkpoint_save needs no such copy; both take a 4 MiB staging buffer
 * too while they read the state). A rank that cannot create its file (a
 * read-only folder) makes the call ZS_ERR_IO on every rank, nothing saved.
 * While it is pending the folder is this engine's: another engine's save
 * there is ZS_ERR_INVALID (above). With delayed_param_update, a save lands
 * the pending update first (as zs_flush): a run that saves follows a path
 * slightly off one that does not (each save brings one update a step
 * forward), and a resumed run is bit for bit the run that saved at the same
 * steps.
 * A save still pending is finished first (as zs_checkpoint_wait) by
 * zs_checkpoint_save, zs_checkpoint_save_async and zs_checkpoint_load; when it
 * failed they return its error, naming it, and do nothing else.
 * zs_engine_destroy with a save pending waits for its writing, then removes
 * this rank's file of it, with a warning: call zs_checkpoint_wait before. */
zs_status_t zs_checkpoint_save_async(zs_engine_t *zs, const char *dir);
/* Collective, between steps (ZS_ERR_STATE otherwise): waits until every rank's
 * file of the pending background save is written, then finishes it as
 * zs_checkpoint_save does, returning its outcome (zs_checkpoint_save's errors:
 * a write that failed on one rank is ZS_ERR_IO on every rank, naming the rank
 * and the file, and its files are removed). ZS_OK when none is pending. */
zs_status_t zs_checkpoint_wait(zs_engine_t *zs);
/* 1 while this rank's file of a background save is still being written; 0
 * once it is written (zs_checkpoint_wait then waits for the other ranks and
 * the manifest only), when none is pending, and for NULL. Not collective; from
 * the thread that drives the engine. Each rank answers for itself: a decision
 * to call zs_checkpoint_wait taken from it must be the same on every rank
 * (all-reduce the answer first, e.g. a MAX over the ranks), or the ranks issue
 * different collectives. */
int zs_checkpoint_writing(const zs_engine_t *zs);
/* Loads the checkpoint in `dir` into an engine that was set up with the same
 * parameters (names, shapes, order); restores the step count and loss scale.
 * A checkpoint of another model-parallel layout (or of none) loads when the
 * parameters declare their splits (zs_checkpoint_set_split, below): each rank
 * assembles its parts from the saved parts; without them, tensors whose
 * shapes differ are ZS_ERR_MISMATCH on every rank naming the tensor. */
zs_status_t zs_checkpoint_load(zs_engine_t *zs, const char *dir);
/* Names the model-parallel layout this engine's part of the model belongs to,
 * in the trainer's words (e.g. "tp=2 pp=1", "tp=1 pp=2 layers 3,1"): printable
 * ASCII, at most ZS_CKPT_LAYOUT_MAX - 1 bytes; NULL or "" clears it. Name the
 * tensor and pipeline splits, virtual stages, expert parallelism, not the
 * data-parallel size, stage or dtype. zs_checkpoint_save records it in each
 * part's manifest ("layout"); a load whose words differ reads the checkpoint
 * as another layout (below: every part's manifest, each rank assembling its
 * ranges) and names both layouts in its refusals. A checkpoint without words
 * is taken as another layout when its model-parallel size or place differ.
 * Local (not collective): call it on every
 * rank with the same words, between zs_engine_create and the save or load
 * (zs_checkpoint_save refuses data-parallel ranks whose words or attributes
 * differ with ZS_ERR_MISMATCH on every rank, saving nothing).
 * ZS_ERR_INVALID for a NULL engine or words too long or not printable. */
#define ZS_CKPT_LAYOUT_MAX 128
zs_status_t zs_checkpoint_set_layout(zs_engine_t *zs, const char *layout);
/* ---- any layout to any layout ----------------------------------------------------
 *
 * A parameter that holds a part of a whole tensor (a tensor-parallel rank's
 * slice, a pipeline stage's tied copy of the embedding) says how, and then a
 * checkpoint saved in one layout loads into any other: tp a -> tp b, pp a with
 * one layer split -> pp b with another, ep a -> ep b (experts are whole
 * tensors under their global names), with or without data parallelism, any
 * stage, shard group, dtype, offload, and their products. The manifest records
 * each tensor's split; a load whose layout differs from the save's (another
 * model-parallel size or place, other zs_checkpoint_set_layout words, another
 * set of tensors) reads every part's manifest and block index, and each rank
 * reads, for each element of the range it owns, the whole tensor's element
 * from a part that holds it (the ranges run on: a slice of rows reads as
 * fast as a tensor), the master and the optimizer state (m and v as fp32
 * values, encoded again into this engine's state dtype), with the step and the
 * loss-scale state. What is checked: every whole tensor this engine holds is
 * in the checkpoint with the same whole shape, every element of it in some
 * part, and every whole tensor of the checkpoint is held by some rank of this
 * run (ZS_ERR_MISMATCH naming the tensor otherwise); the parts are of one
 * save (the same step, optimizer and state). A load in the same layout reads
 * only its own part, as before.
 *
 * The split: the whole tensor's elements (row-major) seen as a view of `ndim`
 * dimensions `dims`, of which the parameter holds [start, start + count)
 * along dimension `dim`, padded to `padded` there (padding after the part,
 * loaded as 0); the parameter's elements are that view's, row-major. So a
 * column slice of a [C, 3C] matrix whose q, k and v are each split is
 * {dims [C, 3, C], dim 2, start r*C/tp, count C/tp}; a vocabulary slice of a
 * [V, C] embedding padded to R rows {dims [V, C], dim 0, start, count, padded
 * R}; a part of padding only has count 0 (5 rows over 4 parts of 2: the last
 * {start 5, count 0, padded 2}). ndim 0: the parameter holds the whole tensor named `whole`, which with a
 * name other than its own makes it a copy (a tied head's embedding): it loads
 * from that tensor and is not written into the layout-free form.
 * whole_ndim / whole_shape: the whole tensor's shape (required with ndim > 0;
 * the product of dims must equal its elements). */
typedef struct {
  const char *whole;  /* the whole tensor's name; NULL or "": the parameter's own */
  int whole_ndim;     /* the whole tensor's shape; 0: the parameter's own shape (ndim 0 only) */
  int64_t whole_shape[ZS_MAX_DIMS];
  int ndim;           /* 0: whole (or a copy); 1..ZS_MAX_DIMS: the view the split is made in */
  int64_t dims[ZS_MAX_DIMS];
  int dim;            /* the view's dimension split */
  int64_t start, count; /* the part held along dim */
  int64_t padded;     /* the parameter's extent along dim (>= count); 0: count */
} zs_split_t;
/* Declares how parameter `param` (zs_param_add's index) is split; NULL clears
 * it. Local, between zs_param_add and the save or load; ZS_ERR_INVALID with a
 * message for a split that does not describe the parameter's elements (its
 * numel must be the view's with dims[dim] replaced by padded). */
zs_status_t zs_checkpoint_set_split(zs_engine_t *zs, int param, const zs_split_t *split);
/* Records a key and a value (printable ASCII, key under 32 bytes, value under
 * 64) in the manifest's "attrs", for tools reading the checkpoint offline:
 * zs_checkpoint_export_hf_gpt2 reads "n_head". At most ZS_CKPT_ATTRS keys; a
 * key given again replaces its value, a NULL value removes it. Local; the
 * same keys and values on every data-parallel rank (zs_checkpoint_save
 * compares them, as the layout's words). */
#define ZS_CKPT_ATTRS 16
zs_status_t zs_checkpoint_set_attr(zs_engine_t *zs, const char *key, const char *value);
/* The value the manifest of the checkpoint zs_checkpoint_load last loaded into
 * this engine recorded for `key`, or NULL (no such key, or nothing loaded yet).
 * For a trainer that steps several engines as one model: it records the same
 * value in each engine's save (zs_checkpoint_set_attr) and compares the loaded
 * ones, so that parts of different saves are not trained on together. Local;
 * the string lives until the next load or zs_engine_destroy. */
const char *zs_checkpoint_loaded_attr(const zs_engine_t *zs, const char *key);

/* Writes every parameter's full fp32 master values to `path` in the safetensors
 * format (tensor names as declared, "__metadata__" with the step), from rank 0.
 * A model-parallel engine holds parts of tensors: ZS_ERR_UNSUPPORTED on every
 * rank (the trainer, which knows how each tensor was split, assembles them). */
zs_status_t zs_export_safetensors(zs_engine_t *zs, const char *path);

/* Offline, on one process, without an engine or MPI (build/bin/zs-ckpt wraps
 * these; messages in zs_last_error(), and logged as every failure is:
 * zs_log_set_level(ZS_LOG_NONE) keeps a tool's stderr quiet): */
typedef struct {
  int world;          /* ranks that saved it */
  int64_t step;       /* optimizer steps taken */
  int ntensors;
  int64_t params;     /* elements over all tensors */
  int64_t bytes;      /* rank files' bytes */
  char optimizer[16]; /* "adamw", "adam", "sgd", "lion" */
  /* from the manifest (a model-parallel save: its first part's, the same in
   * every part): */
  int stage;              /* the ZeRO stage it was saved at */
  int parts;              /* model-parallel parts (dir/mp0 ..), 0 for a plain save */
  char param_dtype[16];   /* "fp32", "bf16", "fp16" */
  char state_dtype[16];   /* the optimizer states' encoding: "fp32", "bf16", "int8" */
  int state_block;        /* int8 states: their block size, else 0 */
  uint64_t save_id;       /* the save's id, in every rank file's header (each save its own) */
  char layout[ZS_CKPT_LAYOUT_MAX]; /* zs_checkpoint_set_layout's words, "" when none */
  int mp_rank, mp_size;   /* the model-parallel part dir is (its manifest's): 0 and 1 for a plain save, 0 and
                             parts for a whole model-parallel one; a part on its own (dir/mp1) says which */
} zs_checkpoint_info_t;
/* Everything a load checks, for every rank at once: the manifest (its checksum
 * and every field), every rank file's header against it, every block's header
 * and CRC, and that each tensor's every element is present exactly once per kind
 * of state. The same statuses as the load (ZS_ERR_CORRUPT, ZS_ERR_UNSUPPORTED,
 * ZS_ERR_IO). info may be NULL. A model-parallel save (dir/mp<r>) is checked
 * part by part, and that the parts are of one save; info then sums the parts
 * (ranks, tensors as each part holds them, elements, bytes). */
zs_status_t zs_checkpoint_verify(const char *dir, zs_checkpoint_info_t *info);
/* zs_checkpoint_verify without reading the values: the manifest, every rank
 * file's header and size, every block's header (seeking over its data), every
 * tensor's elements present once per kind; what the blocks hold and their
 * CRCs are not read. Its time grows with the blocks (one read each), not the
 * bytes (verify reads every byte): far quicker for large blocks, no quicker
 * for thousands of small ones. A flipped bit inside a block's values passes
 * here and fails verify or a load. The same statuses and info. */
zs_status_t zs_checkpoint_inspect(const char *dir, zs_checkpoint_info_t *info);
/* Assembles the full fp32 master tensors from the rank files and writes them to
 * `path` in the safetensors format: the same file zs_export_safetensors writes
 * at the step of the checkpoint, with no training job running. One tensor at a
 * time (an index of the blocks first), so it needs memory for the largest
 * tensor, not the model. */
zs_status_t zs_checkpoint_to_safetensors(const char *dir, const char *path);

/* The layout-free form: any checkpoint in `src` (a directory with a manifest,
 * or the mp<r> parts of a model-parallel save) written to `dst` as one
 * checkpoint of one rank holding every whole tensor (copies left out: a tied
 * head's embedding), its master, m and v as fp32 values (any state dtype
 * decoded), the step and the loss-scale state; it loads, as any checkpoint
 * does, into any layout whose parameters declare their splits. One tensor at a
 * time: memory for the largest tensor and one block of the reader. ZS_ERR_IO,
 * ZS_ERR_CORRUPT, ZS_ERR_MISMATCH (parts that disagree), ZS_ERR_INVALID. */
zs_status_t zs_checkpoint_convert(const char *src, const char *dst);
/* A Hugging Face GPT-2 model folder from any checkpoint of examples/gpt's model
 * (names as zs_import_name_hf_gpt2 maps them, whole tensors from any layout):
 * config.json (GPT2LMHeadModel; n_head from the manifest's attr "n_head", or
 * n_head > 0 here), and model.safetensors, or, above max_shard_bytes (0: 2 GiB)
 * of tensors, model-0000i-of-0000n.safetensors with model.safetensors.index.json.
 * `transformers`' from_pretrained(dir) loads it. One tensor at a time. dir is
 * created if missing (and removed again if the export fails); its files are
 * written under temporary names and renamed. An earlier export in dir is
 * replaced whole: its config.json and index go before the new files are
 * written, its weight files this one does not write after (as transformers'
 * save_pretrained). A dir that holds a checkpoint is ZS_ERR_INVALID; n_head > 0
 * other than the manifest's is ZS_ERR_MISMATCH. config.json's bos and eos
 * tokens are GPT-2's end of text (50256), or the last token of a smaller
 * vocabulary. */
zs_status_t zs_checkpoint_export_hf_gpt2(const char *src, const char *dir, int n_head, int64_t max_shard_bytes);

/* ---- starting from pretrained weights --------------------------------------------
 *
 * zs_import_safetensors fills the parameters of a set-up engine from a
 * safetensors file, or from a sharded set as Hugging Face saves one. `path` is
 *   a .safetensors file;
 *   an index (model.safetensors.index.json: {"weight_map": {tensor: shard file}},
 *     the shard files beside it);
 *   a directory holding model.safetensors.index.json or else model.safetensors.
 * Each rank reads (positioned reads) only the bytes of the element ranges whose
 * fp32 master it owns, converting F32, F16, BF16 or F64 values to fp32, so a
 * rank's extra host memory is its shard plus one block of 2^20 elements, never
 * the model (stage 3); parameters are then rounded to the param dtype and
 * regathered where they are resident (stages 0-2, persistent units). Works at
 * every stage, with offload and with hybrid sharding (every replica reads its
 * own ranges).
 *
 * Names: each tensor of the file is looked up in opts->renames (exact file name;
 * a NULL param_name skips the tensor), else passed to opts->name_fn, else taken
 * as the parameter of the same name. Shapes must equal the declared ones
 * exactly; a parameter may be filled only once.
 *
 * Parts (opts version 2): a parameter may hold a part of its tensor, as a
 * tensor-parallel rank holds a slice of a whole model's matrix. part_fn says so
 * for parameter `param` (the engine's index, zs_param_add's param_out): it
 * returns 1 and writes the whole tensor's shape (ndim <= ZS_MAX_DIMS, what the
 * file's tensor must be), or 0 for a parameter that is its whole tensor.
 * index_fn then gives, for each element e of such a parameter (row-major), the
 * whole tensor's element it holds (row-major), or -1 for padding, which is set
 * to 0. Elements whose indices run on consecutively are read in one piece, so a
 * slice of whole rows or of row segments reads as fast as a whole tensor. Both
 * are called on the ranks that hold the parameter and must not call zeroshard.
 *
 * Only parameter values change, as with zs_param_set: optimizer state and the
 * step count stay (load pretrained weights before the first step, or resume with
 * zs_checkpoint_load). A delayed parameter update still pending is landed first,
 * then overwritten, as zs_param_set does. Collective over the engine's ranks,
 * between steps only (ZS_ERR_STATE otherwise).
 *
 * Everything is checked before anything in the engine changes, and a failure is
 * the same status on every rank (a rank whose own part went well names the rank
 * that failed) with the engine as it was:
 *   ZS_ERR_IO        path missing or unreadable
 *   ZS_ERR_CORRUPT   truncated file, header length past the end, header JSON
 *                    that does not parse, unknown dtype string, data_offsets that
 *                    do not match dtype x shape, leave a hole, overlap or run past
 *                    the data; an index naming a missing shard or disagreeing with
 *                    the shards' headers; a tensor named twice; a NUL character
 *                    (the escape \u0000 or a raw 0 byte) anywhere in a header's or
 *                    an index's JSON: in a tensor name, a dtype, a shard file,
 *                    __metadata__ (the message names the string and the byte);
 *                    a NaN or inf among the values a rank reads (an F64 value
 *                    past float's range too), named with its tensor and element
 *   ZS_ERR_MISMATCH  a shape that differs from the parameter's, a non-float dtype
 *                    for a parameter, parameters with no tensor (unless
 *                    allow_missing), tensors for no parameter (unless
 *                    allow_unexpected), two tensors for one parameter
 * Messages name the tensor, the parameter and the file. */

/* What name_fn says about one tensor of the file. */
enum {
  ZS_IMPORT_UNKNOWN = 0, /* not known: the same name is tried, else it is unexpected */
  ZS_IMPORT_LOAD = 1,    /* fills the parameter written to param_name */
  ZS_IMPORT_SKIP = 2,    /* held by the file but not needed (a mask) */
  ZS_IMPORT_TIED = 3     /* a copy of the tensor that fills the parameter written to
                            param_name (a tied LM head): not loaded, but each rank
                            compares its ranges with that tensor's, and a value that
                            differs is ZS_ERR_MISMATCH naming both tensors (the file
                            holds an untied model this engine cannot hold) */
};
/* Maps file_name to the engine parameter it fills: writes its name (NUL-terminated,
 * at most cap bytes) and returns ZS_IMPORT_LOAD (or ZS_IMPORT_TIED), or returns
 * ZS_IMPORT_SKIP or ZS_IMPORT_UNKNOWN. Called on every rank with the same names; must not call
 * zeroshard. */
typedef int (*zs_import_name_fn)(void *user, const char *file_name, char *param_name, size_t cap);

/* See "Parts" above. */
typedef int (*zs_import_part_fn)(void *user, int param, int *ndim, int64_t *shape);
typedef int64_t (*zs_import_index_fn)(void *user, int param, int64_t e);

typedef struct {
  const char *file_name;  /* a tensor of the file */
  const char *param_name; /* the parameter it fills; NULL: skip the tensor */
} zs_import_rename_t;

typedef struct {
  int version;                       /* ZS_IMPORT_OPTS_VERSION */
  const zs_import_rename_t *renames; /* nrenames entries, looked up first; may be NULL */
  int nrenames;
  zs_import_name_fn name_fn; /* then this; NULL: none */
  void *user;
  int allow_missing;    /* parameters without a tensor keep their values (new layers, adapters) */
  int allow_unexpected; /* tensors that fill no parameter are skipped (a model cut shorter) */
  /* version 2 (a version 1 struct ends above: these are not read from it) */
  zs_import_part_fn part_fn;   /* NULL: every parameter is its whole tensor */
  zs_import_index_fn index_fn; /* with part_fn */
} zs_import_opts_t;
#define ZS_IMPORT_OPTS_VERSION 2
#define ZS_IMPORT_OPTS_INIT {ZS_IMPORT_OPTS_VERSION, NULL, 0, NULL, NULL, 0, 0, NULL, NULL}

/* opts may be NULL (ZS_IMPORT_OPTS_INIT: the file's names are the parameters'). */
zs_status_t zs_import_safetensors(zs_engine_t *zs, const char *path, const zs_import_opts_t *opts);

/* A name_fn for Hugging Face GPT-2 files (GPT2LMHeadModel / GPT2Model, with or
 * without the "transformer." prefix) onto the names examples/gpt declares:
 *   wte.weight -> wte, wpe.weight -> wpe, ln_f.{weight,bias} -> lnf.{w,b},
 *   h.L.ln_1/ln_2.{weight,bias} -> h.L.ln1/ln2.{w,b},
 *   h.L.attn.c_attn / attn.c_proj / mlp.c_fc / mlp.c_proj .{weight,bias}
 *     -> h.L.attn.qkv / attn.proj / mlp.fc / mlp.proj .{w,b}
 *     (GPT-2's Conv1D weights are stored [in, out], the layout examples/gpt uses);
 * skipped: h.L.attn.bias and h.L.attn.masked_bias (the causal mask buffers, not
 * weights); lm_head.weight is ZS_IMPORT_TIED to wte (tied in both models: a file
 * whose head differs from its wte, a fine-tune that untied it, is refused
 * naming lm_head.weight instead of losing its head). user is unused. */
int zs_import_name_hf_gpt2(void *user, const char *file_name, char *param_name, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
