/* The gradient-clip coefficient (src/optim/clip.c), which the engine's step and
 * both parameter-server paths share: off for max_norm <= 0, 1 below the limit,
 * max_norm / (norm + 1e-6) in fp32 above it, and what NaN and infinite norms
 * give. Each case is also compared, bit for bit, with the expression the three
 * callers wrote before they shared it. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "common/common.h"
#include "harness.h"
#include "optim/optim.h"

/* the callers' former inline rule, kept here as the reference */
static float old_rule(float clip, double norm) {
  float coef = 1.0f;
  if (clip > 0) coef = fminf(1.0f, clip / ((float)norm + 1e-6f));
  return coef;
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static void test_off(void) {
  expect_true(same_bits(zs__clip_coef(0.0f, 5.0), 1.0f));
  expect_true(same_bits(zs__clip_coef(-0.0f, 5.0), 1.0f));
  expect_true(same_bits(zs__clip_coef(-1.0f, 5.0), 1.0f));
  expect_true(same_bits(zs__clip_coef(NAN, 5.0), 1.0f));
  expect_true(same_bits(zs__clip_coef(0.0f, NAN), 1.0f)); /* off: the norm is not looked at */
  expect_true(same_bits(zs__clip_coef(0.0f, INFINITY), 1.0f));
}

static void test_below(void) {
  /* norm + 1e-6 <= max: the quotient is >= 1 and the gradients are left alone */
  expect_true(same_bits(zs__clip_coef(1.0f, 0.0), 1.0f));
  expect_true(same_bits(zs__clip_coef(1.0f, 0.5), 1.0f));
  expect_true(same_bits(zs__clip_coef(1.0f, 0.999), 1.0f));
  expect_true(same_bits(zs__clip_coef(INFINITY, 1e30), 1.0f));
}

static void test_above(void) {
  float c = zs__clip_coef(1.0f, 4.0);
  expect_true(same_bits(c, 1.0f / (4.0f + 1e-6f)));
  expect_true(c < 1.0f && c > 0.2499f);
  /* at the limit itself the 1e-6 makes it just below 1 (torch's rule) */
  expect_true(zs__clip_coef(1.0f, 1.0) < 1.0f);
  /* the norm is rounded to float before the division */
  double norm = 3.0000000001;
  expect_true(same_bits(zs__clip_coef(0.5f, norm), 0.5f / ((float)norm + 1e-6f)));
}

static void test_nonfinite(void) {
  /* NaN: clip / NaN is NaN and fminf returns the number, 1 */
  expect_true(same_bits(zs__clip_coef(1.0f, NAN), 1.0f));
  expect_true(same_bits(zs__clip_coef(1.0f, -NAN), 1.0f));
  /* inf, or a double beyond float's range: 0 */
  expect_true(same_bits(zs__clip_coef(1.0f, INFINITY), 0.0f));
  expect_true(same_bits(zs__clip_coef(1.0f, 1e300), 0.0f));
  /* inf / inf is NaN: 1 */
  expect_true(same_bits(zs__clip_coef(INFINITY, INFINITY), 1.0f));
}

static void test_matches_old_rule(void) {
  const float clips[] = {-1.0f, 0.0f, 1e-8f, 0.25f, 1.0f, 3.5f, 1e6f, FLT_MAX, INFINITY, NAN};
  const double norms[] = {0.0, -0.0, 1e-12, 1e-7, 0.1, 0.25, 1.0, 3.4999999, 3.5, 1e6, 1e38, 1e39, 1e300,
                          INFINITY, -INFINITY, NAN};
  for (size_t i = 0; i < sizeof clips / sizeof *clips; i++)
    for (size_t j = 0; j < sizeof norms / sizeof *norms; j++) {
      float got = zs__clip_coef(clips[i], norms[j]), want = old_rule(clips[i], norms[j]);
      if (!same_bits(got, want) && !(isnan(got) && isnan(want)))
        ZS_T_REPORT("expect failed: clip %g norm %g gives %a, the old rule %a", (double)clips[i], norms[j],
                    (double)got, (double)want);
    }
}

int main(void) {
  zs_test_run(test_off);
  zs_test_run(test_below);
  zs_test_run(test_above);
  zs_test_run(test_nonfinite);
  zs_test_run(test_matches_old_rule);
  return zs_test_finish();
}
