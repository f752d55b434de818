#include "meshtrain/checkpoint/commit.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "meshtrain/checkpoint/fs_util.h"
#include "meshtrain/checkpoint/sha256.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/fault_injection.h"

namespace meshtrain::checkpoint {

namespace {

using nlohmann::json;

// Strings travel as i64 words (the group has no byte dtype).
size_t words(size_t bytes) { return (bytes + 7) / 8; }

void send_string(comm::ProcessGroup& g, const std::string& s, int peer) {
  int64_t len = int64_t(s.size());
  g.send(&len, 1, DType::I64, peer);
  std::vector<int64_t> buf(words(s.size()), 0);
  if (!s.empty()) std::memcpy(buf.data(), s.data(), s.size());
  g.send(buf.data(), buf.size(), DType::I64, peer);
}

std::string recv_string(comm::ProcessGroup& g, int peer) {
  int64_t len = 0;
  g.recv(&len, 1, DType::I64, peer);
  MT_REQUIRE(CheckpointError, len >= 0 && len < (int64_t(1) << 40), "bad descriptor length ", len, " from rank ", peer);
  std::vector<int64_t> buf(words(size_t(len)), 0);
  g.recv(buf.data(), buf.size(), DType::I64, peer);
  return std::string(reinterpret_cast<const char*>(buf.data()), size_t(len));
}

std::string broadcast_string(comm::ProcessGroup& g, const std::string& s, int root) {
  int64_t len = int64_t(s.size());
  g.broadcast(&len, 1, DType::I64, root);
  std::vector<int64_t> buf(words(size_t(len)), 0);
  if (g.rank() == root && !s.empty()) std::memcpy(buf.data(), s.data(), s.size());
  g.broadcast(buf.data(), buf.size(), DType::I64, root);
  return std::string(reinterpret_cast<const char*>(buf.data()), size_t(len));
}

// Name of a committed directory moved aside while a step is saved again on a
// file system without RENAME_EXCHANGE. Not a .tmp- name: it may be the only
// complete copy of that step until the new one is in place.
std::string replaced_name(const std::string& dir_name) { return ".replaced-" + dir_name; }

// A crash between the two renames of a replace leaves root/.replaced-step-N:
// it goes back under its name unless the new step-N was completed.
void finish_interrupted_replace(const fs::path& root) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(".replaced-", 0) != 0 || !e.is_directory(ec)) continue;
    const fs::path original = root / n.substr(std::string(".replaced-").size());
    if (fs::exists(original / kManifestFile, ec)) {
      fs::remove_all(e.path(), ec);
    } else {
      fs::remove_all(original, ec);  // a half-moved new copy, if any
      fs::rename(e.path(), original);
    }
  }
}

// Moves `tmp` to `final_dir`, which holds a committed checkpoint of the same
// step: swapped atomically where the file system can, else moved aside
// under a name that survives a crash and is restored by the next save.
void replace_committed(const fs::path& root, const fs::path& tmp, const fs::path& final_dir,
                       const SaveOptions& options) {
  std::error_code ec;
  if (options.allow_exchange && exchange_paths(tmp, final_dir)) {
    fault::point("commit.publish", 0);
    fsync_dir(root);
    fs::remove_all(tmp, ec);  // the old copy now lives at tmp
    return;
  }
  const fs::path aside = root / replaced_name(final_dir.filename().string());
  fs::remove_all(aside, ec);
  fs::rename(final_dir, aside);
  fsync_dir(root);
  fault::point("commit.aside", 0);
  fs::rename(tmp, final_dir);
  fault::point("commit.publish", 0);
  fsync_dir(root);
  fs::remove_all(aside, ec);
}

}  // namespace

std::string shard_descriptor(const LocalShard& s) {
  return json{{"file", s.file.path}, {"bytes", s.file.bytes}, {"tensors", pieces_to_json(s.tensors)}}.dump();
}

Manifest merge_shards(const std::vector<std::string>& shards, int64_t step, const json& metadata,
                      const std::string& source) {
  Manifest m;
  m.step = step;
  m.world_size = int(shards.size());
  m.metadata = metadata.is_object() ? metadata : json{{"value", metadata}};
  std::map<std::string, TensorEntry> tensors;
  std::map<std::string, int> first_rank;
  for (size_t r = 0; r < shards.size(); ++r) {
    const json j = json::parse(shards[r]);
    m.files.push_back({j.at("file").get<std::string>(), j.at("bytes").get<uint64_t>()});
    for (TensorEntry& t : pieces_from_json(j.at("tensors"), source)) {
      auto [it, fresh] = tensors.try_emplace(t.name, TensorEntry{t.name, t.shape, t.dtype, {}});
      if (fresh) first_rank[t.name] = int(r);
      MT_REQUIRE(CheckpointError, it->second.shape == t.shape && it->second.dtype == t.dtype, "save: tensor '",
                 t.name, "' is ", t.shape.str(), " ", dtype_name(t.dtype), " on rank ", r, " but ",
                 it->second.shape.str(), " ", dtype_name(it->second.dtype), " on rank ", first_rank[t.name]);
      for (auto& p : t.pieces) it->second.pieces.push_back(std::move(p));
    }
  }
  for (auto& [name, t] : tensors) {
    std::sort(t.pieces.begin(), t.pieces.end(), [](const PieceEntry& a, const PieceEntry& b) {
      return a.box.offset < b.box.offset;
    });
    m.tensors.push_back(std::move(t));
  }
  validate_manifest(m, source);
  return m;
}

