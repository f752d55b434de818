// Trainer <-> distributed checkpoints (docs/math.md, "Rule: restore claims"): every
// rank writes 1/R of every unit and reads exactly what its TARGET layout owns, so any
// change of dp size or ZeRO stage is a redistribution through global offset ranges.
#include <cstdio>
#include <filesystem>
#include <optional>

#include "meshtrain/checkpoint/model_config_json.h"
#include "meshtrain/checkpoint/model_weights.h"
#include "meshtrain/checkpoint/writer.h"
#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/train/layout_facts.h"
#include "meshtrain/train/restore_claim.h"
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

// The boxes of the GLOBAL tensor that local flat range [begin, end) of
// parameter `p` covers, each with the local flat index of its first element.
struct GlobalBox {
  checkpoint::Box box;
  int64_t local_begin = 0;
};
std::vector<GlobalBox> global_boxes(const model::ParamSpec& p, int64_t begin, int64_t end) {
  std::vector<GlobalBox> out;
  for (checkpoint::Box b : checkpoint::flat_range_to_boxes(p.shape, begin, end)) {
    const int64_t local = flat_index(p.shape, b.offset);
    for (size_t d = 0; d < b.offset.size(); ++d) b.offset[d] += p.global_offset[d];
    out.push_back({std::move(b), local});
  }
  return out;
}

// Pieces of local range [begin, end) of `p` whose element `begin` is at `base`.
void add_pieces(std::vector<checkpoint::TensorPiece>& out, const std::string& name, const model::ParamSpec& p,
                int64_t begin, int64_t end, const Tensor& base) {
  const size_t es = dtype_size(base.dtype());
  for (const GlobalBox& g : global_boxes(p, begin, end))
    out.push_back({name, p.global_shape, base.dtype(), g.box,
                   static_cast<const char*>(base.raw()) + size_t(g.local_begin - begin) * es});
}

// Reads local range [begin, end) of `p` from tensor `name` into `dst`
// (which holds element `begin`).
void read_pieces(const checkpoint::CheckpointReader& reader, const std::string& name, const model::ParamSpec& p,
                 int64_t begin, int64_t end, const Tensor& dst) {
  const size_t es = dtype_size(dst.dtype());
  for (const GlobalBox& g : global_boxes(p, begin, end))
    reader.read(name, g.box, static_cast<char*>(dst.raw()) + size_t(g.local_begin - begin) * es, dst.dtype());
}

// The checkpoint's "layout" record: the facts that decide a step's
// arithmetic (layout_facts.h) and the rest of the layout that wrote it.
nlohmann::json layout_json(const LayoutFacts& facts, const TrainConfig& cfg, int world) {
  nlohmann::json j = facts.layout_json();
  j.update({{"zero_stage", cfg.parallel.zero_stage},
            {"schedule", cfg.parallel.schedule},
            {"virtual_stages", cfg.parallel.virtual_stages},
            {"world", world}});
  return j;
}

}  // namespace

void Trainer::add_unit_pieces(std::vector<checkpoint::TensorPiece>& out, int u, int64_t begin, int64_t end,
                              bool weights, bool moments, bool replicas) const {
  auto& engine = *engine_;
  const auto& plan = engine.plan();
  // The authoritative weights (the f32 masters under the 16-bit policies).
  const Tensor values = engine.weights(u);
  const int64_t values_begin = engine.weights_range(u).first, owned_begin = plan.unit(u).owned_begin;
  for (const auto& piece : plan.pieces_in(u, begin, end)) {
    if (!replicas && !layout_->param(piece.param).writes_checkpoint) continue;  // a replica's copy
    const auto& ps = plan.spec().params[size_t(piece.param)];
    const int64_t n = piece.param_end - piece.param_begin;
    auto slice = [&](const Tensor& t, int64_t from) {
      return t.flat_slice(piece.unit_offset - from, piece.unit_offset - from + n);
    };
    if (weights) add_pieces(out, ps.name, ps, piece.param_begin, piece.param_end, slice(values, values_begin));
    if (!moments) continue;
    add_pieces(out, kExpAvg + ps.name, ps, piece.param_begin, piece.param_end, slice(engine.moment(0, u), owned_begin));
    add_pieces(out, kExpAvgSq + ps.name, ps, piece.param_begin, piece.param_end,
               slice(engine.moment(1, u), owned_begin));
  }
}

