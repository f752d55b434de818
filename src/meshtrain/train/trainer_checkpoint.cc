// Trainer <-> distributed checkpoints (SPEC S9): every rank writes 1/R of
// every unit and reads exactly what its TARGET layout owns, so any change of
// dp size or ZeRO stage is a redistribution through global offset ranges.
#include <cstdio>
#include <filesystem>

#include "meshtrain/checkpoint/model_config_json.h"
#include "meshtrain/checkpoint/model_weights.h"
#include "meshtrain/checkpoint/writer.h"
#include "meshtrain/train/trainer.h"

namespace meshtrain::train {

namespace {

const char* kExpAvg = "optimizer.exp_avg.";
const char* kExpAvgSq = "optimizer.exp_avg_sq.";

int64_t flat_index(const Shape& shape, const std::vector<int64_t>& offset) {
  int64_t flat = 0;
  for (int i = 0; i < shape.rank(); ++i) flat = flat * shape[i] + offset[size_t(i)];
  return flat;
}

// The boxes of param range [begin, end) with their data taken from `base`
// (which holds element `begin`).
void add_pieces(std::vector<checkpoint::TensorPiece>& out, const std::string& name, const Shape& shape, int64_t begin,
                int64_t end, const float* base) {
  for (const checkpoint::Box& box : checkpoint::flat_range_to_boxes(shape, begin, end))
    out.push_back({name, shape, DType::F32, box, base + (flat_index(shape, box.offset) - begin)});
}

nlohmann::json layout_json(const TrainConfig& cfg, int world) {
  return {{"dp", cfg.parallel.dp},          {"zero_stage", cfg.parallel.zero_stage},
          {"tp", 1},                        {"pp", 1},
          {"world", world},                 {"grad_accum", cfg.training.grad_accum},
          {"micro_batch", cfg.training.micro_batch}, {"backend", cfg.comm.backend}};
}

}  // namespace

checkpoint::SaveRequest Trainer::save_request() const {
  auto& engine = *engine_;
  const auto& plan = engine.plan();
  const auto& spec = model_->params().spec();
  checkpoint::SaveRequest r;
  r.step = step_;
  for (int u = 0; u < plan.num_units(); ++u) {
    const auto [begin, end] = plan.save_range(u);
    for (const auto& p : plan.pieces_in(u, begin, end)) {
      const auto& ps = spec.params[size_t(p.param)];
      add_pieces(r.pieces, ps.name, ps.shape, p.param_begin, p.param_end, engine.param_at(u, p.unit_offset));
      add_pieces(r.pieces, kExpAvg + ps.name, ps.shape, p.param_begin, p.param_end, engine.moment_at(0, u, p.unit_offset));
      add_pieces(r.pieces, kExpAvgSq + ps.name, ps.shape, p.param_begin, p.param_end,
                 engine.moment_at(1, u, p.unit_offset));
    }
  }
  nlohmann::json loader_state;
  data::to_json(loader_state, loader_.state());
  r.metadata = {
      {"step", step_},
      {"consumed_rows", consumed_rows_},
      {"consumed_tokens", consumed_tokens_},
      {"loader_state", loader_state},
      // Every random choice is a counter-based function of these seeds.
      {"rng", {{"model_seed", cfg_.model.seed}, {"data_seed", cfg_.data.seed}, {"kind", "philox4x32-10"}}},
      {"optimizer",
       {{"kind", "adamw"},
        {"steps_taken", engine.optimizer_steps()},
        {"lr", cfg_.optimizer.lr},
        {"min_lr", cfg_.optimizer.min_lr},
        {"beta1", cfg_.optimizer.beta1},
        {"beta2", cfg_.optimizer.beta2},
        {"eps", cfg_.optimizer.eps},
        {"weight_decay", cfg_.optimizer.weight_decay},
        {"grad_clip", cfg_.optimizer.grad_clip}}},
      {"lr_schedule",
       {{"kind", optim::to_string(cfg_.optimizer.schedule)},
        {"warmup_steps", cfg_.optimizer.warmup_steps},
        {"total_steps", cfg_.training.steps},
        {"next_step", step_}}},
      {"layout", layout_json(cfg_, ctx_.world_size)},
      {"data", {{"path", cfg_.data.path}, {"mode", cfg_.data.mode}, {"seq_len", cfg_.data.seq_len}}},
      {checkpoint::kMetaModelConfig, checkpoint::model_config_to_json(cfg_.model)},
      {checkpoint::kMetaTokenizer, train_.tokenizer().describe()},
  };
  return r;
}

void Trainer::save_checkpoint() {
  const std::string root = cfg_.checkpoint.resolved_dir(cfg_.metrics.run_dir);
  checkpoint::SaveOptions o;
  o.keep_last = cfg_.checkpoint.keep_last;
  if (cfg_.checkpoint.async) {
    if (!async_ckpt_) async_ckpt_ = std::make_unique<checkpoint::AsyncCheckpointer>(*ctx_.world, root, o);
    async_ckpt_->save(save_request());
  } else {
    checkpoint::save_checkpoint(*ctx_.world, root, save_request(), o);
  }
}

void Trainer::finish_checkpoints() {
  if (async_ckpt_) async_ckpt_->wait();
}

std::string Trainer::restore(const checkpoint::CheckpointReader& reader) {
  auto& engine = *engine_;
  const auto& plan = engine.plan();
  const auto& spec = model_->params().spec();
  // 1. Every check before any byte is copied: the model stays untouched on error.
  bool has_moments = true;
  for (const auto& p : spec.params) {
    reader.expect(p.name, p.shape, DType::F32);
    has_moments = has_moments && reader.has(kExpAvg + p.name) && reader.has(kExpAvgSq + p.name);
  }
  if (has_moments)
    for (const auto& p : spec.params) {
      reader.expect(kExpAvg + p.name, p.shape, DType::F32);
      reader.expect(kExpAvgSq + p.name, p.shape, DType::F32);
    }
  const nlohmann::json& meta = reader.metadata();
  const bool has_position = meta.contains("loader_state") && meta.contains("step");
  data::LoaderState loader_state;
  if (has_position) data::from_json(meta.at("loader_state"), loader_state);

  // 2. Parameters: full units where this layout keeps them (stage 0-2), the
  // owned shard under stage 3; moments: the owned (optimizer) range.
  for (int u = 0; u < plan.num_units(); ++u) {
    const auto [pb, pe] = plan.param_range(u);
    for (const auto& p : plan.pieces_in(u, pb, pe))
      reader.read_flat(spec.params[size_t(p.param)].name, p.param_begin, p.param_end,
                       engine.param_at(u, p.unit_offset), DType::F32);
    if (!has_moments) continue;
    for (const auto& p : plan.owned_pieces(u)) {
      const std::string& name = spec.params[size_t(p.param)].name;
      reader.read_flat(kExpAvg + name, p.param_begin, p.param_end, engine.moment_at(0, u, p.unit_offset), DType::F32);
      reader.read_flat(kExpAvgSq + name, p.param_begin, p.param_end, engine.moment_at(1, u, p.unit_offset),
                       DType::F32);
    }
  }
  if (!has_position) return "assets complete: weights only (optimizer and data position start fresh)";

  // 3. Clocks and data position.
  engine.optimizer().set_steps_taken(meta.at("optimizer").at("steps_taken").get<int64_t>());
  step_ = meta.at("step").get<int64_t>();
  consumed_rows_ = meta.value("consumed_rows", int64_t(0));
  consumed_tokens_ = meta.value("consumed_tokens", int64_t(0));
  loader_.restore(loader_state);

  // 4. Which claim holds (SPEC S9).
  const nlohmann::json& old = meta.at("layout");
  const int64_t old_window = old.at("dp").get<int64_t>() * old.at("grad_accum").get<int64_t>() *
                             old.at("micro_batch").get<int64_t>();
  const int64_t new_window = int64_t(cfg_.parallel.dp) * cfg_.training.grad_accum * cfg_.training.micro_batch;
  const bool same_reduction = old.at("dp") == cfg_.parallel.dp && old.at("grad_accum") == cfg_.training.grad_accum &&
                              old.at("micro_batch") == cfg_.training.micro_batch &&
                              old.value("backend", std::string("threads")) == "threads" &&
                              cfg_.comm.backend == "threads";
  if (old_window != new_window)
    return "assets complete: the global batch changed (" + std::to_string(old_window) + " -> " +
           std::to_string(new_window) + " rows per update), so the optimization trajectory differs";
  if (same_reduction)
    return "bitwise replay: same data-parallel degree and accumulation (ZeRO stage changes alone are bitwise)";
  return "numerically close: same samples and objective per update; the reduction order changed";
}

void Trainer::init_from_safetensors(const std::string& path) {
  const auto file = checkpoint::SafetensorsReader::open(path);
  const checkpoint::ParamValues values = checkpoint::read_param_values(file, cfg_.model);
  auto& engine = *engine_;
  const auto& plan = engine.plan();
  const auto& spec = model_->params().spec();
  for (int u = 0; u < plan.num_units(); ++u) {
    const auto [pb, pe] = plan.param_range(u);
    for (const auto& p : plan.pieces_in(u, pb, pe)) {
      const std::vector<float>& v = values.at(spec.params[size_t(p.param)].name);
      std::copy(v.begin() + p.param_begin, v.begin() + p.param_end, engine.param_at(u, p.unit_offset));
    }
  }
}

std::string Trainer::resume_or_init() {
  namespace fs = std::filesystem;
  const fs::path root = cfg_.checkpoint.resolved_dir(cfg_.metrics.run_dir);
  if (cfg_.checkpoint.resume && fs::exists(root / "latest")) {
    const auto reader = checkpoint::CheckpointReader::open(root.string());
    const std::string claim = restore(reader);
    return "resumed from " + reader.directory().string() + " at step " + std::to_string(step_) + " | " + claim;
  }
  const std::string& from = cfg_.checkpoint.init_from;
  if (from.empty()) return "";
  if (fs::path(from).extension() == ".safetensors") {
    init_from_safetensors(from);
    return "initialized weights from " + from;
  }
  const auto reader = checkpoint::CheckpointReader::open(from);
  restore(reader);
  step_ = 0;  // a new run from those weights
  return "initialized from checkpoint " + reader.directory().string();
}

}  // namespace meshtrain::train