void publish(const Manifest& m, const fs::path& root, const fs::path& tmp, const SaveOptions& options) {
  const fs::path final_dir = root / step_dir_name(m.step);
  const std::string manifest = m.to_json().dump(1) + "\n";
  atomic_write_file(tmp, kManifestFile, manifest);
  atomic_write_file(tmp, kManifestDigestFile, manifest_digest_line(manifest));
  fsync_dir(tmp);
  fault::point("commit.manifest", 0);
  std::error_code ec;
  if (fs::exists(final_dir, ec)) {
    // Saving a step again (e.g. resumed from an older one). Moving the old
    // directory aside and the new one in would leave, between the two,
    // `latest` naming nothing and the only good copy under a .tmp- name.
    replace_committed(root, tmp, final_dir, options);
  } else {
    fs::rename(tmp, final_dir);
    fault::point("commit.publish", 0);
    fsync_dir(root);
  }
  atomic_write_file(root, kLatestFile, final_dir.filename().string() + "\n");
  fault::point("commit.latest", 0);
  apply_retention(root, options.keep_last, final_dir);
  fault::point("commit.retention", 0);
}

fs::path create_save_dir(const fs::path& root, int64_t step) {
  const fs::path tmp = root / tmp_dir_name(step);
  fs::create_directories(root);
  finish_interrupted_replace(root);
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(".tmp-", 0) == 0 && e.is_directory()) fs::remove_all(e.path());
  }
  fs::create_directory(tmp);
  fsync_dir(root);
  fault::point("save.prepare", 0);
  return tmp;
}

std::filesystem::path prepare_save_dir(comm::ProcessGroup& group, const std::filesystem::path& root, int64_t step) {
  const fs::path tmp = root / tmp_dir_name(step);
  std::string error;
  if (group.rank() == 0) {
    try {
      create_save_dir(root, step);
    } catch (const fault::InjectedFault&) {
      throw;  // the rank dies here, as if killed
    } catch (const std::exception& e) {
      error = std::string("cannot prepare checkpoint directory ") + tmp.string() + ": " + e.what();
    }
  }
  error = broadcast_string(group, error, 0);
  if (!error.empty()) throw CheckpointError(error);
  return tmp;
}

std::string commit_save(comm::ProcessGroup& group, const std::filesystem::path& root, int64_t step,
                        const std::filesystem::path& tmp, const std::optional<LocalShard>& local,
                        const std::string& local_error, const nlohmann::json& metadata, const SaveOptions& options,
                        bool local_cancelled) {
  const int world = group.size(), rank = group.rank();
  // Any failed writer fails the save on every rank.
  int64_t failed = local || local_cancelled ? world : rank;
  group.all_reduce(&failed, 1, DType::I64, comm::ReduceOp::Min);
  std::error_code ec;
  if (failed < world) {
    group.barrier();  // nobody is still using the directory
    if (rank == 0) fs::remove_all(tmp, ec);
    if (!local && !local_cancelled) throw CheckpointError("checkpoint save of step " + std::to_string(step) + " failed on rank " +
                                      std::to_string(rank) + ": " + local_error);
    throw CheckpointError("checkpoint save of step " + std::to_string(step) + " failed on rank " +
                          std::to_string(failed) + " (see that rank's error)");
  }
  const std::string mine = shard_descriptor(*local);
  const fs::path final_dir = root / step_dir_name(step);
  std::string error;
  if (rank == 0) {
    std::vector<std::string> shards(static_cast<size_t>(world));
    shards[0] = mine;
    for (int r = 1; r < world; ++r) shards[size_t(r)] = recv_string(group, r);
    try {
      publish(merge_shards(shards, step, metadata, (tmp / kManifestFile).string()), root, tmp, options);
    } catch (const fault::InjectedFault&) {
      throw;  // the rank dies here, as if killed
    } catch (const std::exception& e) {
      error = e.what();
      fs::remove_all(tmp, ec);
    }
  } else {
    send_string(group, mine, 0);
  }
  error = broadcast_string(group, error, 0);
  if (!error.empty()) throw CheckpointError(error);
  return final_dir.string();
}

void apply_retention(const std::filesystem::path& root, int keep_last, const std::filesystem::path& keep) {
  if (keep_last <= 0) return;
  auto all = list_complete_checkpoints(root);
  if (all.size() <= size_t(keep_last)) return;
  std::error_code ec;
  const fs::path keep_name = keep.filename();
  for (size_t i = 0; i + size_t(keep_last) < all.size(); ++i) {
    const fs::path& dir = all[i].second;
    if (dir.filename() == keep_name) continue;
    const fs::path doomed = root / (".tmp-deleting-" + dir.filename().string());
    fs::rename(dir, doomed, ec);
    if (!ec) fs::remove_all(doomed, ec);
  }
}

}  // namespace meshtrain::checkpoint
