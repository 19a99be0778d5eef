/* Checkpoints: ready name maps for zs_import_safetensors (zeroshard/checkpoint.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_impl.h"

/* Hugging Face GPT-2 (modeling_gpt2.py: GPT2Model under "transformer." in
 * GPT2LMHeadModel) onto examples/gpt (gpt.h). A block's Conv1D weights are
 * stored [in, out] in both, so the names are all that differ. */
static const struct {
  const char *hf, *ours;
} k_block[] = {
    {"ln_1.weight", "ln1.w"},           {"ln_1.bias", "ln1.b"},
    {"attn.c_attn.weight", "attn.qkv.w"}, {"attn.c_attn.bias", "attn.qkv.b"},
    {"attn.c_proj.weight", "attn.proj.w"}, {"attn.c_proj.bias", "attn.proj.b"},
    {"ln_2.weight", "ln2.w"},           {"ln_2.bias", "ln2.b"},
    {"mlp.c_fc.weight", "mlp.fc.w"},    {"mlp.c_fc.bias", "mlp.fc.b"},
    {"mlp.c_proj.weight", "mlp.proj.w"}, {"mlp.c_proj.bias", "mlp.proj.b"},
};

static const struct {
  const char *hf, *ours;
} k_top[] = {{"wte.weight", "wte"}, {"wpe.weight", "wpe"}, {"ln_f.weight", "lnf.w"}, {"ln_f.bias", "lnf.b"}};

static int put(char *out, size_t cap, const char *fmt, const char *s, long layer) {
  int n = layer < 0 ? snprintf(out, cap, fmt, s) : snprintf(out, cap, fmt, layer, s);
  return n > 0 && (size_t)n < cap ? ZS_IMPORT_LOAD : ZS_IMPORT_UNKNOWN;
}

int zs_import_name_hf_gpt2(void *user, const char *file_name, char *param_name, size_t cap) {
  (void)user;
  if (!file_name || !param_name || !cap) return ZS_IMPORT_UNKNOWN;
  const char *n = file_name;
  if (!strcmp(n, "lm_head.weight")) return put(param_name, cap, "%s", "wte", -1) ? ZS_IMPORT_TIED : ZS_IMPORT_UNKNOWN;
  if (!strncmp(n, "transformer.", 12)) n += 12;
  for (size_t i = 0; i < sizeof k_top / sizeof k_top[0]; i++)
    if (!strcmp(n, k_top[i].hf)) return put(param_name, cap, "%s", k_top[i].ours, -1);
  if (strncmp(n, "h.", 2) != 0 || n[2] < '0' || n[2] > '9') return ZS_IMPORT_UNKNOWN;
  char *rest;
  long layer = strtol(n + 2, &rest, 10);
  if (*rest != '.' || layer < 0 || layer > 1000000 || (n[2] == '0' && rest != n + 3)) return ZS_IMPORT_UNKNOWN;
  rest++;
  if (!strcmp(rest, "attn.bias") || !strcmp(rest, "attn.masked_bias")) return ZS_IMPORT_SKIP; /* mask buffers */
  for (size_t i = 0; i < sizeof k_block / sizeof k_block[0]; i++)
    if (!strcmp(rest, k_block[i].hf)) return put(param_name, cap, "h.%ld.%s", k_block[i].ours, layer);
  return ZS_IMPORT_UNKNOWN;
}

int zs__ck_hf_gpt2_name(const char *ours, char *hf, size_t cap) {
  for (size_t i = 0; i < sizeof k_top / sizeof k_top[0]; i++)
    if (!strcmp(ours, k_top[i].ours)) return put(hf, cap, "transformer.%s", k_top[i].hf, -1) == ZS_IMPORT_LOAD;
  if (strncmp(ours, "h.", 2) != 0 || ours[2] < '0' || ours[2] > '9') return 0;
  char *rest;
  long layer = strtol(ours + 2, &rest, 10);
  if (*rest != '.' || layer < 0 || layer > 1000000 || (ours[2] == '0' && rest != ours + 3)) return 0;
  for (size_t i = 0; i < sizeof k_block / sizeof k_block[0]; i++)
    if (!strcmp(rest + 1, k_block[i].ours)) return put(hf, cap, "transformer.h.%ld.%s", k_block[i].hf, layer) == ZS_IMPORT_LOAD;
  return 0;
}
