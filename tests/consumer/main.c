/* Uses the installed headers and library: a cpu device, an allocation counted by
 * the accountant, a config validated, a status string, a pipeline schedule
 * simulated (1F1B, p = 4, m = 8: bubble 3/11), a DeepSpeed-style config asking
 * for 8-bit optimizer states. Prints "consumer ok". */
#include <stdio.h>
#include <string.h>

#include <zeroshard/zeroshard.h>

int main(void) {
  zs_device_t *dev;
  if (zs_device_create_cpu(&dev) != ZS_OK) return 1;
  void *p;
  if (zs_device_alloc(dev, 1000, ZS_MEM_PARAMS, &p) != ZS_OK) return 2;
  zs_memory_stats_t s;
  zs_device_memory_stats(dev, &s);
  int ok = s.current[ZS_DOMAIN_DEVICE][ZS_MEM_PARAMS] == 1000;
  zs_device_free(dev, p, 1000, ZS_MEM_PARAMS);
  zs_device_destroy(dev);
  zs_config_t cfg = ZS_CONFIG_INIT;
  cfg.stage = 9;
  zs_log_set_level(ZS_LOG_NONE);
  ok = ok && zs_config_validate(&cfg) == ZS_ERR_INVALID && strstr(zs_last_error(), "stage");
  zs_pp_schedule_config_t sc = ZS_PP_SCHEDULE_CONFIG_INIT;
  sc.stages = 4, sc.microbatches = 8;
  zs_pp_schedule_t *sched = NULL;
  zs_pp_sim_t sim;
  ok = ok && zs_pp_schedule_create(&sched, &sc) == ZS_OK &&
       zs_pp_schedule_simulate(sched, 1, 2, 0, &sim, NULL) == ZS_OK && sim.bubble_num * 11 == sim.bubble_den * 3;
  zs_pp_schedule_destroy(sched);
  zs_config_t q;
  ok = ok && zs_config_from_json(&q, "{\"optimizer\": {\"type\": \"AdamW8bit\"}}") == ZS_OK &&
       q.optim.state_dtype == ZS_STATE_INT8 && !strcmp(zs_state_dtype_name(q.optim.state_dtype), "int8");
  printf("%s\n", ok ? "consumer ok" : "consumer FAILED");
  return ok ? 0 : 3;
}
