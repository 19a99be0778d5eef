/* zeroshard/torch.hpp: ZeRO stages 0-3 for modules of the PyTorch C++ frontend
 * (libtorch), on the zeroshard engine. C++17 (the library is built with the
 * standard the installed libtorch headers ask for).
 *
 * A Sharded wraps a torch::nn::Module: it cuts the module into units (one per
 * direct child with parameters, or the list in Options::units), declares every
 * parameter to a zeroshard engine under its named_parameters() name, sets the
 * engine up with the module's current values, and from then on the module's
 * parameter and gradient tensors are views of the engine's buffers:
 *   - stages 0-2 (and stage-3 persistent units): each parameter tensor is a view
 *     of the engine's resident buffer from construction on (same TensorImpl as
 *     before, so module->fc->weight and the optimizer-free training loop keep
 *     working); its values change at each step().
 *   - stage 3: a unit's parameters are views of its gathered buffer between the
 *     unit's gather and its release (forward) or reduction (backward), and
 *     tensors of 0 elements otherwise. Autograd keeps working across the
 *     release: what forward saved refers to a storage object of the adapter
 *     whose data pointer is bound to the gathered buffer again before the
 *     unit's backward.
 *   - gradients: before a unit's backward its parameters' .grad() become views
 *     of the engine's gradient buffer, into which autograd accumulates in place
 *     (AccumulateGrad adds into a defined .grad()); no second full-size
 *     gradient exists. At stages 2-3 .grad() is undefined again once the unit is
 *     reduced; at 0-1 it stays a view of the resident buffer.
 *
 * Forward and backward: run each unit's forward inside a UnitGuard (or use
 * ShardedSequential, which does it for every child). The guard gathers the unit
 * and releases it when it ends; guard.output(t) ties a unit output into
 * autograd so that backward, on reaching it, calls zs_backward_begin (first
 * unit), gathers the unit again and binds the gradient views; a post-
 * accumulate-grad hook on each parameter counts arrivals and calls zs_reduce
 * as soon as the unit's last gradient has been added, so each reduction
 * overlaps the rest of backward. A callback at the end of backward reduces the
 * units some of whose parameters got no gradient (or that backward never
 * reached), as the engine needs every unit reduced once per round.
 *
 * The engine's config drives the rest: grad_accum rounds (forward + backward)
 * per step(), clipping, param dtype (bf16: the parameters become bf16 tensors,
 * the fp32 master lives in the engine), offload and the delayed update; step()
 * (zs_step) replaces torch::optim. Each round's loss should be the mean over
 * that rank's micro-batch; the engine averages over ranks and rounds.
 *
 * Errors: libtorch reports failure by exception, and autograd carries an
 * exception from a backward hook out of loss.backward(), which a status return
 * could not cross; so every adapter call that fails throws zs_torch::Error,
 * whose status() is the engine's zs_status_t and whose what() names the call,
 * the unit or parameter, and the engine's detailed message. Nothing here exits
 * or aborts.
 *
 * Devices: CPU tensors on the cpu device (zs_device_create_cpu). A module whose
 * parameters live elsewhere is ZS_ERR_UNSUPPORTED.
 *
 * What construction fixes: rank 0's parameter values and buffers are taken on
 * every rank (buffers again after each step(); they are not checkpointed); the
 * parameters, their dtype and requires_grad are read once (changing them after
 * wrapping is ZS_ERR_STATE at the next forward or step()); tied weights are
 * ZS_ERR_UNSUPPORTED and a module wrapped twice ZS_ERR_STATE. docs/libtorch.md
 * ("What the adapter expects of a trainer") has the rest.
 *
 * Threads: the engine is driven from one thread; on CPU tensors libtorch runs
 * backward on the thread that calls backward(), so its hooks call the engine
 * from that thread too.
 */
#ifndef ZEROSHARD_TORCH_HPP
#define ZEROSHARD_TORCH_HPP

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "zeroshard/checkpoint.h"
#include "zeroshard/config_load.h" /* the config from a JSON file or ZS_* variables, as C programs make it */
#include "zeroshard/engine.h"

