// Expert parallelism's token exchange (docs/math.md, "Mixture of experts and
// expert parallelism"): the expert-major buffer of a rank (moe_routing.h: one
// padded block per expert, the experts of ep rank q contiguous) goes to the
// experts' owners with one variable-count all-to-all, each owner runs its experts
// block by block (a block is one source rank's tokens for one expert: the shape
// one rank alone would run) and the outputs return by the reverse all-to-all into
// the same rows, so the combine reads them in (token, slot) order as on one rank.
// Backward sends the output gradients the same way and returns the input
// gradients. A group of one (or none) is the identity: the same code path.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "meshtrain/comm/process_group.h"
#include "meshtrain/core/tensor.h"

namespace meshtrain::model {

class ExpertExchange {
 public:
  struct Block {
    int64_t expert = 0;  // global expert index
    int64_t offset = 0, rows = 0;  // rows of the received buffer
    int source = 0;      // the ep rank whose tokens these are
  };
  // Collective over `ep` (null: one rank): exchanges the block sizes.
  // block_begin: [E + 1] padded block starts of this rank's buffer.
  ExpertExchange(comm::ProcessGroup* ep, const std::vector<int64_t>& block_begin, int64_t n_experts);

  bool local() const { return ep_ == nullptr; }
  // The blocks this rank computes, in (source rank, expert) order.
  const std::vector<Block>& blocks() const { return blocks_; }
  int64_t received_rows() const { return received_rows_; }
  // This rank's buffer rows -> the owners' received layout (a new tensor of
  // at least received_rows() rows; the same tensor when local).
  // The received tensor has a bucketed row count (moe_routing.h), so the
  // allocator sees a bounded set of sizes.
  Tensor dispatch(const Tensor& mine, const std::shared_ptr<CachingAllocator>& alloc, MemCategory cat) const;
  // Received layout -> this rank's buffer rows (into `mine`).
  void give_back(const Tensor& received, const Tensor& mine) const;
  // Bytes this rank sends in one dispatch of `row_bytes`-byte rows (all peers, itself included).
  int64_t sent_bytes(int64_t row_bytes) const;

 private:
  void exchange(const Tensor& from, const std::vector<size_t>& from_rows, const Tensor& to,
                const std::vector<size_t>& to_rows, int64_t d, DType dtype) const;
  comm::ProcessGroup* ep_;
  std::vector<size_t> send_rows_, recv_rows_;  // per peer
  std::vector<Block> blocks_;
  int64_t received_rows_ = 0;
};

}  // namespace meshtrain::model
