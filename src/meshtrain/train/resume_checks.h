// What a resume may rely on and what it must refuse (docs/math.md, "Rule: restore
// claims": restore verifies everything before continuing and reports an honest claim):
//   - the checkpoint to resume from: `latest`, or without it the highest
//     complete step that verifies (said so), never a silent fresh start
//     over another run's committed steps;
//   - the config the checkpoint was written with: a model, optimizer,
//     schedule or data setting that differs is refused, naming each key,
//     unless listed in checkpoint.allow_changes (the claim then says so);
//   - the tensor set: every parameter and both Adam moments of each, or an
//     error naming what is missing, unless the resume is weights only.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/checkpoint/reader.h"
#include "meshtrain/model/param_spec.h"

namespace meshtrain::train {

struct TrainConfig;

struct ResumePoint {
  std::optional<checkpoint::CheckpointReader> reader;  // none: start fresh
  std::string note;  // how it was chosen, when not by `latest` ("" otherwise)
};

// Collective-free; every rank reaches the same answer from the same files.
// ConfigError when checkpoint.resume is false but the root holds committed
// checkpoints; CheckpointError when it holds checkpoints none of which
// verifies.
ResumePoint locate_resume_checkpoint(const std::filesystem::path& root, bool resume);

// Keys compared between the checkpoint's metadata and the run's config.
const std::vector<std::string>& resume_checked_keys();
// ConfigError for an entry of checkpoint.allow_changes that is not one of them.
void validate_allow_changes(const std::vector<std::string>& keys);

// The compared keys whose values differ and are allowed ("optimizer.lr
// 0.001 -> 0.0005"); ConfigError naming every differing key that is not.
std::vector<std::string> check_resume_config(const nlohmann::json& metadata, const TrainConfig& cfg);

// Settings a resume accepts but that make the continuation differ from the
// original run, each named ("training.precision \"fp32\" -> \"bf16\""): the
// precision policy, reproducible mode and the training data's content (its
// shard digest, whatever data.path is). Checkpoints that do not record one
// of them are not compared on it.
std::vector<std::string> continuation_changes(const nlohmann::json& metadata, const TrainConfig& cfg,
                                              const std::string& train_data_sha256);

// Full: weights, Adam moments, step and data position (a resume).
// WeightsOnly: the same with a fresh optimizer state.
// Weights: the weights alone, for a new run starting from them
// (checkpoint.init_from): its own step, optimizer and data position.
enum class RestoreScope { Full, WeightsOnly, Weights };
// WeightsOnly when asked (checkpoint.weights_only) or when the checkpoint
// holds parameters only (an import).
RestoreScope resume_scope(const nlohmann::json& metadata, const TrainConfig& cfg);
// Before anything is read: every parameter must be stored (and under Full
// both moments of each); CheckpointError naming the missing tensors.
// Returns whether the moments are to be restored.
bool check_restore_tensors(const checkpoint::CheckpointReader& reader, const model::ModelSpec& spec,
                           RestoreScope scope);

// The line a resume prints: the layout claim, corrected for changes (allowed
// or continuation_changes) and a weights-only restore.
std::string describe_resume(const std::string& layout_claim, const std::vector<std::string>& changes,
                            RestoreScope scope);

}  // namespace meshtrain::train
