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
 * records nothing, and at stage 2 mpi comms take no part (issue 32 item 1):
 * their operations hold no kernels. */
#include <string.h>

#include "zero/engine_impl.h"

static int several_comms(const zs_engine_t *zs) {
  return zs->rep_comm || zs->mp_comm || zs->hpz_comm || zs->qg_intra || zs->qg_inter || zs->shard_comm != zs->comm;
}

/* Only device kernels can hold each other up: an mpi comm's operations run on
 * its own progress thread (the stream merely waits for a flag), so at stage 2
 * they are neither ordered nor order the others, and a replica all-reduce
 * overlaps the shard group's reduce-scatters (phases.c, rep_all_reduce).
 * Measured on 2 emulated hosts x 2 ranks at 1 Gbit/s (bench/exposed_link.py,
 * zs-membench 8 x 1M fp32, 400 ms of emulated compute): stage 2's exposed
 * link time 0.254 -> 0.123 s. Stage 3 keeps the order: its gathers and
 * reduce-scatters inside the node ran 15-25x slower beside a replica
 * all-reduce (two threads in Open MPI at once), and exposed time rose 0.115 ->
 * 0.175 s, where the replica all-reduces already ran back to back. But on
 * the GPT (real compute, 2 hosts x 2 ranks, bench/exposed_link.py) overlap at
 * stage 3 stepped 0.437 -> 0.274 s at 1 Gbit/s and 0.242 -> 0.316 s at 40:
 * which wins depends on the link and the spare cores, so replica_overlap
 * (zs_config_t) lets the user say; auto keeps stage 2 only. */
int zs__eng_rep_overlaps(const zs_engine_t *zs) {
  if (!zs->rep_comm || zs->cfg.stage < 2 || strcmp(zs_comm_backend(zs->rep_comm), "mpi") != 0) return 0;
  switch (zs->cfg.replica_overlap) {
    case ZS_OVERLAP_ON: return 1;
    case ZS_OVERLAP_OFF: return 0;
    default: return zs->cfg.stage == 2;
  }
}

static int kernels(const zs_engine_t *zs, const zs_comm_t *comm) {
  return !zs__eng_rep_overlaps(zs) || strcmp(zs_comm_backend(comm), "mpi") != 0;
}

zs_status_t zs__eng_comm_order(zs_engine_t *zs, zs_comm_t *comm, zs_stream_t *s) {
  if (!several_comms(zs) || !kernels(zs, comm) || !zs->ord_comm || zs->ord_comm == comm || zs->ord_stream == s)
    return ZS_OK;
  return zs_stream_wait_event(zs->dev, s, zs->ev_order);
}

zs_status_t zs__eng_comm_mark(zs_engine_t *zs, zs_comm_t *comm, zs_stream_t *s) {
  if (!several_comms(zs) || !kernels(zs, comm)) return ZS_OK;
  zs_status_t st = zs_event_record(zs->dev, zs->ev_order, s);
  if (st != ZS_OK) return st;
  zs->ord_comm = comm;
  zs->ord_stream = s;
  return ZS_OK;
}
