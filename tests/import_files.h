/* test_import's file writers: safetensors files laid out as Hugging Face writes
 * them (8-byte little-endian header length, JSON padded with spaces to a
 * multiple of 8, tensors end to end), written here so the bytes are known and
 * can be damaged on purpose; the values every test expects (imp_val); and the
 * GPT's parameters under Hugging Face GPT-2 names. */
#ifndef ZS_TESTS_IMPORT_FILES_H
#define ZS_TESTS_IMPORT_FILES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/half.h"

/* Value k (a tensor's number), element i: multiples of 1/64 below 2 in
 * magnitude, exact in bf16, fp16 and fp32, so any source dtype gives these bits.
 * tests/scripts/write_hf_gpt2.py computes the same. */
static inline float imp_val(int k, int64_t i) { return (float)((int)((i * 7 + k * 13) % 251) - 125) / 64.0f; }

typedef struct {
  const char *name, *dtype; /* "F32", "BF16", "F16", "F64", "I32" */
  int ndim;
  int64_t shape[4];
  int k;       /* imp_val's tensor number */
  void *data;  /* filled by imp_fill */
  int64_t bytes;
} imp_tensor_t;

static inline int64_t imp_numel(const imp_tensor_t *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}

static inline int imp_esize(const char *dtype) {
  return !strcmp(dtype, "F64") ? 8 : !strcmp(dtype, "F32") || !strcmp(dtype, "I32") ? 4 : 2;
}

/* Makes t->data: imp_val(t->k, i) in t->dtype. */
static inline void imp_fill(imp_tensor_t *t) {
  int64_t n = imp_numel(t);
  t->bytes = n * imp_esize(t->dtype);
  t->data = malloc((size_t)(t->bytes > 0 ? t->bytes : 1));
  for (int64_t i = 0; i < n; i++) {
    float v = imp_val(t->k, i);
    if (!strcmp(t->dtype, "F32")) ((float *)t->data)[i] = v;
    else if (!strcmp(t->dtype, "F64")) ((double *)t->data)[i] = v;
    else if (!strcmp(t->dtype, "I32")) ((int32_t *)t->data)[i] = (int32_t)(v * 64);
    else if (!strcmp(t->dtype, "BF16")) ((uint16_t *)t->data)[i] = zs_f32_to_bf16(v);
    else ((uint16_t *)t->data)[i] = zs_f32_to_f16(v);
  }
}

static inline void imp_free(imp_tensor_t *t, int n) {
  for (int i = 0; i < n; i++) free(t[i].data), t[i].data = NULL;
}

/* The header JSON of tensors laid end to end in order; a new string. */
static inline char *imp_header(const imp_tensor_t *t, int n) {
  size_t cap = 256 + (size_t)n * 256, at = 0;
  char *h = malloc(cap);
  at += (size_t)snprintf(h + at, cap - at, "{\"__metadata__\":{\"format\":\"pt\"}");
  int64_t off = 0;
  for (int i = 0; i < n; i++) {
    at += (size_t)snprintf(h + at, cap - at, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t[i].name, t[i].dtype);
    for (int d = 0; d < t[i].ndim; d++)
      at += (size_t)snprintf(h + at, cap - at, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
    at += (size_t)snprintf(h + at, cap - at, "],\"data_offsets\":[%lld,%lld]}", (long long)off,
                           (long long)(off + t[i].bytes));
    off += t[i].bytes;
  }
  snprintf(h + at, cap - at, "}");
  return h;
}

/* 8-byte length (hlen, or the padded header's when 0), the header padded with
 * spaces to a multiple of 8, then the tensors' data (or `data` when given), the
 * last `cut` bytes left off. 0 on success. */
static inline int imp_write_raw(const char *path, const char *header, uint64_t hlen, const imp_tensor_t *t, int n,
                                const void *data, int64_t ndata, int64_t cut) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t len = strlen(header), padded = (len + 7) / 8 * 8;
  int64_t total = 8 + (int64_t)padded;
  for (int i = 0; data == NULL && i < n; i++) total += t[i].bytes;
  if (data) total += ndata;
  char *all = malloc((size_t)total);
  uint64_t h = hlen ? hlen : padded;
  for (int b = 0; b < 8; b++) all[b] = (char)(h >> (8 * b));
  memcpy(all + 8, header, len);
  memset(all + 8 + len, ' ', padded - len);
  int64_t at = 8 + (int64_t)padded;
  if (data) memcpy(all + at, data, (size_t)ndata);
  for (int i = 0; data == NULL && i < n; i++) memcpy(all + at, t[i].data, (size_t)t[i].bytes), at += t[i].bytes;
  int ok = fwrite(all, 1, (size_t)(total - cut), f) == (size_t)(total - cut);
  free(all);
  return fclose(f) == 0 && ok ? 0 : -1;
}

static inline int imp_write(const char *path, imp_tensor_t *t, int n) {
  for (int i = 0; i < n; i++)
    if (!t[i].data) imp_fill(&t[i]);
  char *h = imp_header(t, n);
  int rc = imp_write_raw(path, h, 0, t, n, NULL, 0, 0);
  free(h);
  return rc;
}

/* An index as Hugging Face writes it: names[i] in shard files[i]. */
static inline int imp_write_index(const char *path, const char *const *names, const char *const *files, int n) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "{\n  \"metadata\": {\n    \"total_size\": 0\n  },\n  \"weight_map\": {\n");
  for (int i = 0; i < n; i++) fprintf(f, "    \"%s\": \"%s\"%s\n", names[i], files[i], i + 1 < n ? "," : "");
  fprintf(f, "  }\n}\n");
  return fclose(f);
}

/* ---- the GPT under Hugging Face GPT-2 names ---------------------------------------- */

/* HF's name of the GPT's parameter `index` (gpt.h's table order: wte, wpe, 12 per
 * block, ln_f), with prefix ("" or "transformer."). */
static inline void imp_hf_gpt2_name(char *buf, size_t n, int index, int layers, const char *prefix) {
  static const char *const blk[12] = {"ln_1.weight",      "ln_1.bias",        "attn.c_attn.weight",
                                      "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
                                      "ln_2.weight",      "ln_2.bias",        "mlp.c_fc.weight",
                                      "mlp.c_fc.bias",    "mlp.c_proj.weight", "mlp.c_proj.bias"};
  if (index < 2) snprintf(buf, n, "%s%s", prefix, index ? "wpe.weight" : "wte.weight");
  else if (index < 2 + 12 * layers) snprintf(buf, n, "%sh.%d.%s", prefix, (index - 2) / 12, blk[(index - 2) % 12]);
  else snprintf(buf, n, "%sln_f.%s", prefix, index == 2 + 12 * layers ? "weight" : "bias");
}

#endif
