#include "meshtrain/train/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>

#include "meshtrain/core/threading.h"
#include "meshtrain/data/prepare.h"
#include "meshtrain/data/stats.h"
#include "meshtrain/train/data_setup.h"

namespace meshtrain::train {

namespace {

using Clock = std::chrono::steady_clock;

model::TokenBatch rows_of(const data::Batch& b, int64_t first, int64_t rows) {
  const int64_t off = first * b.seq;
  return {rows, b.seq, b.tokens.data() + off, b.targets.data() + off, b.positions.data() + off,
          b.segments.data() + off};
}

}  // namespace

Trainer::Trainer(const TrainConfig& cfg, data::TokenDataset train_data, std::optional<data::TokenDataset> val_data,
                 std::shared_ptr<CachingAllocator> alloc)
    : cfg_(cfg),
      train_(std::move(train_data)),
      val_(std::move(val_data)),
      alloc_(std::move(alloc)),
      schedule_(cfg.optimizer, cfg.training.steps),
      loader_(train_, loader_config(cfg.data)) {
  cfg_.validate();
  MT_REQUIRE(ConfigError, train_.tokenizer().vocab_size() <= cfg_.model.vocab_size, "model.vocab_size = ",
             cfg_.model.vocab_size, " is smaller than the dataset tokenizer's vocabulary (",
             train_.tokenizer().vocab_size(), ")");
  model_ = std::make_unique<model::Transformer<float>>(cfg_.model, alloc_,
                                                       model::ExecOptions{cfg_.training.recompute});
  optimizer_ = std::make_unique<optim::AdamW<float>>(model_->params(), cfg_.optimizer, alloc_);
  flops_per_token_ = model::model_flops_per_token(cfg_.model, cfg_.data.seq_len);
}

std::unique_ptr<Trainer> Trainer::from_config(const TrainConfig& cfg) {
  ensure_prepared(cfg.data);
  auto train = data::TokenDataset::open(cfg.data.path, "train");
  std::optional<data::TokenDataset> val;
  if (std::filesystem::exists(std::filesystem::path(cfg.data.path) / "val.bin"))
    val = data::TokenDataset::open(cfg.data.path, "val");
  return std::make_unique<Trainer>(cfg, std::move(train), std::move(val));
}

StepMetrics Trainer::step() {
  const int64_t rows = cfg_.training.grad_accum * cfg_.training.micro_batch;
  loader_.next_window(rows, 0, rows, &window_);
  return step_on(window_);
}

StepMetrics Trainer::step_on(const data::Batch& window) {
  const auto t0 = Clock::now();
  alloc_->tracker().reset_peaks();
  const int64_t G = cfg_.training.grad_accum, B = cfg_.training.micro_batch;
  MT_CHECK(window.rows == G * B, "window has ", window.rows, " rows, expected G * micro_batch = ", G * B);
  StepMetrics m;
  m.step = step_ + 1;
  m.lr = schedule_.at(step_);

  // 1. N counted over the whole window before any backward (29.2).
  m.supervised = window.supervised_targets;
  m.non_pad_tokens = window.non_pad_tokens;
  m.computed_positions = window.computed_positions;
  m.padding_ratio = window.padding_ratio();
  const int64_t N = m.supervised;

  // 2. N = 0: nothing to learn from; skip consistently (step and data advance).
  if (N == 0) {
    m.skipped = true;
    m.skip_reason = "no supervised targets in the window (N = 0)";
  } else {
    // 3. grads = (1/N) sum_j grad S_j  (29.3)
    model_->params().zero_grads();
    const float coeff = float(1.0 / double(N));
    double loss_sum = 0;
    for (int64_t j = 0; j < G; ++j) loss_sum += model_->forward_backward(rows_of(window, j * B, B), coeff).loss_sum;
    m.loss = loss_sum / double(N);

    // 4-5. Finiteness and clipping on the global norm after normalization.
    const double sum_sq = optim::grad_sum_squares(model_->params());
    m.grad_norm = std::sqrt(sum_sq);
    if (!std::isfinite(sum_sq) || !std::isfinite(m.loss)) {
      m.skipped = true;
      m.skip_reason = "non-finite gradients or loss";
    } else {
      m.clip_coef = optim::clip_coefficient(m.grad_norm, cfg_.optimizer.grad_clip);
      optimizer_->step(m.lr, m.clip_coef);
    }
  }
  // 6. Commit.
  ++step_;
  m.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  m.tokens_per_s = double(N) / m.seconds;
  m.gflops = m.skipped ? 0 : flops_per_token_ * double(m.computed_positions) / m.seconds * 1e-9;
  m.memory = alloc_->tracker().snapshot();
  return m;
}

EvalResult Trainer::evaluate() {
  EvalResult r;
  if (!val_) return r;
  data::ValidationIterator it(*val_, data::parse_batch_mode(cfg_.data.mode), cfg_.data.seq_len);
  data::Batch b;
  double loss_sum = 0;
  int64_t rows = 0;
  const int64_t limit = cfg_.training.eval_rows;
  while ((limit == 0 || rows < limit) && it.next(cfg_.training.micro_batch, &b)) {
    rows += b.rows;
    if (b.supervised_targets == 0) continue;
    const auto ce = model_->forward_loss(rows_of(b, 0, b.rows));
    loss_sum += ce.loss_sum;
    r.targets += ce.count;
  }
  r.loss = r.targets ? loss_sum / double(r.targets) : 0.0;
  return r;
}

void Trainer::run(std::FILE* console) {
  const int threads = cfg_.training.threads > 0 ? cfg_.training.threads : hardware_cores();
  set_compute_threads(threads);
  std::filesystem::create_directories(cfg_.metrics.run_dir);
  MetricsWriter writer(cfg_.metrics.jsonl.empty()
                           ? std::string()
                           : (std::filesystem::path(cfg_.metrics.run_dir) / cfg_.metrics.jsonl).string());
  const auto& spec = model_->params().spec();
  std::fprintf(console, "model: %s | %.2fM parameters | %.1f MFLOP/token\n", cfg_.model.describe().c_str(),
               double(spec.total_params()) * 1e-6, flops_per_token_ * 1e-6);
  std::fprintf(console,
               "precision: params f32, matmul inputs f32, accumulate f32, outputs f32, optimizer state f32 | "
               "threads %d | window %lld rows x %lld (G=%lld) | %s\n",
               threads, static_cast<long long>(cfg_.training.micro_batch * cfg_.training.grad_accum),
               static_cast<long long>(cfg_.data.seq_len), static_cast<long long>(cfg_.training.grad_accum),
               cfg_.data.mode.c_str());
  if (val_) {
    const double h = data::unigram_entropy(*val_);
    std::fprintf(console, "validation: %lld documents, %lld tokens | unigram entropy baseline %.4f nats/token\n",
                 static_cast<long long>(val_->num_documents()), static_cast<long long>(val_->num_tokens()), h);
    writer.write({{"event", "baseline"}, {"unigram_entropy", h}});
  }
  std::fflush(console);
  const int64_t total = cfg_.training.steps;
  while (step_ < total) {
    StepMetrics m = step();
    writer.write(m.to_json());
    if (m.step % cfg_.metrics.log_every == 0 || m.step == total || m.skipped)
      std::fprintf(console, "%s\n", m.console_line(total).c_str());
    const bool eval_now = (cfg_.training.eval_every > 0 && m.step % cfg_.training.eval_every == 0) || m.step == total;
    if (eval_now && val_) {
      const EvalResult e = evaluate();
      std::fprintf(console, "eval step %lld | val loss %.4f nats/token over %lld targets\n",
                   static_cast<long long>(m.step), e.loss, static_cast<long long>(e.targets));
      writer.write({{"event", "eval"}, {"step", m.step}, {"val_loss", e.loss}, {"targets", e.targets}});
    }
    std::fflush(console);
  }
}

}  // namespace meshtrain::train
