// One rank's part of a save: its pieces written back to back into one shard
// file with a SHA-256 per piece, then fsync'ed. No communication, so the
// asynchronous checkpointer can run it on a background thread.
#pragma once

#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

#include "meshtrain/checkpoint/manifest.h"
#include "meshtrain/checkpoint/writer.h"

namespace meshtrain::checkpoint {

struct LocalShard {
  FileEntry file;
  std::vector<TensorEntry> tensors;  // this rank's pieces, grouped by tensor
};

std::string shard_file_name(int rank);  // "rank-00003.bin"

// Throws CheckpointError; stops early (throwing) when *cancel becomes true.
LocalShard write_rank_shard(const std::filesystem::path& dir, int rank, const std::vector<TensorPiece>& pieces,
                            const SaveOptions& options, const std::atomic<bool>* cancel = nullptr);

// Checks a rank's pieces before anything is written (names, dtypes, boxes).
void check_pieces(const std::vector<TensorPiece>& pieces, int rank);

}  // namespace meshtrain::checkpoint
