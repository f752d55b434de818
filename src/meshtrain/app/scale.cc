#include "meshtrain/app/scale.h"

#include <filesystem>
#include <optional>

#include "meshtrain/checkpoint/fs_util.h"
#include "meshtrain/train/data_setup.h"
#include "meshtrain/train/scaling.h"
#include "meshtrain/train/scaling_chart.h"

namespace meshtrain::app {

ScaleResult scale(const ScaleRequest& q) {
  const train::TrainConfig cfg = train::load_config(q.config, q.overrides);
  std::vector<train::Layout> layouts;
  for (const std::string& l : q.layouts) layouts.push_back(train::parse_layout(l));
  std::optional<plan::HardwareProfile> hw;
  if (!q.hardware.empty()) hw = plan::load_hardware(q.hardware);
  train::ensure_prepared(cfg.data);
  const auto data = data::TokenDataset::open(cfg.data.path, "train");
  const train::ScaleReport report = train::run_scaling(cfg, layouts, q.steps, q.weak, data, hw ? &*hw : nullptr,
                                                              q.threads_per_rank);
  ScaleResult r;
  r.table = report.table();
  r.any_ran = report.baseline >= 0;
  r.out = q.out.empty() ? cfg.metrics.run_dir + "/scale" : q.out;
  std::filesystem::create_directories(r.out);
  checkpoint::atomic_write_file(r.out, "scaling.svg", train::scaling_svg(report));
  checkpoint::atomic_write_file(r.out, "scaling.json", report.json().dump(2) + "\n");
  return r;
}

}  // namespace meshtrain::app
