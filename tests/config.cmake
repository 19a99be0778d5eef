# Config validation and loading (env, our JSON keys, DeepSpeed ds_config.json).
zs_add_test(NAME test_config SOURCES test_config.c LAYERS zs_config zs_common)
target_compile_definitions(test_config PRIVATE ZS_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data")
# Hostile and careless input: strict JSON, limits, ranges, duplicates, timing.
zs_add_test(NAME test_config_strict SOURCES test_config_strict.c LAYERS zs_config zs_common)
# Public configs load as their authors meant (tests/data/ds_configs), the schedule's keys.
zs_add_test(NAME test_config_ds SOURCES test_config_ds.c LAYERS zs_config zs_common)
target_compile_definitions(test_config_ds PRIVATE ZS_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data")
# optim.state_dtype / state_block: JSON, DeepSpeed and bitsandbytes names, env
zs_add_test(NAME test_config_state SOURCES test_config_state.c LAYERS zs_config zs_common)
# ZeRO++ keys (quantized weights, hpZ, quantized gradients): ours, DeepSpeed's, the environment, refusals
zs_add_test(NAME test_config_zeropp SOURCES test_config_zeropp.c LAYERS zs_config zs_common)
# ZeRO-Infinity's keys: DeepSpeed's offload sections and aio, ours, the environment, the rules
zs_add_test(NAME test_config_nvme SOURCES test_config_nvme.c LAYERS zs_config zs_common)
target_compile_definitions(test_config_nvme PRIVATE ZS_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data")
# ZeRO-Infinity's validation rules, each bound, and the summary line
zs_add_test(NAME test_config_nvme_rules SOURCES test_config_nvme_rules.c LAYERS zs_config zs_common)
