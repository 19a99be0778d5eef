/* init_from.c: --init-from (see init_from.h). */
#include "init_from.h"

#include <stdio.h>
#include <string.h>

#include "zeroshard/checkpoint.h"

zs_status_t gpt_init_from(zs_engine_t *zs, const char *path, char *err, size_t n) {
  zs_import_opts_t o = ZS_IMPORT_OPTS_INIT;
  o.name_fn = zs_import_name_hf_gpt2; /* our own names are not GPT-2's: they fall through to themselves */
  return gpt_init_from_opts(zs, path, &o, err, n);
}

zs_status_t gpt_init_from_opts(zs_engine_t *zs, const char *path, const zs_import_opts_t *o, char *err, size_t n) {
  zs_status_t st = zs_import_safetensors(zs, path, o);
  if (st == ZS_OK) return st;
  const char *m = zs_last_error(), *hint = "";
  if (st == ZS_ERR_MISMATCH && strstr(m, "parameter 'wpe' has shape"))
    hint = " (--seq sets wpe's rows; GPT-2's is 1024)";
  else if (st == ZS_ERR_MISMATCH && (strstr(m, "parameter 'wte' h") || strstr(m, "parameter 'head.wte' h")))
    hint = " (--vocab sets wte's rows; GPT-2's is 50257)";
  else if (st == ZS_ERR_MISMATCH && strstr(m, "is tied to parameter") && strstr(m, "differs"))
    hint = " (zs-train-gpt ties its LM head to wte, as GPT-2 does: an untied head cannot be loaded)";
  else if (st == ZS_ERR_MISMATCH)
    hint = " (--layers, --channels, --vocab and --seq must be the checkpoint's: GPT-2 124M is 12, 768, 50257, 1024)";
  snprintf(err, n, "--init-from %s: %s%s", path, m, hint);
  return st;
}
