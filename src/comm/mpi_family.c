/* A comm family's error channel: how a rank that fails tells the others at once
 * instead of leaving them to their timeout (see mpi_family.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/mpi_family.h"
#include "comm/mpi_impl.h" // defines: zs__mpi_poll, zs__mpi_note_broken

enum { NOTICE_TAG = 1, SCOPE_FAMILY = 0, SCOPE_COMM = 1 };
#define NOTICE_MAGIC 0x7a736e31u /* "zsn1" */

/* What travels on the channel: 512 bytes, under every transport's eager limit,
 * so a send completes without its receiver. */
typedef struct {
  uint32_t magic;
  int32_t status;     /* the sender's failure */
  int32_t scope;      /* SCOPE_FAMILY or SCOPE_COMM (the comm `id`) */
  int32_t world_rank; /* the sender's, in MPI_COMM_WORLD */
  int32_t fam_rank;   /* the sender's, in the family's root */
  int32_t comm_rank, comm_size; /* the sender's place in the comm it reports on */
  int32_t pad;
  uint64_t id;
  char msg[472];
} notice_t;

/* One notice sent to every other rank: its requests and the buffer they read. */
typedef struct sent {
  struct sent *next;
  notice_t msg;
  int n;
  MPI_Request req[]; /* n */
} sent_t;

struct zs__family {
  pthread_mutex_t mu;
  MPI_Comm mc; /* the channel */
  int rank, size, wrank;
  MPI_Request rreq; /* the receive from any rank; MPI_REQUEST_NULL once the channel failed */
  notice_t rbuf;
  sent_t *sent;     /* in flight */
  zs__fam_member_t *members;
  int told;  /* this rank sent its whole-family notice */
  int heard; /* another rank's whole-family notice arrived */
  struct zs__family *lost_next;
};

/* What MPI may still write or read after its family went away: kept reachable,
 * never freed (as the mpi backend keeps an orphaned op's buffers). */
static pthread_mutex_t g_lost_mu = PTHREAD_MUTEX_INITIALIZER;
static sent_t *g_lost_sends;
static zs__family_t *g_lost_fams;

static void keep_family(zs__family_t *f) {
  pthread_mutex_lock(&g_lost_mu);
  f->lost_next = g_lost_fams;
  g_lost_fams = f;
  pthread_mutex_unlock(&g_lost_mu);
}

/* ---- the channel -------------------------------------------------------------------- */

/* Polls the n requests for up to limit_s seconds; 1 when all completed. */
static int wait_bounded(int n, MPI_Request *req, double limit_s) {
  double t0 = zs__now();
  long pause = 1000;
  for (;;) {
    int flag = 0;
    if (MPI_Testall(n, req, &flag, MPI_STATUSES_IGNORE) != MPI_SUCCESS) return 0;
    if (flag) return 1;
    if (zs__now() - t0 > limit_s) return 0;
    struct timespec ts = {0, pause};
    nanosleep(&ts, NULL);
    if (pause < 1000000) pause *= 2;
  }
}

static void post_recv(zs__family_t *f) {
  if (MPI_Irecv(&f->rbuf, (int)sizeof f->rbuf, MPI_BYTE, MPI_ANY_SOURCE, NOTICE_TAG, f->mc, &f->rreq) !=
      MPI_SUCCESS) {
    f->rreq = MPI_REQUEST_NULL;
    ZS_LOG_W("comm family: posting the receive for other ranks' failure notices failed: a failure elsewhere "
             "will show here only as a timeout");
  }
}

zs_status_t zs__family_create(MPI_Comm comm, const char *fn, zs__family_t **out) {
  *out = NULL;
  zs__family_t *f = calloc(1, sizeof *f);
  if (!f) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory for the comm's error channel", fn);
  char what[96];
  snprintf(what, sizeof what, "%s: MPI_Comm_idup (the error channel)", fn);
  MPI_Request req = MPI_REQUEST_NULL;
  f->mc = MPI_COMM_NULL;
  int rc = MPI_Comm_idup(comm, &f->mc, &req);
  if (rc != MPI_SUCCESS) {
    free(f);
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return ZS_FAIL(NULL, ZS_ERR_COMM, "%s failed: %s", what, msg);
  }
  zs_status_t st = zs__mpi_poll(&req, 0, what);
  if (st != ZS_OK) {
    zs__mpi_note_broken();
    if (st == ZS_ERR_TIMEOUT) keep_family(f); /* MPI may still write f->mc */
    else free(f);
    return st;
  }
  MPI_Comm_set_errhandler(f->mc, MPI_ERRORS_RETURN);
  MPI_Comm_rank(f->mc, &f->rank);
  MPI_Comm_size(f->mc, &f->size);
  MPI_Comm_rank(MPI_COMM_WORLD, &f->wrank);
  pthread_mutex_init(&f->mu, NULL);
  post_recv(f);
  *out = f;
  return ZS_OK;
}

