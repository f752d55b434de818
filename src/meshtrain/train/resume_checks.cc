#include "meshtrain/train/resume_checks.h"

#include <algorithm>

#include "meshtrain/checkpoint/consistency.h"
#include "meshtrain/checkpoint/fs_util.h"
#include "meshtrain/checkpoint/model_config_json.h"
#include "meshtrain/core/error.h"
#include "meshtrain/optim/lr_schedule.h"
#include "meshtrain/train/train_config.h"

namespace meshtrain::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Model settings that do not affect a continuation (initialization only).
bool init_only(const std::string& key) { return key == "init_std" || key == "seed"; }

// key -> (recorded, current): the checkpoint's values next to the run's,
// for every compared key the checkpoint records.
std::vector<std::tuple<std::string, json, json>> compared(const json& meta, const TrainConfig& cfg) {
  std::vector<std::tuple<std::string, json, json>> out;
  auto add = [&](const std::string& key, const json& recorded, const json& current) {
    out.emplace_back(key, recorded, current);
  };
  if (meta.contains(checkpoint::kMetaModelConfig)) {
    const json now = checkpoint::model_config_to_json(cfg.model);
    for (const auto& [k, v] : meta[checkpoint::kMetaModelConfig].items())
      if (!init_only(k) && now.contains(k)) add("model." + k, v, now[k]);
  }
  if (meta.contains("optimizer")) {
    const auto& o = meta["optimizer"];
    const auto& c = cfg.optimizer;
    const std::vector<std::pair<const char*, double>> now = {{"lr", c.lr},     {"min_lr", c.min_lr},
                                                             {"beta1", c.beta1}, {"beta2", c.beta2},
                                                             {"eps", c.eps},   {"weight_decay", c.weight_decay},
                                                             {"grad_clip", c.grad_clip}};
    for (const auto& [k, v] : now)
      if (o.contains(k)) add(std::string("optimizer.") + k, o[k], v);
  }
  if (meta.contains("lr_schedule")) {
    const auto& s = meta["lr_schedule"];
    if (s.contains("kind")) add("optimizer.schedule", s["kind"], optim::to_string(cfg.optimizer.schedule));
    if (s.contains("warmup_steps")) add("optimizer.warmup_steps", s["warmup_steps"], cfg.optimizer.warmup_steps);
    if (s.contains("total_steps")) add("training.steps", s["total_steps"], cfg.training.steps);
  }
  if (meta.contains("rng") && meta["rng"].contains("data_seed")) add("data.seed", meta["rng"]["data_seed"], cfg.data.seed);
  if (meta.contains("data")) {
    const auto& d = meta["data"];
    if (d.contains("mode")) add("data.mode", d["mode"], cfg.data.mode);
    if (d.contains("seq_len")) add("data.seq_len", d["seq_len"], cfg.data.seq_len);
  }
  return out;
}

// Numbers compare by value (an integer-valued double equals the integer).
bool same(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
  return a == b;
}

}  // namespace

ResumePoint locate_resume_checkpoint(const fs::path& root, bool resume) {
  std::error_code ec;
  const bool has_latest = fs::exists(fs::symlink_status(root / checkpoint::kLatestFile, ec));
  const auto complete = checkpoint::list_complete_checkpoints(root);
  ResumePoint rp;
  if (!resume) {
    const std::string newest = complete.empty() ? "" : " (newest: " + complete.back().second.filename().string() + ")";
    MT_REQUIRE(ConfigError, !has_latest && complete.empty(), "checkpoint.resume = false, but ", root.string(),
               " already holds checkpoints of a run", newest,
               "; saving would replace its committed steps. Use a new metrics.run_dir or checkpoint.dir, or remove "
               "them");
    return rp;
  }
  if (has_latest) {
    rp.reader.emplace(checkpoint::CheckpointReader::open(root.string()));
    return rp;
  }
  if (complete.empty()) return rp;  // a new run
  // No pointer: the highest complete step that verifies, said so; never a
  // fresh start that would overwrite them.
  std::string failures;
  for (auto it = complete.rbegin(); it != complete.rend(); ++it) {
    try {
      rp.reader.emplace(checkpoint::CheckpointReader::open(it->second.string()));
      rp.note = "no '" + std::string(checkpoint::kLatestFile) + "' pointer in " + root.string() + ": resuming from " +
                it->second.filename().string() + ", the highest complete checkpoint that verifies" +
                (failures.empty() ? "" : " (skipped: " + failures + ")");
      return rp;
    } catch (const CheckpointError& e) {
      failures += (failures.empty() ? "" : "; ") + it->second.filename().string() + ": " + e.what();
    }
  }
  MT_THROW(CheckpointError, root.string(), " holds checkpoint directories but none verifies (", failures,
           "); refusing to start a new run over them");
}

const std::vector<std::string>& resume_checked_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    const json model_keys = checkpoint::model_config_to_json(model::ModelConfig{});
    for (const auto& [name, v] : model_keys.items())
      if (!init_only(name)) k.push_back("model." + name);
    for (const char* o : {"optimizer.lr", "optimizer.min_lr", "optimizer.beta1", "optimizer.beta2", "optimizer.eps",
                          "optimizer.weight_decay", "optimizer.grad_clip", "optimizer.schedule",
                          "optimizer.warmup_steps", "training.steps", "data.seed", "data.mode", "data.seq_len"})
      k.push_back(o);
    return k;
  }();
  return keys;
}

