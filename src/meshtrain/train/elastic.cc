#include "meshtrain/train/elastic.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "meshtrain/core/error.h"
#include "meshtrain/train/run_dir.h"

namespace meshtrain::train {

namespace {

int64_t model_ranks(const TrainConfig& cfg) {
  return int64_t(cfg.parallel.cp) * cfg.parallel.tp * cfg.parallel.pp;
}

// Micro-batches per global window, whatever the layout.
int64_t window_micro_batches(const TrainConfig& cfg) {
  return parallel::window_micro_batches(cfg.parallel, cfg.training.grad_accum);
}

bool runnable(const TrainConfig& cfg, const ElasticLayout& l) {
  try {
    (void)at_layout(cfg, l);
    return true;
  } catch (const ConfigError&) {
    return false;  // this split of the window is not runnable; try a smaller dp
  }
}

}  // namespace

std::string ElasticLayout::describe() const {
  return detail::concat(ranks, ranks == 1 ? " rank" : " ranks", ": dp=", dp, ", grad_accum=",
                        parallel::describe_grad_accum(replica_grad_accum, grad_accum));
}

std::vector<std::string> ElasticLayout::overrides() const {
  const std::string counts = replica_grad_accum.empty() ? "" : parallel::describe_grad_accum(replica_grad_accum, 0, ",");
  return {"parallel.dp=" + std::to_string(dp), "training.grad_accum=" + std::to_string(grad_accum),
          "parallel.replica_grad_accum=[" + counts + "]"};
}

std::string describe_change(const ElasticLayout& from, const ElasticLayout& to) {
  if (to.ranks == from.ranks && to.dp == from.dp && to.replica_grad_accum == from.replica_grad_accum) return "";
  return from.describe() + " -> " + to.describe();
}

ElasticLayout current_layout(const TrainConfig& cfg) {
  return {int(cfg.parallel.dp * model_ranks(cfg)), cfg.parallel.dp, cfg.training.grad_accum,
          cfg.parallel.replica_grad_accum};
}

TrainConfig at_layout(const TrainConfig& cfg, const ElasticLayout& layout) {
  TrainConfig c = cfg;
  c.parallel.dp = int(layout.dp);
  c.training.grad_accum = layout.grad_accum;
  c.parallel.replica_grad_accum = layout.replica_grad_accum;
  c.validate();
  return c;
}

std::optional<ElasticLayout> largest_layout(const TrainConfig& cfg, int ranks) {
  MT_CHECK(cfg.parallel.dp >= 1, "elastic layouts need a configured dp");
  const int64_t m = model_ranks(cfg), window = window_micro_batches(cfg);
  std::optional<ElasticLayout> best;
  for (int64_t dp = std::min<int64_t>(ranks / m, window); dp >= 1; --dp) {
    // The window as evenly as it goes: the first window % dp replicas one more.
    ElasticLayout l{int(dp * m), dp, (window + dp - 1) / dp, {}};
    if (window % dp != 0)
      for (int64_t d = 0; d < dp; ++d) l.replica_grad_accum.push_back(window / dp + (d < window % dp ? 1 : 0));
    if (l.ranks < cfg.comm.min_ranks || (best && best->grad_accum < l.grad_accum)) continue;
    if (runnable(cfg, l)) best = l;  // as fast as the best so far, on fewer ranks
  }
  return best;
}

std::string capacity_file(const TrainConfig& cfg) {
  return (std::filesystem::path(cfg.metrics.run_dir) / kRunCapacityFile).string();
}

int read_capacity(const TrainConfig& cfg, int otherwise) {
  const std::string path = capacity_file(cfg);
  std::ifstream in(path);
  if (!in) return otherwise;
  std::stringstream text;
  text << in.rdbuf();
  long long n = 0;
  std::string rest;
  std::istringstream parse(text.str());
  const bool ok = bool(parse >> n) && !(parse >> rest) && n >= 1 && n <= 1 << 20;
  MT_REQUIRE(ConfigError, ok, "capacity file ", path, " holds '", text.str(),
             "': expected one positive count, the ranks the job may use now (or remove the file)");
  return int(n);
}

ElasticLayout shrink_or_grow(const TrainConfig& cfg, int capacity, const std::string& why) {
  const std::optional<ElasticLayout> l = largest_layout(cfg, capacity);
  MT_REQUIRE(CommError, l.has_value(), why, ": ", capacity, capacity == 1 ? " rank is" : " ranks are",
             " left, and no layout of this job's global window (", window_micro_batches(cfg),
             " micro-batches of ", cfg.training.micro_batch, " rows) with tp x cp x pp = ", model_ranks(cfg),
             " runs on them with at least comm.min_ranks = ", cfg.comm.min_ranks,
             " ranks: the job stops here (its checkpoints are kept; run it again when capacity returns)");
  return *l;
}

}  // namespace meshtrain::train
