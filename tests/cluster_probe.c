/* cluster_probe: what tests/scripts/cluster_sim_test.sh runs inside
 * scripts/cluster-sim to see what the emulated cluster gives an MPI job.
 *
 *   cluster-sim --hosts K --ranks-per-host R ... -- cluster_probe BYTES
 *
 * Rank 0 prints one line on stdout:
 *   probe world=W nodes=K node_of=0,0,2,2 names=N bytes=B seconds=S cpu_wait=S
 *         local_bytes=B local_seconds=S
 * node_of: for each world rank, the world rank of the first rank on its node as
 * MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) sees it (by-slot placement gives
 * 0,..,0,R,..,R,...); names: how many distinct MPI_Get_processor_name values the
 * job has (K when cluster-sim gave each host its own hostname); bytes/seconds:
 * rank 0 sent BYTES to the first rank of the next node (the link between host 0
 * and host 1 when there are two nodes) in 4 MiB messages, timed from a barrier to
 * the receiver's one-byte acknowledgement. A warm-up message opens the TCP
 * connection before the clock starts. cpu_wait: the seconds the sender and the
 * receiver spent runnable but waiting for a CPU during that transfer (schedstat):
 * what tells a slow link from a busy machine. local_bytes/local_seconds: the same
 * to the next rank on rank 0's own node (R >= 2), which must not touch any link.
 *
 *   cluster-sim --hosts 2 --ranks-per-host R ... -- cluster_probe BYTES pairs
 *
 * prints instead
 *   pairs world=W bytes=B seconds=S cpu_wait=S
 * every rank r of host 0 and rank r + R of host 1 sending each other BYTES at
 * once (4 MiB messages, both ways), as a collective over both hosts loads the
 * link and the CPUs; seconds: from a barrier to the last rank's end; cpu_wait:
 * the mean over the ranks of the seconds each waited for a CPU meanwhile.
 *
 * No rank spins: every wait is a nonblocking request polled with a sleep between
 * tests (1 ms in barriers, 100 us in transfers, short beside the 4 MiB a socket
 * buffers). On a 2-core machine a spinning rank would take the CPU the other end
 * and the kernel's shaping need, and would make cpu_wait count the spinning as
 * waiting. Every wait is bounded (PROBE_LIMIT_S); past it the job aborts. Exit 0,
 * or 1 on a failure. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROBE_LIMIT_S 120.0
#define PROBE_CHUNK (4 << 20)

static int rank, world;

/* ============================================================================
 * waiting without spinning
 * ========================================================================== */

