/* Buffers a failed comm may still touch, kept reachable instead of freed.
 *
 * A receive ended by a timeout may still be written when its peer sends late,
 * and a send may still be read: MPI cannot cancel either (zeroshard/comm.h). A
 * layer that owns such buffers (the pipeline runtime's pool, the parameter
 * server's receive buffers, the mpi comm's orphans still outstanding at its
 * destroy, with their scratch) hands them here when it is destroyed after a
 * failure. The list is never walked and never freed: it only keeps the blocks
 * reachable, so the memory stays valid for the late transfer and leak checkers
 * see it as live. */
#include <pthread.h>
#include <stdlib.h>

#include "comm/comm_impl.h"

typedef struct kept {
  struct kept *next;
  void *bufs; /* the caller's array of n buffer pointers */
  int n;
} kept_t;

static pthread_mutex_t kept_mu = PTHREAD_MUTEX_INITIALIZER;
static kept_t *kept_list;

void zs__comm_keep(void *bufs, int n) {
  if (!bufs) return;
  kept_t *k = malloc(sizeof *k);
  if (!k) return; /* then they are simply lost: leaked, still never freed */
  *k = (kept_t){NULL, bufs, n};
  pthread_mutex_lock(&kept_mu);
  k->next = kept_list;
  kept_list = k;
  pthread_mutex_unlock(&kept_mu);
}
