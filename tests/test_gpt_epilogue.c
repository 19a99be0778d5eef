/* test_gpt_epilogue: the rule deciding whether the GPT's CUDA path fuses the
 * MLP's bias + GELU into cuBLASLt epilogues (examples/gpt/gelu_epilogue.h),
 * on the CPU: ops_cuda_lt.cu decides every fc forward and mproj dX product with
 * it, so a wrong answer here would either hand cuBLASLt an aux matrix it
 * rejects (a refused run) or leave the fused path unused where it is allowed.
 *
 * (1) ZS_GPT_EPILOGUE's values: fused, separate, auto and empty/unset; others
 *     are -1.
 * (2) gelu_epi_allowed: the aux leading dimension (the output's row length)
 *     must be a multiple of 8, operand rows multiples of 4 floats, every
 *     pointer 16-byte aligned (NULL skipped), and a cuBLASLt context must
 *     exist; each refusal names its reason.
 * (3) gelu_epi_pick: separate wins whenever asked for; auto is fused where
 *     allowed and separate (keeping the reason) elsewhere; fused refuses what
 *     is not allowed naming the reason and the way out; an unknown
 *     ZS_GPT_EPILOGUE is refused naming its value; the environment counts only
 *     under auto (opc_set_epilogue's explicit mode wins).
 * (4) the model-level question: GPT-2's shapes (C 768, 1024, 1280, 1600) and
 *     the tests' small ones (32, 64) are allowed; odd or 2 mod 4 channels not. */
#include <stdint.h>
#include <string.h>

#include "gelu_epilogue.h"
#include "harness.h"

static void test_parse(void) {
  expect_int_eq(gelu_epi_parse(NULL), GELU_EPI_AUTO);
  expect_int_eq(gelu_epi_parse(""), GELU_EPI_AUTO);
  expect_int_eq(gelu_epi_parse("auto"), GELU_EPI_AUTO);
  expect_int_eq(gelu_epi_parse("fused"), GELU_EPI_FUSED);
  expect_int_eq(gelu_epi_parse("separate"), GELU_EPI_SEPARATE);
  expect_int_eq(gelu_epi_parse("Fused"), -1);
  expect_int_eq(gelu_epi_parse("unfused"), -1);
}

static void test_allowed(void) {
  char why[256];
  _Alignas(16) static float buf[64];
  const void *ok[3] = {buf, buf + 4, NULL}; /* 16-byte aligned, NULL skipped */
  const void *off[2] = {buf, buf + 1};      /* 4 bytes past a boundary */
  expect_int_eq(gelu_epi_allowed(1, 3072, 768, 3072, ok, 3, why, sizeof why), 1);
  expect_int_eq(gelu_epi_allowed(1, 3072, 768, 768, NULL, 0, why, sizeof why), 1);
  /* no context */
  expect_int_eq(gelu_epi_allowed(0, 3072, 768, 3072, ok, 3, why, sizeof why), 0);
  expect_str_contains(why, "cuBLASLt context");
  /* aux ld 12: a multiple of 4, not of 8 */
  expect_int_eq(gelu_epi_allowed(1, 12, 4, 12, NULL, 0, why, sizeof why), 0);
  expect_str_contains(why, "row length 12 is not a multiple of 8");
  /* operand rows of 6 floats (24 bytes) */
  expect_int_eq(gelu_epi_allowed(1, 24, 6, 24, NULL, 0, why, sizeof why), 0);
  expect_str_contains(why, "16-byte multiples");
  expect_int_eq(gelu_epi_allowed(1, 24, 8, 6, NULL, 0, why, sizeof why), 0);
  /* a misaligned pointer, named by its position */
  expect_int_eq(gelu_epi_allowed(1, 3072, 768, 3072, off, 2, why, sizeof why), 0);
  expect_str_contains(why, "operand 1");
  expect_str_contains(why, "not 16-byte aligned");
  /* why may be NULL */
  expect_int_eq(gelu_epi_allowed(1, 12, 4, 12, NULL, 0, NULL, 0), 0);
}

