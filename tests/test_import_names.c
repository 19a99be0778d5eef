/* zs_import_safetensors and NUL characters (issue 25.7), on 1-2 cpu ranks.
 * cJSON keeps a "\u0000" escape as a 0 byte in the string it returns and takes
 * a raw 0 byte as part of a string (or as white space between tokens), so a
 * name was cut at its NUL: "blk.0.W\u0000junk" filled parameter blk.0.W, a
 * dtype "F32\u0000x" read as F32, an index's entry and shard file were cut the
 * same way. Each file below is refused with ZS_ERR_CORRUPT on every rank, the
 * message naming the string (as written, printable) and the NUL's byte offset,
 * the engine's values and step unchanged; the same file without the NUL loads. */
#include "import_world.h"

/* A file with header h (from imp_header's good one), rank 0 writing; at_mark >= 0:
 * the byte of h at that offset becomes a raw 0 in the file. */
static void write_with(const char *path, const char *h, const imp_tensor_t *t, int n, long at_mark) {
  int rc = 0;
  if (rank == 0) {
    rc = imp_write_raw(path, h, 0, t, n, NULL, 0, 0);
    FILE *f = rc == 0 && at_mark >= 0 ? fopen(path, "r+b") : NULL;
    if (f) rc = fseek(f, 8 + at_mark, SEEK_SET) || fputc(0, f) == EOF, rc |= fclose(f);
    else if (at_mark >= 0) rc = -1;
  }
  share(path, rc);
}

/* The header byte where `what` starts in h, and the file byte after the 8-byte length. */
static void where(char *buf, size_t n, const char *h, const char *what, int off) {
  long at = (long)(strstr(h, what) - h) + off;
  snprintf(buf, n, "at header byte %ld, file byte %ld)", at, at + 8);
}

static void test_header(void) {
  run_t r;
  zs_config_t c = cfg(2, ZS_FP32, 1);
  assert_ok(open_run(&r, world, &c, NBLK));
  imp_tensor_t t[24];
  int n = tiny_tensors(t, "F32");
  for (int i = 0; i < n; i++) imp_fill(&t[i]);
  char *good = imp_header(t, n), p[512], h[4096], msg[512], at[96];

  /* an escaped NUL in a tensor name, where the cut name is a parameter */
  subst(h, sizeof h, good, "\"blk.0.W\"", "\"blk.0.W\\u0000junk\"");
  path_of(p, sizeof p, "escaped-name.safetensors");
  write_with(p, h, t, n, -1);
  where(at, sizeof at, h, "\\u0000", 0);
  snprintf(msg, sizeof msg, "the tensor name 'blk.0.W\\u0000junk' holds a NUL character (the escape \\u0000 %s", at);
  expect_import_fails(&r, p, NULL, ZS_ERR_CORRUPT, msg);
  /* a raw 0 byte in a tensor name */
  subst(h, sizeof h, good, "\"blk.1.b\"", "\"blk.1.b#x\"");
  path_of(p, sizeof p, "raw-name.safetensors");
  write_with(p, h, t, n, (long)(strstr(h, "#x") - h));
  where(at, sizeof at, h, "#x", 0);
  snprintf(msg, sizeof msg, "the tensor name 'blk.1.b\\x00x' holds a NUL character (a raw 0 byte %s", at);
  expect_import_fails(&r, p, NULL, ZS_ERR_CORRUPT, msg);
  /* a dtype cut to F32 */
  subst(h, sizeof h, good, "\"F32\"", "\"F32\\u0000F16\"");
  path_of(p, sizeof p, "dtype.safetensors");
  write_with(p, h, t, n, -1);
  where(at, sizeof at, h, "\\u0000", 0);
  snprintf(msg, sizeof msg, "the dtype 'F32\\u0000F16' of tensor 'embed.W' holds a NUL character (the escape \\u0000 %s",
           at);
  expect_import_fails(&r, p, NULL, ZS_ERR_CORRUPT, msg);
  /* __metadata__: a value and a key */
  subst(h, sizeof h, good, "\"pt\"", "\"pt\\u0000np\"");
  path_of(p, sizeof p, "meta-value.safetensors");
  write_with(p, h, t, n, -1);
  expect_import_fails(&r, p, NULL, ZS_ERR_CORRUPT, "the __metadata__ value 'pt\\u0000np' of key 'format' holds a NUL");
  subst(h, sizeof h, good, "\"format\"", "\"form\\u0000at\"");
  path_of(p, sizeof p, "meta-key.safetensors");
  write_with(p, h, t, n, -1);
  expect_import_fails(&r, p, NULL, ZS_ERR_CORRUPT, "the __metadata__ key 'form\\u0000at' holds a NUL");
  /* a raw 0 byte between tokens (cJSON skips it as white space) */
  subst(h, sizeof h, good, ",\"embed.b\"", ",#\"embed.b\"");
  path_of(p, sizeof p, "raw-between.safetensors");
  write_with(p, h, t, n, (long)(strstr(h, "#") - h));
  where(at, sizeof at, h, "#", 0);
  snprintf(msg, sizeof msg, "a raw 0 byte stands between the JSON tokens %s", at);
  snprintf(msg + strlen(msg) - 1, 64, " (after tensor 'embed.W'): not JSON");
  expect_import_fails(&r, p, NULL, ZS_ERR_CORRUPT, msg);
  /* a backslash-escaped backslash before "u0000" is no NUL: the name is
   * 'blk.0.W\\u0000' and the import refuses it as a name of no parameter */
  subst(h, sizeof h, good, "\"blk.0.W\"", "\"blk.0.W\\\\u0000\"");
  path_of(p, sizeof p, "backslash.safetensors");
  write_with(p, h, t, n, -1);
  expect_import_fails(&r, p, NULL, ZS_ERR_MISMATCH, NULL);
  /* the file without a NUL loads */
  path_of(p, sizeof p, "good.safetensors");
  write_with(p, good, t, n, -1);
  expect_ok(zs_import_safetensors(r.zs, p, NULL));
  expect_int_eq(count_not_file(&r, NULL, -1), 0);
  free(good);
  imp_free(t, n);
  close_run(&r);
}

