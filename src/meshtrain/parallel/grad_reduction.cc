#include "meshtrain/parallel/grad_reduction.h"

#include <chrono>

#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/model/tree_reduce.h"

namespace meshtrain::parallel {

void GradReduction::close_leaf(int /*u*/) { MT_CHECK(false, "CloseLeaf outside reproducible mode"); }

void GradReduction::complete_in_place(int u) {
  prepare(u);
  c_.store.settle_grads(u);
  if (c_.tp_sums.any(u)) c_.tp_sums.reduce(u, c_.store.unit_grads(u));
}

// ---- the flat buffer (stages 0 and 1) ------------------------------------------------

FlatGrads::FlatGrads(const GradContext& c, bool zero_eagerly)
    : plan_(c.plan),
      store_(c.store),
      buffer_(Tensor::zeros(Shape{c.plan.padded_total()}, c.store.precision().grad_accum, c.alloc, MemCategory::Grads)),
      offset_(c.plan.flat_offsets()),
      zero_eagerly_(zero_eagerly) {
  for (int u = 0; u < plan_.num_units(); ++u)
    if (plan_.unit(u).padded > 0) store_.bind_unit_grads(u, unit(u));
}

Tensor FlatGrads::unit(int u) const {
  return buffer_.flat_slice(offset_[size_t(u)], offset_[size_t(u)] + plan_.unit(u).padded);
}

void FlatGrads::begin_window() {
  if (zero_eagerly_) return kernels::kernels_for(buffer_).fill(buffer_, 0.0);
  for (int u = 0; u < plan_.num_units(); ++u) store_.zero_grads_lazily(u);
}

// ---- stage 0: bucketed all-reduce ----------------------------------------------------

AllReducedGrads::AllReducedGrads(const GradContext& c, double bucket_mb, bool zero_eagerly)
    : GradReduction(c),
      flat_(c, zero_eagerly),
      buckets_(c.plan, flat_.buffer(), flat_.offsets(), bucket_mb, c.groups, c.op, c.store.precision().grad_reduce,
               c.alloc, c.stats) {}

void AllReducedGrads::begin_window() {
  buckets_.begin_window();
  flat_.begin_window();
}

void AllReducedGrads::reduce(int u) {
  complete_in_place(u);
  buckets_.unit_ready(u);
}

Tensor AllReducedGrads::owned(int u) {
  const UnitShard& s = c_.plan.unit(u);
  if (s.padded == 0) return Tensor();
  return flat_.unit(u).flat_slice(s.owned_begin, s.owned_end);
}

void AllReducedGrads::reduce_root(int u, const Tensor& root) {
  model::tree_all_reduce(c_.groups.of(u), root, c_.alloc);  // the root is this window's scratch
  keep_reduced(u, root);
}

void AllReducedGrads::keep_reduced(int u, const Tensor& reduced) {
  const Tensor dst = flat_.unit(u);
  kernels::kernels_for(dst).copy(dst, reduced);
}

// ---- stages 1-3: reduce-scatter into the owned shard ---------------------------------

namespace {
std::optional<FlatGrads> flat_unless_sharded(const GradContext& c, bool zero_eagerly) {
  if (c.plan.shards_grads()) return std::nullopt;
  return std::optional<FlatGrads>(std::in_place, c, zero_eagerly);
}
}  // namespace

ScatteredGrads::ScatteredGrads(const GradContext& c, bool zero_eagerly)
    : GradReduction(c),
      flat_(flat_unless_sharded(c, zero_eagerly)),
      sharded_(c.plan, c.store, c.groups, c.op, c.alloc, c.stats, flat_ ? flat_->buffer() : Tensor(),
               flat_ ? flat_->offsets() : std::vector<int64_t>{}) {}

void ScatteredGrads::begin_window() {
  sharded_.begin_window();
  if (flat_) flat_->begin_window();
}

void ScatteredGrads::reduce(int u) {
  complete_in_place(u);
  sharded_.reduce(u);
}

void ScatteredGrads::reduce_root(int u, const Tensor& root) {
  model::tree_reduce_scatter(c_.groups.of(u), root, c_.alloc);  // the root is this window's scratch
  keep_reduced(u, root);  // its owned chunk is complete
}

void ScatteredGrads::keep_reduced(int u, const Tensor& reduced) {
  const UnitShard& s = c_.plan.unit(u);
  const Tensor dst = sharded_.owned(u);
  kernels::kernels_for(dst).copy(dst, reduced.flat_slice(s.owned_begin, s.owned_end));
}

// ---- reproducible mode: the fixed summation tree -------------------------------------

namespace {
// The tied embedding's unit (the embedding segment's own), or -1.
int tied_unit(const model::ParameterStore& store) { return store.spec().tied_head ? 0 : -1; }

std::vector<int> tree_lanes(const ShardPlan& plan, int ep, int tied) {
  std::vector<int> lanes(size_t(plan.num_units()), 1);
  for (int u = 0; u < plan.num_units(); ++u)
    if (plan.unit(u).experts) lanes[size_t(u)] = ep;
  if (tied >= 0) lanes[size_t(tied)] = 2;  // the embedding's writes, the LM head's
  return lanes;
}
}  // namespace

namespace {
// The window index of the rank's first micro-batch (0 with even counts).
int64_t first_leaf(const GradContext& c, const std::vector<model::LeafSpan>& spans) {
  return spans.empty() ? 0 : spans[size_t(c.groups.data().rank())].first;
}
}  // namespace

TreeGrads::TreeGrads(const GradContext& c, int ep, std::unique_ptr<GradReduction> inner, comm::ProcessGroup* cp,
                     std::vector<model::LeafSpan> spans)
    : GradReduction(c),
      inner_(std::move(inner)),
      cp_(cp && cp->size() > 1 ? cp : nullptr),
      spans_(std::move(spans)),
      tree_(c.plan.num_units(), c.store.precision().grad_accum, c.alloc,
            tree_lanes(c.plan, ep, tied_unit(c.store)), first_leaf(c, spans_)) {
  MT_CHECK(spans_.empty() || ep == 1, "uneven micro-batch counts with ep = ", ep, " (the config refuses them)");
  if (ep > 1 || tied_unit(c.store) >= 0)
    c_.store.set_grad_lane_switch(
        [this](int u, int lane) { c_.store.bind_unit_grads(u, tree_.leaf(u, c_.plan.unit(u).padded, lane)); });
}

TreeGrads::~TreeGrads() { c_.store.set_grad_lane_switch({}); }

void TreeGrads::begin_window() {
  tree_.clear();
  inner_->begin_window();
}

void TreeGrads::prepare(int u) {
  // Each micro-batch's gradient of u goes into its own leaf.
  if (!tree_.has_open_leaf(u)) c_.store.bind_unit_grads(u, tree_.leaf(u, c_.plan.unit(u).padded));
}

void TreeGrads::close_leaf(int u) {
  if (cp_ && !c_.plan.unit(u).experts) sum_leaf_over_cp(u);
  tree_.close_leaf(u);
  c_.store.bind_unit_grads(u, Tensor());
}

void TreeGrads::sum_leaf_over_cp(int u) {
  // Each cp rank's leaf is the subtree of its canonical token blocks; the
  // cp tree finishes the micro-batch's tree (docs/math.md (M.74)). The
  // data group's tree then sees it once: cp rank 0 keeps it, the others
  // hold -0, which leaves every sum x + (-0) = x bit for bit (the cp ranks
  // are the data group's lowest levels).
  for (int lane = 0; lane < tree_.lanes(u); ++lane) {
    const Tensor leaf = tree_.leaf(u, c_.plan.unit(u).padded, lane);
    model::tree_all_reduce(*cp_, leaf, c_.alloc);
    if (cp_->rank() != 0) kernels::kernels_for(leaf).fill(leaf, -0.0);
  }
}

void TreeGrads::reduce_tied(int u) {
  // The lanes this rank writes: the embedding's where it runs the embedding
  // segment, the head's where it runs the head (both on one stage).
  const model::ModelSpec& spec = c_.store.spec();
  int head = 0;
  for (const model::ParamUnit& unit : spec.units) head = std::max(head, unit.segment);
  std::vector<int> written;
  if (spec.partition.holds(0)) written.push_back(0);
  if (spec.partition.holds(head)) written.push_back(1);
  Tensor first;
  for (const int lane : written) {
    reduce_lane(u, lane);
    const Tensor mine = inner_->owned(u);
    if (written.size() == 1 || !mine.defined()) continue;
    if (!first.defined()) {
      first = Tensor::empty(mine.shape(), mine.dtype(), c_.alloc, MemCategory::Grads);
      kernels::kernels_for(mine).copy(first, mine);
    } else {
      kernels::kernels_for(mine).add(mine, first);  // head + embedding == embedding + head, bit for bit
    }
  }
}

void TreeGrads::reduce_lane(int u, int lane) {
  if (spans_.empty()) {
    const Tensor root = lane < 0 ? tree_.root(u) : tree_.lane_root(u, lane);
    if (c_.tp_sums.any(u)) c_.tp_sums.reduce(u, root);  // the window's whole gradient of u, partial over tp ranks
    return inner_->reduce_root(u, root);
  }
  // Uneven counts: the span's aligned subtrees, finished across the group.
  MT_CHECK(lane >= 0 || tree_.lanes(u) == 1, "unit ", u, ": lanes with uneven micro-batch counts");
  const std::vector<Tensor> parts = tree_.lane_parts(u, std::max(lane, 0));
  if (c_.tp_sums.any(u))
    for (const Tensor& p : parts) c_.tp_sums.reduce(u, p);
  model::span_tree_all_reduce(c_.groups.of(u), spans_, parts, c_.alloc);
  inner_->keep_reduced(u, parts[0]);
}

void TreeGrads::reduce(int u) {
  const auto t0 = std::chrono::steady_clock::now();
  if (u == tied_unit(c_.store)) reduce_tied(u);
  else reduce_lane(u, -1);
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  c_.stats.comm_s += dt;
  c_.stats.exposed_s += dt;
  c_.stats.buckets += 1;
  c_.stats.bytes += c_.plan.unit(u).padded * int64_t(dtype_size(c_.store.precision().grad_accum));
}

std::unique_ptr<GradReduction> make_grad_reduction(const GradContext& c, const ParallelConfig& cfg, int ep,
                                                   comm::ProcessGroup* cp, std::vector<model::LeafSpan> spans) {
  const PrecisionPolicy& prec = c.store.precision();
  if (cfg.reproducible)
    MT_REQUIRE(ConfigError, cfg.grad_reduce == GradReduce::Sum && prec.grad_reduce == prec.grad_accum,
               "training.reproducible sums gradients in its own fixed tree: use parallel.grad_reduce = \"sum\" "
               "and reduce in the gradients' type");
  std::unique_ptr<GradReduction> r;
  if (c.plan.stage() == 0) r = std::make_unique<AllReducedGrads>(c, cfg.bucket_mb, cfg.reproducible);
  else r = std::make_unique<ScatteredGrads>(c, cfg.reproducible);
  if (!cfg.reproducible) return r;
  return std::make_unique<TreeGrads>(c, ep, std::move(r), cp, std::move(spans));
}

}  // namespace meshtrain::parallel
