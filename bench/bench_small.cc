// bench-small: end-to-end training step of the reference model (Llama-style,
// vocab 8192, d_model 512, 8 layers, 8 heads / 4 KV heads of 64, SwiGLU
// 1408, untied, fp32, AdamW lr 3e-4 betas 0.9/0.95 wd 0.1), sequence 256,
// micro-batch 8, random tokens. Prints the median step time, tokens/s, model
// FLOPs per token (6 * matmul params + 12 * layers * d * seq = 179.3 MFLOP),
// achieved GFLOP/s as a fraction of (a) the FMA peak measured in the same
// run (at the active kernel ISA level: MESHTRAIN_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2
// measures the AVX2 code and the AVX2 peak on an AVX-512 machine) and (b) the
// rate of the f32 GEMM the step runs (MESHTRAIN_GEMM) on the same shapes,
// next to the other f32 GEMM (packed vs oneDNN) and the bf16 GEMM, with 1
// and 2 threads, and peak memory per category. Also per core-second of CPU time
// against the one-core FMA peak timed the same way: the figure that holds
// when other processes share the cores (wall-clock fractions then do not).
// --precision runs the step under another policy (bf16 / fp16 compute with
// f32 masters, core/precision.h); --reproducible with reproducible mode's
// thread-invariant GEMM, gradient leaves and canonical blocks of
// training.reproducible_blocks' default (training.reproducible);
// --reproducible-cost alternates default and reproducible steps in one
// process and prints the median ratio (docs/performance.md).
//
// --model gpt2-124m runs GPT-2 124M (tied, vocab 50257) at micro-batch 4,
// sequence 256 instead. Each thread count's figures end with the process's
// peak resident memory after its steps (what bench/compare-torch.sh sets
// against PyTorch's). --head-chunk-rows N runs the LM head and the loss in
// backward N rows at a time (training.head_chunk_rows).
//
//   build/bench/bench_small [--steps N] [--threads 1,2] [--precision fp32|bf16|fp16] [--reproducible | --reproducible-cost]
//                           [--model bench-small|gpt2-124m] [--head-chunk-rows N]
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/kernels/cpu/fma_peak.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/core/threading.h"
#include "meshtrain/kernels/cpu/gemm.h"
#include "meshtrain/kernels/cpu/isa.h"
#include "meshtrain/comm/thread_world.h"
#include "meshtrain/model/presets.h"
#include "meshtrain/model/transformer.h"
#include "meshtrain/parallel/data_parallel.h"
#include "meshtrain/parallel/executor.h"
#include "meshtrain/parallel/schedule_gen.h"
#include "meshtrain/train/context_shard.h"
#include "meshtrain/train/train_config.h"

using namespace meshtrain;
using Clock = std::chrono::steady_clock;

