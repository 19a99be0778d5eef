/* gpt_world.h: the world of the GPT trainer's tests (tests/test_gpt_*.c): the
 * cpu device, MPI_COMM_WORLD's mpi comm, this rank and the world's size, the
 * harness's rank prefix, and each rank's share of the machine's cores for its
 * OpenMP team (gpt_threads_auto: the ranks share the cores; a team each of all
 * of them would spin). Included once, by the test's main file. */
#ifndef ZS_TESTS_GPT_WORLD_H
#define ZS_TESTS_GPT_WORLD_H

#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "trainer.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"

static zs_device_t *g_dev;
static zs_comm_t *g_world;
static int g_rank, g_size;

/* Opens the world, or exits 1 saying why. */
static inline void gpt_world_open(void) {
  if (zs_device_create_cpu(&g_dev) != ZS_OK || zs_comm_create_mpi_world(&g_world, g_dev) != ZS_OK) {
    fprintf(stderr, "cannot open the world: %s\n", zs_last_error());
    exit(1);
  }
  g_rank = zs_comm_rank(g_world), g_size = zs_comm_size(g_world);
  zs_t_rank = g_rank;
  gpt_threads_auto(g_size);
}

/* The harness's verdict (zs_test_finish), then the world closed. */
static inline int gpt_world_close(void) {
  int rc = zs_test_finish();
  zs_comm_destroy(g_world);
  zs_device_destroy(g_dev);
  return rc;
}

#endif
