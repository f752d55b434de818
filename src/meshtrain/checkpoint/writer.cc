#include "meshtrain/checkpoint/writer.h"

#include "meshtrain/checkpoint/commit.h"
#include "meshtrain/checkpoint/fs_util.h"
#include "meshtrain/checkpoint/shard_writer.h"
#include "meshtrain/core/fault_injection.h"

namespace meshtrain::checkpoint {

std::string save_checkpoint(comm::ProcessGroup& group, const std::string& ckpt_root, const SaveRequest& request,
                            const SaveOptions& options) {
  const std::filesystem::path root(ckpt_root);
  const auto tmp = prepare_save_dir(group, root, request.step);
  std::optional<LocalShard> local;
  std::string error;
  try {
    local = write_rank_shard(tmp, group.rank(), request.pieces, options);
  } catch (const fault::InjectedFault&) {
    throw;  // the rank dies here, as if killed
  } catch (const std::exception& e) {
    error = e.what();
  }
  return commit_save(group, root, request.step, tmp, local, error, request.metadata, options);
}

std::string save_checkpoint_single(const std::string& ckpt_root, const SaveRequest& request,
                                   const SaveOptions& options) {
  const std::filesystem::path root(ckpt_root);
  const auto tmp = create_save_dir(root, request.step);
  try {
    const LocalShard shard = write_rank_shard(tmp, 0, request.pieces, options);
    publish(merge_shards({shard_descriptor(shard)}, request.step, request.metadata, (tmp / kManifestFile).string()),
            root, tmp, options);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove_all(tmp, ec);
    throw;
  }
  return (root / step_dir_name(request.step)).string();
}

}  // namespace meshtrain::checkpoint