static void quiet_wait(MPI_Request *r, long sleep_ns, const char *what) {
  int done = 0;
  double t0 = MPI_Wtime();
  struct timespec ts = {0, sleep_ns};
  for (;;) {
    MPI_Test(r, &done, MPI_STATUS_IGNORE);
    if (done) return;
    if (MPI_Wtime() - t0 > PROBE_LIMIT_S) {
      fprintf(stderr, "cluster_probe [rank %d]: %s not done in %.0f s\n", rank, what, PROBE_LIMIT_S);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    nanosleep(&ts, NULL);
  }
}

static void quiet_barrier(void) {
  MPI_Request r;
  MPI_Ibarrier(MPI_COMM_WORLD, &r);
  quiet_wait(&r, 1000000, "barrier");
}

/* Seconds this thread has waited on a run queue (runnable, not running) since it
 * started: /proc/thread-self/schedstat's second field; 0 where it cannot be read. */
static double run_wait_s(void) {
  unsigned long long run = 0, wait = 0;
  FILE *f = fopen("/proc/thread-self/schedstat", "r");
  if (!f) return 0;
  if (fscanf(f, "%llu %llu", &run, &wait) != 2) wait = 0;
  fclose(f);
  return 1e-9 * (double)wait;
}

/* ============================================================================
 * one timed transfer
 * ========================================================================== */

/* Rank 0 sends BYTES to PEER (nothing when PEER < 1 or BYTES is 0); every rank
 * calls it. Returns the seconds rank 0 measured (0 elsewhere); *wait_s: how long
 * the sender and the receiver together waited for a CPU meanwhile (the link
 * idles while either does, once the socket buffers run dry). */
static double send_timed(int peer, long long bytes, double *wait_s) {
  *wait_s = 0;
  if (peer < 1 || bytes <= 0) return 0;
  char *buf = calloc(1, PROBE_CHUNK);
  char ack = 0;
  MPI_Request r;
  if (!buf) MPI_Abort(MPI_COMM_WORLD, 1);
  if (rank == 0) MPI_Send(buf, 1, MPI_CHAR, peer, 0, MPI_COMM_WORLD); /* warm-up: the connection */
  if (rank == peer) MPI_Recv(buf, 1, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  quiet_barrier();
  double w0 = run_wait_s(), t0 = MPI_Wtime();
  for (long long off = 0; off < bytes && (rank == 0 || rank == peer); off += PROBE_CHUNK) {
    int n = bytes - off < PROBE_CHUNK ? (int)(bytes - off) : PROBE_CHUNK;
    if (rank == 0) MPI_Isend(buf, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, &r);
    else MPI_Irecv(buf, n, MPI_CHAR, 0, 1, MPI_COMM_WORLD, &r);
    quiet_wait(&r, 100000, "transfer");
  }
  if (rank == peer) {
    MPI_Isend(&ack, 1, MPI_CHAR, 0, 2, MPI_COMM_WORLD, &r);
    quiet_wait(&r, 100000, "acknowledgement");
  }
  if (rank == 0) {
    MPI_Irecv(&ack, 1, MPI_CHAR, peer, 2, MPI_COMM_WORLD, &r);
    quiet_wait(&r, 100000, "acknowledgement");
  }
  double s = MPI_Wtime() - t0, w = run_wait_s() - w0, wpeer = 0;
  if (rank == peer) MPI_Send(&w, 1, MPI_DOUBLE, 0, 3, MPI_COMM_WORLD);
  if (rank == 0) MPI_Recv(&wpeer, 1, MPI_DOUBLE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  *wait_s = w + wpeer;
  free(buf);
  quiet_barrier();
  return rank == 0 ? s : 0;
}

/* The "pairs" mode (see the header): rank r < world / 2 and r + world / 2
 * exchange bytes both ways at once. */
static int pairs(long long bytes) {
  const int half = world / 2, peer = rank < half ? rank + half : rank - half;
  char *out = calloc(1, PROBE_CHUNK), *in = calloc(1, PROBE_CHUNK);
  if (!out || !in || world % 2) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Request r[2];
  MPI_Isend(out, 1, MPI_CHAR, peer, 0, MPI_COMM_WORLD, &r[0]); /* warm-up: the connections */
  MPI_Irecv(in, 1, MPI_CHAR, peer, 0, MPI_COMM_WORLD, &r[1]);
  quiet_wait(&r[0], 100000, "warm-up send");
  quiet_wait(&r[1], 100000, "warm-up receive");
  quiet_barrier();
  double w0 = run_wait_s(), t0 = MPI_Wtime();
  for (long long off = 0; off < bytes; off += PROBE_CHUNK) {
    int n = bytes - off < PROBE_CHUNK ? (int)(bytes - off) : PROBE_CHUNK;
    MPI_Isend(out, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, &r[0]);
    MPI_Irecv(in, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, &r[1]);
    quiet_wait(&r[0], 100000, "transfer send");
    quiet_wait(&r[1], 100000, "transfer receive");
  }
  double mine[2] = {MPI_Wtime() - t0, run_wait_s() - w0}, most = 0, wsum = 0;
  MPI_Reduce(&mine[0], &most, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&mine[1], &wsum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("pairs world=%d bytes=%lld seconds=%.4f cpu_wait=%.4f\n", world, bytes, most, wsum / world);
    fflush(stdout);
  }
  free(out), free(in);
  MPI_Finalize();
  return 0;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  long long bytes = argc > 1 ? atoll(argv[1]) : 0;
  if (bytes < 0) bytes = 0;
  if (argc > 2 && !strcmp(argv[2], "pairs")) return pairs(bytes);

  /* ---- the node split: each rank's node named by its first world rank ---- */
  MPI_Comm local;
  int leader = rank, len = 0;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  MPI_Bcast(&leader, 1, MPI_INT, 0, local);
  int *node_of = malloc(sizeof(int) * (size_t)world);
  char name[MPI_MAX_PROCESSOR_NAME] = {0}, *names = malloc((size_t)MPI_MAX_PROCESSOR_NAME * (size_t)world);
  if (!node_of || !names) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Get_processor_name(name, &len);
  MPI_Gather(&leader, 1, MPI_INT, node_of, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, MPI_COMM_WORLD);
  int nodes = 0, distinct = 0;
  for (int r = 0; rank == 0 && r < world; r++) {
    nodes += node_of[r] == r;
    int seen = 0;
    for (int q = 0; q < r && !seen; q++)
      seen = !strcmp(names + (size_t)q * MPI_MAX_PROCESSOR_NAME, names + (size_t)r * MPI_MAX_PROCESSOR_NAME);
    distinct += !seen;
  }

  /* ---- the transfers: rank 0 to the first rank of the next node, then to
   * the next rank on its own node ---- */
  int peers[2] = {-1, -1};
  for (int r = 1; rank == 0 && r < world; r++) {
    if (peers[0] < 0 && node_of[r] == r) peers[0] = r;
    if (peers[1] < 0 && node_of[r] == 0) peers[1] = r;
  }
  MPI_Bcast(peers, 2, MPI_INT, 0, MPI_COMM_WORLD);
  double remote_wait, local_wait;
  double remote_s = send_timed(peers[0], bytes, &remote_wait);
  double local_s = send_timed(peers[1], bytes, &local_wait);

  if (rank == 0) {
    printf("probe world=%d nodes=%d node_of=", world, nodes);
    for (int r = 0; r < world; r++) printf("%s%d", r ? "," : "", node_of[r]);
    printf(" names=%d bytes=%lld seconds=%.4f cpu_wait=%.4f local_bytes=%lld local_seconds=%.4f\n", distinct,
           peers[0] > 0 ? bytes : 0, remote_s, remote_wait, peers[1] > 0 ? bytes : 0, local_s);
    fflush(stdout);
  }
  free(node_of);
  free(names);
  MPI_Comm_free(&local);
  MPI_Finalize();
  return 0;
}
