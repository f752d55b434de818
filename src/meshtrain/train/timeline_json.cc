#include "meshtrain/train/timeline_json.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "meshtrain/core/error.h"
#include "meshtrain/parallel/schedule_gen.h"

namespace meshtrain::train {

namespace {

parallel::Op op_of(const std::string& kind) {
  using parallel::Op;
  if (kind == "F") return Op::Forward;
  if (kind == "B") return Op::BackwardInput;
  if (kind == "W") return Op::BackwardWeight;
  if (kind == "BW") return Op::Backward;
  MT_THROW(DataError, "pipeline timeline: unknown kind '", kind, "' (expected F, B, W or BW)");
}

}  // namespace

nlohmann::json timeline_record(int64_t step, const parallel::PipelineTimeline& t, double bubble_formula) {
  nlohmann::json ops = nlohmann::json::array();
  for (size_t s = 0; s < t.stages.size(); ++s)
    for (const parallel::TimedAction& a : t.stages[s])
      ops.push_back({{"stage", int(s)},
                     {"chunk", a.chunk},
                     {"micro", a.micro},
                     {"kind", parallel::to_string(a.op)},
                     {"start_s", a.start},
                     {"end_s", a.end},
                     {"busy_s", a.busy}});
  return {{"event", "pipeline_timeline"},
          {"step", step},
          {"schedule", t.schedule},
          {"stages", int(t.stages.size())},
          {"micro_batches", t.micro_batches},
          {"virtual_stages", t.virtual_stages},
          {"bubble", t.measured_bubble()},
          {"bubble_formula", bubble_formula},
          {"ops", ops}};
}

RecordedTimeline read_timeline(const std::string& run_dir, int64_t step) {
  const std::string path = (std::filesystem::path(run_dir) / "metrics.jsonl").string();
  std::ifstream in(path);
  MT_REQUIRE(DataError, in.good(), "cannot read ", path, " (the run's metrics; metrics.jsonl must be enabled)");
  std::optional<nlohmann::json> found;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find("pipeline_timeline") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      MT_THROW(DataError, path, ":", n, ": not a JSON record (", e.what(), ")");
    }
    if (j.value("event", "") != "pipeline_timeline") continue;
    if (step < 0 || j.value("step", int64_t(-1)) == step) found = std::move(j);
  }
  MT_REQUIRE(DataError, found.has_value(), path, " holds no pipeline timeline",
             step < 0 ? std::string() : " for step " + std::to_string(step),
             " (train with metrics.pipeline_timeline = true and parallel.pp > 1)");
  const nlohmann::json& j = *found;
  RecordedTimeline r;
  r.step = j.value("step", int64_t(0));
  r.bubble_formula = j.value("bubble_formula", 0.0);
  r.timeline.schedule = j.value("schedule", std::string());
  r.timeline.micro_batches = j.value("micro_batches", 0);
  r.timeline.virtual_stages = j.value("virtual_stages", 1);
  r.timeline.stages.resize(size_t(j.value("stages", 0)));
  for (const auto& op : j.at("ops")) {
    const int s = op.at("stage").get<int>();
    MT_REQUIRE(DataError, s >= 0 && s < int(r.timeline.stages.size()), path, ": timeline op on stage ", s, " of ",
               r.timeline.stages.size());
    r.timeline.stages[size_t(s)].push_back({op_of(op.at("kind").get<std::string>()), op.at("micro").get<int>(),
                                            op.at("chunk").get<int>(), op.at("start_s").get<double>(),
                                            op.at("end_s").get<double>(), op.value("busy_s", 0.0)});
  }
  return r;
}

std::string describe_timeline(const RecordedTimeline& r) {
  const parallel::PipelineTimeline& t = r.timeline;
  const int p = int(t.stages.size());
  const parallel::Schedule s = parallel::make_schedule(t.schedule, p, t.micro_batches, t.virtual_stages);
  const parallel::ChunkCosts costs = t.chunk_costs(s.chunks());
  const parallel::SimResult sim = parallel::simulate(s, costs);
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "step %lld | %s, p = %d, m = %d, v = %d | bubble measured %.3f, formula (unit time) %.3f, costed "
                "simulation %.3f (measured F, B, W per chunk; makespan %.2f ms)\n",
                static_cast<long long>(r.step), t.schedule.c_str(), p, t.micro_batches, t.virtual_stages,
                t.measured_bubble(), r.bubble_formula, sim.bubble, sim.makespan * 1e3);
  std::string out = buf;
  for (int c = 0; c < s.chunks(); ++c) {
    std::snprintf(buf, sizeof buf, "  chunk %d on stage %d: F %.3f ms, B %.3f ms, W %.3f ms (medians)\n", c,
                  s.chunk_rank[size_t(c)], costs.f[size_t(c)] * 1e3, costs.b[size_t(c)] * 1e3,
                  costs.w[size_t(c)] * 1e3);
    out += buf;
  }
  return out;
}

}  // namespace meshtrain::train
