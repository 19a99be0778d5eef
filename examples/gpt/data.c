/* data.c: loading the byte corpus and cutting deterministic batches from it. */
#include "data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Fixed order, so the corpus is the same wherever the same files exist. Aliases
 * (GPL -> GPL-3, LGPL -> LGPL-3, GFDL -> GFDL-1.3) are left out. */
static const char *const k_files[] = {
    "GPL-3", "Apache-2.0", "GPL-2", "LGPL-2.1", "LGPL-3", "LGPL-2", "GPL-1", "MPL-2.0",
    "MPL-1.1", "GFDL-1.3", "GFDL-1.2", "Artistic", "CC0-1.0", "BSD",
};

static int append_file(gpt_data_t *d, const char *path, int64_t *cap) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  char buf[1 << 16];
  size_t r;
  while ((r = fread(buf, 1, sizeof buf, f)) > 0) {
    if (d->n + (int64_t)r > *cap) {
      int64_t nc = *cap ? *cap * 2 : 1 << 20;
      while (nc < d->n + (int64_t)r) nc *= 2;
      uint8_t *t = realloc(d->tok, (size_t)nc);
      if (!t) {
        fclose(f);
        return -2;
      }
      d->tok = t;
      *cap = nc;
    }
    memcpy(d->tok + d->n, buf, r);
    d->n += (int64_t)r;
  }
  fclose(f);
  return 0;
}

static void split(gpt_data_t *d) { d->n_train = d->n * 9 / 10; }

int gpt_data_load_licenses(gpt_data_t *d, const char *dir, char *err, size_t errlen) {
  memset(d, 0, sizeof *d);
  if (!dir) dir = GPT_DATA_DIR;
  int64_t cap = 0;
  for (size_t i = 0; i < sizeof k_files / sizeof k_files[0]; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, k_files[i]);
    int rc = append_file(d, path, &cap);
    if (rc == -2) {
      snprintf(err, errlen, "out of memory reading %s", path);
      gpt_data_free(d);
      return -1;
    }
    if (rc == 0) d->nfiles++;
  }
  if (d->nfiles == 0 || d->n == 0) {
    snprintf(err, errlen, "no license texts found in %s (expected files such as GPL-3 and Apache-2.0; "
             "install base-files or pass --data FILE)", dir);
    gpt_data_free(d);
    return -1;
  }
  split(d);
  return 0;
}

int gpt_data_load_file(gpt_data_t *d, const char *path, char *err, size_t errlen) {
  memset(d, 0, sizeof *d);
  int64_t cap = 0;
  int rc = append_file(d, path, &cap);
  if (rc != 0 || d->n == 0) {
    snprintf(err, errlen, "cannot read %s: %s", path, rc == -2 ? "out of memory" : d->n == 0 && rc == 0 ? "empty file" : strerror(errno));
    gpt_data_free(d);
    return -1;
  }
  d->nfiles = 1;
  split(d);
  return 0;
}

int gpt_data_from_bytes(gpt_data_t *d, const uint8_t *bytes, int64_t n) {
  memset(d, 0, sizeof *d);
  d->tok = malloc((size_t)(n > 0 ? n : 1));
  if (!d->tok) return -1;
  memcpy(d->tok, bytes, (size_t)n);
  d->n = n;
  d->nfiles = 1;
  split(d);
  return 0;
}

void gpt_data_free(gpt_data_t *d) {
  free(d->tok);
  memset(d, 0, sizeof *d);
}

int gpt_data_check(const gpt_data_t *d, int T, char *err, size_t errlen) {
  if (d->n_train < (int64_t)T + 1 || d->n - d->n_train < (int64_t)T + 1) {
    snprintf(err, errlen, "the corpus has %lld tokens (%lld train, %lld validation): too few for --seq %d",
             (long long)d->n, (long long)d->n_train, (long long)(d->n - d->n_train), T);
    return -1;
  }
  return 0;
}

static uint64_t mix64(uint64_t z) { /* splitmix64's finaliser */
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int64_t gpt_data_train_offset(const gpt_data_t *d, uint64_t seed, int64_t step, int64_t index, int T) {
  uint64_t h = mix64(mix64(mix64(seed ^ 0x6461746164617461ull) ^ (uint64_t)step) ^ (uint64_t)index);
  uint64_t span = (uint64_t)(d->n_train - T); /* starts 0..n_train-T-1 keep T+1 tokens inside */
  return (int64_t)(h % span);
}

static void cut(const uint8_t *src, int T, int *inputs, int *targets) {
  for (int t = 0; t < T; t++) {
    inputs[t] = src[t];
    targets[t] = src[t + 1];
  }
}

void gpt_data_train_batch(const gpt_data_t *d, uint64_t seed, int64_t step, int first, int count,
                          int T, int *inputs, int *targets) {
  for (int i = 0; i < count; i++) {
    int64_t off = gpt_data_train_offset(d, seed, step, first + i, T);
    cut(d->tok + off, T, inputs + (int64_t)i * T, targets + (int64_t)i * T);
  }
}

int gpt_data_val_windows(const gpt_data_t *d, int T) {
  int64_t w = (d->n - d->n_train - 1) / T;
  return w > 0 ? (int)w : 0;
}

void gpt_data_val_batch(const gpt_data_t *d, int first, int count, int T, int *inputs, int *targets) {
  for (int i = 0; i < count; i++)
    cut(d->tok + d->n_train + (int64_t)(first + i) * T, T, inputs + (int64_t)i * T,
        targets + (int64_t)i * T);
}
