#include "meshtrain/train/equivalence.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <sstream>

#include "meshtrain/comm/launch.h"
#include "meshtrain/core/threading.h"
#include "meshtrain/parallel/global_values.h"
#include "meshtrain/parallel/schedule_gen.h"
#include "meshtrain/train/option_effects.h"
#include "meshtrain/train/run.h"
#include "meshtrain/train/trainer.h"

namespace meshtrain::train {

namespace {

// The layout's records, taken on every rank; rank 0's returned.
std::vector<StepRecord> record(const TrainConfig& cfg, int steps, const data::TokenDataset& train_data) {
  std::vector<StepRecord> out;
  std::mutex mu;
  comm::LaunchOptions o;
  o.world_size = cfg.parallel.dp * cfg.parallel.cp * cfg.parallel.tp * cfg.parallel.pp;
  o.mesh = mesh_for(cfg, o.world_size);
  o.group.timeout = comm::Millis(int64_t(cfg.comm.timeout_s * 1000));
  comm::launch_threads(o, [&](comm::ParallelContext& ctx) {
    if (cfg.training.threads > 0) set_compute_threads(cfg.training.threads);  // as train_main does
    Trainer t(cfg, ctx, train_data, std::nullopt);
    std::vector<StepRecord> local = record_steps(t, steps);
    if (ctx.rank == 0) {
      std::lock_guard<std::mutex> lock(mu);
      out = std::move(local);
    }
  });
  return out;
}

bool parse_bool(const std::string& key, const std::string& v) {
  if (v == "1" || v == "true" || v == "on") return true;
  if (v == "0" || v == "false" || v == "off") return false;
  MT_THROW(ConfigError, "layout ", key, "=", v, ": expected on/off, 1/0 or true/false");
}

int parse_int(const std::string& key, const std::string& v) {
  int out = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  MT_REQUIRE(ConfigError, ec == std::errc() && end == v.data() + v.size(), "layout ", key, "=", v,
             ": expected an integer");
  return out;
}

// "3+3+2": one count per replica.
std::vector<int64_t> parse_counts(const std::string& key, const std::string& v) {
  std::vector<int64_t> counts;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, '+')) counts.push_back(parse_int(key, item));
  MT_REQUIRE(ConfigError, !counts.empty(), "layout ", key, "=", v, ": expected counts joined by + (ga=3+3+2)");
  return counts;
}

}  // namespace

std::vector<double> gather_model(Trainer& t, bool grads) {
  return parallel::gather_global_values(t.engine(), *t.training_step().groups().model, grads);
}

std::vector<StepRecord> record_steps(Trainer& t, int steps) {
  std::vector<StepRecord> out;
  std::vector<double> before = gather_model(t, false);
  for (int s = 0; s < steps; ++s) {
    StepRecord r;
    r.metrics = t.step();
    r.grads = gather_model(t, true);
    r.params = gather_model(t, false);
    r.update.resize(r.params.size());
    for (size_t i = 0; i < r.params.size(); ++i) r.update[i] = r.params[i] - before[i];
    before = r.params;
    out.push_back(std::move(r));
  }
  return out;
}

TrainConfig with_layout(const TrainConfig& cfg, const Layout& layout) {
  TrainConfig par = cfg;
  layout.apply(par.parallel);
  par.validate();
  return par;
}

std::string Layout::str() const {
  std::ostringstream os;
  os << "dp=" << dp << ",zero=" << zero_stage << ",reshard=" << reshard_after_forward
     << ",reduce=" << parallel::to_string(grad_reduce) << ",overlap=" << overlap;
  if (tp > 1 || sequence_parallel) os << ",tp=" << tp << ",sp=" << (sequence_parallel ? "on" : "off");
  if (pp > 1 || v > 1) os << ",pp=" << pp << ",schedule=" << schedule << ",v=" << v;
  if (keep_gathered) os << ",keep=1";
  if (cp > 1) os << ",cp=" << cp;
  if (ep > 1) os << ",ep=" << ep;
  if (!replica_grad_accum.empty()) os << ",ga=" << parallel::describe_grad_accum(replica_grad_accum, 0);
  return os.str();
}

