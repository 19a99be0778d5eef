/* gpt_tmpdir.h: a scratch directory every rank of the GPT trainer's tests sees
 * (rank 0 makes it, the others learn its name), removed after every rank is
 * done with it. Include after harness.h. */
#ifndef ZS_TESTS_GPT_TMPDIR_H
#define ZS_TESTS_GPT_TMPDIR_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "zeroshard/comm.h"

/* A directory made by rank 0 and known to every rank (dir: 128 bytes). */
static inline void gpt_tmpdir(zs_comm_t *world, const char *pattern, char *dir) {
  memset(dir, 0, 128);
  if (zs_comm_rank(world) == 0) {
    snprintf(dir, 128, "%s", pattern);
    if (!mkdtemp(dir)) dir[0] = 0;
  }
  assert_ok(zs_comm_broadcast(world, dir, dir, 128, ZS_UINT8, 0, NULL));
  assert_true(dir[0] != 0);
}

/* Removes it, after every rank is done with it. */
static inline void gpt_tmpdir_remove(zs_comm_t *world, const char *dir) {
  zs_comm_barrier(world, NULL);
  if (zs_comm_rank(world) == 0) {
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  }
}

#endif
