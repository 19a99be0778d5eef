# zs-ckpt on a checkpoint the trainer saved on 2 ranks: `verify` says ok with the
# step and parameter count, `export` writes a safetensors file of 4 bytes per
# parameter plus its header, and a damaged rank file makes `verify` exit 1.
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
