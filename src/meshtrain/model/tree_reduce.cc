#include "meshtrain/model/tree_reduce.h"

#include <vector>

#include "meshtrain/comm/hierarchical_group.h"
#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain::model {

namespace {

// Tags of the tree's messages: its level (the only point-to-point traffic
// on the data group; far below any backend's tag bound).
constexpr int kTreeTag = 0;

}  // namespace

bool is_power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

namespace {

void require_tree(int R) {
  MT_REQUIRE(ConfigError, is_power_of_two(R), "reproducible reduction over ", R,
             " ranks: the tree needs a power-of-two group");
}

// Recursive doubling over `group` (docs/math.md (M.11)).
void flat_tree_all_reduce(comm::ProcessGroup& group, const Tensor& buf, const std::shared_ptr<CachingAllocator>& alloc) {
  const int R = group.size(), r = group.rank();
  if (R == 1 || buf.numel() == 0) return;
  require_tree(R);
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

}  // namespace

void tree_all_reduce(comm::ProcessGroup& group, const Tensor& buf, const std::shared_ptr<CachingAllocator>& alloc) {
  comm::HierarchicalGroup* h = comm::as_hierarchical(group);
  if (!h || !h->hierarchical(comm::OpKind::AllReduce, buf.dtype(), size_t(buf.numel())))
    return flat_tree_all_reduce(group, buf, alloc);
  require_tree(group.size());
  // The same tree (docs/math.md, "Hierarchical collectives"): member
  // a·l + j's levels below l pair it with ranks of its own node, the levels
  // from l up with the same local rank on other nodes. So the node's levels
  // as a reduce-scatter (each element summed by the same pairs, on whichever
  // member keeps it), the nodes' levels on this member's piece, and the
  // pieces gathered inside the node give every element the flat tree's bits.
  h->submit([&](comm::ProcessGroup& intra, comm::ProcessGroup& inter) {
    const size_t n = size_t(buf.numel());
    const int l = intra.size(), j = intra.rank();
    const int64_t begin = int64_t(comm::chunk_offset(n, l, j));
    const Tensor piece = buf.flat_slice(begin, begin + int64_t(comm::chunk_size(n, l, j)));
    tree_reduce_scatter(intra, buf, alloc);
    flat_tree_all_reduce(inter, piece, alloc);
    intra.all_gather(piece.raw(), buf.raw(), n, buf.dtype());
  }).wait();
}

void tree_reduce_scatter(comm::ProcessGroup& group, const Tensor& buf, const std::shared_ptr<CachingAllocator>& alloc) {
  const int R = group.size(), r = group.rank();
  if (R == 1 || buf.numel() == 0) return;
  require_tree(R);
  const size_t n = size_t(buf.numel());
  const auto& k = kernels::kernels_for(buf);
  auto chunk_of = [&](const Tensor& t, int64_t at, int c) {
    return t.flat_slice(at, at + int64_t(comm::chunk_size(n, R, c)));
  };
  auto in_buf = [&](int c) { return chunk_of(buf, int64_t(comm::chunk_offset(n, R, c)), c); };
  // Chunks still summed here: those agreeing with r in the bits already used.
  std::vector<int> mine(static_cast<size_t>(R));
  for (int c = 0; c < R; ++c) mine[size_t(c)] = c;
  for (int level = 1; level < R; level <<= 1) {
    const int peer = r ^ level;
    std::vector<int> keep, give;
    for (int c : mine) ((c & level) == (r & level) ? keep : give).push_back(c);
    auto total = [&](const std::vector<int>& cs) {
      int64_t t = 0;
      for (int c : cs) t += int64_t(comm::chunk_size(n, R, c));
      return t;
    };
    Tensor out = Tensor::empty(Shape{total(give)}, buf.dtype(), alloc, MemCategory::Comm);
    Tensor in = Tensor::empty(Shape{total(keep)}, buf.dtype(), alloc, MemCategory::Comm);
    int64_t at = 0;
    for (int c : give) {
      k.copy(chunk_of(out, at, c), in_buf(c));
      at += int64_t(comm::chunk_size(n, R, c));
    }
    comm::Work recv = group.irecv(in.raw(), size_t(in.numel()), buf.dtype(), peer, {.tag = kTreeTag + level});
    comm::Work send = group.isend(out.raw(), size_t(out.numel()), buf.dtype(), peer, {.tag = kTreeTag + level});
    recv.wait();
    send.wait();
    // The peer packed the same chunk indices in the same (ascending) order.
    at = 0;
    for (int c : keep) {
      k.add(in_buf(c), chunk_of(in, at, c));
      at += int64_t(comm::chunk_size(n, R, c));
    }
    mine = keep;
  }
}

double tree_sum(std::vector<double> v) {
  MT_CHECK(is_power_of_two(int64_t(v.size())), "tree sum of ", v.size(), " values");
  for (size_t width = v.size(); width > 1; width /= 2)
    for (size_t i = 0; i < width / 2; ++i) v[i] = v[2 * i] + v[2 * i + 1];
  return v[0];
}

}  // namespace meshtrain::model