namespace {

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// CPU seconds of every thread of this process: with other processes on the
// cores, wall time includes their share and CPU time does not (OpenMP
// threads waiting at a barrier still count, so it is an upper bound).
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Rate {
  double gflops;             // per second of wall time
  double gflop_per_core_s;   // per core-second of CPU time
};

// GEMM rate on the forward/backward shapes of one step: f32 through
// `f32_impl`, or bf16 inputs (fp32 accumulate) when it is empty.
Rate gemm_rate_on_step_shapes(const model::ModelConfig& c, int64_t n, std::optional<kernels::GemmImpl> f32_impl) {
  struct Lin { int64_t in, out; };
  const std::vector<Lin> lins = {{c.d_model, c.q_dim()}, {c.d_model, c.kv_dim()}, {c.q_dim(), c.d_model},
                                 {c.d_model, c.ffn_hidden}, {c.ffn_hidden, c.d_model}, {c.d_model, c.vocab_size}};
  int64_t widest = 0, largest = 0;
  for (const Lin& l : lins) widest = std::max({widest, l.in, l.out}), largest = std::max(largest, l.in * l.out);
  std::vector<float> x(size_t(n * widest), 0.01f), w(size_t(largest), 0.02f), y(size_t(n * widest));
  std::vector<bf16> xb(x.size(), bf16(0.01f)), wb(w.size(), bf16(0.02f)), yb(y.size(), bf16(0.03f));
  auto mm = [&](bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, const bf16* Ab, const float* B,
                const bf16* Bb, float beta, float* C) {
    if (f32_impl) kernels::gemm_f32_using(*f32_impl, ta, tb, M, N, K, 1.f, A, B, beta, C);
    else kernels::gemm_bf16(ta, tb, M, N, K, 1.f, Ab, Bb, beta, C);
  };
  double flops = 0, seconds = 0, cpu_seconds = 0;
  for (int rep = 0; rep < 4; ++rep) {
    for (const Lin& l : lins) {
      const auto t0 = Clock::now();
      const double c0 = process_cpu_seconds();
      mm(false, true, n, l.out, l.in, x.data(), xb.data(), w.data(), wb.data(), 0.f, y.data());  // forward
      mm(false, false, n, l.in, l.out, y.data(), yb.data(), w.data(), wb.data(), 0.f, x.data());  // dX
      mm(true, false, l.out, l.in, n, y.data(), yb.data(), x.data(), xb.data(), 1.f, w.data());   // dW
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      const double dc = process_cpu_seconds() - c0;
      if (rep > 0) {  // the first repetition creates primitives and grows buffers
        seconds += dt;
        cpu_seconds += dc;
        flops += 3 * 2.0 * double(n) * double(l.in) * double(l.out);
      }
    }
  }
  return {flops / seconds * 1e-9, flops / cpu_seconds * 1e-9};
}

// The training step as the trainer runs it for one rank: the data-parallel
// engine over a group of size 1 (no communication), reproducible mode (its
// thread-invariant GEMM, gradient leaves and the canonical blocks of
// training.reproducible_blocks' default) or not.
class StepRunner {
 public:
  StepRunner(const model::ModelConfig& cfg, const PrecisionPolicy& policy, bool reproducible, int64_t head_chunk_rows)
      : reproducible_(reproducible),
        shard_(1, 0, canonical_blocks(reproducible)),
        alloc_(CachingAllocator::create()),
        world_(comm::ThreadWorld::create(1)),
        plan_(cfg, comm::MeshShape{}, 0, layout_options(reproducible)),
        model_(cfg, alloc_, exec_options(policy, head_chunk_rows), plan_.partition()),
        mesh_(comm::Mesh::create(comm::MeshShape{}, world_->group(0))),
        groups_(parallel::resolve_groups(plan_, mesh_)),
        engine_(model_, plan_, groups_, parallel_config(reproducible), optimizer_config(), alloc_),
        executor_(model_, &engine_, nullptr),
        program_(parallel::expand(parallel::one_f_one_b_schedule(1, 1), 0, plan_.chunks(),
                                  [this](int s) { return model_.segment_units(s); }, engine_.param_policy())) {}

  // One update on `window` (one micro-batch), its tokens in reproducible
  // mode's canonical order when on (train/context_shard.h).
  void step(const data::Batch& window) {
    kernels::set_thread_invariant_gemm(reproducible_);
    shard_.assign(window, window.rows);
    const model::TokenBatch batch = shard_.micro_batch(0, window.rows);
    const int64_t n = batch.n();
    engine_.begin_window();
    executor_.run(program_, [&](int) { return batch; },
                  model::ForwardMode{true, double(float(engine_.loss_coefficient(n))), false});
    engine_.finish_grads();
    const double norm = std::sqrt(engine_.grad_sum_squares());
    engine_.step(3e-4, optim::clip_coefficient(norm, 1.0));
  }
  CachingAllocator& allocator() { return *alloc_; }

