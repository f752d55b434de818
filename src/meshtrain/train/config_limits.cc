#include "meshtrain/train/config_limits.h"

#include <cmath>
#include <cstdint>
#include <string>

#include "meshtrain/core/error.h"
#include "meshtrain/core/text.h"
#include "meshtrain/train/train_config.h"

namespace meshtrain::train {
namespace {

constexpr int64_t kKi = 1024, kMi = kKi * kKi;

void int_at_most(const char* key, int64_t v, int64_t max) {
  MT_REQUIRE(ConfigError, v <= max, key, " = ", v, ": at most ", max, " is supported");
}

// Finite and within [lo, hi] (open ends where stated by the caller's range).
void finite_in(const char* key, double v, double lo, double hi, const char* range) {
  MT_REQUIRE(ConfigError, std::isfinite(v) && v >= lo && v <= hi, key, " = ", v, ": expected a finite value in ",
             range);
}

void utf8_name(const char* key, const std::string& v) {
  MT_REQUIRE(ConfigError, is_valid_utf8(v), key, " = '", printable(v),
             "' is not valid UTF-8 (names are recorded in JSON metadata); rename the file or directory");
}

}  // namespace

void check_config_limits(const TrainConfig& c) {
  // Shapes: each dimension bounded so every product of the model (the
  // parameter count, the RoPE table, a batch's activations) fits in 64 bits.
  const auto& m = c.model;
  int_at_most("model.vocab_size", m.vocab_size, (int64_t(1) << 31) - 1);
  int_at_most("model.d_model", m.d_model, 1 * kMi);
  int_at_most("model.n_layers", m.n_layers, 64 * kKi);
  int_at_most("model.n_heads", m.n_heads, 64 * kKi);
  int_at_most("model.n_kv_heads", m.n_kv_heads, 64 * kKi);
  int_at_most("model.head_dim", m.head_dim, 64 * kKi);
  int_at_most("model.ffn_hidden", m.ffn_hidden, 16 * kMi);
  int_at_most("model.max_seq_len", m.max_seq_len, 16 * kMi);
  finite_in("model.norm_eps", m.norm_eps, 0, 1, "(0, 1)");
  finite_in("model.rope_theta", m.rope_theta, 1, 1e12, "(1, 1e12]");
  finite_in("model.init_std", m.init_std, 0, 10, "(0, 10]");

  const auto& t = c.training;
  int_at_most("training.steps", t.steps, int64_t(1) << 40);
  int_at_most("training.micro_batch", t.micro_batch, 16 * kMi);
  int_at_most("training.grad_accum", t.grad_accum, 16 * kMi);
  int_at_most("training.eval_rows", t.eval_rows, int64_t(1) << 40);
  int_at_most("training.head_chunk_rows", t.head_chunk_rows, int64_t(1) << 32);
  int_at_most("training.threads", t.threads, 4096);
  int_at_most("data.seq_len", c.data.seq_len, 16 * kMi);
  int_at_most("data.bucket_pool", c.data.bucket_pool, 1 * kMi);
  MT_REQUIRE(ConfigError, t.micro_batch <= 0 || c.data.seq_len <= 0 ||
                              t.micro_batch * c.data.seq_len <= (int64_t(1) << 32),
             "training.micro_batch x data.seq_len = ", t.micro_batch, " x ", c.data.seq_len,
             ": more than 2^32 positions per micro-batch");
  finite_in("data.val_fraction", c.data.val_fraction, 0, 1, "(0, 1)");

  const auto& o = c.optimizer;
  finite_in("optimizer.lr", o.lr, 0, 10, "(0, 10]");
  finite_in("optimizer.min_lr", o.min_lr, 0, 10, "[0, optimizer.lr]");
  finite_in("optimizer.beta1", o.beta1, 0, 1, "[0, 1)");
  finite_in("optimizer.beta2", o.beta2, 0, 1, "[0, 1)");
  finite_in("optimizer.eps", o.eps, 0, 1, "(0, 1]");
  finite_in("optimizer.weight_decay", o.weight_decay, 0, 1e3, "[0, 1e3]");
  MT_REQUIRE(ConfigError, o.lr * o.weight_decay < 1, "optimizer.lr x optimizer.weight_decay = ", o.lr, " x ",
             o.weight_decay, " = ", o.lr * o.weight_decay,
             ": decoupled weight decay multiplies the weights by 1 - lr x wd each step, which must stay positive");
  finite_in("optimizer.grad_clip", o.grad_clip, 0, 1e12, "[0, 1e12] (0 disables)");
  int_at_most("optimizer.warmup_steps", o.warmup_steps, int64_t(1) << 40);

  // Every rank of the threads backend is a thread of this process.
  int_at_most("parallel.dp", c.parallel.dp, c.comm.backend == "threads" ? 1024 : 1 * kMi);
  finite_in("parallel.bucket_mb", c.parallel.bucket_mb, 0, 1e6, "(0, 1e6]");
  finite_in("comm.timeout_s", c.comm.timeout_s, 0, 1e7, "(0, 1e7]");
  finite_in("comm.straggler_factor", c.comm.straggler_factor, 0, 1e6, "0 (off) or (1, 1e6]");
  finite_in("comm.heartbeat_timeout_s", c.comm.heartbeat_timeout_s, -1, 1e7, "-1, 0 (off) or (0, comm.timeout_s)");
  int_at_most("comm.max_restarts", c.comm.max_restarts, 1000);
  int_at_most("comm.min_ranks", c.comm.min_ranks, 1 << 20);
  MT_REQUIRE(ConfigError, c.comm.min_ranks >= 1, "comm.min_ranks = ", c.comm.min_ranks,
             ": expected >= 1 (the fewest ranks an elastic job continues on)");
  MT_REQUIRE(ConfigError, c.comm.max_restarts >= 0, "comm.max_restarts = ", c.comm.max_restarts, ": expected >= 0");
  int_at_most("checkpoint.every", c.checkpoint.every, int64_t(1) << 40);
  int_at_most("metrics.log_every", c.metrics.log_every, int64_t(1) << 40);

  utf8_name("data.path", c.data.path);
  for (const auto& s : c.data.sources) utf8_name("data.sources", s);
  utf8_name("metrics.run_dir", c.metrics.run_dir);
  utf8_name("metrics.jsonl", c.metrics.jsonl);
  utf8_name("checkpoint.dir", c.checkpoint.dir);
  utf8_name("checkpoint.init_from", c.checkpoint.init_from);
}

}  // namespace meshtrain::train
