#include "meshtrain/train/metrics.h"

#include <filesystem>

#include "meshtrain/core/error.h"

namespace meshtrain::train {

nlohmann::json StepMetrics::to_json() const {
  nlohmann::json mem;
  for (int c = 0; c < kNumMemCategories; ++c) mem[std::string(mem_category_name(MemCategory(c)))] = memory.peak[c];
  mem["total"] = memory.total_peak;
  mem["cached"] = memory.cached;
  nlohmann::json j = {{"step", step},
                      {"loss", loss},
                      {"N", supervised},
                      {"non_pad_tokens", non_pad_tokens},
                      {"computed_positions", computed_positions},
                      {"supervised_targets", supervised},
                      {"padding_ratio", padding_ratio},
                      {"seconds", seconds},
                      {"tokens_per_s", tokens_per_s},
                      {"gflops", gflops},
                      {"grad_norm", grad_norm},
                      {"clip_coef", clip_coef},
                      {"lr", lr},
                      {"comm_s", comm_s},
                      {"comm_exposed_s", comm_exposed_s},
                      {"comm_buckets", comm_buckets},
                      {"comm_bytes", comm_bytes},
                      {"skipped", skipped},
                      {"loss_scale", loss_scale},
                      {"skipped_total", skipped_total},
                      {"peak_memory_bytes", mem}};
  if (skipped) j["skip_reason"] = skip_reason;
  if (pipeline_bubble >= 0) {
    j["pipeline_bubble"] = pipeline_bubble;
    j["pipeline_bubble_formula"] = pipeline_bubble_formula;
  }
  if (tp.calls > 0 || tp.grad_sum_bytes > 0) j["tp_comm"] = tp.to_json();
  return j;
}

std::string StepMetrics::console_line(int64_t total_steps) const {
  char buf[512];
  if (skipped) {
    std::snprintf(buf, sizeof buf, "step %5lld/%lld | skipped: %s", static_cast<long long>(step),
                  static_cast<long long>(total_steps), skip_reason.c_str());
    return buf;
  }
  std::snprintf(buf, sizeof buf,
                "step %5lld/%lld | loss %.4f | N %lld | pad %.3f | %.0f tok/s | %.1f GFLOP/s | gnorm %.3f | lr %.2e | "
                "peak %s",
                static_cast<long long>(step), static_cast<long long>(total_steps), loss,
                static_cast<long long>(supervised), padding_ratio, tokens_per_s, gflops, grad_norm, lr,
                format_bytes(memory.total_peak).c_str());
  std::string line = buf;
  if (loss_scale != 1) {
    std::snprintf(buf, sizeof buf, " | scale %.0f (%lld skipped)", loss_scale, static_cast<long long>(skipped_total));
    line += buf;
  }
  if (pipeline_bubble >= 0) {
    std::snprintf(buf, sizeof buf, " | bubble %.3f (formula %.3f)", pipeline_bubble, pipeline_bubble_formula);
    line += buf;
  }
  return line;
}

MetricsWriter::MetricsWriter(const std::string& jsonl_path) {
  if (jsonl_path.empty()) return;
  const auto parent = std::filesystem::path(jsonl_path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  out_.open(jsonl_path, std::ios::app);
  MT_REQUIRE(ConfigError, out_.good(), "cannot open metrics file '", jsonl_path, "' for writing");
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!out_.is_open()) return;
  out_ << record.dump() << '\n';
  out_.flush();
}

}  // namespace meshtrain::train
