#include "meshtrain/plan/published_runs.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "meshtrain/core/error.h"
#include "meshtrain/plan/byte_size.h"
#include "meshtrain/plan/formulas.h"
#include "meshtrain/plan/prediction.h"

namespace meshtrain::plan {

namespace {

// A GPT of the Megatron papers: LayerNorm, learned positions, GELU MLP of 4h,
// tied embeddings, biases; V = 51,200, s = 2,048.
model::ModelConfig gpt(int64_t layers, int64_t hidden, int64_t heads) {
  model::ModelConfig m;
  m.vocab_size = 51200;
  m.d_model = hidden;
  m.n_layers = layers;
  m.n_heads = heads;
  m.n_kv_heads = heads;
  m.ffn_hidden = 4 * hidden;
  m.max_seq_len = 2048;
  m.norm = model::NormKind::LayerNorm;
  m.positions = model::PositionKind::Learned;
  m.mlp = model::MlpKind::Gelu;
  m.tied_embeddings = true;
  m.bias = true;
  return m;
}

StepInputs run(const model::ModelConfig& m, int tp, int pp, int gpus, int64_t batch, int64_t micro_batch,
               const char* precision, bool recompute, int interleave) {
  StepInputs in;
  in.model = m;
  in.mesh.tp = tp;
  in.mesh.pp = pp;
  in.mesh.dp = gpus / (tp * pp);
  in.precision = PrecisionPolicy::from_name(precision);
  in.recompute = recompute;
  in.micro_batch = micro_batch;
  in.grad_accum = batch / (int64_t(in.mesh.dp) * micro_batch);
  in.seq_len = 2048;
  in.interleave = interleave;
  in.execution.activation_wire = in.precision.compute;  // Megatron moves 16-bit activations
  in.hierarchical = comm::HierarchicalMode::Off;          // NCCL's own algorithms, priced as the ring (M.20)
  // Megatron sums tensor-parallel outputs and input gradients where they are
  // needed, in one collective each (its tp_comm_overlap is off by default).
  in.parallel.tp_overlap = false;
  return in;
}

}  // namespace

std::vector<PublishedRun> megatron_2021_runs() {
  const char* src = "Narayanan et al. 2021 (arXiv 2104.04473), Table 1";
  struct Row {
    const char* label;
    int64_t heads, hidden, layers;
    int tp, pp, gpus;
    int64_t batch;
    double tflops, percent;
  };
  const Row rows[] = {
      {"GPT 1.7B", 24, 2304, 24, 1, 1, 32, 512, 137, 44},
      {"GPT 3.6B", 32, 3072, 30, 2, 1, 64, 512, 138, 44},
      {"GPT 7.5B", 32, 4096, 36, 4, 1, 128, 512, 142, 46},
      {"GPT 18.4B", 48, 6144, 40, 8, 1, 256, 1024, 135, 43},
      {"GPT 39.1B", 64, 8192, 48, 8, 2, 512, 1536, 138, 44},
      {"GPT 76.1B", 80, 10240, 60, 8, 4, 1024, 1792, 140, 45},
      {"GPT 145.6B", 96, 12288, 80, 8, 8, 1536, 2304, 148, 47},
      {"GPT 310.1B", 128, 16384, 96, 8, 16, 1920, 2160, 155, 50},
      {"GPT 529.6B", 128, 20480, 105, 8, 35, 2520, 2520, 163, 52},
      {"GPT 1008B", 160, 25600, 128, 8, 64, 3072, 3072, 163, 52},
  };
  std::vector<PublishedRun> out;
  for (const Row& r : rows) {
    PublishedRun p;
    p.label = r.label;
    p.source = src;
    model::ModelConfig m = gpt(r.layers, r.hidden, r.heads);
    m.tied_embeddings = r.pp == 1;  // the trainer ties across stages only with the pipeline engine's copy
    p.inputs = run(m, r.tp, r.pp, r.gpus, r.batch, 1, "fp16", true, 1);
    p.inputs.execution.fused_attention = false;  // 2021: scores materialized, fused softmax only
    p.published_percent = r.percent;
    p.published_tflops = r.tflops;
    p.flops_count_recompute = true;
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<PublishedRun> megatron_core_175b_runs() {
  std::vector<PublishedRun> out;
  for (auto [gpus, percent] : {std::pair{96, 47.0}, std::pair{4608, 42.0}}) {
    PublishedRun p;
    p.label = "GPT-3 175B, " + std::to_string(gpus) + " GPUs";
    p.source = "Megatron-LM README, strong scaling of GPT-3 175B on H100 (batch 1,152)";
    model::ModelConfig m = gpt(96, 12288, 96);
    m.tied_embeddings = false;
    p.inputs = run(m, 4, 8, gpus, 1152, 1, "bf16", false, 6);
    // The distributed optimizer (ZeRO 1) with its parameter all-gather
    // overlapped with the next forward; gradients reduced in bf16
    // (Megatron-Core's DistributedDataParallelConfig.grad_reduce_in_fp32
    // defaults to false).
    p.inputs.layout.zero_stage = p.inputs.parallel.zero_stage = 1;
    p.inputs.precision = PrecisionPolicy::from_name("bf16", "bf16");
    p.inputs.execution.overlap_param_gather = true;
    p.published_percent = percent;
    p.flops_count_recompute = false;
    out.push_back(std::move(p));
  }
  return out;
}

PublishedCheck check_published(const PublishedRun& run, const HardwareProfile& hw, const StepRecorder& record) {
  const StepInputs& in = run.inputs;
  const Prediction p = predict(in, record, &hw, /*brackets=*/false);
  PublishedCheck c;
  c.step_s = p.time->step_s;
  c.makespan_s = p.time->makespan_s;
  c.bubble = p.time->bubble;
  c.exposed_s = p.time->exposed_comm_s;
  c.update_s = p.time->update_s;
  for (const RankTime& r : p.time->ranks) c.tp_s = std::max(c.tp_s, r.tp_comm_s);
  c.peak_bytes = p.peak_bytes();
  c.fits = p.fits();
  const double flops = megatron_flops(double(in.global_rows()), double(in.seq_len), double(in.model.n_layers),
                                      double(in.model.d_model), double(in.model.vocab_size),
                                      run.flops_count_recompute);
  c.predicted_tflops = flops / c.step_s / double(in.world()) / 1e12;
  c.predicted_percent = 100.0 * c.predicted_tflops * 1e12 / hw.peak(in.precision.compute);
  return c;
}

std::vector<PublishedRun> published_runs(const std::string& name) {
  if (name == "megatron-2021") return megatron_2021_runs();
  if (name == "megatron-core-175b") return megatron_core_175b_runs();
  MT_THROW(ConfigError, "--published ", name, ": expected megatron-2021 or megatron-core-175b");
}

std::string render_published(const std::vector<PublishedRun>& runs, const HardwareProfile& hw,
                             const StepRecorder& record) {
  std::ostringstream os;
  if (!runs.empty()) os << "source: " << runs.front().source << "\nmachine: " << hw.name << " (" << hw.path << ")\n";
  char line[512];
  std::snprintf(line, sizeof line, "  %-22s %-16s %6s %6s %10s %10s %9s %7s %8s %11s %s\n", "run", "mesh", "GPUs",
                "batch", "published", "predicted", "diff", "bubble", "step", "peak", "fits");
  os << line;
  for (const PublishedRun& r : runs) {
    const PublishedCheck c = check_published(r, hw, record);
    const StepInputs& in = r.inputs;
    char mesh[48];
    if (in.interleave > 1)
      std::snprintf(mesh, sizeof mesh, "tp%d pp%d dp%d v%d", in.mesh.tp, in.mesh.pp, in.mesh.dp, in.interleave);
    else
      std::snprintf(mesh, sizeof mesh, "tp%d pp%d dp%d", in.mesh.tp, in.mesh.pp, in.mesh.dp);
    std::snprintf(line, sizeof line, "  %-22s %-16s %6d %6lld %9.1f%% %9.1f%% %+8.1f %6.1f%% %7.2fs %11s %s\n",
                  r.label.c_str(), mesh, in.world(), (long long)in.global_rows(), r.published_percent,
                  c.predicted_percent, c.predicted_percent - r.published_percent, 100 * c.bubble, c.step_s,
                  gib(double(c.peak_bytes)).c_str(), c.fits ? "yes" : "no");
    os << line;
  }
  os << "  percent of peak = the paper's FLOPs per iteration (" << (runs.empty() || runs.front().flops_count_recompute
                                                                      ? "96 B s l h^2 (1 + s/6h + V/16lh), recomputation counted"
                                                                      : "72 B s l h^2 (1 + s/6h + V/12lh)")
     << ") / (predicted step x GPUs x peak)\n";
  return os.str();
}

}  // namespace meshtrain::plan
