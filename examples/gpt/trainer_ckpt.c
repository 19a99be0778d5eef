/* trainer_ckpt.c: the dense GPT trainer's checkpoint metadata (how each
 * parameter sits in the whole model, the model's sizes) and its --load, with
 * what a loaded checkpoint must match beyond its shapes. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "trainer_impl.h"
#include "zeroshard/checkpoint.h"

/* How each parameter sits in the whole model, so that a checkpoint of one
 * layout loads into any other: tp slices (gpt_tp_split); and the model's sizes
 * for offline tools. */
zs_status_t trainer_ckpt_meta(trainer_t *t, gpt_result_t *res) {
  zs_status_t st = ZS_OK;
  for (int pid = 0; pid < t->neng && st == ZS_OK; pid++) {
    const int i = t->tidx[pid];
    zs_split_t s;
    gpt_param_info_t w;
    gpt_param_info(&t->mc, i, &w);
    if (!(t->tp > 1 && gpt_tp_split(&t->tpm, i, &s))) continue;
    s.whole = w.name, s.whole_ndim = w.ndim;
    for (int d = 0; d < w.ndim; d++) s.whole_shape[d] = w.shape[d];
    st = zs_checkpoint_set_split(t->zs, pid, &s);
  }
  char v[32];
  const int val[] = {t->mc.heads, t->mc.layers, t->mc.channels, t->mc.vocab, t->mc.seq};
  const char *key[] = {"n_head", "n_layer", "n_embd", "vocab_size", "n_positions"};
  if (st == ZS_OK) st = zs_checkpoint_set_attr(t->zs, "model", "gpt2");
  for (int k = 0; k < 5 && st == ZS_OK; k++)
    snprintf(v, sizeof v, "%d", val[k]), st = zs_checkpoint_set_attr(t->zs, key[k], v);
  return st == ZS_OK ? ZS_OK : trainer_fail(res, st, "zs_checkpoint_set_split", zs_engine_last_error(t->zs));
}

zs_status_t trainer_ckpt_load(trainer_t *t, gpt_result_t *res) {
  const gpt_opts_t *o = t->o;
  zs_status_t st;
  if ((st = zs_checkpoint_load(t->zs, o->load)) != ZS_OK) {
    char moe[4200], why[8600];
    struct stat sb;
    snprintf(moe, sizeof moe, "%s/moe_pair", o->load);
    const int is_moe = stat(moe, &sb) == 0 || (snprintf(moe, sizeof moe, "%s/experts", o->load), stat(moe, &sb) == 0);
    snprintf(why, sizeof why, "%s%s", zs_engine_last_error(t->zs),
             is_moe ? " (it is the mixture-of-experts trainer's checkpoint, both engines: run with --moe-experts)" : "");
    return trainer_fail(res, st, "zs_checkpoint_load", why);
  }
  const char *heads = zs_checkpoint_loaded_attr(t->zs, "n_head");
  if (heads && atoi(heads) != t->mc.heads) { /* every shape agrees: attention would split its channels otherwise */
    char why[4400];
    snprintf(why, sizeof why, "%s was saved with --heads %s (n_head), this run has --heads %d: give --heads %s",
             o->load, heads, t->mc.heads, heads);
    return trainer_fail(res, ZS_ERR_MISMATCH, "zs_checkpoint_load", why);
  }
  return ZS_OK;
}
