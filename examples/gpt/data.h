/* data.h: byte-level text for the GPT: tokens are the bytes of real text (the
 * license texts every Debian machine ships), split 90/10 into train and
 * validation.
 *
 * Batches are a pure function of (seed, step, sequence index): sequence i of the
 * global batch of step s starts at a hashed offset of the training split, so
 * every world size sees the same global batch and only decides which rank takes
 * which sequences. A sequence is T+1 consecutive tokens: inputs are the first T,
 * targets the last T. Validation uses fixed, non-overlapping windows of the
 * validation split (window i starts at i*T). */
#ifndef ZS_EXAMPLES_GPT_DATA_H
#define ZS_EXAMPLES_GPT_DATA_H

#include <stddef.h>
#include <stdint.h>

#define GPT_DATA_DIR "/usr/share/common-licenses"

typedef struct {
  uint8_t *tok;
  int64_t n;       /* tokens in all */
  int64_t n_train; /* [0, n_train) trains, [n_train, n) validates */
  int nfiles;      /* files concatenated */
} gpt_data_t;

/* Concatenates the license texts found in dir (NULL: GPT_DATA_DIR) in a fixed
 * order; missing files are skipped. 0, or -1 with a message in err (none found). */
int gpt_data_load_licenses(gpt_data_t *d, const char *dir, char *err, size_t errlen);
/* Reads one file (any bytes) instead. 0 or -1 with a message. */
int gpt_data_load_file(gpt_data_t *d, const char *path, char *err, size_t errlen);
/* Takes a copy of n bytes (tests). 0 or -1. */
int gpt_data_from_bytes(gpt_data_t *d, const uint8_t *bytes, int64_t n);
void gpt_data_free(gpt_data_t *d);

/* 0 if both splits can hold a sequence of T+1 tokens, else -1 with a message. */
int gpt_data_check(const gpt_data_t *d, int T, char *err, size_t errlen);
/* Start offset (in the training split) of sequence `index` of step `step`'s batch. */
int64_t gpt_data_train_offset(const gpt_data_t *d, uint64_t seed, int64_t step, int64_t index, int T);
/* Sequences [first, first+count) of step `step`'s global batch into inputs and
 * targets ([count, T] each). */
void gpt_data_train_batch(const gpt_data_t *d, uint64_t seed, int64_t step, int first, int count,
                          int T, int *inputs, int *targets);
/* Number of validation windows of T+1 tokens. */
int gpt_data_val_windows(const gpt_data_t *d, int T);
/* Validation windows [first, first+count). */
void gpt_data_val_batch(const gpt_data_t *d, int first, int count, int T, int *inputs, int *targets);

#endif
