/* The libtorch adapter's backward: a custom autograd function on each unit's
 * outputs gathers the unit again when backward reaches it, a post-accumulate-
 * grad hook per parameter reduces the unit once its last gradient has been
 * added, and a callback at the end of backward reduces what backward never
 * reached. Also ShardedSequential, the wrapper that runs it all for a
 * torch::nn::Sequential. */
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <optional>

#include "adapter_impl.hpp"

namespace zs_torch {

/* ============================================================================
 * autograd pieces
 * ========================================================================== */

namespace {

/* Identity in forward; in backward it runs as soon as the gradient of the
 * unit's output is ready, i.e. before any of the unit's own backward nodes
 * (they all depend on it). */
struct PreBackward : public torch::autograd::Function<PreBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext *ctx, const torch::Tensor &x, int64_t self,
                               int64_t unit) {
    ctx->saved_data["s"] = self;
    ctx->saved_data["u"] = unit;
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                 torch::autograd::variable_list grads) {
    auto *s = reinterpret_cast<Sharded *>(ctx->saved_data["s"].toInt());
    s->pre_backward_((int)ctx->saved_data["u"].toInt());
    return {grads[0], torch::Tensor(), torch::Tensor()};
  }
};

/* Runs after AccumulateGrad has added the parameter's gradient of this
 * backward into .grad() (the engine's buffer). AccumulateGrad runs once per
 * backward for a parameter, after every use's gradient is summed, so when it
 * has run for all of a unit's parameters no node needs the unit any more. */
struct GradReady : public torch::autograd::PostAccumulateGradHook {
  GradReady(Sharded *s, int id) : s_(s), id_(id) {}
  void operator()(const torch::autograd::Variable &) override { s_->grad_ready_(id_); }
  Sharded *s_;
  int id_;
};

} // namespace

namespace detail {

torch::Tensor tie_output(Sharded *s, int u, const torch::Tensor &t) {
  if (!t.defined() || !t.requires_grad() || !torch::GradMode::is_enabled()) return t;
  return PreBackward::apply(t, (int64_t) reinterpret_cast<intptr_t>(s), (int64_t)u);
}

void install_grad_hook(Sharded *s, const torch::Tensor &param, int id) {
  if (!param.requires_grad()) return;
  torch::autograd::impl::set_post_acc_grad_hooks(param, std::make_unique<GradReady>(s, id));
}

void remove_grad_hook(const torch::Tensor &param) {
  if (param.defined() && param.requires_grad()) torch::autograd::impl::set_post_acc_grad_hooks(param, nullptr);
}

} // namespace detail

/* ============================================================================
 * backward
 * ========================================================================== */

void Sharded::pre_backward_(int u) {
  check_deferred_();
  Unit &unit = *units_.at((size_t)u);
  if (phase_ == Phase::Forward) {
    check_(zs_backward_begin(zs_), "zs_backward_begin (backward reached unit '" + unit.name + "')");
    phase_ = Phase::Backward;
    torch::autograd::Engine::get_default_engine().queue_callback([this] { backward_done_(); });
  } else if (phase_ != Phase::Backward) {
    fail_(ZS_ERR_STATE, "zs_torch: backward reached unit '" + unit.name +
                            "' after step() or outside a training forward: run the forward again");
  }
  if (unit.gathered_bwd || unit.reduced) return; /* a unit with several outputs, or used twice */
  check_(zs_gather(zs_, unit.id), "zs_gather(unit '" + unit.name + "') for backward");
  unit.gathered_bwd = true;
  torch::NoGradGuard ng;
  if (!unit.resident) bind_data_(unit);
  bind_grads_(unit);
  unit.pending = unit.trainable;
  if (unit.pending == 0) reduce_(u);
}

void Sharded::grad_ready_(int id) {
  Param &p = *params_.at((size_t)id);
  Unit &unit = *units_.at((size_t)p.unit);
  if (!unit.gathered_bwd)
    fail_(ZS_ERR_STATE, "zs_torch: the gradient of '" + p.name + "' arrived before unit '" + unit.name +
                            "' was gathered for backward: compute the unit inside its UnitGuard and pass its "
                            "outputs through guard.output()");
  if (unit.reduced)
    fail_(ZS_ERR_STATE, "zs_torch: a second gradient of '" + p.name + "' in one round (unit '" + unit.name +
                            "' was already reduced): one backward per forward");
  if (--unit.pending == 0) reduce_(p.unit);
}

void Sharded::reduce_(int u) {
  Unit &unit = *units_.at((size_t)u);
  check_(zs_reduce(zs_, unit.id), "zs_reduce(unit '" + unit.name + "')");
  unit.reduced = true;
  torch::NoGradGuard ng;
  if (cfg_.stage >= 2)
    for (int id : unit.params) params_[(size_t)id]->tensor.mutable_grad() = torch::Tensor();
  if (!unit.resident) unbind_data_(unit);
}

/* The engine needs every unit reduced once per round: units whose parameters
 * got no gradient (unused in this forward, or frozen) are reduced here with
 * the zeros the engine put in their buffers. */
void Sharded::backward_done_() {
  for (int u = num_units() - 1; u >= 0; u--) {
    Unit &unit = *units_[(size_t)u];
    if (unit.reduced) continue;
    if (!unit.gathered_bwd) {
      check_(zs_gather(zs_, unit.id), "zs_gather(unit '" + unit.name + "') at the end of backward");
      unit.gathered_bwd = true;
    }
    reduce_(u);
  }
}

/* ============================================================================
 * ShardedSequential
 * ========================================================================== */

ShardedSequential::ShardedSequential(torch::nn::Sequential seq, const zs_config_t &cfg, zs_device_t *dev,
                                     zs_comm_t *comm, Options opts)
    : Sharded(std::static_pointer_cast<torch::nn::Module>(seq.ptr()), cfg, dev, comm, std::move(opts)),
      seq_(std::move(seq)) {
  const auto children = seq_->named_children();
  for (size_t i = 0; i < children.size(); i++) {
    int u = -1;
    for (const auto &np : children[i].value()->named_parameters(true)) {
      int pu = unit(children[i].key() + "." + np.key());
      if (u >= 0 && pu != u)
        fail_(ZS_ERR_INVALID, "zs_torch::ShardedSequential: child " + children[i].key() +
                                  " has parameters in units '" + unit_name(u) + "' and '" + unit_name(pu) +
                                  "': a child of a Sequential runs inside one unit");
      u = pu;
    }
    child_unit_.push_back(u);
  }
}

torch::Tensor ShardedSequential::forward(torch::Tensor x) {
  const bool eval = !torch::GradMode::is_enabled();
  std::optional<UnitGuard> g;
  size_t i = 0;
  for (auto it = seq_->begin(); it != seq_->end(); ++it, ++i) {
    int u = child_unit_[i];
    if (u >= 0 && !g) g.emplace(gather(u));
    x = it->forward(x);
    if (g && (i + 1 == child_unit_.size() || child_unit_[i + 1] != u)) {
      x = g->output(x);
      g->release();
      g.reset();
    }
  }
  if (eval) forward_end();
  return x;
}

} // namespace zs_torch
