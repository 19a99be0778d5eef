/* zeroshard/config_load.h: checking a zs_config_t, and filling one from the
 * environment or from JSON (our own keys or a DeepSpeed ds_config.json).
 *
 * Common rules for every function here:
 *  - No handles, no global state except the per-thread list of unknown JSON keys
 *    (zs_config_unknown_keys) and the per-thread last error (zs_last_error). The
 *    functions are safe to call from several threads at once, except that
 *    zs_config_from_env reads the environment (do not setenv concurrently).
 *  - Nothing blocks except zs_config_from_json_file, which reads one file.
 *  - The loaders start from ZS_CONFIG_INIT and write *cfg only when they return
 *    ZS_OK; on any failure *cfg is left exactly as it was.
 *  - Failures return ZS_ERR_INVALID (or ZS_ERR_IO for files) and set
 *    zs_last_error() to one line naming the field, variable or JSON key path,
 *    the offending value and what is allowed, for example
 *      "config.stage is 5: use 0 (DDP), 1, 2 or 3"
 *      "config.stage is 7 (from ZS_STAGE): use 0 (DDP), 1, 2 or 3"
 *      "ZS_LR is 'abc': expected a number such as 3e-4"
 *      "zero_optimization.stage is \"3\": expected an integer"
 *    The message is also logged at error level.
 */
#ifndef ZEROSHARD_CONFIG_LOAD_H
#define ZEROSHARD_CONFIG_LOAD_H

#include <stddef.h>

#include "zeroshard/config.h"
#include "zeroshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Checks every field of *cfg and reports the first bad one (ZS_ERR_INVALID;
 * ZS_OK if all are good). What is checked, in this order:
 *   version == ZS_CONFIG_VERSION; stage 0..3; param_dtype fp32|bf16|fp16;
 *   reduce_dtype fp32|bf16 (fp16 only when param_dtype is fp16); optim.kind one
 *   of ZS_ADAMW, ZS_ADAM, ZS_SGD, ZS_LION; optim.lr > 0 and finite; 0 <= beta1, beta2 < 1;
 *   eps > 0; weight_decay >= 0; 0 <= momentum < 1; nesterov 0|1 (SGD: needs
 *   momentum > 0); grad_accum >= 1; grad_clip >= 0; prefetch 0..16; the 0|1
 *   flags; offload_optimizer none|cpu|nvme and only at stage >= 1;
 *   offload_param none|cpu|nvme, not none only at stage 3 with
 *   offload_optimizer cpu|nvme; nvme_path NUL-terminated within its 256 bytes
 *   (always), and not empty with either offload on nvme; the tier's sizes,
 *   checked whatever the devices: nvme_chunk 0 or a multiple of 4096 up to
 *   2^30; nvme_buffers 0 or 2..64; nvme_param_buffers 0 or 1..64;
 *   aio_block_size 0 or a multiple of 4096 up to 64 MiB; aio_queue_depth 0 or
 *   1..1024; delayed_param_update only with offload_optimizer cpu and
 *   offload_param none; loss_scale >= 0, initial_scale > 0, scale_window >= 1,
 *   hysteresis >= 1, 0 < min_scale <= initial_scale (these four only where they are
 *   used: fp16 parameters with loss_scale 0; a static scale or another precision
 *   ignores them, as DeepSpeed reads its fp16 section only when it is enabled);
 *   schedule: kind one of ZS_SCHED_*; COSINE and LINEAR warm up linearly; warmup_steps
 *   0..2^53; total_steps > warmup_steps (DeepSpeed kinds: > max(2, warmup_steps))
 *   except for WARMUP; 0 <= min_lr <= optim.lr; WARMUP_COSINE: ratios in [0, 1]
 *   and min_lr 0 (its floor is cos_min_ratio x lr);
 *   quantized_weights 0|1 and only at stage 3; quantized_weights_block 0 or a
 *   power of two 32..4096; hpz_partition_size >= 0, above 1 only at stage 3
 *   and without shard_group; quantized_gradients 0|4|8, at stages 2-3
 *   (quantized_weights, hpz_partition_size and quantized_gradients combine
 *   with offload_optimizer and offload_param); replica_overlap one of ZS_OVERLAP_*
 *   (zs_engine_create refuses ON at stage 1, without replicas or on NCCL
 *   comms). All floats must be finite.
 * Does not depend on ranks or devices: zs_engine_create checks those. */
