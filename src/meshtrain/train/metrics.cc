#include "meshtrain/train/metrics.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "meshtrain/core/error.h"
#include "meshtrain/core/output_file.h"
#include "meshtrain/train/run_dir.h"

namespace meshtrain::train {

nlohmann::json StepMetrics::to_json() const {
  nlohmann::json mem;
  for (int c = 0; c < kNumMemCategories; ++c) mem[std::string(mem_category_name(MemCategory(c)))] = memory.peak[c];
  mem["total"] = memory.total_peak;
  mem["cached"] = memory.cached;
  mem["page_padding"] = memory.page_padding;
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
    j["pipeline_receive_wait_s"] = pipeline_receive_wait_s;
    j["pipeline_transfer_exposed_s"] = pipeline_transfer_exposed_s;
  }
  if (tp.calls > 0 || tp.grad_sum_bytes > 0) j["tp_comm"] = tp.to_json();
  if (cp.cp > 1) j["cp_comm"] = cp.to_json();
  if (moe.active) j["moe"] = moe.to_json();
  if (!ranks.empty()) j["ranks"] = ranks.to_json();
  if (!stragglers.empty()) {
    j["straggler"] = nlohmann::json::array();
    for (const Straggler& s : stragglers) j["straggler"].push_back(s.to_json());
  }
  return j;
}

CpMetrics cp_metrics(const model::CpCommStats& stats, int cp) { return {cp, stats}; }

nlohmann::json CpMetrics::to_json() const {
  return {{"cp", cp},
          {"forward_bytes", ring.forward_bytes},
          {"backward_bytes", ring.backward_bytes},
          {"exposed_s", ring.exposed_s},
          {"pairs_computed", ring.pairs_computed},
          {"pairs_skipped", ring.pairs_skipped}};
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
  if (moe.active) {
    std::snprintf(buf, sizeof buf, " | aux %.4f | drop %.3f | top expert %.2f", moe.aux_loss, moe.drop_fraction,
                  moe.max_expert_share);
    line += buf;
  }
  if (pipeline_bubble >= 0) {
    std::snprintf(buf, sizeof buf, " | bubble %.3f (formula %.3f)", pipeline_bubble, pipeline_bubble_formula);
    line += buf;
  }
  return line;
}

MetricsWriter::MetricsWriter(const std::string& jsonl_path) : path_(jsonl_path) {
  if (jsonl_path.empty()) return;
  check_metrics_file(jsonl_path);  // never append to a file that is not a run's metrics
  const auto parent = std::filesystem::path(jsonl_path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  out_.open(jsonl_path, std::ios::app);
  MT_REQUIRE(ConfigError, out_.good(), "cannot open metrics file '", jsonl_path, "' for writing");
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!out_.is_open()) return;
  errno = 0;
  out_ << record.dump() << '\n';
  out_.flush();
  if (out_.good()) return;
  if (lost_++ == 0)
    std::fprintf(stderr, "meshtrain: warning: cannot write metrics to %s (%s); the run continues, its metrics are "
                 "being lost\n", path_.c_str(), errno ? std::strerror(errno) : "write failed");
  out_.clear();
}

int64_t truncate_metrics_after(const std::string& jsonl_path, int64_t step) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (jsonl_path.empty()) return 0;
  check_metrics_file(jsonl_path);  // never rewrite a file that is not a run's metrics
  if (!fs::is_regular_file(fs::symlink_status(jsonl_path, ec))) return 0;  // absent, or a device
  std::ifstream in(jsonl_path);
  std::string line, kept;
  int64_t dropped = 0;
  bool changed = false;
  while (std::getline(in, line)) {
    changed = changed || in.eof();
    if (in.eof()) break;  // no newline: a record torn by a crash
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const bool later = j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
                       j["step"].get<int64_t>() > step && j.value("event", std::string()) != "restart";
    if (later) dropped = std::max(dropped, j["step"].get<int64_t>());
    if (j.is_discarded() || later) {
      changed = true;
      continue;
    }
    kept += line + "\n";
  }
  in.close();
  if (!changed) return 0;
  write_file_atomically(jsonl_path, kept);
  return dropped;
}

}  // namespace meshtrain::train
