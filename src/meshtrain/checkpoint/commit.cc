#include "meshtrain/checkpoint/commit.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "meshtrain/checkpoint/fs_util.h"
#include "meshtrain/core/error.h"

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

json shard_to_json(const LocalShard& s) {
  return {{"file", s.file.path}, {"bytes", s.file.bytes}, {"tensors", pieces_to_json(s.tensors)}};
}

// Rank 0: merges every rank's descriptors into a validated manifest.
Manifest merge(const std::vector<std::string>& shards, int64_t step, const json& metadata, const std::string& source) {
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

// Rank 0: manifest, fsync, rename, latest, retention.
void publish(const Manifest& m, const std::filesystem::path& root, const std::filesystem::path& tmp,
             const std::filesystem::path& final_dir, const SaveOptions& options) {
  atomic_write_file(tmp, kManifestFile, m.to_json().dump(1) + "\n");
  fsync_dir(tmp);
  std::error_code ec;
  if (fs::exists(final_dir, ec)) {
    // Saving a step again (e.g. after resuming from an older one): move the
    // old directory aside first; rename cannot replace a non-empty one.
    const fs::path old = root / (".tmp-replaced-" + final_dir.filename().string());
    fs::remove_all(old, ec);
    fs::rename(final_dir, old);
    fs::rename(tmp, final_dir);
    fs::remove_all(old, ec);
  } else {
    fs::rename(tmp, final_dir);
  }
  fsync_dir(root);
  atomic_write_file(root, kLatestFile, final_dir.filename().string() + "\n");
  apply_retention(root, options.keep_last, final_dir);
}

}  // namespace

std::filesystem::path prepare_save_dir(comm::ProcessGroup& group, const std::filesystem::path& root, int64_t step) {
  const fs::path tmp = root / tmp_dir_name(step);
  std::string error;
  if (group.rank() == 0) {
    try {
      fs::create_directories(root);
      for (const auto& e : fs::directory_iterator(root)) {
        const std::string n = e.path().filename().string();
        if (n.rfind(".tmp-", 0) == 0 && e.is_directory()) fs::remove_all(e.path());
      }
      fs::create_directory(tmp);
      fsync_dir(root);
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
  const std::string mine = shard_to_json(*local).dump();
  const fs::path final_dir = root / step_dir_name(step);
  std::string error;
  if (rank == 0) {
    std::vector<std::string> shards(static_cast<size_t>(world));
    shards[0] = mine;
    for (int r = 1; r < world; ++r) shards[size_t(r)] = recv_string(group, r);
    try {
      publish(merge(shards, step, metadata, (tmp / kManifestFile).string()), root, tmp, final_dir, options);
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
