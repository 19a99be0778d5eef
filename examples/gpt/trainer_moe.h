/* trainer_moe.h: what a mixture-of-experts run of the GPT reports beside the
 * usual results (gpt_result_t.moe; trainer_moe.c, gpt_moe.h). */
#ifndef ZS_EXAMPLES_GPT_TRAINER_MOE_H
#define ZS_EXAMPLES_GPT_TRAINER_MOE_H

#include <stdint.h>
#include <stdio.h>

typedef struct {
  int experts, topk, ep, layers; /* experts 0: not an MoE run */
  int shard_groups[2];           /* the dense and the experts' engine's (zs_engine_shard_group) */
  float capacity_factor, aux_weight;
  /* over the run and every rank, per layer and expert ([layers x experts]):
   * assignments (token, slot) the router chose, and those capacity kept */
  int64_t *routed, *kept;
  float *aux;                    /* [steps]: the aux loss, mean over layers, ranks and micro-batches */
  /* this rank, per step ([steps]): its bytes through all-to-all on the ep comm
   * (zs_comm_stats, ZS_COLL_ALL_TO_ALL, sent and received), and what routing
   * decided (the layers' zs_moe_report after each dispatch, summed: the rows
   * dispatch sends and receives; combine and both backwards move the same
   * rows the other way or again), and the count exchanges' bytes each way */
  uint64_t *a2a_sent, *a2a_recv, *route_sent, *route_recv;
  uint64_t count_bytes;          /* per step: layers x accum x (ep - 1) x E/ep x 8 */
  void *mem;
} gpt_moe_info_t;

/* The "moe" member of the --json document (a leading ", \"moe\": {...}"), or nothing for experts 0. */
void gpt_moe_info_json(const gpt_moe_info_t *m, int steps, FILE *f);
void gpt_moe_info_free(gpt_moe_info_t *m);

#endif