void validate_allow_changes(const std::vector<std::string>& keys) {
  const auto& known = resume_checked_keys();
  for (const auto& k : keys) {
    if (std::find(known.begin(), known.end(), k) != known.end()) continue;
    std::string list;
    for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
    MT_THROW(ConfigError, "checkpoint.allow_changes: '", k, "' is not a setting a resume compares (", list, ")");
  }
}

std::vector<std::string> check_resume_config(const json& meta, const TrainConfig& cfg) {
  const auto& allowed = cfg.checkpoint.allow_changes;
  std::vector<std::string> accepted, refused;
  for (const auto& [key, recorded, current] : compared(meta, cfg)) {
    if (same(recorded, current)) continue;
    const std::string change = key + " " + recorded.dump() + " -> " + current.dump();
    (std::find(allowed.begin(), allowed.end(), key) != allowed.end() ? accepted : refused).push_back(change);
  }
  if (!refused.empty()) {
    std::string list;
    for (const auto& r : refused) list += (list.empty() ? "" : "; ") + r;
    MT_THROW(ConfigError, "the config differs from the checkpoint's (checkpoint -> this run): ", list,
             ". Resuming would train a different model or objective than the one saved. Restore the settings, "
             "start a new run (new metrics.run_dir), or allow deliberate changes with checkpoint.allow_changes = [\"",
             refused.front().substr(0, refused.front().find(' ')), "\", ...]");
  }
  return accepted;
}

std::vector<std::string> continuation_changes(const json& meta, const TrainConfig& cfg,
                                              const std::string& train_data_sha256) {
  std::vector<std::string> out;
  auto compare = [&](const std::string& key, const json& recorded, const json& current) {
    if (!recorded.is_null() && !same(recorded, current)) out.push_back(key + " " + recorded.dump() + " -> " + current.dump());
  };
  const json none;
  const json& precision = meta.contains("precision") ? meta["precision"] : none;
  if (precision.is_object()) {
    compare("training.precision", precision.value("policy", json()), cfg.training.precision);
    compare("training.grad_reduce_dtype", precision.value("grad_reduce_dtype", json()), cfg.training.grad_reduce_dtype);
  }
  const json& layout = meta.contains("layout") ? meta["layout"] : none;
  if (layout.is_object()) compare("training.reproducible", layout.value("reproducible", json()), cfg.training.reproducible);
  const json& data = meta.contains("data") ? meta["data"] : none;
  const std::string recorded = data.is_object() ? data.value("train_sha256", std::string()) : "";
  if (!recorded.empty() && !train_data_sha256.empty() && recorded != train_data_sha256)
    out.push_back("training data: data.path = '" + cfg.data.path + "' holds other text (train.bin SHA-256 " +
                  recorded.substr(0, 12) + "... -> " + train_data_sha256.substr(0, 12) + "...)");
  return out;
}

RestoreScope resume_scope(const json& meta, const TrainConfig& cfg) {
  if (cfg.checkpoint.weights_only) return RestoreScope::WeightsOnly;
  const bool parameters_only =
      meta.contains("imported") && meta["imported"].value("contents", std::string()) == "parameters";
  return parameters_only ? RestoreScope::WeightsOnly : RestoreScope::Full;
}

bool check_restore_tensors(const checkpoint::CheckpointReader& reader, const model::ModelSpec& spec,
                           RestoreScope scope) {
  std::vector<std::string> missing;
  for (const auto& p : spec.params) {
    if (!reader.has(p.name)) missing.push_back(p.name);
    if (scope != RestoreScope::Full) continue;
    for (const char* prefix : {checkpoint::kExpAvgPrefix, checkpoint::kExpAvgSqPrefix})
      if (!reader.has(prefix + p.name)) missing.push_back(prefix + p.name);
  }
  if (!missing.empty()) {
    std::string list;
    for (size_t i = 0; i < missing.size() && i < 5; ++i) list += (i ? ", '" : "'") + missing[i] + "'";
    if (missing.size() > 5) list += " and " + std::to_string(missing.size() - 5) + " more";
    MT_THROW(CheckpointError, "checkpoint ", reader.directory().string(), " lacks ", list,
             scope == RestoreScope::Full
                 ? ": an exact resume needs every parameter and both Adam moments of each (set "
                   "checkpoint.weights_only = true to resume the weights with a fresh optimizer state)"
                 : ": the model needs every parameter");
  }
  return scope == RestoreScope::Full;
}

std::string describe_resume(const std::string& layout_claim, const std::vector<std::string>& changes,
                            RestoreScope scope) {
  if (changes.empty() && scope == RestoreScope::Full) return layout_claim;
  std::string what;
  for (const auto& c : changes) what += (what.empty() ? "" : "; ") + c;
  std::string out = "assets complete";
  if (scope == RestoreScope::WeightsOnly) out += ": weights only, the optimizer state starts fresh";
  if (!changes.empty()) out += std::string(scope == RestoreScope::WeightsOnly ? "; " : ": ") + "changes (" + what + ")";
  return out + "; the continuation differs from the original run (" + layout_claim + " apart from that)";
}

}  // namespace meshtrain::train
