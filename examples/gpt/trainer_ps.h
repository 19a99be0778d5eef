/* trainer_ps.h: what a parameter-server run of the GPT reports beside the
 * usual results (gpt_result_t.ps; trainer_ps.c, zeroshard/ps.h). */
#ifndef ZS_EXAMPLES_GPT_TRAINER_PS_H
#define ZS_EXAMPLES_GPT_TRAINER_PS_H

#include <stdint.h>
#include <stdio.h>

#define GPT_PS_HIST 64  /* = ZS_PS_HIST_BINS */
#define GPT_PS_MAX_RANKS 64

typedef struct {
  int servers, workers, async, staleness; /* servers 0: not a parameter-server run; staleness -1: none */
  int64_t hist[GPT_PS_HIST];  /* server 0's staleness histogram (updates behind; last bin: that many or more) */
  int64_t staleness_max;      /* over the servers */
  int max_clock_gap;          /* over the servers: the largest lead a granted worker had over the slowest */
  double steps_per_s[GPT_PS_MAX_RANKS]; /* per worker: its steps over its training time */
  double wait_frac[GPT_PS_MAX_RANKS];   /* per worker: the share of its time blocked in push/pull */
  uint64_t server_bytes_per_step;       /* server 0: bytes sent + received per step */
  uint64_t worker_bytes_per_step;       /* worker 0: bytes sent + received per step */
} gpt_ps_info_t;

/* The "ps" member of the --json document (a leading ", \"ps\": {...}"), or nothing for servers 0. */
void gpt_ps_info_json(const gpt_ps_info_t *ps, FILE *f);

#endif
