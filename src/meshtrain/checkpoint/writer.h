// Saving a distributed checkpoint. Every rank passes the pieces (boxes of
// logical tensors) it owns; together the pieces of all ranks must cover each
// tensor exactly once (replicated tensors: pick one owner, or split them
// with balanced_part_boxes so every rank writes a share).
//
// Commit protocol (docs/checkpoints.md):
//   1. rank 0 removes stale ckpt_root/.tmp-* directories of crashed saves and
//      creates ckpt_root/.tmp-step-NNNNNNNN;
//   2. each rank writes its pieces to rank-RRRRR.bin there (SHA-256 per
//      piece) and fsyncs it;
//   3. the piece descriptors go to rank 0, which validates the partition,
//      writes manifest.json, fsyncs, renames the directory to
//      step-NNNNNNNN (swapping atomically with an existing directory of
//      that step), then replaces `latest` atomically and applies
//      retention; every rank returns the same result or the same error.
// A crash at any point leaves `latest` naming a complete checkpoint, and
// never removes the only copy of a committed step (tests/checkpoint/
// commit_crash_test.cc kills the process at every step of this protocol).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/checkpoint/box.h"
#include "meshtrain/comm/process_group.h"
#include "meshtrain/core/dtype.h"
#include "meshtrain/core/shape.h"

namespace meshtrain::checkpoint {

struct TensorPiece {
  std::string name;   // logical name, e.g. "model.layers.0.mlp.up_proj.weight"
  Shape global_shape;
  DType dtype = DType::F32;
  Box box;            // which part of the global tensor `data` holds
  const void* data = nullptr;  // box.numel() elements, row-major within the box
};

struct SaveRequest {
  int64_t step = 0;
  // Stored verbatim in the manifest; rank 0's copy is used.
  nlohmann::json metadata = nlohmann::json::object();
  std::vector<TensorPiece> pieces;
};

struct SaveOptions {
  // Keep the last K complete checkpoints (by step); 0 keeps all. The one
  // just written is never deleted.
  int keep_last = 0;
  // Test hook: called by the writing thread before each piece; throwing
  // from it injects a writer failure on that rank.
  std::function<void(int rank, const std::string& tensor)> before_piece;
  // Saving a step that already exists swaps the directories atomically
  // (RENAME_EXCHANGE); false takes the path used on file systems without it.
  bool allow_exchange = true;
};

// Collective over `group`. Returns the committed directory
// (ckpt_root/step-NNNNNNNN) on every rank; throws CheckpointError on every
// rank when any rank failed (the temporary directory is then removed).
std::string save_checkpoint(comm::ProcessGroup& group, const std::string& ckpt_root, const SaveRequest& request,
                            const SaveOptions& options = {});

// The same protocol for a single writer holding every piece (conversions,
// tools): no ProcessGroup, no threads. Writes rank-00000.bin.
std::string save_checkpoint_single(const std::string& ckpt_root, const SaveRequest& request,
                                   const SaveOptions& options = {});

}  // namespace meshtrain::checkpoint
