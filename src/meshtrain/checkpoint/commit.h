// The collective halves of a save (writer.h describes the protocol):
// preparing the temporary directory, and the commit that gathers piece
// descriptors to rank 0, writes the manifest, renames and moves `latest`.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "meshtrain/checkpoint/shard_writer.h"
#include "meshtrain/comm/process_group.h"

namespace meshtrain::checkpoint {

// Collective: rank 0 removes stale .tmp-* directories and creates a fresh
// root/.tmp-step-NNNNNNNN; every rank gets its path.
std::filesystem::path prepare_save_dir(comm::ProcessGroup& group, const std::filesystem::path& root, int64_t step);

// Collective. `local` is this rank's written shard, or nullopt with
// `local_error` when writing failed (`local_cancelled`: it stopped because
// another rank failed, so the error names that rank). On success returns root/step-NNNNNNNN
// on every rank; otherwise removes the temporary directory and throws the
// same CheckpointError on every rank.
std::string commit_save(comm::ProcessGroup& group, const std::filesystem::path& root, int64_t step,
                        const std::filesystem::path& tmp, const std::optional<LocalShard>& local,
                        const std::string& local_error, const nlohmann::json& metadata, const SaveOptions& options,
                        bool local_cancelled = false);

// Keeps the `keep_last` highest complete steps and `keep`; deletes others
// by renaming them to a .tmp- name first (a half-deleted directory never
// looks complete).
void apply_retention(const std::filesystem::path& root, int keep_last, const std::filesystem::path& keep);

}  // namespace meshtrain::checkpoint
