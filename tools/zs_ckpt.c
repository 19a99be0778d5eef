/* zs-ckpt: a checkpoint directory without the training job.
 *
 *   zs-ckpt verify DIR                 what a load checks (the manifest's checksum
 *                                      and fields, every rank file's header and
 *                                      blocks, every tensor complete once);
 *                                      prints what the checkpoint holds
 *   zs-ckpt export DIR OUT.safetensors the fp32 master weights for Python tools
 *
 * Exit: 0 ok, 1 the checkpoint or the file system failed (the status name and
 * the message say which file, block or tensor: ZS_ERR_CORRUPT, ZS_ERR_UNSUPPORTED
 * for another format version, ZS_ERR_IO), 2 bad usage. */
#include <stdio.h>
#include <string.h>

#include "zeroshard/checkpoint.h"
#include "zeroshard/log.h"
#include "zeroshard/status.h"

static int usage(void) {
  fprintf(stderr, "usage: zs-ckpt verify DIR\n       zs-ckpt export DIR OUT.safetensors\n");
  return 2;
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
    printf("%s: ok: step %lld, saved by %d rank(s), %d tensors, %lld parameters, optimizer %s, %lld bytes\n",
           argv[2], (long long)info.step, info.world, info.ntensors, (long long)info.params, info.optimizer,
           (long long)info.bytes);
    return 0;
  }
  if (!strcmp(argv[1], "export") && argc == 4) {
    zs_status_t st = zs_checkpoint_to_safetensors(argv[2], argv[3]);
    if (st != ZS_OK) {
      fprintf(stderr, "zs-ckpt: %s: %s\n", zs_status_name(st), zs_last_error());
      return 1;
    }
    printf("%s: written from %s\n", argv[3], argv[2]);
    return 0;
  }
  return usage();
}
