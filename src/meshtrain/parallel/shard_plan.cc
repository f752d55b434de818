#include "meshtrain/parallel/shard_plan.h"

#include <algorithm>

#include "meshtrain/core/error.h"

namespace meshtrain::parallel {

ShardPlan::ShardPlan(std::shared_ptr<const model::ModelSpec> spec, int dp_size, int dp_rank, int zero_stage,
                     int edp_size, int edp_rank)
    : spec_(std::move(spec)), R_(dp_size), rank_(dp_rank), stage_(zero_stage) {
  MT_CHECK(R_ >= 1 && rank_ >= 0 && rank_ < R_, "bad dp rank ", rank_, " of ", R_);
  if (edp_size == 0) edp_size = R_, edp_rank = rank_;
  MT_CHECK(edp_rank >= 0 && edp_rank < edp_size && R_ % edp_size == 0, "bad edp rank ", edp_rank, " of ", edp_size,
           " in a data group of ", R_);
  for (const auto& u : spec_->units) {
    UnitShard s;
    s.experts = u.experts;
    s.group_size = u.experts ? edp_size : R_;
    s.group_rank = u.experts ? edp_rank : rank_;
    const int64_t quantum = int64_t(s.group_size) * kNormBlock;
    s.numel = u.numel;
    s.padded = (u.numel + quantum - 1) / quantum * quantum;
    s.shard = s.padded / s.group_size;
    if (shards_optimizer()) {
      s.owned_begin = int64_t(s.group_rank) * s.shard;
      s.owned_end = s.owned_begin + s.shard;
    } else {
      s.owned_begin = 0;
      s.owned_end = s.padded;
    }
    units_.push_back(s);
  }
}

std::vector<int> ShardPlan::segment_order() const {
  std::vector<int> order(units_.size());
  for (size_t u = 0; u < order.size(); ++u) order[u] = int(u);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return spec_->units[size_t(a)].segment < spec_->units[size_t(b)].segment;
  });
  return order;
}

std::vector<int64_t> ShardPlan::flat_offsets() const {
  std::vector<int64_t> offset(units_.size(), 0);
  int64_t off = 0;
  for (int u : segment_order()) {
    offset[size_t(u)] = off;
    off += units_[size_t(u)].padded;
  }
  return offset;
}

std::vector<OwnedPiece> ShardPlan::owned_pieces(int u) const {
  return pieces_in(u, unit(u).owned_begin, unit(u).owned_end);
}

std::vector<OwnedPiece> ShardPlan::pieces_in(int u, int64_t begin, int64_t end) const {
  std::vector<OwnedPiece> out;
  for (int i : spec_->units[size_t(u)].params) {
    const auto& p = spec_->params[size_t(i)];
    const int64_t b = std::max(begin, p.unit_offset), e = std::min(end, p.unit_offset + p.numel());
    if (b < e) out.push_back({i, b - p.unit_offset, e - p.unit_offset, b});
  }
  return out;
}

int64_t ShardPlan::padded_total() const {
  int64_t n = 0;
  for (const auto& s : units_) n += s.padded;
  return n;
}

ShardPlan::Persistent ShardPlan::persistent_bytes(const PrecisionPolicy& precision) const {
  int64_t full = 0, shard = 0;
  for (const auto& s : units_) full += s.padded, shard += s.shard;
  auto size = [](DType t) { return int64_t(dtype_size(t)); };
  const int64_t per_owned = 2 * size(precision.optimizer) + (precision.has_master_copy() ? size(precision.master) : 0);
  Persistent p;
  p.params = (shards_params() ? shard : full) * size(precision.params);
  p.grads = (shards_grads() ? shard : full) * size(precision.grad_accum);
  p.optimizer = (shards_optimizer() ? shard : full) * per_owned;
  return p;
}

}  // namespace meshtrain::parallel