zs_status_t zs_config_validate(const zs_config_t *cfg);

/* Fills *cfg from ZS_CONFIG_INIT plus these environment variables, then
 * validates. A variable that is unset or empty keeps the default. Like every
 * loader here, the first call reads the library's settings, which names each
 * ZS_* variable of the environment that zeroshard does not read (a warning
 * through the log, once a process).
 *   ZS_STAGE             0..3                ZS_PARAM_DTYPE   fp32|bf16|fp16
 *   ZS_REDUCE_DTYPE      fp32|bf16|fp16      ZS_OPTIM         adamw|adam|sgd|lion
 *   ZS_LR ZS_BETA1 ZS_BETA2 ZS_EPS ZS_WEIGHT_DECAY ZS_MOMENTUM ZS_GRAD_CLIP
 *                        numbers (strtod syntax, e.g. 3e-4)
 *   ZS_GRAD_ACCUM ZS_PREFETCH  integers      ZS_PERSIST_THRESHOLD  elements (>= 0)
 *   ZS_RESHARD_AFTER_FORWARD ZS_DELAYED_PARAM_UPDATE ZS_NESTEROV  1|0|true|false|on|off|yes|no
 *   ZS_OFFLOAD ZS_OFFLOAD_PARAM  none|cpu|nvme   ZS_LOSS_SCALE    number, 0 = dynamic
 *   ZS_NVME_PATH         the tier's directory, kept as given (more than 255
 *                        bytes is an error naming the variable)
 *   ZS_NVME_CHUNK ZS_AIO_BLOCK_SIZE  whole numbers (elements, bytes)
 *   ZS_NVME_BUFFERS ZS_NVME_PARAM_BUFFERS ZS_AIO_QUEUE_DEPTH  integers
 *   ZS_OPTIM_STATE       fp32|bf16|int8      ZS_OPTIM_STATE_BLOCK  elements
 *   ZS_QUANTIZED_GRADIENTS 0|8|4 (bits)      ZS_QUANTIZED_GRADIENTS_GROUP  ranks
 *   ZS_SHARD_GROUP       ranks per shard group (0 = all)
 *   ZS_QUANTIZED_WEIGHTS 1|0 (flag words as above)   ZS_QUANTIZED_WEIGHTS_BLOCK  elements
 *   ZS_HPZ_PARTITION_SIZE  ranks (a node) holding backward's gathers
 *   ZS_REPLICA_OVERLAP   auto|on|off (or the flag words: on/off)
 *   ZS_LR_SCHEDULE       constant|cosine|linear|warmup|warmup_decay|warmup_cosine
 *   ZS_WARMUP_STEPS ZS_TOTAL_STEPS  whole numbers of steps   ZS_MIN_LR  number
 *   ZS_WARMUP_TYPE       linear|log (the DeepSpeed kinds)
 *   ZS_WARMUP_MIN_RATIO ZS_COS_MIN_RATIO  numbers (warmup_cosine; from the
 *                        environment its defaults are the struct's, a linear
 *                        warmup and 0, where a DeepSpeed file's WarmupCosineLR
 *                        takes DeepSpeed's, log and 1e-4)
 * Names are case-insensitive for the word values. Numbers are read in the C
 * locale (a decimal point, whatever setlocale says). A value that does not parse
 * is ZS_ERR_INVALID naming the variable and the value (control bytes shown as
 * \xNN); a number beyond what its field holds says "out of range" and the range
 * (as for JSON below); a value that parses but is not allowed fails validation,
 * whose message names the variable. */
zs_status_t zs_config_from_env(zs_config_t *cfg);
/* The same variables over *cfg as it stands (a config file's, or the
 * program's), then validates: the environment wins over the file for what it
 * sets, the rest is kept. On failure *cfg is unchanged. A file and the
 * environment together:
 *   zs_config_from_json_file(&cfg, path) == ZS_OK && zs_config_apply_env(&cfg) == ZS_OK
 * (zs_config_from_env alone starts from ZS_CONFIG_INIT, and the loaders below
 * read the file alone). */
zs_status_t zs_config_apply_env(zs_config_t *cfg);

