/* zs-ckpt: a checkpoint directory without the training job.
 *
 *   zs-ckpt verify DIR                 what a load checks (the manifest's checksum
 *                                      and fields, every rank file's header and
 *                                      blocks, every tensor complete once);
 *                                      prints what the checkpoint holds
 *   zs-ckpt export DIR OUT.safetensors the fp32 master weights for Python tools,
 *                                      whole tensors from any layout
 *   zs-ckpt export --hf OUTDIR DIR [--n-head H] [--max-shard-bytes N]
 *                                      a Hugging Face GPT-2 folder (config.json,
 *                                      model.safetensors or shards with an index)
 *   zs-ckpt convert DIR OUTDIR         the layout-free form: one rank file of
 *                                      whole tensors (master, m, v), loadable
 *                                      into any layout
 *
 * Exit: 0 ok, 1 the checkpoint or the file system failed (the status name and
 * the message say which file, block or tensor: ZS_ERR_CORRUPT, ZS_ERR_UNSUPPORTED
 * for another format version, ZS_ERR_IO, ZS_ERR_MISMATCH), 2 bad usage, or
 * arguments the library refuses (ZS_ERR_INVALID: --n-head 3 for 64 channels, an
 * output directory that holds a checkpoint). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt_impl.h" /* defines: manifest_t, zs__ck_parse_manifest */
#include "zeroshard/checkpoint.h"
#include "zeroshard/log.h"
#include "zeroshard/status.h"

static int usage(void) {
  fprintf(stderr, "usage: zs-ckpt verify DIR\n       zs-ckpt export DIR OUT.safetensors\n"
                  "       zs-ckpt export --hf OUTDIR DIR [--n-head H] [--max-shard-bytes N]\n"
                  "       zs-ckpt convert DIR OUTDIR\n"
                  "verify reads every block; export needs only the master weights' blocks.\n"
                  "Exit: 0 ok, 1 the checkpoint or the file system failed (the status and why), 2 bad usage\n"
                  "or arguments refused (ZS_ERR_INVALID)\n");
  return 2;
}

static int done(zs_status_t st, const char *what, const char *from) {
  if (st != ZS_OK) {
    fprintf(stderr, "zs-ckpt: %s: %s\n", zs_status_name(st), zs_last_error());
    return st == ZS_ERR_INVALID ? 2 : 1;
  }
  printf("%s: written from %s\n", what, from);
  return 0;
}

/* export --hf OUTDIR DIR [--n-head H] [--max-shard-bytes N] */
static int export_hf(int argc, char **argv) {
  if (argc < 5 || (argc - 5) % 2) return usage();
  long heads = 0, mb = 0; /* mb: the shard size in bytes */
  for (int i = 5; i < argc; i += 2) {
    char *end;
    long v = strtol(argv[i + 1], &end, 10);
    if (*end || v <= 0 || v > (1L << 50)) return usage();
    if (!strcmp(argv[i], "--n-head")) heads = v;
    else if (!strcmp(argv[i], "--max-shard-bytes")) mb = v;
    else return usage();
  }
  return done(zs_checkpoint_export_hf_gpt2(argv[4], argv[3], (int)heads, (int64_t)mb), argv[3], argv[4]);
}

/* The model-parallel parts of a save (DIR/mp0, mp1, ...), 0 for a plain one. */
static int mp_parts(const char *dir) {
  char p[4096];
  struct stat sb;
  int n = 0;
  while (n < 1 << 20 && snprintf(p, sizeof p, "%s/mp%d/manifest.json", dir, n) < (int)sizeof p && stat(p, &sb) == 0) n++;
  return n;
}

int main(int argc, char **argv) {
  if (argc < 3) return usage();
  zs_log_set_level(ZS_LOG_NONE); /* the message is printed below, once */
  if (!strcmp(argv[1], "verify") && argc == 3) {
    zs_checkpoint_info_t info;
    zs_status_t st = zs_checkpoint_verify(argv[2], &info);
    if (st != ZS_OK) {
      fprintf(stderr, "zs-ckpt: %s: %s\n", zs_status_name(st), zs_last_error());
      return 1;
    }
    printf("%s: ok: step %lld, saved by %d rank(s), %d tensors, %lld parameters, optimizer %s, %lld bytes",
           argv[2], (long long)info.step, info.world, info.ntensors, (long long)info.params, info.optimizer,
           (long long)info.bytes);
    const int parts = mp_parts(argv[2]);
    /* the optimizer states' encoding, from the (first part's) manifest, verified above */
    char mdir[4096], err[ZS_ERRBUF];
    manifest_t m;
    snprintf(mdir, sizeof mdir, parts ? "%s/mp0" : "%s", argv[2]);
    if (zs__ck_parse_manifest(mdir, &m, err, "zs-ckpt") == ZS_OK) {
      printf(", states %s", m.state_dtype);
      if (m.state_block) printf(" (blocks of %d)", m.state_block);
      zs__ck_manifest_free(&m);
    }
    if (parts) printf(" (in %d model-parallel parts: tensors and parameters as the parts hold them)", parts);
    printf("\n");
    return 0;
  }
  if (!strcmp(argv[1], "export") && argc >= 3 && !strcmp(argv[2], "--hf")) return export_hf(argc, argv);
  if (!strcmp(argv[1], "export") && argc == 4) return done(zs_checkpoint_to_safetensors(argv[2], argv[3]), argv[3], argv[2]);
  if (!strcmp(argv[1], "convert") && argc == 4) return done(zs_checkpoint_convert(argv[2], argv[3]), argv[3], argv[2]);
  return usage();
}
