// The installed headers from C++17 (tests/scripts/install_consumer.cmake also
// compiles this file with -std=c++17 -Wall -Wextra -pedantic-errors on the
// pkg-config flags, where the headers are not system headers): ZS_CONFIG_INIT,
// which C++ before C++20 takes as zs_config_defaults(), the other versioned
// structs' initializers, a config validated, one read from JSON. Prints
// "consumer ok".
#include <cstdio>
#include <cstring>

#include <zeroshard/zeroshard.h>

int main() {
  zs_config_t cfg = ZS_CONFIG_INIT;
  const zs_config_t c = zs_config_defaults();
  bool ok = cfg.version == ZS_CONFIG_VERSION && std::memcmp(&cfg, &c, sizeof cfg) == 0 &&
            cfg.optim.kind == ZS_ADAMW && cfg.optim.lr == 1e-3f && cfg.grad_accum == 1;
  zs_log_set_level(ZS_LOG_NONE);
  ok = ok && zs_config_validate(&cfg) == ZS_OK;
  cfg.stage = 9;
  ok = ok && zs_config_validate(&cfg) == ZS_ERR_INVALID && std::strstr(zs_last_error(), "stage");
  zs_pp_schedule_config_t sc = ZS_PP_SCHEDULE_CONFIG_INIT;
  zs_pp_config_t pc = ZS_PP_CONFIG_INIT;
  zs_moe_config_t mc = ZS_MOE_CONFIG_INIT;
  zs_ps_config_t ps = ZS_PS_CONFIG_INIT;
  zs_import_opts_t io = ZS_IMPORT_OPTS_INIT;
  ok = ok && sc.version == ZS_PP_SCHEDULE_VERSION && pc.version == ZS_PP_CONFIG_VERSION &&
       ps.version == ZS_PS_CONFIG_VERSION && io.version == ZS_IMPORT_OPTS_VERSION;
  (void)mc;
  zs_config_t q;
  ok = ok && zs_config_from_json(&q, "{\"zero_optimization\": {\"stage\": 2}}") == ZS_OK && q.stage == 2;
  std::printf("%s\n", ok ? "consumer ok" : "consumer FAILED");
  return ok ? 0 : 3;
}