 private:
  static int canonical_blocks(bool reproducible) {
    return reproducible ? train::TrainingConfig{}.reproducible_blocks : 0;  // the key's default
  }
  static parallel::LayoutOptions layout_options(bool reproducible) {
    parallel::LayoutOptions o;
    o.canonical_blocks = canonical_blocks(reproducible);
    return o;
  }
  static model::ExecOptions exec_options(const PrecisionPolicy& policy, int64_t head_chunk_rows) {
    model::ExecOptions exec;
    exec.materialize_params = false;
    exec.precision = policy;
    exec.head_chunk_rows = head_chunk_rows;
    return exec;
  }
  static parallel::ParallelConfig parallel_config(bool reproducible) {
    parallel::ParallelConfig pc;
    pc.reproducible = reproducible;
    return pc;
  }
  static optim::OptimizerConfig optimizer_config() {
    optim::OptimizerConfig oc;
    oc.lr = 3e-4;
    oc.weight_decay = 0.1;
    return oc;
  }
  bool reproducible_;
  train::ContextShard shard_;
  std::shared_ptr<CachingAllocator> alloc_;
  std::shared_ptr<comm::ThreadWorld> world_;
  parallel::LayoutPlan plan_;
  model::Transformer model_;
  comm::Mesh mesh_;
  parallel::RankGroups groups_;
  parallel::DataParallel engine_;
  parallel::StepExecutor executor_;
  parallel::Program program_;
};

// Reproducible mode's cost: a default and a reproducible step runner in this
// process, their steps alternating (so the host's interference falls on
// both alike), the median of the per-pair time ratios.
void print_reproducible_cost(const model::ModelConfig& cfg, const PrecisionPolicy& policy,
                             const data::Batch& batch, int threads, int steps) {
  set_compute_threads(threads);
  StepRunner plain(cfg, policy, false, 0), canonical(cfg, policy, true, 0);
  std::vector<double> off, on, ratios;
  for (int s = 0; s < steps + 2; ++s) {
    double t[2];
    for (int which = 0; which < 2; ++which) {
      const auto t0 = Clock::now();
      (which == 0 ? plain : canonical).step(batch);
      t[which] = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    if (s < 2) continue;  // warm-up: caches, primitives, first-touch pages
    off.push_back(t[0]);
    on.push_back(t[1]);
    ratios.push_back(t[1] / t[0]);
  }
  std::printf("threads %d: reproducible mode %.1f ms vs %.1f ms a step (medians of %d alternating steps): "
              "on / off %.3fx (median of the pairs' ratios; from %.3f to %.3f)\n",
              threads, median(on) * 1e3, median(off) * 1e3, steps, median(ratios),
              *std::min_element(ratios.begin(), ratios.end()), *std::max_element(ratios.begin(), ratios.end()));
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 7;
  std::vector<int> thread_counts = {1, 2};
  std::string precision = "fp32";
  bool reproducible = false, reproducible_cost = false;
  std::string model_name = "bench-small";
  int64_t head_chunk_rows = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--precision") && i + 1 < argc) precision = argv[++i];
    else if (!std::strcmp(argv[i], "--reproducible")) reproducible = true;
    else if (!std::strcmp(argv[i], "--reproducible-cost")) reproducible_cost = true;
    else if (!std::strcmp(argv[i], "--model") && i + 1 < argc) model_name = argv[++i];
    else if (!std::strcmp(argv[i], "--head-chunk-rows") && i + 1 < argc) head_chunk_rows = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) {
      thread_counts.clear();
      for (char* t = std::strtok(argv[++i], ","); t; t = std::strtok(nullptr, ",")) thread_counts.push_back(std::atoi(t));
    } else {
      model_name.clear();
      break;
    }
  }
  const bool gpt2 = model_name == "gpt2-124m";
  if (!gpt2 && model_name != "bench-small") {
    std::fprintf(stderr, "usage: bench_small [--steps N] [--threads 1,2] [--precision fp32|bf16|fp16] "
                 "[--reproducible | --reproducible-cost] [--model bench-small|gpt2-124m] [--head-chunk-rows N]\n");
    return 2;
  }
  const model::ModelConfig cfg = gpt2 ? model::gpt2_124m_config() : model::bench_small_config();
  const int64_t rows = gpt2 ? 4 : 8, seq = 256, n = rows * seq;
  const double flops_per_token = model::model_flops_per_token(cfg, seq);

  // Random tokens, one document per row, every position supervised.
  data::Batch batch;
  batch.rows = rows;
  batch.seq = seq;
  batch.tokens.resize(size_t(n));
  batch.targets.resize(size_t(n));
  batch.positions.resize(size_t(n));
  batch.segments.assign(size_t(n), 0);
  CounterRng rng(42);
  for (int64_t i = 0; i < n; ++i) {
    batch.tokens[size_t(i)] = int32_t(rng.bits(1, i)[0] % cfg.vocab_size);
    batch.targets[size_t(i)] = int32_t(rng.bits(2, i)[0] % cfg.vocab_size);
    batch.positions[size_t(i)] = int32_t(i % seq);
  }