static void keep_sends(sent_t *s) {
  pthread_mutex_lock(&g_lost_mu);
  s->next = g_lost_sends;
  g_lost_sends = s;
  pthread_mutex_unlock(&g_lost_mu);
}

/* Test the sends in flight; free those done. One that failed may leave others
 * of its batch in flight: the batch is kept. Caller holds mu. */
static void reap_sends(zs__family_t *f) {
  for (sent_t **pp = &f->sent; *pp;) {
    sent_t *s = *pp;
    int flag = 0;
    if (MPI_Testall(s->n, s->req, &flag, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
      *pp = s->next;
      keep_sends(s);
    } else if (flag) {
      *pp = s->next;
      free(s);
    } else {
      pp = &s->next;
    }
  }
}

static void family_free(zs__family_t *f) {
  int fin = 0, recv_out = 0, send_out = 0;
  MPI_Finalized(&fin);
  if (fin) { /* the caller finalised MPI first: nothing can be asked of it */
    ZS_LOG_W("comm family: MPI was finalized before its last comm was destroyed: its error channel is leaked");
    keep_family(f);
    return;
  }
  /* a receive that has not matched can be cancelled, which completes it */
  int flag = 0;
  if (f->rreq != MPI_REQUEST_NULL && MPI_Test(&f->rreq, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && !flag) {
    MPI_Cancel(&f->rreq);
    recv_out = !wait_bounded(1, &f->rreq, 1.0);
  }
  /* notices that arrived unasked (several ranks failed): read and drop them, so
   * none lingers for a later communicator */
  for (int n = 0; !recv_out && n < 4 * f->size; n++) {
    int more = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, NOTICE_TAG, f->mc, &more, &status) != MPI_SUCCESS || !more) break;
    MPI_Recv(&f->rbuf, (int)sizeof f->rbuf, MPI_BYTE, status.MPI_SOURCE, NOTICE_TAG, f->mc, MPI_STATUS_IGNORE);
  }
  for (sent_t *s = f->sent, *next; s; s = next) {
    next = s->next;
    if (wait_bounded(s->n, s->req, 1.0)) {
      free(s);
      continue;
    }
    send_out = 1;
    keep_sends(s);
  }
  f->sent = NULL;
  if (recv_out || send_out)
    ZS_LOG_W("comm family (rank %d of %d): its error channel still has requests in flight: the channel and "
             "their buffers stay allocated", f->rank, f->size);
  else
    MPI_Comm_free(&f->mc);
  pthread_mutex_destroy(&f->mu);
  if (recv_out) keep_family(f); /* f->rbuf may still be written */
  else free(f);
}

void zs__family_drop(zs__family_t *fam) {
  if (fam && !fam->members) family_free(fam);
}

int *zs__mpi_ranks_in(MPI_Comm mc, int size, MPI_Comm other) {
  int *in = malloc(2 * sizeof(int) * (size_t)(size > 0 ? size : 1));
  MPI_Group g = MPI_GROUP_NULL, gf = MPI_GROUP_NULL;
  int rc = in ? MPI_Comm_group(mc, &g) : MPI_ERR_NO_MEM;
  if (rc == MPI_SUCCESS) rc = MPI_Comm_group(other, &gf);
  if (rc == MPI_SUCCESS) {
    for (int i = 0; i < size; i++) in[i] = i;
    rc = MPI_Group_translate_ranks(g, size, in, gf, in + size);
  }
  if (g != MPI_GROUP_NULL) MPI_Group_free(&g);
  if (gf != MPI_GROUP_NULL) MPI_Group_free(&gf);
  if (rc != MPI_SUCCESS) {
    free(in);
    return NULL;
  }
  memmove(in, in + size, sizeof(int) * (size_t)size);
  return in;
}

