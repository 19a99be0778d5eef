/* The order of the engine's communicators on the device (issue 30 item 5).
 *
 * An engine may issue collectives on several communicators: hybrid sharding's
 * shard group and replica group (and the world at stage 0), and the norm's
 * model-parallel group. Each communicator runs its own operations in issue
 * order, whatever the streams (nccl.c), but two communicators' operations on two
 * streams may run at once on a GPU, and NCCL warns that their kernels may then
 * block each other: CUDA promises no forward progress between streams, so a
 * rank whose replica all-reduce holds the SMs while its peer's waits behind a
 * shard all-gather can hang both. The engine therefore orders them: an
 * operation on another communicator and another stream than the previous one
 * waits (zs_stream_wait_event) for that one. Every rank issues the same
 * sequence from one thread, so the order is the same everywhere and adds no
 * deadlock of its own. What it costs: a replica all-reduce and the next unit's
 * prefetched all-gather no longer overlap. An engine with one communicator
 * records nothing, and mpi comms take no part (issue 32 item 1): their
 * operations hold no kernels. */
#include <string.h>

#include "zero/engine_impl.h"

static int several_comms(const zs_engine_t *zs) { return zs->rep_comm || zs->mp_comm || zs->shard_comm != zs->comm; }

/* Only device kernels can hold each other up: an mpi comm's operations run on
 * its own progress thread (the stream merely waits for a flag), so they are
 * neither ordered nor order the others, and a replica all-reduce overlaps the
 * shard group's work (phases.c, rep_all_reduce). */
static int kernels(const zs_comm_t *comm) { return strcmp(zs_comm_backend(comm), "mpi") != 0; }

zs_status_t zs__eng_comm_order(zs_engine_t *zs, zs_comm_t *comm, zs_stream_t *s) {
  if (!several_comms(zs) || !kernels(comm) || !zs->ord_comm || zs->ord_comm == comm || zs->ord_stream == s)
    return ZS_OK;
  return zs_stream_wait_event(zs->dev, s, zs->ev_order);
}

zs_status_t zs__eng_comm_mark(zs_engine_t *zs, zs_comm_t *comm, zs_stream_t *s) {
  if (!several_comms(zs) || !kernels(comm)) return ZS_OK;
  zs_status_t st = zs_event_record(zs->dev, zs->ev_order, s);
  if (st != ZS_OK) return st;
  zs->ord_comm = comm;
  zs->ord_stream = s;
  return ZS_OK;
}
