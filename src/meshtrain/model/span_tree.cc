#include "meshtrain/model/span_tree.h"

#include <algorithm>
#include <string>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/model/tree_reduce.h"

namespace meshtrain::model {

std::vector<LeafSpan> aligned_blocks(LeafSpan span) {
  std::vector<LeafSpan> blocks;
  for (int64_t at = span.first; at < span.end();) {
    int64_t size = 1;
    while (at % (2 * size) == 0 && at + 2 * size <= span.end()) size *= 2;
    blocks.push_back({at, size});
    at += size;
  }
  return blocks;
}

namespace {

// Leaves of the window; ConfigError unless the spans with leaves tile [0, W)
// and W is a power of two.
int64_t checked_window(const std::vector<LeafSpan>& spans) {
  std::vector<LeafSpan> held;
  for (const LeafSpan& s : spans)
    if (s.count > 0) held.push_back(s);
  std::sort(held.begin(), held.end(), [](const LeafSpan& a, const LeafSpan& b) { return a.first < b.first; });
  int64_t at = 0;
  for (const LeafSpan& s : held) {
    MT_CHECK(s.first == at, "leaf spans leave a gap or overlap at leaf ", at);
    at = s.end();
  }
  MT_REQUIRE(ConfigError, is_power_of_two(at), "reproducible reduction of a window of ", at,
             " micro-batches: the tree needs a power of two");
  return at;
}

bool meets(const LeafSpan& s, int64_t first, int64_t count) {
  return s.count > 0 && s.first < first + count && first < s.end();
}

// The group ranks whose spans meet leaves [first, first + count), ascending.
std::vector<int> holders(const std::vector<LeafSpan>& spans, int64_t first, int64_t count) {
  std::vector<int> ranks;
  for (int r = 0; r < int(spans.size()); ++r)
    if (meets(spans[size_t(r)], first, count)) ranks.push_back(r);
  return ranks;
}

int index_of(const std::vector<int>& ranks, int r) {
  return int(std::find(ranks.begin(), ranks.end(), r) - ranks.begin());
}

// A node of the tree this rank holds the sum of.
struct Held {
  int64_t first, count;
  Tensor sum;
};

// A node crossing spans, finished at this level.
struct Join {
  size_t left, right;  // indices into held; right == npos: received
  Tensor theirs;
};

}  // namespace

void span_tree_all_reduce(comm::ProcessGroup& group, const std::vector<LeafSpan>& spans,
                          const std::vector<Tensor>& parts, const std::shared_ptr<CachingAllocator>& alloc) {
  MT_CHECK(int(spans.size()) == group.size(), spans.size(), " leaf spans for a group of ", group.size());
  MT_CHECK(!parts.empty(), "span tree without a buffer");
  const int64_t W = checked_window(spans);
  const int r = group.rank();
  const LeafSpan me = spans[size_t(r)];
  const std::vector<LeafSpan> blocks = aligned_blocks(me);
  MT_CHECK(me.count == 0 || parts.size() == blocks.size(), parts.size(), " subtree roots for ", blocks.size(),
           " aligned blocks");
  const Tensor& out = parts[0];
  const auto& k = kernels::kernels_for(out);
  const size_t n = size_t(out.numel());
  // Tags: the node's heap index (root 1, children 2i and 2i + 1), unique per message.
  auto tag = [W](int64_t first, int64_t count) { return int(W / count + first / count); };
  std::vector<Held> held;
  for (size_t i = 0; i < blocks.size(); ++i) held.push_back({blocks[i].first, blocks[i].count, parts[i]});
  auto held_at = [&](int64_t first, int64_t count) {
    for (size_t i = 0; i < held.size(); ++i)
      if (held[i].first == first && held[i].count == count) return i;
    MT_CHECK(false, "span tree: node [", first, ", ", first + count, ") not held");
    return size_t(0);
  };
  for (int64_t L = 1; me.count > 0 && L < W; L *= 2) {
    // Parents of size 2L that meet the span without lying inside it: at
    // most the two holding its ends (docs/math.md (M.75)).
    std::vector<int64_t> parents;
    for (const int64_t leaf : {me.first, me.end() - 1}) {
      const int64_t p = leaf / (2 * L) * (2 * L);
      const bool inside = p >= me.first && p + 2 * L <= me.end();
      if (!inside && std::find(parents.begin(), parents.end(), p) == parents.end()) parents.push_back(p);
    }
    std::vector<Join> joins;
    std::vector<comm::Work> works;
    for (const int64_t p : parents) {
      const std::vector<int> left = holders(spans, p, L), right = holders(spans, p + L, L);
      const bool in_left = meets(me, p, L), in_right = meets(me, p + L, L);
      const comm::OpOptions o{.tag = tag(p, 2 * L)};
      // A rank on one side only takes the other side's sum from the rank
      // its index there picks (index mod the other side's count).
      auto send_picks = [&](const std::vector<int>& mine, const std::vector<int>& other, int64_t mine_first, size_t sum) {
        for (size_t j = 0; j < other.size(); ++j)
          if (!meets(spans[size_t(other[j])], mine_first, L) && mine[j % mine.size()] == r)
            works.push_back(group.isend(held[sum].sum.raw(), n, out.dtype(), other[j], o));
      };
      size_t a = 0, b = std::string::npos;
      if (in_left) send_picks(left, right, p, a = held_at(p, L));
      if (in_right) send_picks(right, left, p + L, b = held_at(p + L, L));
      if (in_left && in_right) {
        joins.push_back({a, b, Tensor()});
        continue;
      }
      const std::vector<int>& mine = in_left ? left : right;
      const std::vector<int>& other = in_left ? right : left;
      Tensor theirs = Tensor::empty(out.shape(), out.dtype(), alloc, MemCategory::Comm);
      works.push_back(group.irecv(theirs.raw(), n, out.dtype(), other[size_t(index_of(mine, r)) % other.size()], o));
      joins.push_back({in_left ? a : b, std::string::npos, theirs});
    }
    for (comm::Work& w : works) w.wait();
    // mine + theirs == theirs + mine, bit for bit: every holder gets the same sum.
    std::vector<size_t> dropped;
    for (const Join& j : joins) {
      Held& h = held[j.left];
      if (j.right != std::string::npos) {
        k.add(h.sum, held[j.right].sum);
        h.first = std::min(h.first, held[j.right].first);
        dropped.push_back(j.right);
      } else {
        k.add(h.sum, j.theirs);
        h.first = h.first / (2 * L) * (2 * L);
      }
      h.count = 2 * L;
    }
    std::sort(dropped.rbegin(), dropped.rend());
    for (const size_t i : dropped) held.erase(held.begin() + std::ptrdiff_t(i));
  }
  // Ranks without leaves take the root from a rank with leaves.
  const std::vector<int> with = holders(spans, 0, W);
  std::vector<int> without;
  for (int q = 0; q < group.size(); ++q)
    if (spans[size_t(q)].count == 0) without.push_back(q);
  const comm::OpOptions o{.tag = int(2 * W)};  // past every node's
  std::vector<comm::Work> works;
  if (me.count == 0) {
    works.push_back(group.irecv(out.raw(), n, out.dtype(), with[size_t(index_of(without, r)) % with.size()], o));
  } else {
    const Tensor& root = held[held_at(0, W)].sum;
    for (size_t j = 0; j < without.size(); ++j)
      if (int(j % with.size()) == index_of(with, r)) works.push_back(group.isend(root.raw(), n, out.dtype(), without[j], o));
    for (comm::Work& w : works) w.wait();
    works.clear();
    if (root.raw() != out.raw()) k.copy(out, root);
  }
  for (comm::Work& w : works) w.wait();
}

}  // namespace meshtrain::model