int *zs__family_ranks(zs__family_t *fam, MPI_Comm mc, int size) {
  return fam ? zs__mpi_ranks_in(mc, size, fam->mc) : NULL;
}

void zs__family_join(zs__family_t *fam, zs__fam_member_t *m, uint64_t id, int *fam_rank) {
  m->fam = fam;
  m->id = id;
  m->nsplit = 0;
  m->fam_rank = fam_rank;
  m->next = NULL;
  if (!fam) return;
  pthread_mutex_lock(&fam->mu);
  m->next = fam->members;
  fam->members = m;
  pthread_mutex_unlock(&fam->mu);
}

uint64_t zs__family_child_id(zs__fam_member_t *parent, int color) {
  uint64_t h = 1469598103934665603ull;
  uint64_t v[3] = {parent->id, parent->nsplit++, (uint64_t)(int64_t)color};
  const unsigned char *c = (const unsigned char *)v;
  for (size_t i = 0; i < sizeof v; i++) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

void zs__family_leave(zs__fam_member_t *m) {
  zs__family_t *f = m->fam;
  free(m->fam_rank);
  m->fam_rank = NULL;
  if (!f) return;
  pthread_mutex_lock(&f->mu);
  for (zs__fam_member_t **pp = &f->members; *pp; pp = &(*pp)->next)
    if (*pp == m) {
      *pp = m->next;
      break;
    }
  int last = !f->members;
  pthread_mutex_unlock(&f->mu);
  m->fam = NULL;
  if (last) family_free(f);
}

/* ---- notices ------------------------------------------------------------------------- */

/* What member m says about notice n: who failed, where, and why. */
static void notice_text(const zs__fam_member_t *m, const notice_t *n, char *out, size_t len) {
  int r = -1;
  if (n->scope == SCOPE_COMM) r = n->comm_rank;
  else if (m->fam_rank)
    for (int i = 0; i < m->size && r < 0; i++)
      if (m->fam_rank[i] == n->fam_rank) r = i;
  char who[96];
  if (r >= 0) snprintf(who, sizeof who, "world rank %d (rank %d of this comm)", n->world_rank, r);
  else snprintf(who, sizeof who, "world rank %d%s", n->world_rank, m->fam_rank ? " (not in this comm)" : "");
  const char *scope = n->scope == SCOPE_COMM ? "this comm" : "every rank";
  /* a timeout's notice comes from a rank that waited: another may be the one
   * that did not arrive (this one, if it was late) */
  int k = n->status == ZS_OK ? snprintf(out, len, "%s left and told %s: ", who, scope) /* a revoke with ZS_OK */
          : n->status == ZS_ERR_TIMEOUT && n->scope == SCOPE_COMM
              ? snprintf(out, len, "%s timed out waiting for the other ranks (ZS_ERR_TIMEOUT) and told %s: ", who,
                         scope)
              : snprintf(out, len, "%s failed with %s and told %s: ", who, zs_status_name((zs_status_t)n->status),
                         scope);
  if (k < 0 || (size_t)k >= len) return;
  size_t ml = strnlen(n->msg, sizeof n->msg); /* the reason, cut to what fits */
  if (ml > len - (size_t)k - 1) ml = len - (size_t)k - 1;
  memcpy(out + k, n->msg, ml);
  out[(size_t)k + ml] = '\0';
}

/* Hands notice n to the members it concerns. Caller holds mu. */
static void dispatch(zs__family_t *f, const notice_t *n) {
  if (n->magic != NOTICE_MAGIC || n->status < ZS_OK || n->status >= ZS_STATUS_COUNT) {
    ZS_LOG_W("comm family: dropped a malformed failure notice");
    return;
  }
  if (n->scope == SCOPE_FAMILY) f->heard = 1;
  zs_status_t st = n->status == ZS_ERR_TIMEOUT ? ZS_ERR_TIMEOUT : ZS_ERR_PEER;
  for (zs__fam_member_t *m = f->members; m; m = m->next) {
    if (n->scope == SCOPE_COMM && m->id != n->id) continue;
    if (n->scope == SCOPE_COMM) m->told = 1;
    char text[ZS_ERRBUF];
    notice_text(m, n, text, sizeof text);
    m->on_notice(m->ctx, st, text);
  }
}

void zs__family_poll(zs__family_t *f) {
  if (!f || pthread_mutex_trylock(&f->mu) != 0) return;
  while (f->rreq != MPI_REQUEST_NULL) {
    int flag = 0;
    if (MPI_Test(&f->rreq, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      f->rreq = MPI_REQUEST_NULL;
      ZS_LOG_W("comm family: the receive for other ranks' failure notices failed: a failure elsewhere will show "
               "here only as a timeout");
      break;
    }
    if (!flag) break;
    notice_t n = f->rbuf;
    n.msg[sizeof n.msg - 1] = '\0';
    post_recv(f);
    dispatch(f, &n);
  }
  if (f->sent) reap_sends(f);
  pthread_mutex_unlock(&f->mu);
}

/* Sends notice `n` to every other rank. Caller holds mu. ZS_OK, or ZS_ERR_COMM
 * naming the first rank it could not be posted to. */
static zs_status_t send_all(zs__family_t *f, const notice_t *n, char *err) {
  reap_sends(f);
  if (f->size < 2) return ZS_OK;
  sent_t *s = calloc(1, sizeof *s + sizeof(MPI_Request) * (size_t)(f->size - 1));
  if (!s) return ZS_FAIL(err, ZS_ERR_COMM, "comm family: out of host memory for a failure notice");
  s->msg = *n;
  int bad = -1, rc = MPI_SUCCESS;
  for (int r = 0; r < f->size; r++) {
    if (r == f->rank) continue;
    int e = MPI_Isend(&s->msg, (int)sizeof s->msg, MPI_BYTE, r, NOTICE_TAG, f->mc, &s->req[s->n]);
    if (e == MPI_SUCCESS) s->n++;
    else if (bad < 0) bad = r, rc = e;
  }
  s->next = f->sent;
  f->sent = s;
  if (bad < 0) return ZS_OK;
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return ZS_FAIL(err, ZS_ERR_COMM, "comm family (rank %d of %d): posting the failure notice to rank %d failed: %s",
                 f->rank, f->size, bad, msg);
}

static void notice_fill(const zs__fam_member_t *m, notice_t *n, int scope, zs_status_t st, const char *msg) {
  memset(n, 0, sizeof *n);
  n->magic = NOTICE_MAGIC;
  n->status = st;
  n->scope = scope;
  n->world_rank = m->fam->wrank;
  n->fam_rank = m->fam->rank;
  n->comm_rank = m->rank;
  n->comm_size = m->size;
  n->id = m->id;
  snprintf(n->msg, sizeof n->msg, "%s", msg && *msg ? msg : "(no message)");
}

void zs__family_tell(zs__fam_member_t *m, zs_status_t st, const char *msg) {
  zs__family_t *f = m->fam;
  if (!f || m->size < 2) return;
  notice_t n;
  notice_fill(m, &n, SCOPE_COMM, st, msg);
  pthread_mutex_lock(&f->mu);
  if (send_all(f, &n, NULL) == ZS_OK) m->told = 1;
  pthread_mutex_unlock(&f->mu);
}

int zs__family_told(zs__fam_member_t *m) {
  zs__family_t *f = m->fam;
  if (!f) return 0;
  pthread_mutex_lock(&f->mu);
  int r = f->told || f->heard || m->told;
  pthread_mutex_unlock(&f->mu);
  return r;
}

zs_status_t zs__family_revoke(zs__fam_member_t *m, zs_status_t why, const char *msg, char *err) {
  char text[ZS_ERRBUF];
  snprintf(text, sizeof text, "revoked by this rank (zs_comm_revoke, %s%s): %s", zs_status_name(why),
           why == ZS_OK ? ": it left" : "", msg && *msg ? msg : "(no message)");
  zs__family_t *f = m->fam;
  if (!f) {
    m->on_notice(m->ctx, ZS_ERR_COMM, text);
    return ZS_FAIL(err, ZS_ERR_UNSUPPORTED, "zs_comm_revoke: the comm has no channel to the other ranks (a nccl "
                   "comm not made from MPI): it is aborted here only, and they are not told");
  }
  notice_t n;
  notice_fill(m, &n, SCOPE_FAMILY, why, msg);
  pthread_mutex_lock(&f->mu);
  for (zs__fam_member_t *x = f->members; x; x = x->next) x->on_notice(x->ctx, ZS_ERR_COMM, text);
  zs_status_t st = ZS_OK;
  if (!f->told && !f->heard) {
    f->told = 1;
    st = send_all(f, &n, err);
  }
  pthread_mutex_unlock(&f->mu);
  return st;
}
