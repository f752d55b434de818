#include "meshtrain/train/live_state.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "meshtrain/checkpoint/commit.h"
#include "meshtrain/checkpoint/consistency.h"
#include "meshtrain/checkpoint/fs_util.h"
#include "meshtrain/checkpoint/shard_writer.h"
#include "meshtrain/core/output_file.h"

namespace meshtrain::train {

namespace fs = std::filesystem;

namespace {

// ".live-" + the checkpoint's own name of the step (step-NNNNNNNN).
constexpr const char* kLivePrefix = ".live-";

bool overlaps(const checkpoint::Box& a, const checkpoint::Box& b) {
  for (int d = 0; d < a.rank(); ++d)
    if (a.offset[size_t(d)] + a.length[size_t(d)] <= b.offset[size_t(d)] ||
        b.offset[size_t(d)] + b.length[size_t(d)] <= a.offset[size_t(d)])
      return false;
  return true;
}

// One copy of every piece the ranks wrote into `dir`, as a manifest of step
// `step`; CheckpointError when they do not cover the whole state.
checkpoint::Manifest assemble(const fs::path& dir, int64_t step) {
  std::vector<fs::path> descriptors;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") descriptors.push_back(e.path());
  std::sort(descriptors.begin(), descriptors.end());
  checkpoint::Manifest m;
  m.step = step;
  std::map<std::string, checkpoint::TensorEntry> chosen;
  for (const fs::path& d : descriptors) {
    std::ifstream in(d);
    const nlohmann::json j = nlohmann::json::parse(in);
    if (m.metadata.empty()) m.metadata = j.at("metadata");
    const nlohmann::json& shard = j.at("shard");
    m.files.push_back({shard.at("file").get<std::string>(), shard.at("bytes").get<uint64_t>()});
    for (checkpoint::TensorEntry& t : checkpoint::pieces_from_json(shard.at("tensors"), d.string())) {
      auto& c = chosen.try_emplace(t.name, checkpoint::TensorEntry{t.name, t.shape, t.dtype, {}}).first->second;
      for (auto& p : t.pieces)
        if (std::none_of(c.pieces.begin(), c.pieces.end(), [&](const auto& q) { return overlaps(p.box, q.box); }))
          c.pieces.push_back(std::move(p));
    }
  }
  MT_REQUIRE(CheckpointError, !descriptors.empty(), dir.string(), ": no rank wrote its live state");
  m.world_size = int(m.files.size());
  for (auto& [name, t] : chosen) {
    std::sort(t.pieces.begin(), t.pieces.end(), [](const auto& a, const auto& b) { return a.box.offset < b.box.offset; });
    if (name.rfind(checkpoint::kExpAvgPrefix, 0) != 0 && name.rfind(checkpoint::kExpAvgSqPrefix, 0) != 0)
      for (const char* prefix : {checkpoint::kExpAvgPrefix, checkpoint::kExpAvgSqPrefix})
        MT_REQUIRE(CheckpointError, chosen.count(prefix + name), "no live rank holds ", prefix, name);
    m.tensors.push_back(std::move(t));
  }
  const std::string source = "the live state of step " + std::to_string(step);
  checkpoint::validate_manifest(m, source);            // every tensor covered exactly once
  checkpoint::check_metadata_consistency(m, source);  // every parameter of the model there
  for (const fs::path& d : descriptors) fs::remove(d);
  return m;
}

}  // namespace

void write_live_state(const Trainer& t, int rank) {
  try {
    const std::optional<checkpoint::SaveRequest> r = t.live_state_request();
    if (!r) return;
    const TrainConfig& cfg = t.config();
    const fs::path dir =
        fs::path(cfg.checkpoint.resolved_dir(cfg.metrics.run_dir)) / (kLivePrefix + checkpoint::step_dir_name(r->step));
    fs::create_directories(dir);
    const checkpoint::LocalShard shard = checkpoint::write_rank_shard(dir, rank, r->pieces, {});
    const nlohmann::json shard_json = nlohmann::json::parse(checkpoint::shard_descriptor(shard));
    const fs::path descriptor = (dir / checkpoint::shard_file_name(rank)).replace_extension(".json");
    write_file_atomically(descriptor.string(), nlohmann::json{{"shard", shard_json}, {"metadata", r->metadata}}.dump());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meshtrain: rank %d could not write its live state (%s): the job resumes from its latest "
                 "checkpoint\n", rank, e.what());
  }
}

LiveStateCommit commit_live_state(const std::string& root, int keep_last) {
  LiveStateCommit out;
  std::vector<std::pair<int64_t, fs::path>> live;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kLivePrefix, 0) != 0) continue;
    if (const auto step = checkpoint::parse_step_dir_name(name.substr(std::strlen(kLivePrefix))))
      live.emplace_back(*step, e.path());
  }
  std::sort(live.rbegin(), live.rend());
  const auto complete = checkpoint::list_complete_checkpoints(root);
  int64_t newest = -1;
  for (const auto& c : complete) newest = std::max(newest, c.first);
  for (const auto& [step, dir] : live) {
    if (out.committed.empty() && step > newest) {
      try {
        const checkpoint::Manifest m = assemble(dir, step);
        checkpoint::SaveOptions o;
        o.keep_last = keep_last;
        checkpoint::publish(m, root, dir, o);
        out.committed = (fs::path(root) / checkpoint::step_dir_name(step)).string();
        out.step = step;
        out.ranks = m.world_size;
        continue;
      } catch (const std::exception& e) {
        out.why_not = e.what();
      }
    }
    fs::remove_all(dir, ec);
  }
  return out;
}

}  // namespace meshtrain::train
