# zs-ckpt on a checkpoint the trainer saved on 2 ranks: `verify` says ok with the
# step and parameter count, `export` writes a safetensors file of 4 bytes per
# parameter plus its header, and a damaged rank file makes `verify` exit 1.
# `export --hf` (a trial's findings): a second export into the folder of a
# sharded one leaves no index or shard of the first (transformers would load
# the new file, zs-train-gpt --init-from the old index); --n-head against the
# head count the checkpoint records is refused (1), as is a folder that holds a
# checkpoint (2, and nothing written into it); a failed export leaves no
# directory it made; config.json names the end-of-text token.
# -D MPIEXEC, TRAINER, ZS_CKPT, WORK (a scratch folder)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${MPIEXEC} -n 2 --oversubscribe ${TRAINER} --stage 2 --layers 1 --channels 32 --heads 2
                        --seq 16 --batch 4 --steps 3 --val-seqs 0 --quiet --save ${WORK}/ck
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the trainer failed (${rc})")
endif()
execute_process(COMMAND ${ZS_CKPT} verify ${WORK}/ck RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "ok: step 3, saved by 2 rank\\(s\\), [0-9]+ tensors, ([0-9]+) parameters")
  message(FATAL_ERROR "verify: rc ${rc}: ${out}${err}")
endif()
set(params ${CMAKE_MATCH_1})
execute_process(COMMAND ${ZS_CKPT} export ${WORK}/ck ${WORK}/m.safetensors RESULT_VARIABLE rc)
file(SIZE ${WORK}/m.safetensors size)
math(EXPR data "${params} * 4")
if(NOT rc EQUAL 0 OR size LESS_EQUAL data)
  message(FATAL_ERROR "export: rc ${rc}, ${size} bytes for ${params} parameters")
endif()
# export --hf: sharded, then one file into the same folder
execute_process(COMMAND ${ZS_CKPT} export --hf ${WORK}/hf ${WORK}/ck --max-shard-bytes 4096 RESULT_VARIABLE rc)
file(GLOB shards ${WORK}/hf/model-*-of-*.safetensors)
list(LENGTH shards nshards)
if(NOT rc EQUAL 0 OR nshards LESS 2 OR NOT EXISTS ${WORK}/hf/model.safetensors.index.json)
  message(FATAL_ERROR "export --hf, sharded: rc ${rc}, ${nshards} shards")
endif()
execute_process(COMMAND ${ZS_CKPT} export --hf ${WORK}/hf ${WORK}/ck RESULT_VARIABLE rc)
file(GLOB left ${WORK}/hf/*)
list(SORT left)
string(REPLACE "${WORK}/hf/" "" left "${left}")
if(NOT rc EQUAL 0 OR NOT left STREQUAL "config.json;model.safetensors")
  message(FATAL_ERROR "export --hf over a sharded export: rc ${rc}, the folder holds ${left}")
endif()
file(READ ${WORK}/hf/config.json cfg)
if(NOT cfg MATCHES "\"eos_token_id\":[ \t]*255[,\n]" OR NOT cfg MATCHES "\"n_head\":[ \t]*2[,\n]")
  message(FATAL_ERROR "config.json: ${cfg}")
endif()
execute_process(COMMAND ${ZS_CKPT} export --hf ${WORK}/hf4 ${WORK}/ck --n-head 4 RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "n_head 4 given, but .* records n_head 2" OR EXISTS ${WORK}/hf4)
  message(FATAL_ERROR "export --hf --n-head 4 of a 2-head checkpoint: rc ${rc}: ${err}")
endif()
execute_process(COMMAND ${ZS_CKPT} export --hf ${WORK}/ck ${WORK}/ck RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "holds a checkpoint" OR EXISTS ${WORK}/ck/config.json)
  message(FATAL_ERROR "export --hf into a checkpoint: rc ${rc}: ${err}")
endif()
file(GLOB files ${WORK}/ck/*.rank00001.zsr)
file(WRITE ${files} "") # the rank file emptied
execute_process(COMMAND ${ZS_CKPT} verify ${WORK}/ck RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "ZS_ERR_CORRUPT")
  message(FATAL_ERROR "verify of a truncated checkpoint: rc ${rc}: ${err}")
endif()
execute_process(COMMAND ${ZS_CKPT} RESULT_VARIABLE rc ERROR_QUIET)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "no arguments: rc ${rc}, wanted 2")
endif()
file(REMOVE_RECURSE ${WORK})