/* Fills *cfg from ZS_CONFIG_INIT plus a JSON object (NUL-terminated UTF-8),
 * then validates. Two vocabularies are accepted in one document:
 *
 * Our own keys, named as the struct fields: "version" (1 or 2: the same keys;
 * it is the C struct's layout that changed with 2), "stage", "param_dtype"
 * and "reduce_dtype" ("fp32"|"bf16"|"fp16"), "optim": {"kind":
 * "adamw"|"adam"|"sgd"|"lion", "lr", "beta1", "beta2", "eps", "weight_decay",
 * "momentum", "nesterov", "state_dtype" ("fp32"|"bf16"|"int8"), "state_block"}, "grad_accum", "grad_clip", "prefetch",
 * "reshard_after_forward", "persist_threshold", "reduce_bucket_size",
 * "offload_optimizer" ("none"|"cpu"|"nvme"), "offload_strict", "delayed_param_update",
 * "offload_param" ("none"|"cpu"|"nvme"), "nvme_path" (a string of 1..255
 * bytes), "nvme_chunk", "nvme_buffers", "nvme_param_buffers", "aio_block_size",
 * "aio_queue_depth", "replica_overlap" ("auto"|"on"|"off", or true/false),
 * "loss_scale", "initial_scale", "scale_window", "hysteresis", "min_scale",
 * "shard_group", "quantized_weights", "quantized_weights_block", "hpz_partition_size",
 * "quantized_gradients" (0, 8 or 4 bits), "quantized_gradients_group",
 * "schedule": {"kind": "constant"|"cosine"|"linear"|"warmup"|
 * "warmup_decay"|"warmup_cosine", "warmup_steps", "total_steps", "min_lr",
 * "warmup_type": "linear"|"log", "warmup_min_ratio", "cos_min_ratio"}.
 * Flags take true/false or 0/1. Our keys are applied after the DeepSpeed keys,
 * so they win wherever both set one field, whatever their order in the file.
 *
 * DeepSpeed's ds_config.json, where it maps (the rest of DeepSpeed's schema is
 * reported as unknown):
 *   zero_optimization.stage                        -> stage
 *   zero_optimization.reduce_bucket_size           -> reduce_bucket_size (kept for
 *       reference: zeroshard reduces whole units, a unit is the bucket)
 *   zero_optimization.stage3_param_persistence_threshold -> persist_threshold
 *       (elements in both; DeepSpeed applies it per parameter, zeroshard per unit)
 *   zero_optimization.stage3_prefetch_bucket_size  accepted, not mapped: it counts
 *       elements, zeroshard prefetches whole units; prefetch keeps its value (1,
 *       or our "prefetch") and an info line says so
 *   zero_optimization.stage3_max_live_parameters   accepted, not mapped: live
 *       gathered memory is bounded by prefetch+1 units; an info line says so
 *   zero_optimization.zero_quantized_weights       -> quantized_weights (ZeRO++'s
 *       qwZ: int8 weights in stage 3's gathers, a scale per 256 elements)
 *   zero_optimization.zero_hpz_partition_size      -> hpz_partition_size (ZeRO++'s
 *       hpZ: backward's gathers among that many ranks, from a secondary copy)
 *   zero_optimization.offload_optimizer.device     "cpu" -> ZS_OFFLOAD_CPU,
 *       "nvme" -> ZS_OFFLOAD_NVME (ZeRO-Infinity), "none" -> ZS_OFFLOAD_NONE
 *   zero_optimization.offload_optimizer.pin_memory accepted: offloaded state is
 *       always pinned (set offload_strict to fail rather than fall back)
 *   zero_optimization.offload_optimizer.nvme_path  -> nvme_path (null: none);
 *       buffer_count -> nvme_buffers; ratio only 1 or absent (anything else:
 *       "partial optimizer offload is not built: use 1"); pipeline,
 *       pipeline_read, pipeline_write, fast_init accepted with an info line
 *       (zeroshard always pipelines the tier's reads and writes with the update)
 *   zero_optimization.offload_param.device         "cpu" | "nvme" | "none" ->
 *       offload_param (stage 3, with offload_optimizer cpu or nvme);
 *       nvme_path -> nvme_path; buffer_count -> nvme_param_buffers; pin_memory
 *       as the optimizer's; buffer_size and max_in_cpu accepted (info: each
 *       parameter buffer holds the largest unit's shard; parameters on nvme
 *       are not cached in host memory)
 *     The two nvme_path keys, where both are given, must be equal (zeroshard
 *       keeps one tier a rank: the optimizer state and the parameters in one
 *       file), whatever the sections' devices; our "nvme_path", like every key
 *       of ours, is applied after them and wins over both.
 *   aio.block_size -> aio_block_size, aio.queue_depth -> aio_queue_depth;
 *       thread_count, single_submit, overlap_events accepted (info: io_uring
 *       needs no I/O threads, batches submissions, reaps while in flight);
 *       intra_op_parallelism accepted; use_gds false accepted, true refused
 *       (GPUDirect Storage is not built)
 *   zero_optimization.overlap_comm, contiguous_gradients, allgather_bucket_size,
 *       allgather_partitions, reduce_scatter, round_robin_gradients,
 *       sub_group_size, stage3_max_reuse_distance,
 *       stage3_gather_16bit_weights_on_model_save (and _fp16_), ...
 *                                                  accepted no-ops (debug log:
 *       the engine always overlaps, reduce-scatters and buckets by unit)
 *   gradient_clipping -> grad_clip; gradient_accumulation_steps -> grad_accum
 *   communication_data_type "fp32"|"bf16"|"fp16"   -> reduce_dtype. Note: without
 *       it zeroshard reduces in fp32 (ZS_CONFIG_INIT), where DeepSpeed reduces in
 *       the compute dtype; set it to "bf16" to match DeepSpeed's traffic.
 *   bf16.enabled (or "bfloat16") true -> param_dtype bf16
 *   fp16.enabled true -> param_dtype fp16; fp16.loss_scale -> loss_scale (0 =
 *       dynamic); initial_scale_power p -> initial_scale = 2^p (0..63);
 *       loss_scale_window -> scale_window; hysteresis; min_loss_scale -> min_scale
 *       (bf16 and fp16 both enabled is an error)
 *   optimizer.type "AdamW"|"Adam"|"SGD"|"Lion" (any case). DeepSpeed runs "Adam" as
 *       AdamW (decoupled weight decay) unless params.adam_w_mode is false, so
 *       "Adam" -> ZS_ADAMW, and "Adam" with adam_w_mode false -> ZS_ADAM
 *       (L2 decay folded into the gradient). "AdamW" is always ZS_ADAMW.
 *   optimizer.params.lr, betas [b1, b2], eps, weight_decay, momentum, nesterov;
 *       amsgrad must be false and bias_correction true (what zeroshard does);
 *       torch_adam and fused are accepted no-ops
 *   scheduler.type "WarmupLR" -> schedule.kind ZS_SCHED_WARMUP, "WarmupDecayLR" ->
 *       ZS_SCHED_WARMUP_DECAY, "WarmupCosineLR" -> ZS_SCHED_WARMUP_COSINE (DeepSpeed's
 *       spelling; their rates are DeepSpeed's, step for step: zeroshard/config.h);
 *       any other type is an error (set the rate yourself with zs_engine_set_lr);
 *       no type (or an empty section, or null): no scheduler, as in DeepSpeed.
 *       params, with DeepSpeed's defaults for what is left out (warmup_num_steps
 *       1000, warmup_type "log", warmup_min_lr 0, cos_min_ratio 0.0001,
 *       warmup_min_ratio 0): warmup_min_lr -> schedule.min_lr; warmup_max_lr ->
 *       optim.lr (DeepSpeed's scheduler overwrites the optimizer's rate; WarmupLR
 *       without it peaks at the optimizer's lr, WarmupDecayLR at 0.001 as in
 *       DeepSpeed); warmup_num_steps -> schedule.warmup_steps (1 or more: 0 is
 *       an error, as DeepSpeed 0.19.8 raises one); total_num_steps ->
 *       schedule.total_steps (required by WarmupDecayLR and WarmupCosineLR);
 *       warmup_type "linear"|"log"; warmup_min_ratio, cos_min_ratio;
 *       last_batch_iteration only -1 (the schedule follows the engine's step
 *       count). A key the type does not take is an error, as in DeepSpeed.
 *       "auto" values: warmup_min_lr -> 0 and warmup_max_lr -> optim.lr (what
 *       Hugging Face's Trainer fills in); warmup_num_steps and total_num_steps
 *       are taken from our "schedule" keys (warmup_steps, total_steps) in the
 *       same document, and are an error naming the key otherwise.
 *   train_batch_size, train_micro_batch_size_per_gpu, steps_per_print,
 *       wall_clock_breakdown, ... accepted and ignored (debug log): the trainer
 *       owns batching and printing
 * A DeepSpeed numeric or flag value of "auto" (Hugging Face's placeholder)
 * keeps the current value, with an info line. fp16.enabled (or bf16.enabled)
 * "auto" therefore leaves the precision to the trainer, as Hugging Face and
 * Accelerate fill it from their own flags (DeepSpeed alone would read the
 * string as true); the section's loss-scale values are still applied, and
 * checked only if fp16 with dynamic scaling ends up in use. Flags also take
 * the strings "true" and "false" (any case), which templated configs write and
 * DeepSpeed's pydantic sections read as booleans.
 *
 * Unknown keys, at any depth, do not fail the call: each is logged as one
 * warning with its path ("zero_optimization.stage3_foo"), the first 20 one by
 * one and then one line with the count, and the list is kept for
 * zs_config_unknown_keys. If a known key appears more than once in an object
 * its last value wins whole (a repeated section replaces the earlier one, whose
 * values are not read) and one warning says so.
 *
 * The text must be strict JSON (RFC 8259), and is checked before anything is
 * applied. Refused, with the line, column and text there: whitespace other than
 * space, tab, CR and LF (control bytes); raw control bytes in strings; \u0000
 * anywhere (a C string would end there); control characters in keys; invalid
 * UTF-8 (overlong, surrogates, past U+10FFFF, cut short); unpaired UTF-16
 * surrogates in \u escapes; numbers JSON does not have (01, 1., .5, +1, 0x10,
 * NaN, Infinity), longer than 40 characters, or nonzero and below the smallest
 * double (1e-400); comments, trailing commas and text after the object. A UTF-8
 * BOM at the very start is skipped. Limits that bound time and memory (a
 * DeepSpeed config has ~100 values, 4 levels): the text under 16 MiB, at most
 * 100000 values, at most 64 levels of nesting. Loading is linear in the size of
 * the text.
 *
 * Numbers: integer fields take whole numbers in any notation (3, 3.0, 5e8; 2.5
 * is an error) in -2147483648..2147483647; sizes take whole numbers 0..2^53;
 * float fields take magnitudes up to 3.4e38, and a nonzero value that would
 * round to 0 in a float (below 1.4e-45) is out of range too.
 *
 * Errors (ZS_ERR_INVALID; *cfg unchanged): cfg or json_text NULL; text that
 * breaks the rules above (the message gives line, column and the text there);
 * the document is not an object; a known key with the wrong type, a number out
 * of its field's range ("optim.lr is beyond 1.8e+308: out of range for a float
 * (largest magnitude 3.4e+38)") or a value that cannot be honoured (the message
 * names the key path and the value); the result fails zs_config_validate (the
 * message names the field and the key it came from). ZS_ERR_NOMEM if memory
 * runs out. */
