/* The libtorch adapter's checkpoints: the engine's (zs_checkpoint_save/_load,
 * zs_export_safetensors) and the module's buffers beside them (BatchNorm's
 * running statistics are the module's, not the engine's: without them a
 * resumed run evaluated with fresh statistics). Rank 0 writes and reads the
 * buffers' file, dir/buffers.step<N>.pt, a torch::serialize archive by
 * named_buffers() name; its outcome is every rank's. */
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>

#include <sstream>

#include "adapter_impl.hpp"
#include "zeroshard/log.h"

namespace zs_torch {

namespace {

/* dir/buffers.step<N>.pt, or with model-parallel parts (a mesh's engine: each
 * part's module has its own buffers) dir/buffers.step<N>.mp<k>of<M>.pt, read
 * back only in the same layout. */
std::string buffers_file(const std::string &dir, int64_t step, zs_engine_t *zs) {
  int k = 0, M = zs_engine_mp_size(zs, &k);
  std::string part = M > 1 ? ".mp" + std::to_string(k) + "of" + std::to_string(M) : "";
  return dir + "/buffers.step" + std::to_string(step) + part + ".pt";
}

/* dir/buffers.step<k>.pt for every k but `step`: an earlier save's (the
 * engine removes its own earlier files likewise once a save is in place). */
void remove_other_steps(const std::string &dir, const std::string &keep) {
  DIR *d = opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> gone;
  const std::string mine = keep.substr(keep.rfind('/') + 1);
  const std::string part = mine.substr(mine.find('.', std::strlen("buffers.step"))); /* ".pt" or ".mp<k>of<M>.pt" */
  while (struct dirent *e = readdir(d)) {
    long long k = 0;
    int used = 0;
    const std::string name = e->d_name;
    if (std::sscanf(e->d_name, "buffers.step%lld%n", &k, &used) == 1 && name.substr((size_t)used) == part &&
        name != mine)
      gone.push_back(dir + "/" + name); /* this part's file of another step */
  }
  closedir(d);
  for (const auto &p : gone) std::remove(p.c_str());
}

} // namespace

/* Rank 0's status and message on every rank of the engine's comm: a failure
 * there throws zs_torch::Error everywhere (the other ranks would otherwise go
 * on into the next collective alone). */
void Sharded::rank0_outcome_(zs_status_t st, const std::string &why, const std::string &what) {
  zs_comm_t *comm = zs_engine_comm(zs_);
  if (comm && zs_comm_size(comm) > 1) {
    auto msg = torch::zeros({512 + 8}, torch::TensorOptions().dtype(torch::kUInt8));
    auto *q = msg.data_ptr<uint8_t>();
    int64_t s = st;
    std::memcpy(q, &s, 8);
    std::snprintf(reinterpret_cast<char *>(q + 8), 512, "%s", why.c_str());
    from_rank0_(msg, what + ": its outcome from rank 0");
    std::memcpy(&s, q, 8);
    st = (zs_status_t)s;
    if (st != ZS_OK) fail_(st, what + " (rank 0): " + zs_status_name(st) + ": " + reinterpret_cast<char *>(q + 8));
    return;
  }
  if (st != ZS_OK) fail_(st, what + ": " + zs_status_name(st) + ": " + why);
}

void Sharded::save(const std::string &dir) {
  check_deferred_();
  auto named = module_->named_buffers(true);
  zs_comm_t *comm = zs_engine_comm(zs_);
  const bool rank0 = !comm || zs_comm_rank(comm) == 0;
  const int64_t step = zs_engine_step_count(zs_);
  if (!named.is_empty()) {
    zs_status_t st = ZS_OK;
    std::string why;
    if (rank0) {
      const std::string path = buffers_file(dir, step, zs_), tmp = path + ".tmp";
      try {
        if (mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST)
          throw std::runtime_error("cannot create " + dir + ": " + std::strerror(errno));
        torch::serialize::OutputArchive ar;
        for (auto &nb : named)
          if (nb.value().defined()) ar.write(nb.key(), nb.value(), /*is_buffer=*/true);
        ar.save_to(tmp);
        if (std::rename(tmp.c_str(), path.c_str()) != 0)
          throw std::runtime_error("cannot rename " + tmp + ": " + std::strerror(errno));
      } catch (const std::exception &e) {
        std::remove(tmp.c_str());
        st = ZS_ERR_IO, why = e.what();
      }
    }
    rank0_outcome_(st, why, "zs_torch: save(): writing the module's buffers");
  }
  check_(zs_checkpoint_save(zs_, dir.c_str()), "zs_checkpoint_save");
  if (rank0 && !named.is_empty()) remove_other_steps(dir, buffers_file(dir, step, zs_));
}

void Sharded::load(const std::string &dir) {
  check_deferred_();
  check_(zs_checkpoint_load(zs_, dir.c_str()), "zs_checkpoint_load");
  rebind_resident_();
  auto named = module_->named_buffers(true);
  if (named.is_empty()) return;
  zs_comm_t *comm = zs_engine_comm(zs_);
  const bool rank0 = !comm || zs_comm_rank(comm) == 0;
  const std::string path = buffers_file(dir, zs_engine_step_count(zs_), zs_);
  zs_status_t st = ZS_OK;
  std::string why;
  struct stat sb;
  const bool there = stat(path.c_str(), &sb) == 0; /* rank 0's answer is everyone's (below) */
  if (rank0 && there) {
    /* every buffer read and checked before any is written: a failure changes none */
    std::vector<torch::Tensor> got;
    try {
      torch::serialize::InputArchive ar;
      ar.load_from(path);
      for (auto &nb : named) {
        torch::Tensor t;
        const torch::Tensor &b = nb.value();
        if (!b.defined()) {
          got.emplace_back();
          continue;
        }
        if (!ar.try_read(nb.key(), t, /*is_buffer=*/true)) {
          st = ZS_ERR_MISMATCH, why = path + " holds no buffer '" + nb.key() + "' (another model's checkpoint?)";
          break;
        }
        if (t.sizes() != b.sizes() || t.scalar_type() != b.scalar_type()) {
          std::ostringstream os;
          os << path << ": buffer '" << nb.key() << "' is " << t.scalar_type() << " " << t.sizes()
             << " there but " << b.scalar_type() << " " << b.sizes() << " in this module";
          st = ZS_ERR_MISMATCH, why = os.str();
          break;
        }
        got.push_back(t);
      }
      if (st == ZS_OK) { /* all checked: now written */
        torch::NoGradGuard ng;
        size_t i = 0;
        for (auto &nb : named) {
          if (got[i].defined()) nb.value().copy_(got[i]);
          i++;
        }
      }
    } catch (const std::exception &e) { /* this rank's failure is every rank's (rank0_outcome_) */
      st = ZS_ERR_CORRUPT, why = path + ": " + e.what();
    }
  }
  rank0_outcome_(st, why, "zs_torch: load(): reading the module's buffers");
  if (rank0 && !there) {
    const std::string msg = "zs_torch: load(): " + dir + " has no " + path.substr(dir.size() + 1) +
                            " (a checkpoint of an older adapter, or of another model-parallel layout, whose parts' "
                            "buffers load only in it): the module's buffers keep their values";
    zs_log_message(ZS_LOG_WARN, __FILE__, __LINE__, msg.c_str());
  }
  sync_buffers_("zs_torch: load()");
}

void Sharded::export_safetensors(const std::string &path) {
  check_(zs_export_safetensors(zs_, path.c_str()), "zs_export_safetensors");
}

} // namespace zs_torch
