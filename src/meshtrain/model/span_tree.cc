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

// One rank's part of span_tree_all_reduce: the nodes it holds, finished
// level by level (docs/math.md (M.75)).
class SpanTree {
 public:
  SpanTree(comm::ProcessGroup& group, const std::vector<LeafSpan>& spans, const std::vector<Tensor>& parts,
           const std::shared_ptr<CachingAllocator>& alloc)
      : group_(group), spans_(spans), alloc_(alloc), W_(checked_window(spans)), r_(group.rank()),
        me_(spans[size_t(r_)]), out_(parts[0]), k_(kernels::kernels_for(out_)), n_(size_t(out_.numel())) {
    const std::vector<LeafSpan> blocks = aligned_blocks(me_);
    MT_CHECK(me_.count == 0 || parts.size() == blocks.size(), parts.size(), " subtree roots for ", blocks.size(),
             " aligned blocks");
    for (size_t i = 0; i < blocks.size(); ++i) held_.push_back({blocks[i].first, blocks[i].count, parts[i]});
  }

  void run() {
    for (int64_t L = 1; me_.count > 0 && L < W_; L *= 2) finish_level(L);
    share_root();
  }

 private:
  // Tags: the node's heap index (root 1, children 2i and 2i + 1), unique per message.
  int tag(int64_t first, int64_t count) const { return int(W_ / count + first / count); }

  size_t held_at(int64_t first, int64_t count) const {
    for (size_t i = 0; i < held_.size(); ++i)
      if (held_[i].first == first && held_[i].count == count) return i;
    MT_CHECK(false, "span tree: node [", first, ", ", first + count, ") not held");
    return 0;
  }

  // The nodes of size 2L that meet the span without lying inside it: at
  // most the two holding its ends.
  void finish_level(int64_t L) {
    std::vector<int64_t> parents;
    for (const int64_t leaf : {me_.first, me_.end() - 1}) {
      const int64_t p = leaf / (2 * L) * (2 * L);
      const bool inside = p >= me_.first && p + 2 * L <= me_.end();
      if (!inside && std::find(parents.begin(), parents.end(), p) == parents.end()) parents.push_back(p);
    }
    std::vector<Join> joins;
    std::vector<comm::Work> works;
    for (const int64_t p : parents) joins.push_back(exchange(p, L, works));
    for (comm::Work& w : works) w.wait();
    // mine + theirs == theirs + mine, bit for bit: every holder gets the same sum.
    std::vector<size_t> dropped;
    for (const Join& j : joins) {
      Held& h = held_[j.left];
      if (j.right != std::string::npos) {
        k_.add(h.sum, held_[j.right].sum);
        dropped.push_back(j.right);
      } else {
        k_.add(h.sum, j.theirs);
      }
      h.first = h.first / (2 * L) * (2 * L);
      h.count = 2 * L;
    }
    std::sort(dropped.rbegin(), dropped.rend());
    for (const size_t i : dropped) held_.erase(held_.begin() + std::ptrdiff_t(i));
  }

  // Node [p, p + 2L): a rank on one side only takes the other side's sum
  // from the rank its index there picks (index mod the other side's count);
  // a rank on both adds its own two.
  Join exchange(int64_t p, int64_t L, std::vector<comm::Work>& works) {
    const std::vector<int> left = holders(spans_, p, L), right = holders(spans_, p + L, L);
    const bool in_left = meets(me_, p, L), in_right = meets(me_, p + L, L);
    const comm::OpOptions o{.tag = tag(p, 2 * L)};
    auto send_picks = [&](const std::vector<int>& mine, const std::vector<int>& other, int64_t mine_first, size_t sum) {
      for (size_t j = 0; j < other.size(); ++j)
        if (!meets(spans_[size_t(other[j])], mine_first, L) && mine[j % mine.size()] == r_)
          works.push_back(group_.isend(held_[sum].sum.raw(), n_, out_.dtype(), other[j], o));
    };
    size_t a = 0, b = std::string::npos;
    if (in_left) send_picks(left, right, p, a = held_at(p, L));
    if (in_right) send_picks(right, left, p + L, b = held_at(p + L, L));
    if (in_left && in_right) return {a, b, Tensor()};
    const std::vector<int>& mine = in_left ? left : right;
    const std::vector<int>& other = in_left ? right : left;
    Tensor theirs = Tensor::empty(out_.shape(), out_.dtype(), alloc_, MemCategory::Comm);
    works.push_back(group_.irecv(theirs.raw(), n_, out_.dtype(), other[size_t(index_of(mine, r_)) % other.size()], o));
    return {in_left ? a : b, std::string::npos, theirs};
  }

  // Ranks without leaves take the root from a rank with leaves; every rank
  // ends with it in out.
  void share_root() {
    const std::vector<int> with = holders(spans_, 0, W_);
    std::vector<int> without;
    for (int q = 0; q < group_.size(); ++q)
      if (spans_[size_t(q)].count == 0) without.push_back(q);
    const comm::OpOptions o{.tag = int(2 * W_)};  // past every node's
    if (me_.count == 0)
      return group_.irecv(out_.raw(), n_, out_.dtype(), with[size_t(index_of(without, r_)) % with.size()], o).wait();
    const Tensor& root = held_[held_at(0, W_)].sum;
    std::vector<comm::Work> works;
    for (size_t j = 0; j < without.size(); ++j)
      if (int(j % with.size()) == index_of(with, r_))
        works.push_back(group_.isend(root.raw(), n_, out_.dtype(), without[j], o));
    for (comm::Work& w : works) w.wait();
    if (root.raw() != out_.raw()) k_.copy(out_, root);
  }

  comm::ProcessGroup& group_;
  const std::vector<LeafSpan>& spans_;
  const std::shared_ptr<CachingAllocator>& alloc_;
  const int64_t W_;
  const int r_;
  const LeafSpan me_;
  const Tensor& out_;
  const kernels::KernelTable& k_;
  const size_t n_;
  std::vector<Held> held_;
};

}  // namespace

void span_tree_all_reduce(comm::ProcessGroup& group, const std::vector<LeafSpan>& spans,
                          const std::vector<Tensor>& parts, const std::shared_ptr<CachingAllocator>& alloc) {
  MT_CHECK(int(spans.size()) == group.size(), spans.size(), " leaf spans for a group of ", group.size());
  MT_CHECK(!parts.empty(), "span tree without a buffer");
  SpanTree(group, spans, parts, alloc).run();
}

}  // namespace meshtrain::model