namespace zs_torch {

class Error : public std::runtime_error {
 public:
  Error(zs_status_t st, const std::string &msg) : std::runtime_error(msg), status_(st) {}
  zs_status_t status() const noexcept { return status_; }

 private:
  zs_status_t status_;
};

/* A unit: the parameters of the listed submodules (dotted paths as in
 * named_modules(), e.g. "blocks.0"; "" is the root's own parameters, not its
 * children's), gathered and reduced together. */
struct UnitSpec {
  std::string name;
  std::vector<std::string> modules;
};

struct Options {
  /* Empty: one unit per direct child that holds parameters, in registration
   * order, plus a first unit "<root>" for parameters registered on the module
   * itself. Otherwise every parameter must fall in exactly one unit. */
  std::vector<UnitSpec> units;
  /* Parameters to declare ZS_PARAM_NO_DECAY (no weight decay), by name and
   * tensor; empty: none. no_decay_vectors() is the common choice. */
  std::function<bool(const std::string &, const torch::Tensor &)> no_decay;
  /* Parameter groups, by name and tensor: {lr_scale, wd_scale} multiplying the
   * learning rate and the weight decay of that parameter (zs_param_set_scales,
   * declared before setup, so every rank must give the same); empty: {1, 1}
   * for all. torch::optim's param groups with their own "lr" map to this. */
  std::function<std::pair<float, float>(const std::string &, const torch::Tensor &)> scales;
};

/* Biases and normalization weights: every parameter of at most one dimension. */
inline bool no_decay_vectors(const std::string &, const torch::Tensor &t) { return t.dim() <= 1; }

class Sharded;

/* Holds unit u gathered for its forward (move-only). output(t) returns t tied
 * into autograd so that backward gathers the unit again and reduces it; pass
 * every tensor output of the unit through it (and use its return value). */
class UnitGuard {
 public:
  UnitGuard(UnitGuard &&o) noexcept : s_(o.s_), u_(o.u_) { o.s_ = nullptr; }
  UnitGuard &operator=(UnitGuard &&) = delete;
  ~UnitGuard();
  torch::Tensor output(const torch::Tensor &t);
  /* Releases now (the destructor does it otherwise; a failure there is
   * reported by the adapter's next call). */
  void release();

 private:
  friend class Sharded;
  UnitGuard(Sharded *s, int u) : s_(s), u_(u) {}
  Sharded *s_;
  int u_;
};

class Sharded {
 public:
  /* Makes an engine from cfg (copied) on dev and comm (which must outlive this
   * object), declares the module and sets the engine up (collective over comm:
   * every rank must pass the same module structure). */
  Sharded(std::shared_ptr<torch::nn::Module> module, const zs_config_t &cfg, zs_device_t *dev, zs_comm_t *comm,
          Options opts = {});
  /* Declares into an engine the caller made (from cfg, e.g. zs_engine_create_mesh)
   * and has not set up yet, and takes it over: the engine writes pointer slots
   * that live in this object until zs_engine_destroy, so this object destroys
   * it (also when the constructor throws). */
  Sharded(std::shared_ptr<torch::nn::Module> module, zs_engine_t *engine, const zs_config_t &cfg,
          Options opts = {});
  template <typename T>
  Sharded(const torch::nn::ModuleHolder<T> &m, const zs_config_t &cfg, zs_device_t *dev, zs_comm_t *comm,
          Options opts = {})
      : Sharded(std::static_pointer_cast<torch::nn::Module>(m.ptr()), cfg, dev, comm, std::move(opts)) {}
  /* The module's parameters become tensors of 0 elements (their storage was the
   * engine's): take state_dict() first to keep the values. Removes the hooks. */
  virtual ~Sharded();
  Sharded(const Sharded &) = delete;
  Sharded &operator=(const Sharded &) = delete;

  zs_engine_t *engine() const { return zs_; }
  torch::nn::Module &module() const { return *module_; }
  int num_units() const { return (int)units_.size(); }
  const std::string &unit_name(int u) const;
  /* The unit holding the submodule or parameter of that name; throws
   * ZS_ERR_INVALID naming the units there are. */
  int unit(const std::string &name) const;
  int num_params() const { return (int)params_.size(); }
  const std::string &param_name(int p) const;
  /* The engine's current addresses of a parameter and its gradient (NULL where
   * the engine holds none now): what the module's tensors are views of. */
  const void *param_address(int p) const;
  const void *grad_address(int p) const;

