// The halves of a save around the shard writes (writer.h describes the
// protocol): preparing the temporary directory, and the commit that merges
// the piece descriptors, writes the manifest, moves the directory into
// place and repoints `latest`. The file-system steps run on one process
// (rank 0, or a single writer without any ProcessGroup); the collective
// wrappers agree on the outcome.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/checkpoint/manifest.h"
#include "meshtrain/checkpoint/shard_writer.h"
#include "meshtrain/comm/process_group.h"

namespace meshtrain::checkpoint {

// ---- one process, no communication ------------------------------------------
// Finishes an interrupted replace, removes stale .tmp-* directories and
// creates a fresh root/.tmp-step-NNNNNNNN.
std::filesystem::path create_save_dir(const std::filesystem::path& root, int64_t step);
// Merges the shards' descriptors (JSON of shard_descriptor, in rank order)
// into a validated manifest.
Manifest merge_shards(const std::vector<std::string>& shards, int64_t step, const nlohmann::json& metadata,
                      const std::string& source);
std::string shard_descriptor(const LocalShard& shard);
// Writes the manifest into `tmp`, moves `tmp` to root/step-NNNNNNNN (an
// existing directory of that step is swapped atomically), repoints `latest`
// and applies retention. A crash at any point leaves `latest` naming a
// complete checkpoint and never removes the only copy of a committed step.
void publish(const Manifest& m, const std::filesystem::path& root, const std::filesystem::path& tmp,
             const SaveOptions& options);

// ---- collective over `group` ------------------------------------------------------
// Rank 0 runs create_save_dir; every rank gets the path or the same error.
std::filesystem::path prepare_save_dir(comm::ProcessGroup& group, const std::filesystem::path& root, int64_t step);

// `local` is this rank's written shard, or nullopt with `local_error` when
// writing failed (`local_cancelled`: it stopped because another rank
// failed, so the error names that rank). On success returns
// root/step-NNNNNNNN on every rank; otherwise removes the temporary
// directory and throws the same CheckpointError on every rank.
std::string commit_save(comm::ProcessGroup& group, const std::filesystem::path& root, int64_t step,
                        const std::filesystem::path& tmp, const std::optional<LocalShard>& local,
                        const std::string& local_error, const nlohmann::json& metadata, const SaveOptions& options,
                        bool local_cancelled = false);

// Keeps the `keep_last` highest complete steps and `keep`; deletes others
// by renaming them to a .tmp- name first (a half-deleted directory never
// looks complete).
void apply_retention(const std::filesystem::path& root, int keep_last, const std::filesystem::path& keep);

}  // namespace meshtrain::checkpoint
