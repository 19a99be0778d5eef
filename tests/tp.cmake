# Owner: tp layer.
#   test_tp      zeroshard/tp.h on cpu devices over MPI at tp = 1-4: the vocabulary split for any V
#                and tp; f/g and their sequence-parallel forms in fp32/bf16/fp16 (values, in place,
#                traffic equal to comm.h's formulas, rows that do not split); a column -> tanh -> row
#                parallel MLP from the pieces equal to the unsharded one (outputs, input gradient,
#                weight-gradient slices; dense and sequence-parallel); the vocab-parallel embedding
#                and cross-entropy against float64 references at V = 1, V < tp, V % tp != 0, odd n,
#                slice-edge ids, 1e4 logit offsets, padding never read or written; bad arguments
#                and out-of-range ids refused on every rank with nothing written
#   test_tp_gpu  the same checks on a cuda device (kernels/tp.cu): nccl at 1 rank, the mpi comm
#                with staging at 2 ranks sharing a GPU (label gpu; skips without a GPU)
if(TARGET zs_tp AND ZS_HAVE_MPI)
  zs_add_test(NAME test_tp SOURCES test_tp.c test_comm_lsan.c
              LAYERS zs_common zs_memory zs_device zs_comm zs_tp RANKS 1 2 3 4 TIMEOUT 90)
  zs_add_test(NAME test_tp_gpu SOURCES test_tp_gpu.c test_comm_lsan.c
              LAYERS zs_common zs_memory zs_device zs_comm zs_tp RANKS 1 2 LABELS gpu TIMEOUT 120)
endif()
