/* The gradient-clip coefficient, one rule for every caller (the engine's step,
 * the parameter server's sync and async paths): torch.nn.utils.clip_grad_norm_'s,
 * in its fp32 arithmetic, so a clipped step here and there gives the same bits. */
#include <math.h>

#include "optim/optim.h"

float zs__clip_coef(float max_norm, double norm) {
  if (!(max_norm > 0)) return 1.0f; /* off: 0, negative or NaN */
  /* a NaN quotient (NaN norm, or inf / inf) gives 1: fminf returns the number */
  return fminf(1.0f, max_norm / ((float)norm + 1e-6f));
}
