/* Internal to the libtorch adapter: what Sharded keeps per parameter and unit,
 * and the autograd pieces of autograd.cpp. */
#ifndef ZEROSHARD_TORCH_ADAPTER_IMPL_HPP
#define ZEROSHARD_TORCH_ADAPTER_IMPL_HPP

#include "zeroshard/torch.hpp"

namespace zs_torch {

struct Sharded::Param {
  std::string name;
  torch::Tensor tensor;         /* the module's parameter (its TensorImpl is kept) */
  std::vector<int64_t> shape;
  int unit = -1;                /* index into units_ */
  bool trainable = true;        /* requires_grad at construction (else ZS_PARAM_FROZEN) */
  void *pslot = nullptr;        /* written by the engine: parameter address or NULL */
  void *gslot = nullptr;        /* ... gradient address or NULL */
  c10::Storage storage;         /* one for the adapter's life, bound to pslot while valid */
  torch::Tensor view;           /* shape over storage */
  size_t bytes = 0;
  torch::Dtype dtype = torch::kFloat;
};

struct Sharded::Unit {
  std::string name;
  int id = -1;                  /* the engine's unit id */
  std::vector<int> params;      /* parameter ids (= indices into params_) */
  int trainable = 0;            /* parameters that take gradients */
  bool resident = false;        /* parameters valid from setup on (stages 0-2, persistent) */
  /* this backward round */
  bool gathered_bwd = false;    /* zs_gather done in backward */
  bool reduced = false;         /* zs_reduce done */
  int pending = 0;              /* trainable parameters whose gradient has not arrived yet */
};

namespace detail {
/* t tied into autograd: its backward, run when t's gradient is ready (before
 * the unit's own backward), calls s->pre_backward_(u). */
torch::Tensor tie_output(Sharded *s, int u, const torch::Tensor &t);
/* A post-accumulate-grad hook on the parameter: s->grad_ready_(param). */
void install_grad_hook(Sharded *s, const torch::Tensor &param, int id);
void remove_grad_hook(const torch::Tensor &param);
} // namespace detail

} // namespace zs_torch

#endif
