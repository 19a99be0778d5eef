# Owner: trace layer.
#   test_trace_pp     tests/scripts/check_trace.py runs test_trace (one pipeline step over 2 ranks, callbacks
#                     that sleep) under ZS_TRACE: every rank's file is valid JSON with one compute event per
#                     forward/backward of the schedule and one comm event per transfer (labelled with its
#                     mb.chunk), the comm events' bytes equal zs_comm_stats kind by kind, zs-trace merge
#                     gives one valid file of both ranks; without ZS_TRACE nothing is written. The bubble
#                     zs-trace measures on 1F1B at p = 2 with 100/200 ms computes is within 10% (15% at m = 8) of
#                     (p-1)/(m+p-1) for m = 2, 4, 8 (printed only in a sanitized build: TRACE_TIMING=0);
#                     zs-trace plot draws the m = 8 timeline when gnuplot is here; run alone (RUN_SERIAL)
if(TARGET zs_pp AND ZS_HAVE_MPI)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  # the program alone (no test of its own: check_trace.py runs it)
  zs_layer_closure(trace_layers zs_common zs_memory zs_device zs_comm zs_pp)
  add_executable(test_trace test_trace.c)
  target_include_directories(test_trace PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(test_trace PRIVATE ${trace_layers} ${ZS_PUBLIC_LIBS} ${ZS_PRIVATE_LIBS})
  if(Python3_Interpreter_FOUND)
    # RUN_SERIAL: the bubble is a timing check on 2 cores, and one other busy process
    # (ctest -j runs the next test beside it) adds 5-15% to it at m = 8
    set(zs_trace_timing "")
    set(zs_trace_serial RUN_SERIAL)
    if(ZS_SANITIZE) # timing is the plain build's to check (see check_trace.py)
      set(zs_trace_timing TRACE_TIMING=0)
      set(zs_trace_serial "")
    endif()
    zs_add_test_run(NAME test_trace_pp
                    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/scripts/check_trace.py
                            ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} $<TARGET_FILE:test_trace>
                            $<TARGET_FILE:zs-trace> ${CMAKE_CURRENT_BINARY_DIR}/trace_out
                    LABELS mpi TIMEOUT 120 ${zs_trace_serial} ENV ${ZS_MPIEXEC_ENV} ${zs_trace_timing})
  endif()
endif()
#   test_trace_engine  (2 ranks) the engine's events read back with cJSON: tracing off writes nothing and
#                     zs_trace_start refuses bad names; after zs_trace_start, for stage 3 + offload, stage 1
#                     (bf16) and stage 2 + delayed update: one gather/release/reduce event per call with the
#                     unit and bytes, one "update step N" per step (per unit inside it with offload), offload
#                     copies with the shard's / parameters' bytes, all inside the trainer's "step N" ranges,
#                     rows properly nested; _early_np2: zs_trace_start before the first comm, rank-named files
#   test_trace_bubble  zs-trace bubble per "step N" range and over one window on a synthetic 2-rank trace with
#                     known numbers, and its replay (the measured computes with instant transfers) on a 1F1B
#                     trace whose replayed timeline is known, none for an order no timeline runs; zs-trace plot
#                     with engine events, of one step (--step N), and of an engine-only trace (gnuplot)
if(TARGET zs_zero AND TARGET zs_comm AND ZS_HAVE_MPI)
  zs_add_test(NAME test_trace_engine SOURCES test_trace_engine.c LIBS zeroshard_static RANKS 2 TIMEOUT 60
              ARGS ${CMAKE_CURRENT_BINARY_DIR}/trace_engine_out)
  # zs_trace_start before the first comm: the files still carry the world rank
  zs_add_test_run(TARGET test_trace_engine NAME_SUFFIX _early RANKS 2
                  ARGS ${CMAKE_CURRENT_BINARY_DIR}/trace_engine_early early TIMEOUT 60 SKIP_RETURN_CODE NONE)
endif()
#   test_bench_pp_bubble  bench/pp_bubble.py on a small model (2 ranks, 1F1B and GPipe, m = 2, 3 steps): the
#                     trainer's traces give a bubble, a replayed one no larger and the stage-means one, in
#                     its --json
if(TARGET zs-trace AND TARGET zs-train-gpt AND ZS_HAVE_MPI AND Python3_Interpreter_FOUND)
  zs_add_test_run(NAME test_bench_pp_bubble
                  COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/bench/pp_bubble.py
                          --bin $<TARGET_FILE_DIR:zs-train-gpt> --m 2 --steps 3 --skip 1
                          --out ${CMAKE_CURRENT_BINARY_DIR}/pp_bubble_out --json
                          -- --layers 2 --channels 32 --heads 2 --seq 16
                  LABELS mpi TIMEOUT 120 ENV ${ZS_MPIEXEC_ENV}
                  PROPERTIES
                    PASS_REGULAR_EXPRESSION "\"schedule\": \"gpipe\", \"m\": 2, \"theory\": 0.3333, \"bubble\": [0-9.]+, \"replayed\": [0-9.]+, \"stage_means\": [0-9.]+"
                    FAIL_REGULAR_EXPRESSION "pp_bubble.py:") # its errors; the pass expression ignores the exit
endif()
if(TARGET zs-trace)
  add_executable(test_trace_bubble test_trace_bubble.c)
  target_include_directories(test_trace_bubble PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(test_trace_bubble PRIVATE m)
  zs_add_test_run(TARGET test_trace_bubble ARGS $<TARGET_FILE:zs-trace> ${CMAKE_CURRENT_BINARY_DIR}/trace_bubble_out
                  TIMEOUT 60)
endif()
#   test_trace_summary_np2  zs-trace summary on the traces of a real 2-rank stage-3 run (the tiny model, steps
#                     marked "step N"), checked against the files' own events read with cJSON: per row, kind and
#                     rank the count, total, mean and share and their medians, the step time and "step (self)",
#                     --skip 1, --json, the table, a merged file, a trace without steps; no files or a file
#                     that is not a zeroshard trace: exit 2
if(TARGET zs-trace AND TARGET zs_zero AND TARGET zs_comm AND ZS_HAVE_MPI)
  zs_add_test(NAME test_trace_summary SOURCES test_trace_summary.c LIBS zeroshard_static RANKS 2 TIMEOUT 60
              ARGS $<TARGET_FILE:zs-trace> ${CMAKE_CURRENT_BINARY_DIR}/trace_summary_out)
  add_dependencies(test_trace_summary zs-trace)
endif()
#   test_trace_env    ZS_TRACE naming a folder that does not exist (or a name too long) is an error in the log
#                     when the trace layer first reads it (the first comm), and tracing stays off: no
#                     ZS_ERR_IO at exit; a good ZS_TRACE traces
zs_add_test(NAME test_trace_env SOURCES test_trace_env.c LAYERS zs_common zs_trace
            ARGS ${CMAKE_CURRENT_BINARY_DIR}/trace_env_out)
