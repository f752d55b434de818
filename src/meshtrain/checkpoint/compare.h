// Compares two checkpoints tensor by tensor (bitwise, after conversion to
// f64) and their training position: what a user runs to prove that a resume
// or a layout change replayed exactly (`meshtrain ckpt diff A B`).
#pragma once

#include <string>
#include <vector>

#include "meshtrain/checkpoint/reader.h"

namespace meshtrain::checkpoint {

struct TensorDiff {
  std::string name;
  int64_t differing = 0;  // elements that differ
  double max_abs = 0;     // largest absolute difference
};

struct CheckpointDiff {
  std::vector<std::string> only_in_a, only_in_b, shape_mismatch;
  std::vector<TensorDiff> differing;  // tensors whose values differ
  int64_t tensors_compared = 0;
  bool position_equal = true;  // step, loader state, optimizer step count
  std::string position_note;
  bool identical() const;
  std::string str() const;
};

CheckpointDiff compare_checkpoints(const CheckpointReader& a, const CheckpointReader& b);

}  // namespace meshtrain::checkpoint
