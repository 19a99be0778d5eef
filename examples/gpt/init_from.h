/* init_from.h: --init-from FILE|DIR, the GPT's parameters from pretrained weights.
 *
 * Accepts a Hugging Face GPT-2 checkpoint (a model.safetensors, or a directory
 * with model.safetensors.index.json and its shards, names with or without
 * "transformer.") or this trainer's own --export (gpt.h's names). Call it on
 * every rank after zs_engine_setup and before the first step (a --load resume
 * replaces it: the checkpoint has the trained values). Collective over the
 * engine's ranks; each reads only its shard's ranges (zs_import_safetensors). */
#ifndef ZS_EXAMPLES_GPT_INIT_FROM_H
#define ZS_EXAMPLES_GPT_INIT_FROM_H

#include <stddef.h>

#include "zeroshard/checkpoint.h"
#include "zeroshard/engine.h"

/* 0, or the status with a message in err (n bytes) naming the tensor and, for a
 * shape that differs, the option that sets it. The engine is unchanged on failure. */
zs_status_t gpt_init_from(zs_engine_t *zs, const char *path, char *err, size_t n);
/* The same with the caller's import options (a split model's: names that fall
 * on other pipeline stages skipped, tensor-parallel parts; trainer_whole.c);
 * o->name_fn should itself map GPT-2's names (zs_import_name_hf_gpt2). */
zs_status_t gpt_init_from_opts(zs_engine_t *zs, const char *path, const zs_import_opts_t *o, char *err, size_t n);

#endif
