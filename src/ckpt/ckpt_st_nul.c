/* Checkpoints: NUL characters in the JSON of a safetensors header or a Hugging
 * Face index, found before the JSON is parsed.
 *
 * cJSON (1.7) turns a "\u0000" escape into a 0 byte inside the string it
 * returns, keeps a raw 0 byte inside a string, and skips a raw 0 byte between
 * tokens as white space. A name is a C string from there on, so
 * "blk.0\u0000junk" would be read as tensor "blk.0" (and a shard file name cut
 * the same way would open another file). The Rust safetensors parser refuses
 * raw control bytes; zeroshard refuses every NUL, escaped or raw, naming the
 * string it is in and its byte offset. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ckpt/ckpt_impl.h"

#define NUL_MAX_DEPTH 64 /* keys are told from values this deep; deeper strings count as values */

/* One string of the text: [s0, s1) between its quotes (s1 = n if it is not closed). */
static void span_set(size_t *sp, size_t s0, size_t s1) { sp[0] = s0, sp[1] = s1; }

int zs__json_find_nul(const char *t, size_t n, json_nul_t *o) {
  char kind[NUL_MAX_DEPTH];     /* '{' or '[' per open container */
  int want_key[NUL_MAX_DEPTH];  /* an object's next string is a key */
  size_t key[3][2] = {{0, 0}};  /* the last key seen at depth 1 and at depth 2 */
  int depth = 0;
  memset(o, 0, sizeof *o);
  for (size_t i = 0; i < n; i++) {
    const unsigned char c = (unsigned char)t[i];
    if (c == 0) { /* between tokens */
      o->at = i, o->depth = depth;
      span_set(o->k1, key[1][0], key[1][1]);
      span_set(o->k2, key[2][0], key[2][1]);
      return 1;
    }
    if (c == '"') {
      const int in = depth > 0 && depth <= NUL_MAX_DEPTH;
      const int is_key = in && kind[depth - 1] == '{' && want_key[depth - 1];
      size_t j = i + 1, nul = SIZE_MAX;
      int escaped = 0;
      while (j < n && t[j] != '"') {
        if (t[j] == 0 && nul == SIZE_MAX) nul = j;
        if (t[j] == '\\' && j + 1 < n) {
          if (t[j + 1] == 0 && nul == SIZE_MAX) nul = j + 1;
          if (t[j + 1] == 'u' && j + 6 <= n && !memcmp(t + j + 2, "0000", 4) && nul == SIZE_MAX) nul = j, escaped = 1;
          j += 2;
          continue;
        }
        j++;
      }
      if (j > n) j = n;
      if (is_key && depth <= 2) {
        span_set(key[depth], i + 1, j);
        if (depth == 1) span_set(key[2], 0, 0);
      }
      if (nul != SIZE_MAX) {
        o->at = nul, o->in_string = 1, o->escaped = escaped, o->is_key = is_key, o->depth = depth;
        span_set(o->s, i + 1, j);
        span_set(o->k1, key[1][0], key[1][1]);
        span_set(o->k2, key[2][0], key[2][1]);
        return 1;
      }
      i = j; /* the closing quote */
    } else if (c == '{' || c == '[') {
      if (depth < NUL_MAX_DEPTH) kind[depth] = (char)c, want_key[depth] = c == '{';
      depth++;
    } else if (c == '}' || c == ']') {
      if (depth > 0) depth--;
    } else if (c == ':' && depth > 0 && depth <= NUL_MAX_DEPTH) {
      want_key[depth - 1] = 0;
    } else if (c == ',' && depth > 0 && depth <= NUL_MAX_DEPTH && kind[depth - 1] == '{') {
      want_key[depth - 1] = 1;
    }
  }
  return 0;
}

void zs__json_printable(char *out, size_t cap, const char *t, const size_t *span) {
  size_t at = 0, i = span[0];
  const size_t max = 72; /* characters of the string shown */
  if (cap) out[0] = 0;
  for (; i < span[1] && at + 8 < cap && i - span[0] < max; i++) {
    unsigned char c = (unsigned char)t[i];
    if (c >= 0x20 && c < 0x7f) out[at++] = (char)c;
    else at += (size_t)snprintf(out + at, cap - at, "\\x%02x", c);
  }
  if (i < span[1] && at + 4 < cap) memcpy(out + at, "...", 3), at += 3;
  if (cap) out[at < cap ? at : cap - 1] = 0;
}