zs_status_t zs_config_from_json(zs_config_t *cfg, const char *json_text);

/* As zs_config_from_json, reading the document from `path` (under 16 MiB, no
 * NUL bytes). Cannot open or read the file: ZS_ERR_IO, with the path and
 * strerror. Messages about the content start with the path. */
zs_status_t zs_config_from_json_file(zs_config_t *cfg, const char *path);

/* The unknown keys met by the most recent zs_config_from_json(_file) call on the
 * calling thread, as JSON paths joined by commas in document order
 * ("bogus,zero_optimization.stage3_foo"), or "" if there were none (or no call
 * yet on this thread). Kept even when that call failed (the keys met before the
 * failure). Very long lists end with ",...". The pointer stays valid, and its
 * text unchanged, until the next from_json call on this thread. */
const char *zs_config_unknown_keys(void);

/* Writes a one-line human summary of *cfg into buf (n bytes, truncated to fit,
 * always NUL-terminated when n > 0) and returns buf, e.g.
 *   "stage 3, param bf16, reduce fp32, adamw lr 0.0003 betas 0.9/0.95 eps 1e-08
 *    wd 0.1, grad_accum 4, clip 1, prefetch 1, reshard_after_forward 1, persist 0,
 *    offload cpu"
 * With ZeRO-Infinity: ", offload nvme, offload_param cpu|nvme, nvme <nvme_path>"
 * (offload_param only when set, the path only with a tier on nvme).
 * Loss-scale settings appear only with fp16 parameters or a static scale.
 * Does not validate. Returns "" (a static empty string) when buf is NULL or n is 0,
 * and "(null config)" in buf when cfg is NULL. */
const char *zs_config_describe(const zs_config_t *cfg, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
