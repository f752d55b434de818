#include "meshtrain/parallel/layout_plan.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "meshtrain/core/error.h"
#include "meshtrain/core/memory_tracker.h"

namespace meshtrain::parallel {

namespace {

model::ModelConfig finalized(model::ModelConfig cfg) {
  cfg.finalize();
  return cfg;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

}  // namespace

const char* to_string(ChunkPlacement p) { return p == ChunkPlacement::V ? "V" : "loop"; }

std::vector<Chunk> pipeline_chunks(int64_t n_layers, int pp, int v, const std::vector<int64_t>& layers,
                                   ChunkPlacement placement) {
  MT_REQUIRE(ConfigError, pp >= 1 && v >= 1, "pipeline of pp = ", pp, " x v = ", v, ": both must be >= 1");
  MT_REQUIRE(ConfigError, placement != ChunkPlacement::V || v == 2, "the V placement (schedule zb-v) puts exactly 2 ",
             "chunks on every pipeline rank, but parallel.virtual_stages = ", v);
  const int64_t C = int64_t(pp) * v;
  MT_REQUIRE(ConfigError, C <= n_layers, "pipeline of pp = ", pp, " x v = ", v, " = ", C,
             " chunks but model.n_layers = ", n_layers, ": every chunk needs at least one block");
  std::vector<int64_t> blocks(static_cast<size_t>(C), 0);
  if (layers.empty()) {
    for (int64_t c = 0; c < C; ++c) blocks[size_t(c)] = n_layers / C + (c < n_layers % C ? 1 : 0);
  } else {
    MT_REQUIRE(ConfigError, int64_t(layers.size()) == C, "parallel.pp_layers has ", layers.size(),
               " entries but the pipeline has pp x v = ", C, " chunks");
    for (int64_t b : layers)
      MT_REQUIRE(ConfigError, b >= 1, "parallel.pp_layers: every chunk needs at least one block (got ", b, ")");
    const int64_t sum = std::accumulate(layers.begin(), layers.end(), int64_t(0));
    MT_REQUIRE(ConfigError, sum == n_layers, "parallel.pp_layers adds up to ", sum, " blocks but model.n_layers = ",
               n_layers);
    blocks = layers;
  }
  std::vector<Chunk> chunks;
  int next_block = 0;
  for (int64_t c = 0; c < C; ++c) {
    Chunk ch;
    ch.first = c == 0 ? 0 : next_block + 1;  // segment of the first block (l + 1); chunk 0 starts with the embedding
    next_block += int(blocks[size_t(c)]);
    ch.last = next_block + (c == C - 1 ? 1 : 0);  // the last chunk ends with the head (segment L + 1)
    ch.pp_rank = placement == ChunkPlacement::V && c >= pp ? int(2 * pp - 1 - c) : int(c % pp);
    chunks.push_back(ch);
  }
  return chunks;
}

LayoutPlan::LayoutPlan(const model::ModelConfig& cfg, const comm::MeshShape& mesh, int rank,
                       const LayoutOptions& options, std::shared_ptr<const model::ModelSpec> global)
    : cfg_(finalized(cfg)),
      mesh_(mesh),
      rank_(rank),
      coords_(mesh.coords(rank)),
      options_(options),
      chunks_(pipeline_chunks(cfg_.n_layers, mesh.pp, options.virtual_stages, options.pp_layers, options.placement)),
      tie_stages_([&] {
        // The tied LM head reads the embedding: a copy sits with the head.
        const int first = chunks_.front().pp_rank, head = chunks_.back().pp_rank;
        return cfg_.tied_embeddings && first != head ? std::vector<int>{first, head} : std::vector<int>{};
      }()),
      global_(global ? std::move(global) : std::make_shared<const model::ModelSpec>(model::build_model_spec(cfg_))),
      spec_([&] {
        model::ModelPartition part;
        part.tp_size = mesh_.tp;
        part.tp_rank = coords_[comm::Axis::Tp];
        part.ep_size = mesh_.ep;
        part.ep_rank = coords_[comm::Axis::Ep];
        part.sequence_parallel = options_.sequence_parallel;
        part.canonical_blocks = options_.canonical_blocks;
        if (mesh_.pp > 1)
          for (const Chunk& c : chunks_)
            if (c.pp_rank == coords_[comm::Axis::Pp])
              for (int s = c.first; s <= c.last; ++s) part.segments.push_back(s);
        std::sort(part.segments.begin(), part.segments.end());
        if (!tie_stages_.empty() && coords_[comm::Axis::Pp] == tie_stages_[1]) part.copy_units.push_back(0);
        return std::make_shared<const model::ModelSpec>(model::localize(*global_, cfg_, part));
      }()),
      // ZeRO shards over dp x cp (the data group's rank: dp coordinate x cp
      // + cp coordinate); routed experts over the replicas of the same
      // experts (edp, inside dp x cp).
      shards_(spec_, mesh.dp * mesh.cp, coords_[comm::Axis::Dp] * mesh.cp + coords_[comm::Axis::Cp],
              options.zero_stage, mesh.size(comm::Axis::Edp), coords_[comm::Axis::Edp]) {
  const int tp_rank = coords_[comm::Axis::Tp];
  std::vector<int> stage_of_segment(size_t(cfg_.n_layers + 2));
  for (const Chunk& c : chunks_)
    for (int s = c.first; s <= c.last; ++s) stage_of_segment[size_t(s)] = c.pp_rank;
  for (const model::ParamSpec& p : spec_->params) {
    ParamLayout l;
    const bool tied = p.unit == 0 && !tie_stages_.empty();
    l.stages = tied ? tie_stages_ : std::vector<int>{stage_of_segment[size_t(spec_->units[size_t(p.unit)].segment)]};
    // A routed expert is held by its owners only: summed over their replicas.
    l.reduce_axes = p.expert >= 0 ? comm::Axes(comm::Axis::Edp) : data_axes();
    l.tied = tied;
    const int pieces = p.tp.pieces(mesh_.tp, p.name);
    if (p.tp.is_shard()) {
      // A piece shared by several tp ranks (KV heads fewer than ranks): each
      // rank's gradient holds its own query heads' part (docs/math.md (M.38)),
      // but in reproducible mode the whole of it, the dK/dV of the head's
      // query heads summed over those ranks in the head tree (M.76).
      l.tp_replicas = mesh_.tp / pieces;
      l.share_sums = l.tp_replicas > 1 && options_.canonical_blocks == 0;
      l.counts_in_norm = tp_rank % l.tp_replicas == 0;
    } else {
      // Replicated on tp: identical gradients, unless a sequence shard
      // feeds each rank (sequence parallelism). Canonical blocks sum those
      // over the group in each micro-batch's own tree (docs/math.md (M.73)).
      if (options_.sequence_parallel && mesh_.tp > 1 && options_.canonical_blocks == 0)
        l.reduce_axes = l.reduce_axes | comm::Axis::Tp;
      l.counts_in_norm = tp_rank == 0;
    }
    // The tied copy on the head's stage is the same logical parameter.
    if (tied) l.counts_in_norm = l.counts_in_norm && coords_[comm::Axis::Pp] == tie_stages_[0];
    l.writes_checkpoint = l.counts_in_norm;
    params_.push_back(std::move(l));
  }
}

std::vector<int> LayoutPlan::tied_units() const {
  if (tie_stages_.empty()) return {};
  const int pp = coords_[comm::Axis::Pp];
  return pp == tie_stages_[0] || pp == tie_stages_[1] ? std::vector<int>{0} : std::vector<int>{};
}

std::vector<int> LayoutPlan::my_chunks() const {
  std::vector<int> mine;
  for (size_t c = 0; c < chunks_.size(); ++c)
    if (chunks_[c].pp_rank == coords_[comm::Axis::Pp]) mine.push_back(int(c));
  return mine;
}

ParamBytes param_bytes(const LayoutPlan& plan, int param, const PrecisionPolicy& precision) {
  const model::ParamSpec& p = plan.spec().params[size_t(param)];
  const ShardPlan& s = plan.shards();
  const UnitShard& u = s.unit(p.unit);
  auto overlap = [&](int64_t b, int64_t e) {
    return std::max<int64_t>(0, std::min(e, p.unit_offset + p.numel()) - std::max(b, p.unit_offset));
  };
  const int64_t owned = overlap(u.owned_begin, u.owned_end);
  ParamBytes b;
  b.params = (s.shards_params() ? owned : p.numel()) * int64_t(dtype_size(precision.params));
  b.grads = (s.shards_grads() ? owned : p.numel()) * int64_t(dtype_size(precision.grad_accum));
  const int64_t per_owned = 2 * int64_t(dtype_size(precision.optimizer)) +
                            (precision.has_master_copy() ? int64_t(dtype_size(precision.master)) : 0);
  b.optimizer = (s.shards_optimizer() ? owned : p.numel()) * per_owned;
  return b;
}

std::string plan_table(const model::ModelConfig& cfg, const comm::MeshShape& mesh, const LayoutOptions& options,
                       const PrecisionPolicy& precision) {
  mesh.validate(mesh.world_size());
  std::vector<LayoutPlan> plans;
  for (int r = 0; r < mesh.world_size(); ++r) plans.emplace_back(cfg, mesh, r, options);
  const model::ModelSpec global = model::build_model_spec(plans[0].model_config());

  // Per global parameter: the local shapes over tp ranks and the largest
  // per-rank bytes, from every rank that holds it.
  struct Row {
    std::set<std::string> shapes;
    const ParamLayout* layout = nullptr;
    int64_t bytes = 0;
    std::string stages;
  };
  std::vector<Row> rows(global.params.size());
  for (const LayoutPlan& plan : plans)
    for (size_t i = 0; i < plan.spec().params.size(); ++i) {
      const model::ParamSpec& p = plan.spec().params[i];
      Row& row = rows[size_t(p.global_index)];
      row.shapes.insert(p.shape.str());
      if (!row.layout) row.layout = &plan.param(int(i));
      row.stages.clear();
      for (int st : plan.param(int(i)).stages) row.stages += (row.stages.empty() ? "S" : "+S") + std::to_string(st);
      row.bytes = std::max(row.bytes, param_bytes(plan, int(i), precision).total());
    }

  std::ostringstream os;
  os << "layout: " << mesh.str() << " | zero_stage " << options.zero_stage << " | v " << options.virtual_stages
     << " | chunk placement " << to_string(options.placement)
     << (options.sequence_parallel ? " | sequence parallel" : "") << " | world " << mesh.world_size() << "\n";
  os << "precision: " << precision.describe() << "\n";
  os << "pipeline chunks:";
  for (const Chunk& c : plans[0].chunks()) os << " [segments " << c.first << "-" << c.last << " on pp " << c.pp_rank << "]";
  os << "\n";
  os << "columns: placement per axis (S<k> = pipeline stage k, S0+S3 = tied: a copy on both stages, R = replicated,\n"
        "S(d) = split on dim d, xN = N tp ranks share each piece, ep = a routed expert held only by its owners on\n"
        "the expert-parallel axis); local shape on each tp rank; grad sum = axes its\n"
        "gradient is summed over (tp:N = the N tp ranks sharing a piece, S0+S3 = the tied copies' stages);\n"
        "bytes/rank = values + gradients + optimizer state on the rank holding most\n\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-48s %-7s %-3s %-3s %-8s %-24s %-12s %12s\n", "parameter", "pp", "dp", "cp", "tp",
                "local shape", "grad sum", "bytes/rank");
  os << line;
  for (size_t g = 0; g < global.params.size(); ++g) {
    const model::ParamSpec& p = global.params[g];
    const Row& row = rows[g];
    std::vector<std::string> shapes(row.shapes.begin(), row.shapes.end());
    std::string group = row.layout->reduce_axes.key();
    if (row.layout->share_sums) group += "+tp:" + std::to_string(row.layout->tp_replicas);
    if (row.layout->tied) group += "+" + row.stages;
    std::snprintf(line, sizeof line, "%-48s %-7s %-3s %-3s %-8s %-24s %-12s %12s\n", p.name.c_str(),
                  row.stages.c_str(), p.expert >= 0 && mesh.ep > 1 ? "ep" : "R", "R", p.tp.str(mesh.tp).c_str(),
                  join(shapes, " | ").c_str(), group.c_str(), format_bytes(row.bytes).c_str());
    os << line;
  }
  os << "\npersistent bytes per rank (params + grads + optimizer state):\n";
  for (const LayoutPlan& plan : plans) {
    ParamBytes total;
    for (size_t i = 0; i < plan.spec().params.size(); ++i) {
      const ParamBytes b = param_bytes(plan, int(i), precision);
      total.params += b.params, total.grads += b.grads, total.optimizer += b.optimizer;
    }
    std::snprintf(line, sizeof line, "  rank %3d (pp %d dp %d cp %d tp %d): params %s, grads %s, optimizer %s, total %s\n",
                  plan.rank(), plan.coord(comm::Axis::Pp), plan.coord(comm::Axis::Dp), plan.coord(comm::Axis::Cp),
                  plan.coord(comm::Axis::Tp),
                  format_bytes(total.params).c_str(), format_bytes(total.grads).c_str(),
                  format_bytes(total.optimizer).c_str(), format_bytes(total.total()).c_str());
    os << line;
  }
  return os.str();
}

}  // namespace meshtrain::parallel