  const PrecisionPolicy policy = PrecisionPolicy::from_name(precision);
  std::printf("%s: %s, seq %lld, micro-batch %lld, %s%s", model_name.c_str(), cfg.describe().c_str(),
              static_cast<long long>(seq), static_cast<long long>(rows), policy.describe().c_str(),
              reproducible ? ", reproducible mode" : "");
  if (head_chunk_rows > 0) std::printf(", LM head in chunks of %lld rows", static_cast<long long>(head_chunk_rows));
  std::printf("\n");
  const kernels::GemmImpl f32_gemm = kernels::active_gemm_impl();
  const kernels::GemmImpl other_gemm =
      f32_gemm == kernels::GemmImpl::kPacked ? kernels::GemmImpl::kOnednn : kernels::GemmImpl::kPacked;
  std::printf("kernels: %s | GEMM: %s | f32 GEMM %s (MESHTRAIN_GEMM), bf16 GEMM %s\n",
              kernels::isa_description().c_str(), kernels::gemm_description().c_str(),
              kernels::gemm_impl_name(f32_gemm), kernels::bf16_gemm_name());
  std::printf("model FLOPs per token: %.1f MFLOP (6 x %lld matmul params + 12 L d T)\n", flops_per_token * 1e-6,
              static_cast<long long>(model::build_model_spec(cfg).matmul_params(cfg)));
  if (reproducible_cost) {
    for (int threads : thread_counts) print_reproducible_cost(cfg, policy, batch, threads, steps);
    return 0;
  }
  for (int threads : thread_counts) {
    set_compute_threads(threads);
    StepRunner runner(cfg, policy, reproducible, head_chunk_rows);
    CachingAllocator* const alloc = &runner.allocator();
    std::vector<double> times, cpu_times;
    int64_t os_allocs_after_warmup = 0;
    long faults_after_warmup = 0;
    for (int s = 0; s < steps + 2; ++s) {
      if (s == 2) {
        os_allocs_after_warmup = alloc->os_allocations();
        faults_after_warmup = minor_faults();
      }
      alloc->tracker().reset_peaks();
      const auto t0 = Clock::now();
      const double c0 = process_cpu_seconds();
      runner.step(batch);
      if (s >= 2) {
        times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
        cpu_times.push_back(process_cpu_seconds() - c0);
      }
    }
    const double faults_per_step = double(minor_faults() - faults_after_warmup) / steps;
    // Before the GEMM rates below grow the process with buffers of their own.
    const double steps_rss_mib = peak_rss_mib();
    const double t = median(times);
    const double gflops = flops_per_token * double(n) / t * 1e-9;
    const double peak = kernels::measure_fma_peak_gflops(threads);
    const double cpu = median(cpu_times);
    const double core_peak = kernels::measure_fma_core_peak_gflops();
    const double gflop_per_core_s = flops_per_token * double(n) / cpu * 1e-9;
    const Rate gemm = gemm_rate_on_step_shapes(cfg, n, f32_gemm);
    const Rate gemm_other = gemm_rate_on_step_shapes(cfg, n, other_gemm);
    const Rate gemm_bf16 = gemm_rate_on_step_shapes(cfg, n, std::nullopt);
    std::printf("\nthreads %d: median step %.1f ms over %d steps | %.0f tokens/s | %.1f GFLOP/s\n", threads, t * 1e3,
                steps, double(n) / t, gflops);
    // The spread says how much the host interfered: on a shared machine the
    // fastest step is the closest to the uncontended speed (the median stays
    // the figure of record).
    const auto [fastest, slowest] = std::minmax_element(times.begin(), times.end());
    std::printf("  steps from %.1f to %.1f ms: the fastest at %.1f%% of peak\n", *fastest * 1e3, *slowest * 1e3,
                100 * flops_per_token * double(n) / *fastest * 1e-9 / peak);
    std::printf("  FMA peak %.1f GFLOP/s -> %.1f%% of peak | f32 GEMM (%s) on the step's shapes %.1f GFLOP/s = %.1f%% "
                "of peak -> the step runs at %.1f%% of it\n",
                peak, 100 * gflops / peak, kernels::gemm_impl_name(f32_gemm), gemm.gflops, 100 * gemm.gflops / peak,
                100 * gflops / gemm.gflops);
    std::printf("  f32 GEMM %s vs %s on the same shapes, same run: %.1f vs %.1f GFLOP/s = %.2fx (%.1f%% vs %.1f%% of "
                "peak)\n",
                kernels::gemm_impl_name(f32_gemm), kernels::gemm_impl_name(other_gemm), gemm.gflops, gemm_other.gflops,
                gemm.gflops / gemm_other.gflops, 100 * gemm.gflops / peak, 100 * gemm_other.gflops / peak);
    std::printf("  CPU time: %.1f core-ms per step | %.0f tokens per core-second | %.1f GFLOP per core-second -> "
                "%.1f%% of the per-core FMA peak %.1f, %.1f%% of the f32 GEMM's %.1f\n",
                cpu * 1e3, double(n) / cpu, gflop_per_core_s, 100 * gflop_per_core_s / core_peak, core_peak,
                100 * gflop_per_core_s / gemm.gflop_per_core_s, gemm.gflop_per_core_s);
    std::printf("  bf16 GEMM (fp32 accumulate) on the same shapes: %.1f GFLOP/s = %.2fx the f32 GEMM "
                "(per core-second %.1f = %.2fx)\n",
                gemm_bf16.gflops, gemm_bf16.gflops / gemm.gflops, gemm_bf16.gflop_per_core_s,
                gemm_bf16.gflop_per_core_s / gemm.gflop_per_core_s);
    std::printf("  fresh OS blocks after warm-up: %lld | page faults per step: %.0f | peak memory: %s\n",
                static_cast<long long>(alloc->os_allocations() - os_allocs_after_warmup), faults_per_step,
                alloc->tracker().snapshot().str().c_str());
    std::printf("  peak resident memory of the process after its training steps: %.1f MiB\n", steps_rss_mib);
  }
  return 0;
}
