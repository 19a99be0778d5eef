/* gelu_epilogue.h: when the CUDA path may fuse the MLP's bias + GELU into the
 * fc GEMM (cuBLASLt's GELU_AUX_BIAS epilogue) and the GELU's gradient into the
 * mproj backward's dX GEMM (DGELU), in plain C: ops_cuda_lt.cu decides with these
 * functions before every such product, the trainer names the pick in its
 * header, and tests/test_gpt_epilogue.c checks the rule on the CPU.
 *
 * The limits are cuBLASLt's (cublasLt.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD):
 * the GELU input ("aux") matrix's leading dimension must be divisible by 8;
 * here it is the output's row length (4C: fc and d4 are [N,4C] row-major). The
 * kernels are asked for (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES) and given
 * 16-byte aligned operands whose rows stay 16-byte aligned: every pointer a
 * multiple of 16 bytes, every row length a multiple of 4 floats. The bias and
 * aux pointers have no alignment preference of their own (the heuristic infers
 * it from their values), so they are held to 16 bytes too. Anything else takes
 * the separate path (a GEMM, a bias pass, a GELU pass), which has no limits. */
#ifndef ZS_EXAMPLES_GPT_GELU_EPILOGUE_H
#define ZS_EXAMPLES_GPT_GELU_EPILOGUE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The path: AUTO reads ZS_GPT_EPILOGUE (fused | separate | auto) and is fused
 * where allowed, separate elsewhere; FUSED refuses what is not allowed;
 * SEPARATE is the unfused path (the parity and A/B path). */
enum { GELU_EPI_AUTO = 0, GELU_EPI_FUSED = 1, GELU_EPI_SEPARATE = 2 };

/* ZS_GPT_EPILOGUE's value as a mode: NULL, "" and "auto" give AUTO; -1 for
 * anything but fused, separate and auto. */
static inline int gelu_epi_parse(const char *s) {
  if (!s || !*s || !strcmp(s, "auto")) return GELU_EPI_AUTO;
  if (!strcmp(s, "fused")) return GELU_EPI_FUSED;
  if (!strcmp(s, "separate")) return GELU_EPI_SEPARATE;
  return -1;
}

/* May cuBLASLt's epilogue take a product whose output and aux are `ld_out`
 * floats a row, whose operands are `lda` and `ldb` floats a row, at the
 * `nptrs` pointers ptrs (NULL entries are skipped: the setup asks with shapes
 * only)? have_lt: a cuBLASLt context exists (opc_lt_init). 1 yes; 0 no, with
 * the reason in why (n bytes; why may be NULL). */
static inline int gelu_epi_allowed(int have_lt, int64_t ld_out, int64_t lda, int64_t ldb, const void *const *ptrs,
                                   int nptrs, char *why, size_t n) {
  if (!have_lt) {
    if (why) snprintf(why, n, "no cuBLASLt context on this device (opc_lt_init not called, or it failed)");
    return 0;
  }
  if (ld_out % 8) {
    if (why)
      snprintf(why, n, "the GELU input's row length %lld is not a multiple of 8 (cuBLASLt's aux leading dimension "
                       "rule; the MLP's 4C: channels must be even)", (long long)ld_out);
    return 0;
  }
  if (lda % 4 || ldb % 4) {
    if (why)
      snprintf(why, n, "operand rows of %lld and %lld floats are not all 16-byte multiples (channels must be a "
                       "multiple of 4)", (long long)lda, (long long)ldb);
    return 0;
  }
  for (int i = 0; i < nptrs; i++)
    if (ptrs[i] && (uintptr_t)ptrs[i] % 16) {
      if (why) snprintf(why, n, "operand %d at %p is not 16-byte aligned", i, ptrs[i]);
      return 0;
    }
  return 1;
}

/* The path for one product under `mode` (GELU_EPI_*; env: ZS_GPT_EPILOGUE's
 * value, read when mode is AUTO) given gelu_epi_allowed's answer `allowed` and
 * its reason: GELU_EPI_FUSED or GELU_EPI_SEPARATE; -1 refused (an unknown
 * ZS_GPT_EPILOGUE, or FUSED where not allowed), with the reason in why. Under
 * AUTO a product that is not allowed runs separate and why keeps the reason. */
static inline int gelu_epi_pick(int mode, const char *env, int allowed, const char *reason, char *why, size_t n) {
  if (mode == GELU_EPI_AUTO) {
    mode = gelu_epi_parse(env);
    if (mode < 0) {
      if (why) snprintf(why, n, "ZS_GPT_EPILOGUE=%s: expected fused, separate or auto", env);
      return -1;
    }
  }
  if (mode == GELU_EPI_SEPARATE) {
    if (why) snprintf(why, n, "ZS_GPT_EPILOGUE=separate");
    return GELU_EPI_SEPARATE;
  }
  if (allowed) {
    if (why && n) why[0] = 0;
    return GELU_EPI_FUSED;
  }
  if (mode == GELU_EPI_AUTO) {
    if (why) snprintf(why, n, "%s", reason ? reason : "not allowed");
    return GELU_EPI_SEPARATE;
  }
  if (why)
    snprintf(why, n, "fused bias+GELU epilogue refused: %s: ZS_GPT_EPILOGUE=separate or auto takes the separate path",
             reason ? reason : "not allowed");
  return -1;
}

/* The model-level question the trainer asks at setup, from shapes alone: both
 * products of a block with C channels (the fc forward: out and aux [N,4C], x
 * [N,C], W [C,4C]; the mproj dX: out and aux [N,4C], dout [N,C], W [4C,C]). */
static inline int gelu_epi_allowed_model(int have_lt, int C, char *why, size_t n) {
  return gelu_epi_allowed(have_lt, 4 * (int64_t)C, C, 4 * (int64_t)C, NULL, 0, why, n) &&
         gelu_epi_allowed(have_lt, 4 * (int64_t)C, C, C, NULL, 0, why, n);
}

#endif