comm::MeshShape Layout::mesh() const {
  comm::MeshShape m;
  m.pp = pp;
  m.dp = dp;
  m.cp = cp;
  m.tp = tp;
  m.ep = ep;
  m.validate(m.world_size());
  return m;
}

parallel::LayoutOptions Layout::options() const {
  parallel::LayoutOptions o;
  o.zero_stage = zero_stage;
  o.virtual_stages = v;
  o.placement = parallel::placement_of(schedule);
  o.sequence_parallel = sequence_parallel;
  return o;
}

void Layout::apply(parallel::ParallelConfig& p) const {
  // Chunk sizes written for another pipeline split no longer fit: the cost
  // model's partition replaces them.
  if (pp != p.pp || v != p.virtual_stages) p.pp_layers.clear();
  p.dp = dp;
  p.replica_grad_accum = replica_grad_accum;
  p.zero_stage = zero_stage;
  p.reshard_after_forward = reshard_after_forward;
  p.grad_reduce = grad_reduce;
  p.overlap = overlap;
  p.tp = tp;
  p.sequence_parallel = sequence_parallel;
  p.pp = pp;
  p.schedule = schedule;
  p.virtual_stages = v;
  p.keep_gathered = keep_gathered;
  p.cp = cp;
  p.ep = ep;
}

Layout parse_layout(const std::string& text) {
  Layout l;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    MT_REQUIRE(ConfigError, eq != std::string::npos, "layout item '", item, "': expected key=value");
    const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    if (k == "dp") l.dp = parse_int(k, v);
    else if (k == "zero") l.zero_stage = parse_int(k, v);
    else if (k == "reshard") l.reshard_after_forward = parse_bool(k, v);
    else if (k == "overlap") l.overlap = parse_bool(k, v);
    else if (k == "tp") l.tp = parse_int(k, v);
    else if (k == "sp") l.sequence_parallel = parse_bool(k, v);
    else if (k == "pp") l.pp = parse_int(k, v);
    else if (k == "v") l.v = parse_int(k, v);
    else if (k == "cp") l.cp = parse_int(k, v);
    else if (k == "ep") l.ep = parse_int(k, v);
    else if (k == "schedule") l.schedule = v;
    else if (k == "keep") l.keep_gathered = parse_bool(k, v);
    else if (k == "ga") l.replica_grad_accum = parse_counts(k, v);
    else if (k == "reduce") {
      MT_REQUIRE(ConfigError, v == "sum" || v == "avg", "layout reduce=", v, ": expected sum or avg");
      l.grad_reduce = v == "sum" ? parallel::GradReduce::Sum : parallel::GradReduce::Avg;
    } else {
      MT_THROW(ConfigError, "unknown layout key '", k,
               "' (known: dp, zero, reshard, reduce, overlap, keep, tp, sp, pp, schedule, v, cp, ep, ga)");
    }
  }
  if (!l.replica_grad_accum.empty() && text.find("dp=") == std::string::npos) l.dp = int(l.replica_grad_accum.size());
  MT_REQUIRE(ConfigError, l.dp >= 1, "layout dp=", l.dp, ": expected >= 1");
  parallel::ParallelConfig pc;
  pc.dp = l.dp;
  pc.replica_grad_accum = l.replica_grad_accum;
  pc.zero_stage = l.zero_stage;
  pc.validate();
  l.mesh();  // axis sizes >= 1, ep carved out of dp x cp
  MT_REQUIRE(ConfigError, l.v >= 1, "layout v=", l.v, ": expected >= 1");
  // zb-v runs two chunks per rank: v=2 is implied when not given.
  if (l.schedule == "zb-v" && text.find("v=") == std::string::npos) l.v = 2;
  parallel::check_schedule(l.schedule, l.pp, 1, l.v);
  parallel::ParallelConfig stated;
  l.apply(stated);
  check_parallel_options_take_effect(stated);
  return l;
}

