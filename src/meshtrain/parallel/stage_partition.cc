#include "meshtrain/parallel/stage_partition.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "meshtrain/core/error.h"
#include "meshtrain/core/memory_tracker.h"
#include "meshtrain/model/param_spec.h"

namespace meshtrain::parallel {

std::vector<SegmentCost> segment_costs(const model::ModelConfig& config, int64_t rows, int64_t seq, bool recompute,
                                       DType compute) {
  model::ModelConfig cfg = config;
  cfg.finalize();
  const model::ModelSpec spec = model::build_model_spec(cfg);
  const double tokens = double(rows * seq), d = double(cfg.d_model), V = double(cfg.vocab_size);
  const int64_t es = int64_t(dtype_size(compute)), n = rows * seq;
  // A segment's parameters: its unit and, in an MoE block, its routed experts' unit.
  auto unit_params = [&](int segment) {
    int64_t numel = 0;
    for (const model::ParamUnit& u : spec.units)
      if (u.segment == segment) numel += u.numel;
    return numel;
  };
  std::vector<SegmentCost> out;

  // Embedding: a gather (and a learned-position add), nothing kept.
  out.push_back({"embedding", 3.0 * 2.0 * d * tokens, 0, unit_params(0)});

  // Block: its matmuls (2 FLOPs per weight per token) and causal attention
  // (QK^T and AV over (seq + 1) / 2 keys on average); backward 2x forward.
  // A mixture-of-experts block runs the router and, per token, top_k
  // experts' feed-forwards (and the shared expert's), under balanced routing.
  const bool swiglu = cfg.mlp == model::MlpKind::SwiGLU;
  const int64_t ffn = cfg.ffn_hidden, q = cfg.q_dim(), kv = cfg.kv_dim(), ffn_mats = swiglu ? 3 : 2;
  const double attention_matmul = 2.0 * double(d * q + 2 * d * kv + q * d);
  const double attention = 2.0 * 2.0 * double(q) * double(seq + 1) / 2.0;
  const int64_t experts_per_token = cfg.experts_top_k + (cfg.moe_shared_expert ? 1 : 0);
  for (int64_t l = 0; l < cfg.n_layers; ++l) {
    const bool moe = cfg.is_moe_layer(l);
    const int64_t ffns = moe ? experts_per_token : 1;
    const double mlp_matmul = 2.0 * double(ffns * ffn_mats * d * ffn) + (moe ? 2.0 * d * double(cfg.n_experts) : 0);
    const double block_fwd = (attention_matmul + mlp_matmul + attention) * tokens;
    // Kept per token: input, both norm outputs and the residual, q k v and
    // the attention output, the log-sum-exp per head, each feed-forward's
    // hidden activations (SwiGLU: gate, up, product; GELU: pre-activation,
    // output) and an MoE block's router logits.
    const int64_t kept = recompute ? cfg.d_model
                                   : 4 * cfg.d_model + 2 * q + 2 * kv + cfg.n_heads + ffns * ffn_mats * ffn +
                                         (moe ? cfg.n_experts : 0);
    out.push_back(
        {"block " + std::to_string(l), block_fwd * (recompute ? 4.0 : 3.0), kept * n * es, unit_params(int(l) + 1)});
  }

  // Head: final norm, LM head matmul, cross-entropy; keeps its input, the
  // normed input and dlogits (in the logits' buffer).
  const double head_fwd = (2.0 * d * V + 5.0 * V) * tokens;
  out.push_back(
      {"head", 3.0 * head_fwd, (2 * cfg.d_model + cfg.vocab_size) * n * es, unit_params(int(cfg.n_layers) + 1)});
  return out;
}

std::vector<int64_t> balance_blocks(const std::vector<SegmentCost>& costs, int chunks) {
  const int L = int(costs.size()) - 2;
  MT_REQUIRE(ConfigError, chunks >= 1 && chunks <= L, "a pipeline of ", chunks, " chunks over model.n_layers = ", L,
             ": every chunk needs at least one block");
  // prefix[i]: FLOPs of segments 1..i (blocks 0..i-1).
  std::vector<double> prefix(size_t(L + 1), 0.0);
  for (int i = 1; i <= L; ++i) prefix[size_t(i)] = prefix[size_t(i - 1)] + costs[size_t(i)].flops;
  auto chunk_cost = [&](int c, int from, int to) {  // blocks [from, to) in chunk c
    double f = prefix[size_t(to)] - prefix[size_t(from)];
    if (c == 0) f += costs.front().flops;
    if (c == chunks - 1) f += costs.back().flops;
    return f;
  };
  // best[c][i]: the smallest possible largest cost of chunks 0..c holding
  // blocks [0, i); cut[c][i] the first block of chunk c there.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(size_t(chunks), std::vector<double>(size_t(L + 1), inf));
  std::vector<std::vector<int>> cut(size_t(chunks), std::vector<int>(size_t(L + 1), 0));
  for (int i = 1; i <= L; ++i) best[0][size_t(i)] = chunk_cost(0, 0, i);
  for (int c = 1; c < chunks; ++c)
    for (int i = c + 1; i <= L; ++i)
      // The latest cut among equals: earlier chunks take more blocks.
      for (int j = c; j < i; ++j) {
        const double v = std::max(best[size_t(c - 1)][size_t(j)], chunk_cost(c, j, i));
        if (v <= best[size_t(c)][size_t(i)]) best[size_t(c)][size_t(i)] = v, cut[size_t(c)][size_t(i)] = j;
      }
  std::vector<int64_t> blocks(static_cast<size_t>(chunks));
  int end = L;
  for (int c = chunks - 1; c >= 0; --c) {
    const int begin = c == 0 ? 0 : cut[size_t(c)][size_t(end)];
    blocks[size_t(c)] = end - begin;
    end = begin;
  }
  return blocks;
}

std::string partition_table(const std::vector<SegmentCost>& costs, const std::vector<Chunk>& chunks,
                            const Schedule& schedule, DType param_dtype, const std::string& how) {
  const SimResult sim = simulate(schedule);
  const int P = schedule.ranks;
  std::vector<double> flops(size_t(P), 0.0);
  std::vector<int64_t> act(size_t(P), 0), params(size_t(P), 0);
  std::vector<std::string> what(static_cast<size_t>(P));
  for (size_t c = 0; c < chunks.size(); ++c) {
    const Chunk& ch = chunks[c];
    const size_t r = size_t(ch.pp_rank);
    for (int s = ch.first; s <= ch.last; ++s) {
      flops[r] += costs[size_t(s)].flops;
      act[r] += costs[size_t(s)].activation_bytes;
      params[r] += costs[size_t(s)].params;
    }
    what[r] += (what[r].empty() ? "" : " + ") + std::string("[") + costs[size_t(ch.first)].name +
               (ch.last > ch.first ? " .. " + costs[size_t(ch.last)].name : "") + "]";
  }
  const double slowest = *std::max_element(flops.begin(), flops.end());
  std::string out =
      "pipeline stages (" + how + "; " + schedule.name + ", m = " + std::to_string(schedule.micro_batches) + "):\n";
  char line[512];
  for (int r = 0; r < P; ++r) {
    // A stage with v chunks holds live chunk activations: its per-micro-
    // batch activations spread over its chunks.
    const int64_t per_chunk = act[size_t(r)] / std::max<int64_t>(1, int64_t(schedule.chunks() / P));
    std::snprintf(line, sizeof line,
                  "  stage %d: %s | %.3g GFLOP/micro-batch (%.0f%% of the slowest) | activations %s/micro-batch, "
                  "%d live -> peak %s | params %s\n",
                  r, what[size_t(r)].c_str(), flops[size_t(r)] * 1e-9, 100.0 * flops[size_t(r)] / slowest,
                  format_bytes(act[size_t(r)]).c_str(), sim.peak_live[size_t(r)],
                  format_bytes(per_chunk * sim.peak_live[size_t(r)]).c_str(),
                  format_bytes(params[size_t(r)] * int64_t(dtype_size(param_dtype))).c_str());
    out += line;
  }
  return out;
}

}  // namespace meshtrain::parallel
