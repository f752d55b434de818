#include "meshtrain/parallel/tree_reduce.h"

#include <vector>

#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain::parallel {

namespace {

// Tags of the tree's messages: its level (the only point-to-point traffic
// on the data group; far below any backend's tag bound).
constexpr int kTreeTag = 0;

}  // namespace

bool is_power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

void tree_all_reduce(comm::ProcessGroup& group, const Tensor& buf, const std::shared_ptr<CachingAllocator>& alloc) {
  const int R = group.size(), r = group.rank();
  if (R == 1 || buf.numel() == 0) return;
  MT_REQUIRE(ConfigError, is_power_of_two(R), "reproducible reduction over ", R,
             " ranks: the tree needs a power-of-two group");
  const auto& k = kernels::kernels_for(buf);
  Tensor theirs = Tensor::empty(buf.shape(), buf.dtype(), alloc, MemCategory::Comm);
  for (int level = 1; level < R; level <<= 1) {
    const int peer = r ^ level;
    comm::Work recv = group.irecv(theirs.raw(), size_t(buf.numel()), buf.dtype(), peer, {.tag = kTreeTag + level});
    comm::Work send = group.isend(buf.raw(), size_t(buf.numel()), buf.dtype(), peer, {.tag = kTreeTag + level});
    recv.wait();
    send.wait();
    k.add(buf, theirs);  // mine + theirs == theirs + mine, bit for bit
  }
}

void tree_reduce_scatter(comm::ProcessGroup& group, const Tensor& buf, const std::shared_ptr<CachingAllocator>& alloc) {
  const int R = group.size(), r = group.rank();
  if (R == 1 || buf.numel() == 0) return;
  MT_REQUIRE(ConfigError, is_power_of_two(R), "reproducible reduction over ", R,
             " ranks: the tree needs a power-of-two group");
  MT_CHECK(buf.numel() % R == 0, "tree reduce-scatter of ", buf.numel(), " elements over ", R, " ranks");
  const int64_t chunk = buf.numel() / R;
  const auto& k = kernels::kernels_for(buf);
  auto chunk_of = [&](const Tensor& t, int c) { return t.flat_slice(c * chunk, (c + 1) * chunk); };
  // Chunks still summed here: those agreeing with r in the bits already used.
  std::vector<int> mine(static_cast<size_t>(R));
  for (int c = 0; c < R; ++c) mine[size_t(c)] = c;
  for (int level = 1; level < R; level <<= 1) {
    const int peer = r ^ level;
    std::vector<int> keep, give;
    for (int c : mine) ((c & level) == (r & level) ? keep : give).push_back(c);
    Tensor out = Tensor::empty(Shape{int64_t(give.size()) * chunk}, buf.dtype(), alloc, MemCategory::Comm);
    Tensor in = Tensor::empty(Shape{int64_t(keep.size()) * chunk}, buf.dtype(), alloc, MemCategory::Comm);
    for (size_t i = 0; i < give.size(); ++i) k.copy(chunk_of(out, int(i)), chunk_of(buf, give[i]));
    comm::Work recv = group.irecv(in.raw(), size_t(in.numel()), buf.dtype(), peer, {.tag = kTreeTag + level});
    comm::Work send = group.isend(out.raw(), size_t(out.numel()), buf.dtype(), peer, {.tag = kTreeTag + level});
    recv.wait();
    send.wait();
    // The peer packed the same chunk indices in the same (ascending) order.
    for (size_t i = 0; i < keep.size(); ++i) k.add(chunk_of(buf, keep[i]), chunk_of(in, int(i)));
    mine = keep;
  }
}

double tree_sum(std::vector<double> v) {
  MT_CHECK(is_power_of_two(int64_t(v.size())), "tree sum of ", v.size(), " values");
  for (size_t width = v.size(); width > 1; width /= 2)
    for (size_t i = 0; i < width / 2; ++i) v[i] = v[2 * i] + v[2 * i + 1];
  return v[0];
}

}  // namespace meshtrain::parallel
