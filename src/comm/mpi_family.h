/* Internal: a comm family's error channel (mpi_family.c), shared by the mpi
 * and nccl backends.
 *
 * A family is a comm made from an MPI communicator (zs_comm_create_mpi_world,
 * zs_comm_create_mpi, zs_comm_create_nccl_mpi) and every comm split from it,
 * on every rank. A rank that fails while others may be waiting for it tells
 * them through a channel of its own: a duplicate of the root's communicator
 * that carries nothing but notices (a fixed 512-byte message, eager on every
 * transport), with one receive from any rank always posted. The backends' own
 * waits poll it (zs__family_poll: the mpi progress thread while it polls an op
 * and before each op, the nccl watchdog while an op is unfinished, and
 * zs_comm_async_error), so a notice ends the ops it concerns within a poll of
 * its arrival, instead of their timeout.
 *
 * Two kinds of notice:
 *  - the whole family (zs__family_revoke, for zs_comm_revoke): every comm of
 *    the family breaks, on every rank;
 *  - one comm (zs__family_tell: an op of it failed on this rank by itself, a
 *    timeout or a backend error): sent to every rank of the family too (a
 *    sender need not know who holds the comm), and only the comms with its id
 *    break. The id is the same on every rank of a comm: the root's is fixed,
 *    a split child's hashes its parent's, the parent's count of splits so far
 *    (the same everywhere: splits are collective) and the child's color.
 * A receiving comm breaks with ZS_ERR_PEER (ZS_ERR_TIMEOUT when the sender's
 * failure was a timeout: the comm as a whole timed out, and callers that treat
 * timeouts alike keep doing so), and a message naming the sender (its rank in
 * MPI_COMM_WORLD and in the receiving comm) and its reason.
 *
 * Locking: the family's mutex guards its members, the channel's requests and
 * the `told` / `heard` flags; notices are handed to a member's on_notice with
 * it held, so on_notice may take the backend's own locks but no caller may hold
 * a backend lock while it calls into the family. Pollers only try-lock. */
#ifndef ZS_COMM_MPI_FAMILY_H
#define ZS_COMM_MPI_FAMILY_H

#include <mpi.h>
#include <stdint.h>

#include "zeroshard/status.h"

typedef struct zs__family zs__family_t;

/* One comm's place in its family, embedded in the backend's context. */
typedef struct zs__fam_member {
  struct zs__fam_member *next; /* the family's list (its mutex) */
  zs__family_t *fam;           /* NULL: the comm has no channel (a nccl comm not made from MPI) */
  uint64_t id;                 /* the comm's, the same on each of its ranks */
  uint32_t nsplit;             /* splits made from this comm so far (the caller's thread) */
  int rank, size;              /* in the comm */
  int *fam_rank;               /* [size]: each rank's rank in the family's root; NULL: unknown (owned) */
  int told;                    /* this comm's ranks were told of a failure: this rank told them (its op's
                                  timeout or error), or another's notice for this comm came (the mutex) */
  /* Breaks the comm with st and msg (a notice, or this rank's revoke): any
   * thread, the family's mutex held. */
  void (*on_notice)(void *ctx, zs_status_t st, const char *msg);
  void *ctx;
} zs__fam_member_t;

/* The root comm's id. */
#define ZS__FAMILY_ROOT_ID UINT64_C(0x7a73666d6c790001)

/* A channel over `comm` (duplicated with MPI_Comm_idup, polled against
 * ZS_COMM_TIMEOUT_S: collective over comm) with no members yet. `fn` names the
 * caller in messages. On failure nothing is left to free. */
zs_status_t zs__family_create(MPI_Comm comm, const char *fn, zs__family_t **out);
/* Frees a family that nothing joined (a create that failed later). */
void zs__family_drop(zs__family_t *fam);
/* The family rank of each rank of mc (size ranks; a communicator whose ranks
 * all belong to the family), for zs__family_join; NULL when out of memory or
 * MPI fails (the member then names senders by world rank only). */
int *zs__family_ranks(zs__family_t *fam, MPI_Comm mc, int size);
/* [size]: each rank of mc (of size ranks) as a rank of other (MPI_UNDEFINED
 * where not in it): a new array, or NULL (no memory, an MPI error). Local. */
int *zs__mpi_ranks_in(MPI_Comm mc, int size, MPI_Comm other);
/* Adds m (the caller filled ctx, on_notice, rank, size) to fam with this id,
 * taking ownership of fam_rank (may be NULL). fam NULL: m stays alone. */
void zs__family_join(zs__family_t *fam, zs__fam_member_t *m, uint64_t id, int *fam_rank);
/* The id of the next child split from parent with this color (counts the
 * split: every rank of the parent calls it once per split, whatever its color). */
uint64_t zs__family_child_id(zs__fam_member_t *parent, int color);
/* Removes m; the last member frees the channel: its receive is cancelled,
 * notices already there are read and dropped, sends still in flight after a
 * second are left to MPI (kept reachable, not freed). Call before the
 * backend's context goes away, and after anything that may call on_notice
 * with it from this comm's own threads. */
void zs__family_leave(zs__fam_member_t *m);
/* Reads the notices that have arrived and hands each to the members it
 * concerns. Never blocks (gives way if another thread is at it); fam may be NULL. */
void zs__family_poll(zs__family_t *fam);
/* An op of m's comm failed on this rank by itself (st, msg): tells the other
 * ranks holding the comm. Call once per comm, without the backend's locks. */
void zs__family_tell(zs__fam_member_t *m, zs_status_t st, const char *msg);
/* This rank gives up (why, msg): breaks every comm of m's family on this rank
 * (their on_notice with ZS_ERR_COMM) and tells every other rank, once per
 * family (not again after an earlier revoke, nor when another rank's revoke
 * has already reached this one: every rank has been told then). ZS_OK;
 * ZS_ERR_COMM when a notice could not be posted; ZS_ERR_UNSUPPORTED when m has
 * no family (its comm alone is broken). The message goes into err (may be NULL). */
zs_status_t zs__family_revoke(zs__fam_member_t *m, zs_status_t why, const char *msg, char *err);
/* Whether the ranks of m's comm have been told of a failure or a departure:
 * this rank revoked, or another rank's revoke reached it (the whole family),
 * or a failure of this comm's own was told to its ranks by this rank or
 * reached it from another. No MPI call. */
int zs__family_told(zs__fam_member_t *m);

#endif
