#include "meshtrain/checkpoint/writer.h"

#include "meshtrain/checkpoint/commit.h"
#include "meshtrain/checkpoint/shard_writer.h"

namespace meshtrain::checkpoint {

std::string save_checkpoint(comm::ProcessGroup& group, const std::string& ckpt_root, const SaveRequest& request,
                            const SaveOptions& options) {
  const std::filesystem::path root(ckpt_root);
  const auto tmp = prepare_save_dir(group, root, request.step);
  std::optional<LocalShard> local;
  std::string error;
  try {
    local = write_rank_shard(tmp, group.rank(), request.pieces, options);
  } catch (const std::exception& e) {
    error = e.what();
  }
  return commit_save(group, root, request.step, tmp, local, error, request.metadata, options);
}

}  // namespace meshtrain::checkpoint
