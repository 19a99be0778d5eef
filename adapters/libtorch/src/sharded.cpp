/* The libtorch adapter: a torch::nn::Module's parameters and gradients as views
 * of a zeroshard engine's buffers (zeroshard/torch.hpp says what a trainer sees).
 * Declaration and setup, binding tensors to the engine's pointer slots, the
 * step and the checkpoint calls; autograd.cpp has the backward machinery. */
#include "zeroshard/torch.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "adapter_impl.hpp"

namespace zs_torch {

/* ============================================================================
 * errors
 * ========================================================================== */

void Sharded::fail_(zs_status_t st, const std::string &msg) const { throw Error(st, msg); }

void Sharded::check_(zs_status_t st, const std::string &what) const {
  if (st == ZS_OK) return;
  const char *detail = zs_ ? zs_engine_last_error(zs_) : "";
  if (!detail || !*detail) detail = zs_last_error();
  fail_(st, what + ": " + zs_status_name(st) + ": " + (detail && *detail ? detail : zs_status_string(st)));
}

void Sharded::check_deferred_() {
  if (deferred_st_ == ZS_OK) return;
  zs_status_t st = deferred_st_;
  deferred_st_ = ZS_OK;
  fail_(st, deferred_msg_);
}

/* ============================================================================
 * declaration and setup
 * ========================================================================== */

static torch::Dtype torch_dtype(zs_dtype_t dt) {
  switch (dt) {
  case ZS_BF16: return torch::kBFloat16;
  case ZS_FP16: return torch::kHalf;
  default: return torch::kFloat;
  }
}

/* Modules wrapped now: a second Sharded over one module would rebind the same
 * tensors to another engine's buffers. */
static std::mutex g_wrapped_mu;
static std::set<const torch::nn::Module *> g_wrapped;

/* Setup asks for the ranges this rank stores: copied from the module's values. */
static int init_from_module(void *user, int param, int64_t off, int64_t n, float *dst) {
  auto *src = static_cast<std::vector<torch::Tensor> *>(user);
  if (param < 0 || param >= (int)src->size()) return 1;
  const torch::Tensor &t = (*src)[(size_t)param];
  if (off < 0 || n < 0 || off + n > t.numel()) return 1;
  std::memcpy(dst, t.data_ptr<float>() + off, (size_t)n * sizeof(float));
  return 0;
}

Sharded::Sharded(std::shared_ptr<torch::nn::Module> module, const zs_config_t &cfg, zs_device_t *dev,
                 zs_comm_t *comm, Options opts)
    : module_(std::move(module)) {
  if (!module_) fail_(ZS_ERR_INVALID, "zs_torch::Sharded: the module is null");
  if (!dev || !comm) fail_(ZS_ERR_INVALID, "zs_torch::Sharded: the device and comm must not be NULL");
  if (zs_device_kind(dev) != ZS_DEVICE_CPU)
    fail_(ZS_ERR_UNSUPPORTED, "zs_torch::Sharded: the adapter drives CPU tensors on a cpu device "
                              "(zs_device_create_cpu); a cuda device needs libtorch's CUDA streams bound to "
                              "the engine, which this adapter does not do yet");
  check_(zs_engine_create(&zs_, &cfg, dev, comm), "zs_torch::Sharded: zs_engine_create");
  owns_engine_ = true;
  cfg_ = cfg;
  try {
    declare_and_setup_(std::move(opts));
  } catch (...) {
    unregister_();
    zs_engine_destroy(zs_);
    zs_ = nullptr;
    throw;
  }
}

Sharded::Sharded(std::shared_ptr<torch::nn::Module> module, zs_engine_t *engine, const zs_config_t &cfg,
                 Options opts)
    : module_(std::move(module)), zs_(engine), owns_engine_(true), cfg_(cfg) {
  if (!zs_) fail_(ZS_ERR_INVALID, "zs_torch::Sharded: the engine is NULL");
  try {
    if (!module_) fail_(ZS_ERR_INVALID, "zs_torch::Sharded: the module is null");
    declare_and_setup_(std::move(opts));
  } catch (...) {
    unregister_();
    zs_engine_destroy(zs_); /* while the slots it writes still exist */
    zs_ = nullptr;
    throw;
  }
}

/* Which unit each parameter falls in: by the units' module paths (the longest
 * matching path wins, so "blocks" and "blocks.0" may both be listed), or one
 * unit per direct child. */
static std::vector<UnitSpec> default_units(const torch::nn::Module &m) {
  std::vector<UnitSpec> units;
  if (!m.named_parameters(false).is_empty()) units.push_back({"<root>", {""}});
  for (const auto &c : m.named_children())
    if (!c.value()->named_parameters(true).is_empty()) units.push_back({c.key(), {c.key()}});
  return units;
}

void Sharded::declare_and_setup_(Options opts) {
  torch::nn::Module &m = *module_;
  {
    std::lock_guard<std::mutex> lk(g_wrapped_mu);
    if (!g_wrapped.insert(&m).second)
      fail_(ZS_ERR_STATE, "zs_torch::Sharded: this module is already wrapped by another zs_torch::Sharded (its "
                          "parameters are that engine's buffers): destroy that one first, or wrap another module");
    registered_ = true;
  }
  std::vector<UnitSpec> specs = opts.units.empty() ? default_units(m) : opts.units;
  if (specs.empty()) fail_(ZS_ERR_INVALID, "zs_torch::Sharded: the module has no parameters");

  /* every listed path must exist; map path -> unit */
  auto modules = m.named_modules("", true);
  std::set<std::string> unit_names;
  std::vector<std::pair<std::string, int>> paths; /* module path, unit index */
  for (size_t u = 0; u < specs.size(); u++) {
    if (!unit_names.insert(specs[u].name).second)
      fail_(ZS_ERR_INVALID, "zs_torch::Sharded: unit name '" + specs[u].name + "' is used twice");
    if (specs[u].modules.empty())
      fail_(ZS_ERR_INVALID, "zs_torch::Sharded: unit '" + specs[u].name + "' lists no modules");
    for (const auto &path : specs[u].modules) {
      if (!path.empty() && !modules.contains(path)) {
        std::ostringstream os;
        os << "zs_torch::Sharded: unit '" << specs[u].name << "' names module '" << path
           << "', which the model does not have (its direct children:";
        for (const auto &c : m.named_children()) os << " '" << c.key() << "'";
        os << ")";
        fail_(ZS_ERR_INVALID, os.str());
      }
      paths.emplace_back(path, (int)u);
    }
  }
  auto unit_of = [&](const std::string &pname) {
    int best = -1;
    size_t best_len = 0;
    for (const auto &pu : paths) {
      const std::string &path = pu.first;
      bool match = path.empty() ? pname.find('.') == std::string::npos
                                : pname.size() > path.size() && pname.compare(0, path.size(), path) == 0 &&
                                      pname[path.size()] == '.';
      if (match && (best < 0 || path.size() >= best_len)) {
        if (best >= 0 && path.size() == best_len && best != pu.second)
          fail_(ZS_ERR_INVALID, "zs_torch::Sharded: parameter '" + pname + "' falls in two units ('" +
                                    specs[(size_t)best].name + "' and '" + specs[(size_t)pu.second].name +
                                    "'): list each module once");
        best = pu.second;
        best_len = path.size();
      }
    }
    return best;
  };

  /* group the parameters by unit, each unit's in named_parameters() order */
  std::vector<std::vector<std::pair<std::string, torch::Tensor>>> by_unit(specs.size());
  std::map<const c10::TensorImpl *, std::string> seen; /* tied weights: one tensor, two names */
  for (const auto &np : m.named_parameters(true)) {
    const torch::Tensor &t = np.value();
    auto tied = seen.emplace(t.unsafeGetTensorImpl(), np.key());
    if (!tied.second)
      fail_(ZS_ERR_UNSUPPORTED, "zs_torch::Sharded: parameters '" + tied.first->second + "' and '" + np.key() +
                                    "' are one tensor (tied weights): the adapter declares every parameter on its "
                                    "own and cannot bind two names to one buffer; untie them before wrapping");
    if (!t.device().is_cpu())
      fail_(ZS_ERR_UNSUPPORTED, "zs_torch::Sharded: parameter '" + np.key() + "' is on " + t.device().str() +
                                    ": the adapter shards CPU modules");
    if (!t.is_floating_point())
      fail_(ZS_ERR_INVALID, "zs_torch::Sharded: parameter '" + np.key() + "' is not floating point");
    int u = unit_of(np.key());
    if (u < 0) {
      std::ostringstream os;
      os << "zs_torch::Sharded: parameter '" << np.key() << "' is in none of the units (";
      for (size_t i = 0; i < specs.size(); i++) os << (i ? ", " : "") << "'" << specs[i].name << "'";
      os << "): list the module that holds it";
      fail_(ZS_ERR_INVALID, os.str());
    }
    by_unit[(size_t)u].emplace_back(np.key(), t);
  }

  std::vector<torch::Tensor> init_src;
  for (size_t u = 0; u < specs.size(); u++) {
    if (by_unit[u].empty())
      fail_(ZS_ERR_INVALID, "zs_torch::Sharded: unit '" + specs[u].name + "' holds no parameters");
    auto unit = std::make_unique<Unit>();
    unit->name = specs[u].name;
    check_(zs_unit_add(zs_, unit->name.c_str(), &unit->id), "zs_unit_add('" + unit->name + "')");
    for (auto &np : by_unit[u]) {
      auto p = std::make_unique<Param>();
      p->name = np.first;
      p->tensor = np.second;
      p->unit = (int)units_.size();
      p->shape = np.second.sizes().vec();
      p->trainable = np.second.requires_grad();
      unsigned flags = ZS_PARAM_DEFAULT;
      if (opts.no_decay && opts.no_decay(p->name, p->tensor)) flags |= ZS_PARAM_NO_DECAY;
      if (!p->trainable) flags |= ZS_PARAM_FROZEN;
      std::vector<int64_t> shape = p->shape;
      if (shape.empty()) shape.push_back(1); /* a 0-d parameter is one element */
      int id = -1;
      check_(zs_param_add(zs_, unit->id, p->name.c_str(), (int)shape.size(), shape.data(), flags, &p->pslot,
                          p->trainable ? &p->gslot : nullptr, &id),
             "zs_param_add('" + p->name + "')");
      if (id != (int)params_.size())
        fail_(ZS_ERR_INTERNAL, "zs_torch::Sharded: parameter ids are not consecutive");
      if (opts.scales) {
        const std::pair<float, float> sc = opts.scales(p->name, p->tensor);
        check_(zs_param_set_scales(zs_, id, sc.first, sc.second), "zs_param_set_scales('" + p->name + "')");
      }
      unit->params.push_back(id);
      unit->trainable += p->trainable;
      init_src.push_back(np.second.detach().to(torch::kFloat).contiguous());
      params_.push_back(std::move(p));
    }
    units_.push_back(std::move(unit));
  }

  /* rank 0's values on every rank, as DistributedDataParallel does: a rank
   * that forgot the seed would otherwise start its replica (stage 0) or its
   * shards (1-3) from its own values; its buffers (e.g. BatchNorm's) too */
  for (size_t i = 0; i < init_src.size(); i++)
    from_rank0_(init_src[i], "zs_torch::Sharded: broadcasting '" + params_[i]->name + "' from rank 0");
  sync_buffers_("zs_torch::Sharded");
  check_(zs_engine_setup(zs_, init_from_module, &init_src), "zs_engine_setup");
  init_src.clear();

  /* from here on the module's tensors are the engine's: resident ones bound
   * for good, the others empty until gathered */
  torch::NoGradGuard ng;
  const torch::Dtype dt = torch_dtype(cfg_.param_dtype);
  for (auto &up : units_) {
    Unit &unit = *up;
    unit.resident = true;
    for (int id : unit.params) {
      Param &p = *params_[(size_t)id];
      p.storage = c10::Storage(c10::Storage::use_byte_size_t(), (size_t)0,
                               at::DataPtr(nullptr, at::Device(at::kCPU)), nullptr, false);
      p.bytes = (size_t)p.tensor.numel() * torch::elementSize(dt);
      p.dtype = dt;
      unit.resident = unit.resident && p.pslot != nullptr;
      detail::install_grad_hook(this, p.tensor, id);
    }
    if (unit.resident)
      bind_data_(unit);
    else
      unbind_data_(unit);
  }
}

void Sharded::unregister_() {
  if (!registered_) return;
  std::lock_guard<std::mutex> lk(g_wrapped_mu);
  g_wrapped.erase(module_.get());
  registered_ = false;
}

Sharded::~Sharded() {
  unregister_();
  torch::NoGradGuard ng;
  for (auto &pp : params_) {
    Param &p = *pp;
    detail::remove_grad_hook(p.tensor);
    if (p.tensor.defined()) {
      p.tensor.mutable_grad() = torch::Tensor();
      p.tensor.set_data(torch::empty({0}, torch::TensorOptions().dtype(p.dtype)));
    }
    if (p.storage) {
      p.storage.set_data_ptr_noswap(at::DataPtr(nullptr, at::Device(at::kCPU)));
      p.storage.set_nbytes(0);
    }
  }
  if (owns_engine_) zs_engine_destroy(zs_);
}

/* ============================================================================
 * binding tensors to the engine's slots
 * ========================================================================== */

/* The parameter's storage object stays the same for the adapter's life: what
 * forward saved for backward (views such as weight.t()) shares it, and sees
 * the gathered buffer again once it is rebound before the unit's backward. */
void Sharded::bind_data_(Unit &unit) {
  for (int id : unit.params) {
    Param &p = *params_[(size_t)id];
    if (!p.pslot)
      fail_(ZS_ERR_INTERNAL, "zs_torch: parameter '" + p.name + "' has no address although its unit '" + unit.name +
                                 "' is gathered");
    p.storage.set_data_ptr_noswap(at::DataPtr(p.pslot, at::Device(at::kCPU)));
    p.storage.set_nbytes(p.bytes);
    if (!p.view.defined())
      p.view = torch::empty({0}, torch::TensorOptions().dtype(p.dtype)).set_(p.storage, 0, p.shape);
    p.tensor.set_data(p.view);
  }
}

/* After calls that update resident units (zs_step, a delayed update landed by
 * zs_flush, a load): the engine writes them on its streams, asynchronously to
 * this thread (as CUDA's do), so wait for them before libtorch or the trainer
 * reads the module's tensors, and bind them again (a resident slot never
 * moves; this keeps the module's tensors the engine's views). */
void Sharded::rebind_resident_() {
  check_(zs_engine_synchronize(zs_), "zs_torch: waiting for the engine's update");
  torch::NoGradGuard ng;
  for (auto &up : units_)
    if (up->resident) bind_data_(*up);
}

/* What a trainer may have changed in the module after wrapping that would
 * make it compute with other tensors than the engine's, or step parameters it
 * froze: an error instead (the engine reads both once, at construction). */
void Sharded::check_params_(const Unit &unit) const {
  for (int id : unit.params) {
    const Param &p = *params_[(size_t)id];
    const char *how = nullptr;
    if (p.tensor.requires_grad() != p.trainable)
      how = p.trainable ? "has requires_grad false now (it was true when wrapped)"
                        : "has requires_grad true now (it was frozen when wrapped)";
    else if (p.tensor.scalar_type() != p.dtype)
      how = "changed its dtype (module->to()?)";
    else if (unit.resident && p.tensor.data_ptr() != p.pslot)
      how = "is no longer a view of the engine's buffer (replaced or moved?)";
    if (how)
      fail_(ZS_ERR_STATE, "zs_torch: parameter '" + p.name + "' " + how +
                              " after wrapping: the engine reads parameters, their dtype and requires_grad once, at "
                              "construction; make such changes before constructing zs_torch::Sharded");
  }
}

/* Rank 0's buffers (BatchNorm's running statistics, ...) on every rank, as
 * DistributedDataParallel's broadcast_buffers: at construction, after each
 * step and after a load. They are the module's own, not the engine's: not
 * reduced; checkpoints hold rank 0's beside the engine's files (checkpoint.cpp). */
void Sharded::sync_buffers_(const std::string &when) {
  zs_comm_t *comm = zs_engine_comm(zs_);
  if (!comm || zs_comm_size(comm) < 2) return;
  torch::NoGradGuard ng;
  for (auto &nb : module_->named_buffers(true)) {
    torch::Tensor &b = nb.value();
    if (!b.defined() || b.numel() == 0) continue;
    torch::Tensor t = b.is_contiguous() ? b : b.contiguous();
    from_rank0_(t, when + ": broadcasting buffer '" + nb.key() + "' from rank 0");
    if (!b.is_contiguous()) b.copy_(t);
  }
}

/* A contiguous CPU tensor's bytes from rank 0 of the engine's comm, in pieces
 * of at most INT32_MAX bytes (MPI's counts are int). */
void Sharded::from_rank0_(const torch::Tensor &t, const std::string &what) {
  zs_comm_t *comm = zs_engine_comm(zs_);
  auto *q = static_cast<uint8_t *>(t.data_ptr());
  for (size_t o = 0, n = t.nbytes(); o < n; o += (size_t)INT32_MAX) {
    size_t k = std::min(n - o, (size_t)INT32_MAX);
    check_(zs_comm_broadcast(comm, q + o, q + o, k, ZS_UINT8, 0, nullptr), what);
  }
}

void Sharded::unbind_data_(Unit &unit) {
  for (int id : unit.params) {
    Param &p = *params_[(size_t)id];
    p.tensor.set_data(torch::empty({0}, torch::TensorOptions().dtype(p.dtype)));
    p.storage.set_data_ptr_noswap(at::DataPtr(nullptr, at::Device(at::kCPU)));
    p.storage.set_nbytes(0);
  }
}

/* .grad() = a view of the engine's gradient buffer: AccumulateGrad adds into a
 * defined gradient in place, so autograd writes the engine's buffer directly. */
void Sharded::bind_grads_(Unit &unit) {
  for (int id : unit.params) {
    Param &p = *params_[(size_t)id];
    if (!p.trainable) continue;
    if (!p.gslot)
      fail_(ZS_ERR_INTERNAL, "zs_torch: parameter '" + p.name + "' has no gradient buffer in backward");
    p.tensor.mutable_grad() = torch::from_blob(p.gslot, p.shape, torch::TensorOptions().dtype(p.dtype));
  }
}

/* ============================================================================
 * forward
 * ========================================================================== */

void Sharded::begin_forward_unit_(int u) {
  check_deferred_();
  Unit &unit = *units_.at((size_t)u);
  if (phase_ != Phase::Forward) {
    check_(zs_forward_begin(zs_), "zs_forward_begin (before unit '" + unit.name + "')");
    phase_ = Phase::Forward;
    for (auto &w : units_) w->gathered_bwd = w->reduced = false, w->pending = 0;
  }
  check_params_(unit);
  check_(zs_gather(zs_, unit.id), "zs_gather(unit '" + unit.name + "') for forward");
  torch::NoGradGuard ng;
  if (!unit.resident) bind_data_(unit);
}

void Sharded::end_forward_unit_(int u) {
  Unit &unit = *units_.at((size_t)u);
  check_(zs_release(zs_, unit.id), "zs_release(unit '" + unit.name + "')");
  torch::NoGradGuard ng;
  if (!unit.resident) unbind_data_(unit);
}

UnitGuard Sharded::gather(int u) {
  if (u < 0 || u >= num_units())
    fail_(ZS_ERR_INVALID, "zs_torch: gather(" + std::to_string(u) + "): the model has " +
                              std::to_string(num_units()) + " units");
  begin_forward_unit_(u);
  return UnitGuard(this, u);
}

void Sharded::forward_end() {
  check_deferred_();
  check_(zs_forward_end(zs_), "zs_forward_end");
  phase_ = Phase::Idle;
}

UnitGuard::~UnitGuard() {
  if (!s_) return;
  try {
    release();
  } catch (const Error &e) {
    if (s_ && s_->deferred_st_ == ZS_OK) s_->deferred_st_ = e.status(), s_->deferred_msg_ = e.what();
  } catch (const std::exception &e) {
    if (s_ && s_->deferred_st_ == ZS_OK) s_->deferred_st_ = ZS_ERR_INTERNAL, s_->deferred_msg_ = e.what();
  }
}

void UnitGuard::release() {
  if (!s_) throw Error(ZS_ERR_STATE, "zs_torch::UnitGuard::release: the unit was already released");
  Sharded *s = s_;
  s_ = nullptr;
  s->end_forward_unit_(u_);
}

torch::Tensor UnitGuard::output(const torch::Tensor &t) {
  if (!s_) throw Error(ZS_ERR_STATE, "zs_torch::UnitGuard::output after release: tie outputs in before it");
  return detail::tie_output(s_, u_, t);
}

/* ============================================================================
 * step, state, checkpoints
 * ========================================================================== */

zs_step_report_t Sharded::step() {
  check_deferred_();
  if (phase_ == Phase::Forward)
    fail_(ZS_ERR_STATE, "zs_torch: step() after a forward without backward: call loss.backward() first");
  for (const auto &u : units_) check_params_(*u);
  zs_step_report_t rep;
  check_(zs_step(zs_, &rep), "zs_step");
  phase_ = Phase::Idle;
  for (auto &u : units_) u->gathered_bwd = u->reduced = false, u->pending = 0;
  rebind_resident_();
  sync_buffers_("zs_torch: step()");
  return rep;
}

void Sharded::flush() {
  check_(zs_flush(zs_), "zs_flush");
  rebind_resident_();
}

std::vector<std::pair<std::string, torch::Tensor>> Sharded::state_dict() {
  check_deferred_();
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (size_t i = 0; i < params_.size(); i++) {
    const Param &p = *params_[i];
    torch::Tensor t = torch::empty(p.shape, torch::TensorOptions().dtype(torch::kFloat));
    check_(zs_param_get(zs_, (int)i, t.data_ptr<float>()), "zs_param_get('" + p.name + "')");
    out.emplace_back(p.name, t);
  }
  rebind_resident_();
  return out;
}


zs_memory_stats_t Sharded::memory_stats() const {
  zs_memory_stats_t s;
  check_(zs_memory_stats(zs_, &s), "zs_memory_stats");
  return s;
}

/* Ids out of range are zs_torch::Error (ZS_ERR_INVALID), as gather's. */
const Sharded::Param &Sharded::param_at_(int p, const char *fn) const {
  if (p < 0 || p >= num_params())
    fail_(ZS_ERR_INVALID, std::string("zs_torch: ") + fn + "(" + std::to_string(p) + "): the model has " +
                              std::to_string(num_params()) + " parameters");
  return *params_[(size_t)p];
}
const void *Sharded::param_address(int p) const { return param_at_(p, "param_address").pslot; }
const void *Sharded::grad_address(int p) const { return param_at_(p, "grad_address").gslot; }
UnitGuard Sharded::gather(const std::string &unit_name) { return gather(unit(unit_name)); }

const std::string &Sharded::unit_name(int u) const {
  if (u < 0 || u >= num_units())
    fail_(ZS_ERR_INVALID, "zs_torch: unit_name(" + std::to_string(u) + "): the model has " +
                              std::to_string(num_units()) + " units");
  return units_[(size_t)u]->name;
}
const std::string &Sharded::param_name(int p) const { return param_at_(p, "param_name").name; }

int Sharded::unit(const std::string &name) const {
  for (size_t u = 0; u < units_.size(); u++)
    if (units_[u]->name == name) return (int)u;
  for (const auto &p : params_)
    if (p->name == name) return p->unit;
  std::ostringstream os;
  os << "zs_torch: no unit or parameter '" << name << "' (units:";
  for (const auto &u : units_) os << " '" << u->name << "'";
  os << ")";
  fail_(ZS_ERR_INVALID, os.str());
}

} // namespace zs_torch