checkpoint::SaveRequest Trainer::save_request() const {
  const auto& plan = engine_->plan();
  checkpoint::SaveRequest r;
  r.step = step_;
  for (int u = 0; u < plan.num_units(); ++u) {
    if (plan.unit(u).padded == 0) continue;  // another pipeline stage's unit
    // The data-parallel replicas split the writing (each its 1/R of the unit).
    const auto [begin, end] = plan.save_range(u);
    add_unit_pieces(r.pieces, u, begin, end, true, true, false);
  }
  r.metadata = state_metadata(loader_.state(), scaler_.state());
  return r;
}

void Trainer::mark_boundary() { boundary_ = {loader_.state(), scaler_.state()}; }

std::optional<checkpoint::SaveRequest> Trainer::live_state_request() const {
  if (steps_->updating()) return std::nullopt;
  const auto& plan = engine_->plan();
  checkpoint::SaveRequest r;
  r.step = step_;
  for (int u = 0; u < plan.num_units(); ++u) {
    if (plan.unit(u).padded == 0) continue;
    // The weights wherever this rank holds them; the moments of its owned range.
    const auto [wb, we] = engine_->weights_range(u);
    add_unit_pieces(r.pieces, u, wb, we, true, false, true);
    add_unit_pieces(r.pieces, u, plan.unit(u).owned_begin, plan.unit(u).owned_end, false, true, true);
  }
  r.metadata = state_metadata(boundary_.loader, boundary_.scaler);
  return r;
}

