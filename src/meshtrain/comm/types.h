// Vocabulary shared by every backend: reduce ops, op kinds, option structs
// and the partition rule for counts that do not divide the group size.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "meshtrain/core/dtype.h"

namespace meshtrain::comm {

enum class ReduceOp : uint8_t { Sum, Avg, Max, Min };
std::string_view reduce_op_name(ReduceOp op);

enum class OpKind : uint8_t {
  AllReduce, ReduceScatter, AllGather, AllToAll, Broadcast, Send, Recv, Barrier, Split,
};
inline constexpr int kNumOpKinds = 9;
std::string_view op_kind_name(OpKind k);

using Millis = std::chrono::milliseconds;
// Generous default: a slow step must not look like a dead peer.
inline constexpr Millis kDefaultTimeout{300'000};

// Per-call options. A zero timeout means "the group's timeout".
struct OpOptions {
  Millis timeout{0};
  int tag = 0;  // send/recv only: messages match on (peer, tag), FIFO per pair
};

// A member's place in a group a split makes: its size and the member's rank.
struct SplitPlace {
  int size = 1, rank = 0;
};

// Per-group options, inherited by groups made with split().
struct GroupOptions {
  Millis timeout = kDefaultTimeout;
  // Verify before every collective that all members entered the same
  // (op, seq, count, dtype, root, reduce op). The threads backend always
  // does this (it is free there); MPI pays one small all-gather per op.
  bool check = false;
  // The largest tag send/recv may use, below the backend's own bound (0:
  // the backend's). Lets a test run a backend with MPI's smallest legal bound.
  int max_tag = 0;
};

// Partition of `count` elements over `parts` ranks used by reduce_scatter
// and all_gather: balanced, the first count % parts ranks get one extra
// element. Chunk i = [offset(i), offset(i) + size(i)); sizes differ by at
// most one and may be zero (count < parts).
inline size_t chunk_size(size_t count, int parts, int i) {
  return count / size_t(parts) + (size_t(i) < count % size_t(parts) ? 1 : 0);
}
inline size_t chunk_offset(size_t count, int parts, int i) {
  const size_t q = count / size_t(parts), r = count % size_t(parts);
  return size_t(i) * q + (size_t(i) < r ? size_t(i) : r);
}

// What every member must agree on for one collective (check mode).
struct Fingerprint {
  OpKind kind = OpKind::Barrier;
  uint64_t seq = 0;
  uint64_t count = 0;
  DType dtype = DType::F32;
  int root = -1;
  ReduceOp op = ReduceOp::Sum;
  bool operator==(const Fingerprint&) const = default;
  std::string str() const;
};

}  // namespace meshtrain::comm
