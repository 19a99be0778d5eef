# The example GPT (examples/gpt): the model alone, the trainer's parity across
# world sizes and stages, and the CUDA path against the CPU one. The targets
# they link are defined in examples/CMakeLists.txt (configured after tests/;
# CMake resolves them at generate time), so they are registered only when that
# directory builds them.
if(EXISTS ${PROJECT_SOURCE_DIR}/examples/gpt/gpt.c)
  zs_add_test(NAME test_gpt SOURCES test_gpt.c LIBS zs_gpt_model TIMEOUT 60)
  # the layers against float64 references, gpt_expf in ulps, thread-count independence
  zs_add_test(NAME test_gpt_ops SOURCES test_gpt_ops.c LIBS zs_gpt_model TIMEOUT 120)
  # GCC vectorizes the loops marked /* vec */ (the exp loops of GELU, softmax and
  # cross-entropy) in the AVX2 and AVX-512 clones (ops_simd.h; skips elsewhere)
  if(ZS_GPT_VEC_FLAGS AND CMAKE_C_COMPILER_ID STREQUAL "GNU" AND NOT ZS_SANITIZE) # the same compile in both builds
    zs_add_test_run(NAME test_gpt_vectorized
                    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/check_vectorized.sh ${CMAKE_C_COMPILER}
                            "${ZS_GPT_VEC_FLAGS}" ${PROJECT_SOURCE_DIR}/examples/gpt/ops.c
                            ${PROJECT_SOURCE_DIR}/examples/gpt/ops_attn.c
                    SKIP_RETURN_CODE 77 TIMEOUT 120)
  endif()
  # the fused CUDA attention's tiling (attn_tile.h) in C against float64: runs everywhere
  zs_add_test(NAME test_gpt_attn_tile SOURCES test_gpt_attn_tile.c LIBS zs_gpt_model TIMEOUT 120)
  # the CUDA path's rule for fusing the MLP's bias+GELU into cuBLASLt epilogues (gelu_epilogue.h): runs everywhere
  zs_add_test(NAME test_gpt_epilogue SOURCES test_gpt_epilogue.c LIBS zs_gpt_model TIMEOUT 60)
  # the matrix products (gemm.h): fp32, and bf16 emulated and on oneDNN (skipped without it)
  zs_add_test(NAME test_gpt_gemm SOURCES test_gpt_gemm.c LIBS zs_gpt_model zs_common TIMEOUT 60)
  if(ZS_HAVE_MPI AND EXISTS ${PROJECT_SOURCE_DIR}/src/zero/CMakeLists.txt)
    zs_add_test(NAME test_gpt_parity SOURCES test_gpt_parity.c LIBS zs_gpt_trainer RANKS 1 2 4 TIMEOUT 120)
    # ZeRO++'s options in the trainer: flags, 200 steps against the exact run, bytes, refusals
    # A checkpoint of any layout (tp, pp, interleaved, dp x tp, hybrid, ep) loaded into any other
    zs_add_test(NAME test_gpt_layouts SOURCES test_gpt_layouts.c LIBS zs_gpt_trainer RANKS 4 TIMEOUT 300)
    # zs-ckpt export --hf of a tp 2 x pp 2 checkpoint: transformers' from_pretrained gives the
    # trainer's validation loss to 1e-6 (skips without transformers and torch: ZS_HF=ON installs them)
    find_package(Python3 COMPONENTS Interpreter QUIET)
    if(Python3_Interpreter_FOUND AND TARGET zs-ckpt)
      zs_add_test_run(NAME test_hf_export
                      COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/scripts/hf_export_check.py
                              ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:zs-train-gpt> $<TARGET_FILE:zs-ckpt>
                      LABELS mpi SKIP_RETURN_CODE 77 TIMEOUT 300 ENV ${ZS_MPIEXEC_ENV})
    endif()
    zs_add_test(NAME test_gpt_zeropp SOURCES test_gpt_zeropp.c LIBS zs_gpt_trainer RANKS 1 2 4 TIMEOUT 120)
    # --recompute in every dense layout: the same bits, the activations kept by formula
    zs_add_test(NAME test_gpt_recompute SOURCES test_gpt_recompute.c LIBS zs_gpt_trainer RANKS 4 TIMEOUT 120)
    # a rank's memory beside the model state: cuBLAS opened on first use, not at start; the
    # pipeline's tied-wte swap through a scratch of one piece, not one of wte's size
    zs_add_test(NAME test_gpt_mem SOURCES test_gpt_mem.c LIBS zs_gpt_trainer RANKS 2 TIMEOUT 60)
    # --comm nccl on the cpu device: refused, saying why, before any comm is made
    zs_add_test_run(NAME test_gpt_comm_nccl_cpu COMMAND $<TARGET_FILE:zs-train-gpt> --comm nccl --steps 1
                    TIMEOUT 30 PROPERTIES PASS_REGULAR_EXPRESSION "--comm nccl needs --device cuda")
    # a schedule shorter than the run: its last steps at the floor, said (a trial's ran at lr 0 silently)
    zs_add_test_run(NAME test_gpt_lr_steps_short COMMAND $<TARGET_FILE:zs-train-gpt> --layers 1 --channels 32
                    --heads 2 --seq 16 --batch 2 --steps 5 --lr-steps 3 --quiet
                    TIMEOUT 30 PROPERTIES PASS_REGULAR_EXPRESSION "--lr-steps 3 ends before this run does \\(step 5\\): steps 4..5")
    # The CUDA path against the CPU one (label gpu; exits 77 without a GPU or CUDA
    # build; its trainer half needs NCCL). One rank, through mpiexec for MPI.
    # The --export file read back by Python's safetensors (skips without it).
    find_package(Python3 COMPONENTS Interpreter)
    if(Python3_Interpreter_FOUND)
      zs_add_test_run(NAME test_safetensors_python
                      COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/scripts/check_safetensors.py
                              ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:zs-train-gpt> 2
                      LABELS mpi SKIP_RETURN_CODE 77 TIMEOUT 120 ENV ${ZS_MPIEXEC_ENV})
      # ZeRO-Infinity end to end: a GPT whose state (707 MiB in memory) does
      # not fit a memory cgroup of 560 MiB that bench/infinity.py makes and
      # removes trains there through the NVMe tier (under the build directory)
      # with the in-memory run's losses bit for bit; without the tier setup
      # refuses with ZS_ERR_NOMEM; the OOM killer never runs. Skips without a
      # writable memory cgroup or liburing. Not in sanitizer builds: an
      # instrumented trainer's shadow memory would move the limits the test
      # reasons about, and test_engine_tier runs the tier's code under them.
      if(NOT ZS_SANITIZE)
      zs_add_test_run(NAME test_infinity_cgroup
                      COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/bench/infinity.py
                              --bin $<TARGET_FILE_DIR:zs-train-gpt> --limit-mib 560 --steps 2
                              --model "--layers 6 --channels 768 --heads 12 --seq 64 --batch 4"
                      LABELS mpi SKIP_RETURN_CODE 77 TIMEOUT 300 ENV ${ZS_MPIEXEC_ENV})
      endif()
    endif()
    zs_add_test(NAME test_gpt_gpu SOURCES test_gpt_gpu.c LIBS zs_gpt_trainer RANKS 1 LABELS gpu TIMEOUT 300)
    # --matmul tf32|bf16 on the cuda path: the tensor cores' products against float64, the trainer's losses
    zs_add_test(NAME test_gpt_gpu_math SOURCES test_gpt_gpu_math.c LIBS zs_gpt_trainer RANKS 1 LABELS gpu TIMEOUT 120)
    # the fused attention (attn_cuda.cu) against float64, forward and dq/dk/dv, and its refusals
    zs_add_test(NAME test_gpt_attn_gpu SOURCES test_gpt_attn_gpu.c LIBS zs_gpt_model LABELS gpu TIMEOUT 120)
    if(ZS_HAVE_NCCL)
      target_include_directories(test_gpt_gpu PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
      target_include_directories(test_gpt_gpu_math PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
    endif()
  endif()
endif()