static void test_pick(void) {
  char why[256];
  /* separate: always, allowed or not, asked explicitly or through the environment */
  expect_int_eq(gelu_epi_pick(GELU_EPI_SEPARATE, NULL, 1, "", why, sizeof why), GELU_EPI_SEPARATE);
  expect_int_eq(gelu_epi_pick(GELU_EPI_AUTO, "separate", 1, "", why, sizeof why), GELU_EPI_SEPARATE);
  expect_str_contains(why, "ZS_GPT_EPILOGUE=separate");
  /* auto: fused where allowed (why emptied), separate elsewhere with the reason */
  strcpy(why, "stale");
  expect_int_eq(gelu_epi_pick(GELU_EPI_AUTO, NULL, 1, "", why, sizeof why), GELU_EPI_FUSED);
  expect_int_eq(why[0], 0);
  expect_int_eq(gelu_epi_pick(GELU_EPI_AUTO, "auto", 1, "", why, sizeof why), GELU_EPI_FUSED);
  expect_int_eq(gelu_epi_pick(GELU_EPI_AUTO, "", 0, "aux ld 12", why, sizeof why), GELU_EPI_SEPARATE);
  expect_str_contains(why, "aux ld 12");
  /* fused: where allowed; refused elsewhere, with the reason and the way out */
  expect_int_eq(gelu_epi_pick(GELU_EPI_FUSED, NULL, 1, "", why, sizeof why), GELU_EPI_FUSED);
  expect_int_eq(gelu_epi_pick(GELU_EPI_AUTO, "fused", 1, "", why, sizeof why), GELU_EPI_FUSED);
  expect_int_eq(gelu_epi_pick(GELU_EPI_AUTO, "fused", 0, "aux ld 12", why, sizeof why), -1);
  expect_str_contains(why, "aux ld 12");
  expect_str_contains(why, "ZS_GPT_EPILOGUE=separate or auto");
  expect_int_eq(gelu_epi_pick(GELU_EPI_FUSED, NULL, 0, NULL, why, sizeof why), -1);
  expect_str_contains(why, "not allowed");
  /* an unknown value: refused, named */
  expect_int_eq(gelu_epi_pick(GELU_EPI_AUTO, "epilogue", 1, "", why, sizeof why), -1);
  expect_str_contains(why, "ZS_GPT_EPILOGUE=epilogue");
  /* an explicit mode is not overridden by the environment */
  expect_int_eq(gelu_epi_pick(GELU_EPI_SEPARATE, "fused", 1, "", why, sizeof why), GELU_EPI_SEPARATE);
  expect_int_eq(gelu_epi_pick(GELU_EPI_FUSED, "separate", 1, "", why, sizeof why), GELU_EPI_FUSED);
  expect_int_eq(gelu_epi_pick(GELU_EPI_FUSED, "bogus", 1, "", why, sizeof why), GELU_EPI_FUSED);
}

static void test_model(void) {
  char why[256];
  const int yes[] = {32, 64, 768, 1024, 1280, 1600, 4, 12};
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
    if (!gelu_epi_allowed_model(1, yes[i], why, sizeof why)) ZS_T_REPORT("C %d refused: %s", yes[i], why);
  }
  expect_int_eq(gelu_epi_allowed_model(1, 33, why, sizeof why), 0); /* 4C = 132: not a multiple of 8 */
  expect_str_contains(why, "channels must be even");
  expect_int_eq(gelu_epi_allowed_model(1, 34, why, sizeof why), 0); /* 4C = 136 fine, rows of 34 floats not */
  expect_str_contains(why, "multiple of 4");
  expect_int_eq(gelu_epi_allowed_model(0, 768, why, sizeof why), 0);
}

int main(void) {
  zs_test_run(test_parse);
  zs_test_run(test_allowed);
  zs_test_run(test_pick);
  zs_test_run(test_model);
  return zs_test_finish();
}
