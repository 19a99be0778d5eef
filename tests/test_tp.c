/* Tensor and sequence parallelism (zeroshard/tp.h) on cpu devices over MPI, at
 * 1-4 ranks (tp = the world size): the checks of test_tp_checks.h and
 * test_tp_vocab_checks.h, against float64 single-rank references, on a stream
 * of the device (compute on its worker, collectives on the comm, in the order of
 * the calls) and again, for some, on the caller's NULL stream. */
#include "harness_world.h" // defines: zs_t_world_open_cpu
#include "test_tp_checks.h"
#include "test_tp_vocab_checks.h"
#include "zeroshard/log.h"

int main(void) {
  zs_device_t *dev = NULL;
  zs_comm_t *comm = NULL;
  int rank, size;
  zs_t_world_open_cpu(&dev, &comm, &rank, &size);
  E = (tp_env_t){.dev = dev, .comm = comm, .rank = rank, .size = size, .host_ids = 1, .rtol = 1e-5};
  zs_log_set_level(ZS_LOG_NONE); /* the checks read the messages themselves */
  if (zs_tp_create(&E.tp, comm) != ZS_OK || zs_stream_create(dev, &E.s) != ZS_OK) {
    fprintf(stderr, "setup failed: %s\n", zs_last_error());
    return 1;
  }
  zs_test_run(test_vocab_part);
  zs_test_run(test_operators);
  zs_test_run(test_operators_bad);
  zs_test_run(test_mlp);
  zs_test_run(test_embedding);
  zs_test_run(test_cross_entropy);
  zs_test_run(test_vocab_bad);
  /* the caller's stream: each call done when it returns */
  zs_stream_t *s = E.s;
  E.s = NULL;
  zs_test_run_named("test_mlp (NULL stream)", test_mlp);
  zs_test_run_named("test_vocab_bad (NULL stream)", test_vocab_bad);
  zs_test_run_named("test_cross_entropy (NULL stream)", test_cross_entropy);
  zs_stream_destroy(dev, s);
  zs_tp_destroy(E.tp);
  int rc = zs_test_finish();
  zs_comm_destroy(comm);
  zs_device_destroy(dev);
  return rc;
}
