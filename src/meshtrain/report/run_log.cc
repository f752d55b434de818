#include "meshtrain/report/run_log.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "meshtrain/core/error.h"

namespace meshtrain::report {
namespace fs = std::filesystem;
namespace {

double num(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

std::vector<double> numbers(const nlohmann::json& j, const char* key) {
  std::vector<double> v;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return v;
  for (const auto& x : *it) v.push_back(x.is_number() ? x.get<double>() : 0.0);
  return v;
}

// The step record's "ranks" and "straggler" (train/rank_timing.h, train/straggler.h).
void read_rank_times(const nlohmann::json& j, StepRecord& s) {
  if (const auto it = j.find("ranks"); it != j.end() && it->is_object()) {
    s.rank_step_s = numbers(*it, "step_s");
    s.rank_compute_s = numbers(*it, "compute_s");
    if (s.rank_compute_s.size() != s.rank_step_s.size()) s.rank_step_s.clear(), s.rank_compute_s.clear();
  }
  if (const auto it = j.find("straggler"); it != j.end() && it->is_array())
    for (const auto& x : *it)
      if (x.is_object()) s.stragglers.push_back({x.value("rank", 0), x.value("host", std::string("?")), num(x, "ratio")});
}

// A "restart" or "membership" record (train/run.cc). A membership change
// after a failure is written next to its restart record: one entry.
void add_resume(std::vector<ResumeRecord>& out, const std::string& event, const nlohmann::json& j) {
  ResumeRecord m;
  m.resumed_step = j.value("resumed_step", int64_t(0));
  m.lost_steps = j.value("lost_steps", int64_t(0));
  m.reason = j.value("reason", std::string());
  m.change = j.value("change", std::string());
  m.ranks = j.value("ranks", 0), m.dp = j.value("dp", 0), m.grad_accum = j.value("grad_accum", 0);
  m.layout = j.value("layout", std::string());
  m.recovery_s = j.contains("recovery_s") ? num(j, "recovery_s") : -1.0;
  const bool told = event == "restart" && !out.empty() && !out.back().change.empty() &&
                    out.back().resumed_step == m.resumed_step && out.back().reason == m.reason;
  if (!told) out.push_back(m);
}

}  // namespace

RunLog read_run(const std::string& run_dir) {
  RunLog r;
  r.dir = run_dir;
  std::string name = fs::path(run_dir).lexically_normal().filename().string();
  if (name.empty()) name = fs::path(run_dir).lexically_normal().parent_path().filename().string();
  r.name = name;
  const fs::path file = fs::path(run_dir) / "metrics.jsonl";
  std::ifstream in(file);
  MT_REQUIRE(DataError, in.good(), "report: cannot read ", file.string(),
             " (a run directory is metrics.run_dir of a training run)");
  std::map<int64_t, StepRecord> steps;
  std::map<int64_t, EvalRecord> evals;
  double recorded_peak = 0;
  int64_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      // A run killed mid-write leaves a torn last line: skip only that one.
      if (in.peek() == EOF) break;
      MT_THROW(DataError, file.string(), ":", line_no, ": not a JSON record (", e.what(), ")");
    }
    MT_REQUIRE(DataError, j.is_object(), file.string(), ":", line_no, ": not a JSON object");
    const std::string event = j.value("event", "");
    if (event == "run") {
      r.run = j;
      recorded_peak = std::max(recorded_peak, num(j, "peak_gflops"));
    } else if (event == "peak") {
      recorded_peak = std::max(recorded_peak, num(j, "peak_gflops"));
    } else if (event == "baseline") {
      r.unigram_entropy = num(j, "unigram_entropy");
    } else if (event == "eval") {
      EvalRecord e;
      e.step = j.value("step", int64_t(0));
      e.val_loss = num(j, "val_loss");
      if (j.contains("val_bits_per_byte")) e.bits_per_byte = num(j, "val_bits_per_byte");
      evals[e.step] = e;
    } else if (event == "restart" || event == "membership") {
      add_resume(r.resumes, event, j);
    } else if (event == "pipeline_timeline") {
      r.pipeline_step = j.value("step", int64_t(0));
      r.pipeline.clear();
      for (const auto& op : j.value("ops", nlohmann::json::array()))
        r.pipeline.push_back({op.value("stage", 0), op.value("micro", 0), op.value("kind", std::string("F")),
                              num(op, "start_s"), num(op, "end_s")});
    } else if (event.empty() && j.contains("step") && j.contains("loss")) {
      StepRecord s;
      s.step = j["step"].get<int64_t>();
      s.loss = num(j, "loss");
      s.tokens = num(j, "supervised_targets");  // per step; made cumulative below
      s.tokens_per_s = num(j, "tokens_per_s");
      s.gflops = num(j, "gflops");
      s.grad_norm = num(j, "grad_norm");
      s.lr = num(j, "lr");
      s.comm_s = num(j, "comm_s");
      s.comm_exposed_s = num(j, "comm_exposed_s");
      s.seconds = num(j, "seconds");
      s.skipped = j.value("skipped", false);
      s.skip_reason = j.value("skip_reason", "");
      if (j.contains("peak_memory_bytes") && j["peak_memory_bytes"].is_object())
        for (const auto& [k, v] : j["peak_memory_bytes"].items())
          if (v.is_number() && k != "cached" && k != "total") s.peak_memory[k] = v.get<double>();
      read_rank_times(j, s);
      steps[s.step] = s;
    }
  }
  MT_REQUIRE(DataError, !steps.empty(), "report: ", file.string(), " holds no step records");
  double tokens = 0, fastest = 0;
  for (auto& [step, s] : steps) {
    tokens += s.tokens;
    s.tokens = tokens;
    if (!s.skipped) fastest = std::max(fastest, s.gflops);
    r.steps.push_back(s);
  }
  if (recorded_peak > 0) {
    r.peak = std::max(recorded_peak, fastest);
    r.peak_from_steps = fastest > recorded_peak;
  }
  for (auto& [step, e] : evals) {
    auto it = steps.upper_bound(step);  // tokens seen by the end of that step
    e.tokens = it == steps.begin() ? 0 : std::prev(it)->second.tokens;
    r.evals.push_back(e);
  }
  return r;
}

}  // namespace meshtrain::report