  /* Gathers unit u for its forward; the guard releases it when it ends. */
  UnitGuard gather(int u);
  UnitGuard gather(const std::string &unit_name);
  /* Ends a forward-only pass (evaluation, e.g. under torch::NoGradGuard). */
  void forward_end();
  /* The optimizer step (zs_step) after grad_accum rounds; clears nothing in the
   * module (the engine zeroes its gradient buffers itself). */
  zs_step_report_t step();
  /* Lands a delayed parameter update (zs_flush). */
  void flush();

  /* Full fp32 copies of every parameter, by named_parameters() name, from the
   * fp32 master (collective at stages 1-3). */
  std::vector<std::pair<std::string, torch::Tensor>> state_dict();
  /* zs_checkpoint_save / _load and zs_export_safetensors (collective; tensor
   * names are the module's parameter names). A module with buffers (BatchNorm's
   * running statistics) has them saved too, rank 0's, as dir/buffers.step<N>.pt
   * (a torch::serialize archive by named_buffers() name, N the step; with
   * model-parallel parts, each part's rank 0 its own, buffers.step<N>.mp<k>of<M>.pt,
   * read back in the same layout only), written
   * before the engine's files; load() reads the file of the step it loaded and
   * gives every rank its values (a buffer missing from it, or of another shape
   * or dtype, is ZS_ERR_MISMATCH on every rank and changes no buffer; a
   * checkpoint without the file, of an older adapter, leaves the buffers as
   * they are, with a warning). */
  void save(const std::string &dir);
  void load(const std::string &dir);
  void export_safetensors(const std::string &path);
  zs_memory_stats_t memory_stats() const;

  /* Called by the autograd nodes and hooks (not for trainers). */
  void pre_backward_(int u);
  void grad_ready_(int p);
  void backward_done_();

 protected:
  struct Param;
  struct Unit;
  enum class Phase { Idle, Forward, Backward };

  void declare_and_setup_(Options opts);
  void check_(zs_status_t st, const std::string &what) const;
  [[noreturn]] void fail_(zs_status_t st, const std::string &msg) const;
  void begin_forward_unit_(int u);
  void end_forward_unit_(int u);
  void bind_data_(Unit &unit);
  void unbind_data_(Unit &unit);
  void bind_grads_(Unit &unit);
  void reduce_(int u);
  void check_deferred_();
  void check_params_(const Unit &unit) const;
  const Param &param_at_(int p, const char *fn) const;
  void unregister_();
  void rebind_resident_();
  void sync_buffers_(const std::string &when);
  void rank0_outcome_(zs_status_t st, const std::string &why, const std::string &what);
  void from_rank0_(const torch::Tensor &t, const std::string &what);

  std::shared_ptr<torch::nn::Module> module_;
  zs_engine_t *zs_ = nullptr;
  bool owns_engine_ = false;
  zs_config_t cfg_;
  std::vector<std::unique_ptr<Param>> params_; /* stable addresses: the engine writes the slots */
  std::vector<std::unique_ptr<Unit>> units_;
  Phase phase_ = Phase::Idle;
  bool callback_queued_ = false;
  bool registered_ = false; /* the module is in the wrapped-modules registry */
  zs_status_t deferred_st_ = ZS_OK; /* a failure in a destructor, reported by the next call */
  std::string deferred_msg_;

  friend class UnitGuard;
};

/* A torch::nn::Sequential whose children with parameters are the units, in
 * order; children without parameters run unsharded. forward() gathers each
 * unit around its child's forward; under torch::NoGradGuard it is an
 * evaluation pass (zs_forward_end at the end). */
class ShardedSequential : public Sharded {
 public:
  ShardedSequential(torch::nn::Sequential seq, const zs_config_t &cfg, zs_device_t *dev, zs_comm_t *comm,
                    Options opts = {});
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::nn::Sequential seq_;
  std::vector<int> child_unit_; /* per child: its unit, or -1 */
};

} // namespace zs_torch

#endif
