/* The start and the rank-count skip of a multi-rank test main on cpu devices:
 * the cpu device, the MPI world comm over it, this rank and the world size, the
 * harness's rank prefix. A test on a GPU or a comm chosen by environment opens
 * its world through engine_world.h instead. */
#ifndef ZS_TESTS_HARNESS_WORLD_H
#define ZS_TESTS_HARNESS_WORLD_H

#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"

/* Opens the cpu device and the MPI world comm over it and sets zs_t_rank; rank
 * and size (may be NULL) get this rank and the world size. A test that cannot
 * start fails: "setup failed: <the library's last error>" and exit 1. */
static inline void zs_t_world_open_cpu(zs_device_t **dev, zs_comm_t **world, int *rank, int *size) {
  if (zs_device_create_cpu(dev) != ZS_OK || zs_comm_create_mpi_world(world, *dev) != ZS_OK) {
    fprintf(stderr, "setup failed: %s\n", zs_last_error());
    exit(1);
  }
  zs_t_rank = zs_comm_rank(*world);
  if (rank) *rank = zs_t_rank;
  if (size) *size = zs_comm_size(*world);
}

/* Unless ok (the rank count the test needs), destroys the world comm (the last
 * comm: it finalizes MPI) and the device, and skips the binary (exit 77) saying why. */
static inline void zs_t_world_skip_unless(int ok, zs_device_t *dev, zs_comm_t *world, const char *why) {
  if (ok) return;
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  ZS_SKIP(why);
}

#endif