EquivalenceConfigs equivalence_configs(const TrainConfig& cfg, const Layout& layout, bool bitwise) {
  TrainConfig par = cfg;
  if (bitwise) par.training.reproducible = true;
  par = with_layout(par, layout);
  par.comm.backend = "threads";
  par.validate();  // the tensor-parallel shape rules, before anything runs
  TrainConfig ref = par;
  ref.parallel = parallel::ParallelConfig{};
  ref.training.grad_accum = parallel::window_micro_batches(par.parallel, cfg.training.grad_accum);  // same window
  ref.comm.backend = "threads";
  ref.validate();
  mesh_for(par, par.parallel.dp * par.parallel.cp * par.parallel.tp * par.parallel.pp);  // the mesh record() builds
  return {par, ref};
}

EquivalenceReport compare_with_single_rank(const TrainConfig& cfg, const Layout& layout, int steps,
                                           const data::TokenDataset& train_data, double tolerance, bool bitwise) {
  const auto [par, ref] = equivalence_configs(cfg, layout, bitwise);
  if (bitwise) tolerance = 0;
  const auto a = record(ref, steps, train_data), b = record(par, steps, train_data);
  // par: validated, its model finalized.
  EquivalenceReport r = compare_records(a, b, global_tensors(par.model), par.training.precision, tolerance);
  r.layout = layout.str();
  r.bitwise = bitwise;
  // What reproducible mode makes bitwise: the data-parallel split of the
  // window, the ZeRO stage, pipeline stages, tensor and sequence
  // parallelism, context parallelism and expert parallelism.
  if (bitwise) {
    r.claim_covers = {"dp x grad_accum split of the window", "ZeRO stage " + std::to_string(layout.zero_stage)};
    if (!layout.replica_grad_accum.empty())
      r.claim_covers.push_back("uneven micro-batch counts per replica (" +
                               parallel::describe_grad_accum(layout.replica_grad_accum, 0) +
                               ": the tree finished across the replicas' spans, docs/math.md (M.75))");
    if (layout.pp > 1)
      r.claim_covers.push_back("pipeline stages (pp " + std::to_string(layout.pp) + ", " + layout.schedule +
                               (cfg.model.tied_embeddings ? "; the tied table's two writers in lanes of their own)"
                                                          : ")"));
    if (layout.tp > 1)
      r.claim_covers.push_back("tensor parallelism (tp " + std::to_string(layout.tp) + ": " +
                               std::to_string(par.training.reproducible_blocks) +
                               " canonical blocks of every split sum in one tree, docs/math.md (M.73))");
    if (layout.tp > cfg.model.n_kv_heads)
      r.claim_covers.push_back("KV heads shared by " + std::to_string(layout.tp / cfg.model.n_kv_heads) +
                               " tp ranks (each KV head's query heads summed in one tree, docs/math.md (M.76))");
    if (layout.sequence_parallel)
      r.claim_covers.push_back("sequence parallelism (the replicated weights' sums over canonical token blocks)");
    if (layout.cp > 1)
      r.claim_covers.push_back("context parallelism (cp " + std::to_string(layout.cp) + ": " +
                               std::to_string(par.training.reproducible_blocks) +
                               " canonical token blocks, each a chunk pair of every row; attention per query chunk "
                               "against its row's keys in order, docs/math.md (M.74))");
    if (layout.ep > 1)
      r.claim_covers.push_back("expert parallelism (ep " + std::to_string(layout.ep) +
                               ": each source rank's expert gradients in a tree lane of its own)");
  }
  return r;
}

}  // namespace meshtrain::train