nlohmann::json Trainer::state_metadata(const data::LoaderState& loader, const nlohmann::json& scaler) const {
  nlohmann::json loader_state;
  data::to_json(loader_state, loader);
  const LayoutFacts facts = LayoutFacts::from_layout(cfg_, *layout_);
  return {
      {"step", step_},
      {"consumed_rows", consumed_rows_},
      {"consumed_tokens", consumed_tokens_},
      {"loader_state", loader_state},
      // Every random choice is a counter-based function of these seeds.
      {"rng", {{"model_seed", cfg_.model.seed}, {"data_seed", cfg_.data.seed}, {"kind", "philox4x32-10"}}},
      {"optimizer",
       {{"kind", "adamw"},
        {"steps_taken", engine_->optimizer_steps()},
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
      {"layout", layout_json(facts, cfg_, ctx_.world_size)},
      {"kernels", facts.kernels},
      {"precision", {{"policy", cfg_.training.precision}, {"grad_reduce_dtype", cfg_.training.grad_reduce_dtype},
                     {"describe", precision().describe()}}},
      {"loss_scaler", scaler},
      {"data", {{"path", cfg_.data.path}, {"mode", cfg_.data.mode}, {"seq_len", cfg_.data.seq_len},
                {"train_sha256", train_.content_digest()}}},
      {checkpoint::kMetaModelConfig, checkpoint::model_config_to_json(cfg_.model)},
      {checkpoint::kMetaTokenizer, train_.tokenizer().describe()},
  };
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

std::string Trainer::restore(const checkpoint::CheckpointReader& reader, RestoreScope scope) {
  auto& engine = *engine_;
  const auto& plan = engine.plan();
  const auto& spec = plan.spec();
  // 1. Every check before any byte is copied: the model stays untouched on
  // error. Shapes are the global (logical) ones: any layout reads any other's.
  const bool has_moments = check_restore_tensors(reader, spec, scope);
  // What save_request writes: the master weights' and the moments' dtypes.
  for (const auto& p : spec.params) reader.expect(p.name, p.global_shape, precision().master);
  if (has_moments)
    for (const auto& p : spec.params) {
      reader.expect(kExpAvg + p.name, p.global_shape, precision().optimizer);
      reader.expect(kExpAvgSq + p.name, p.global_shape, precision().optimizer);
    }
  const nlohmann::json& meta = reader.metadata();
  const bool has_position = scope != RestoreScope::Weights && meta.contains("loader_state") && meta.contains("step");
  data::LoaderState loader_state;
  std::optional<LayoutFacts> saved;  // the claim's (step 4), read before any copy
  if (has_position) {
    data::from_json(meta.at("loader_state"), loader_state);
    saved = LayoutFacts::from_metadata(meta);
  }

  // 2. Weights: the boxes this layout keeps authoritative (the whole local
  // unit under stages 0-2, the owned shard under stage 3, the owned range of
  // the f32 masters under the 16-bit policies); moments: the owned range.
  for (int u = 0; u < plan.num_units(); ++u) {
    if (plan.unit(u).padded == 0) continue;
    const auto [pb, pe] = engine.weights_range(u);
    const Tensor values = engine.weights(u);
    const int64_t values_begin = pb, owned_begin = plan.unit(u).owned_begin;
    for (const auto& piece : plan.pieces_in(u, pb, pe)) {
      const auto& ps = spec.params[size_t(piece.param)];
      const int64_t off = piece.unit_offset - values_begin;
      read_pieces(reader, ps.name, ps, piece.param_begin, piece.param_end,
                  values.flat_slice(off, off + piece.param_end - piece.param_begin));
    }
    if (!has_moments) continue;
    for (const auto& piece : plan.owned_pieces(u)) {
      const auto& ps = spec.params[size_t(piece.param)];
      const int64_t off = piece.unit_offset - owned_begin, n = piece.param_end - piece.param_begin;
      read_pieces(reader, kExpAvg + ps.name, ps, piece.param_begin, piece.param_end,
                  engine.moment(0, u).flat_slice(off, off + n));
      read_pieces(reader, kExpAvgSq + ps.name, ps, piece.param_begin, piece.param_end,
                  engine.moment(1, u).flat_slice(off, off + n));
    }
  }
  engine.refresh_params();
  if (!has_position) return "assets complete: weights only (optimizer and data position start fresh)";

  // 3. Clocks, the loss scaler and the data position.
  engine.optimizer().set_steps_taken(has_moments ? meta.at("optimizer").at("steps_taken").get<int64_t>() : 0);
  if (scaler_.enabled() && meta.contains("loss_scaler") && meta.at("loss_scaler").value("enabled", false))
    scaler_.restore(meta.at("loss_scaler"));
  step_ = meta.at("step").get<int64_t>();
  consumed_rows_ = meta.value("consumed_rows", int64_t(0));
  consumed_tokens_ = meta.value("consumed_tokens", int64_t(0));
  loader_.restore(loader_state);
  mark_boundary();

  // 4. Which claim holds (docs/math.md, "Rule: restore claims").
  return restore_claim(*saved, LayoutFacts::from_layout(cfg_, *layout_)).text;
}

void Trainer::init_from_safetensors(const std::string& path) {
  const auto file = checkpoint::SafetensorsReader::open(path);
  const checkpoint::ParamValues values = checkpoint::read_param_values(file, cfg_.model);
  auto& engine = *engine_;
  const auto& plan = engine.plan();
  const auto& spec = plan.spec();
  for (int u = 0; u < plan.num_units(); ++u) {
    if (plan.unit(u).padded == 0) continue;
    const auto [pb, pe] = engine.weights_range(u);
    const Tensor dst = engine.weights(u);  // f32, or f64 under the fp64 policy
    const auto& k = kernels::kernels_for(dst);
    std::vector<float> local(size_t(pe - pb));
    const Tensor staged = Tensor::wrap(local.data(), dst.shape(), DType::F32);
    k.convert(staged, dst);  // what no piece covers stays as it is
    for (const auto& piece : plan.pieces_in(u, pb, pe)) {
      const auto& ps = spec.params[size_t(piece.param)];
      const std::vector<float>& v = values.at(ps.name);  // the global tensor
      float* out = local.data() + (piece.unit_offset - pb);
      for (int64_t i = piece.param_begin; i < piece.param_end; ++i) out[i - piece.param_begin] = v[size_t(ps.global_flat(i))];
    }
    k.convert(dst, staged);
  }
  engine.refresh_params();
}

std::string Trainer::resume_or_init() {
  namespace fs = std::filesystem;
  const fs::path root = cfg_.checkpoint.resolved_dir(cfg_.metrics.run_dir);
  ResumePoint rp = locate_resume_checkpoint(root, cfg_.checkpoint.resume);
  if (rp.reader) {
    auto changes = check_resume_config(rp.reader->metadata(), cfg_);  // refuses undeclared changes
    for (auto& c : continuation_changes(rp.reader->metadata(), cfg_, train_.content_digest()))
      changes.push_back(std::move(c));
    const RestoreScope scope = resume_scope(rp.reader->metadata(), cfg_);
    const std::string claim = describe_resume(restore(*rp.reader, scope), changes, scope);
    return (rp.note.empty() ? "" : rp.note + "\n") + "resumed from " + rp.reader->directory().string() +
           " at step " + std::to_string(step_) + " | " + claim;
  }
  const std::string& from = cfg_.checkpoint.init_from;
  if (from.empty()) return "";
  if (fs::path(from).extension() == ".safetensors") {
    init_from_safetensors(from);
    return "initialized weights from " + from;
  }
  // A new run from those weights: its own step, optimizer and data
  // position (other data, often), not the saved run's.
  const auto reader = checkpoint::CheckpointReader::open(from);
  restore(reader, RestoreScope::Weights);
  return "initialized from checkpoint " + reader.directory().string();
}

}  // namespace meshtrain::train