/* An index whose entry or shard file holds a NUL: the cut entry names a tensor
 * the shard holds, the cut shard file the right file. */
static void test_index(void) {
  run_t r;
  zs_config_t c = cfg(1, ZS_FP32, 0);
  assert_ok(open_run(&r, world, &c, NBLK));
  imp_tensor_t t[24];
  int n = tiny_tensors(t, "F32");
  const char *tn[24], *fs[24];
  char d[512], q[600];
  tiny_shards(d, sizeof d, q, sizeof q, "nul-index", t, n, tn, fs, 1);
  tn[4] = "blk.0.g\\u0000junk";
  share(q, rank == 0 ? imp_write_index(q, tn, fs, n) : 0);
  expect_import_fails(&r, d, NULL, ZS_ERR_CORRUPT, "the tensor name 'blk.0.g\\u0000junk' in weight_map holds a NUL "
                      "character (the escape \\u0000 at byte ");
  tn[4] = t[4].name;
  fs[5] = "b.safetensors\\u0000.bak";
  share(q, rank == 0 ? imp_write_index(q, tn, fs, n) : 0);
  expect_import_fails(&r, d, NULL, ZS_ERR_CORRUPT, "the shard file 'b.safetensors\\u0000.bak' of tensor 'blk.1.W' "
                      "holds a NUL");
  fs[5] = "b.safetensors"; /* as it should be: it loads */
  share(q, rank == 0 ? imp_write_index(q, tn, fs, n) : 0);
  expect_ok(zs_import_safetensors(r.zs, d, NULL));
  expect_int_eq(count_not_file(&r, NULL, -1), 0);
  imp_free(t, n);
  close_run(&r);
}

int main(void) {
  ckpt_world_open();
  zs_t_rank = rank;
  zs_test_run(test_header);
  zs_test_run(test_index);
  return ckpt_world_close();
}
