/* The libtorch adapter: a torch::nn::Module's parameters and gradients as views
 * of a zeroshard engine's buffers (zeroshard/torch.hpp says what a trainer sees).
 * Declaration and setup, binding tensors to the engine's pointer slots, the
 * step and the checkpoint calls; autograd.cpp has the backward machinery. */
#include "zeroshard/torch.hpp"

#include <cstring>
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
  for (const auto &np : m.named_parameters(true)) {
    const torch::Tensor &t = np.value();
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
      unit->params.push_back(id);
      unit->trainable += p->trainable;
      init_src.push_back(np.second.detach().to(torch::kFloat).contiguous());
      params_.push_back(std::move(p));
    }
    units_.push_back(std::move(unit));
  }

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

Sharded::~Sharded() {
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
  zs_step_report_t rep;
  check_(zs_step(zs_, &rep), "zs_step");
  phase_ = Phase::Idle;
  for (auto &u : units_) u->gathered_bwd = u->reduced = false, u->pending = 0;
  return rep;
}

void Sharded::flush() { check_(zs_flush(zs_), "zs_flush"); }

std::vector<std::pair<std::string, torch::Tensor>> Sharded::state_dict() {
  check_deferred_();
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (size_t i = 0; i < params_.size(); i++) {
    const Param &p = *params_[i];
    torch::Tensor t = torch::empty(p.shape, torch::TensorOptions().dtype(torch::kFloat));
    check_(zs_param_get(zs_, (int)i, t.data_ptr<float>()), "zs_param_get('" + p.name + "')");
    out.emplace_back(p.name, t);
  }
  return out;
}

void Sharded::save(const std::string &dir) { check_(zs_checkpoint_save(zs_, dir.c_str()), "zs_checkpoint_save"); }
void Sharded::load(const std::string &dir) { check_(zs_checkpoint_load(zs_, dir.c_str()), "zs_checkpoint_load"); }
void Sharded::export_safetensors(const std::string &path) {
  check_(zs_export_safetensors(zs_, path.c_str()), "zs_export_safetensors");
}

zs_memory_stats_t Sharded::memory_stats() const {
  zs_memory_stats_t s;
  check_(zs_memory_stats(zs_, &s), "zs_memory_stats");
  return s;
}

const void *Sharded::param_address(int p) const { return params_.at((size_t)p)->pslot; }
const void *Sharded::grad_address(int p) const { return params_.at((size_t)p)->gslot; }
UnitGuard Sharded::gather(const std::string &unit_name) { return gather(unit(unit_name)); }

const std::string &Sharded::unit_name(int u) const { return units_.at((size_t)u)->name; }
const std::string &Sharded::param_name(int p) const { return params_.at((size_t)p)->name; }

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
