#include "meshtrain/train/peak_flops.h"

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/checkpoint/fs_util.h"
#include "meshtrain/core/threading.h"
#include "meshtrain/kernels/cpu/gemm.h"
#include "meshtrain/kernels/cpu/gemm_peak.h"
#include "meshtrain/kernels/cpu/isa.h"

namespace meshtrain::train {
namespace fs = std::filesystem;
namespace {

nlohmann::json read_cache(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(checkpoint::read_text_file(path, size_t(1) << 20));
  } catch (const std::exception&) {
    return nlohmann::json::object();  // absent or unreadable: measured again and rewritten
  }
  return j.is_object() ? j : nlohmann::json::object();
}

// Stores one entry; a cache that cannot be written (a read-only home) only
// means the next run measures again.
void store(DType dtype, int busy_cores, double per_core, const std::string& how) {
  const std::string path = peak_cache_path();
  if (path.empty()) return;
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", ::gmtime_r(&now, &utc));
  try {
    nlohmann::json j = read_cache(path);
    j["peaks"][peak_key(dtype, busy_cores)] = {{"per_core_flops", per_core}, {"measured", when}, {"how", how}};
    fs::create_directories(fs::path(path).parent_path());
    checkpoint::atomic_write_file(fs::path(path).parent_path(), fs::path(path).filename().string(), j.dump(2) + "\n");
  } catch (const std::exception&) {
  }
}

}  // namespace

int job_cores(bool threads_backend, int world_size, int threads_per_rank, int process_cores) {
  const int threads = std::max(1, world_size) * std::max(1, threads_per_rank);
  return threads_backend ? std::min(threads, std::max(1, process_cores)) : threads;
}

std::string peak_cache_path() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return (fs::path(xdg) / "meshtrain" / "peak_flops.json").string();
  const char* home = std::getenv("HOME");
  if (home && *home) return (fs::path(home) / ".cache" / "meshtrain" / "peak_flops.json").string();
  return "";
}

std::string peak_key(DType dtype, int busy_cores) {
  return kernels::cpu_model_name() + " | " + kernels::isa_name(kernels::active_isa()) + " | " +
         kernels::gemm_impl_name(kernels::active_gemm_impl()) + " gemm | " + std::string(dtype_name(dtype)) + " | " +
         std::to_string(busy_cores) + " core" + (busy_cores > 1 ? "s" : "");
}

double measure_core_peak(DType dtype, int busy_cores) {
  // Shapes of the best classes of `bench machine` (m = 1024 tokens, n and k
  // those of small and mid-sized projections); every core measures at once,
  // as every core computes in training.
  const int64_t shapes[][3] = {{1024, 256, 64}, {1024, 256, 256}, {512, 512, 512}};
  std::vector<double> best(size_t(std::max(1, busy_cores)), 0.0);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < best.size(); ++i)
    threads.emplace_back([&, i] {
      set_compute_threads(1);
      for (const auto& s : shapes)
        best[i] = std::max(best[i], kernels::measure_gemm_core_flops(dtype, s[0], s[1], s[2], 0.1));
    });
  for (auto& t : threads) t.join();
  return *std::max_element(best.begin(), best.end());
}

PeakFlops peak_flops(DType dtype, int cores, int busy_cores, bool refresh) {
  PeakFlops p;
  p.cores = std::max(1, cores);
  p.dtype = dtype;
  const std::string path = peak_cache_path();
  if (!refresh && !path.empty()) {
    const nlohmann::json j = read_cache(path);
    const auto peaks = j.find("peaks");
    if (peaks != j.end() && peaks->is_object()) {
      const auto e = peaks->find(peak_key(dtype, busy_cores));
      if (e != peaks->end() && e->is_object() && e->value("per_core_flops", 0.0) > 0) {
        p.per_core = e->value("per_core_flops", 0.0);
        p.origin = "cached in " + path + " (" + e->value("measured", std::string("?")) + ")";
        return p;
      }
    }
  }
  p.per_core = measure_core_peak(dtype, busy_cores);
  p.origin = "measured now" + (path.empty() ? std::string() : ", cached in " + path);
  store(dtype, busy_cores, p.per_core, "best GEMM of one core, " + std::to_string(busy_cores) + " at once");
  return p;
}

PeakFlops raise_peak(const PeakFlops& peak, int busy_cores, double achieved, int64_t step) {
  PeakFlops p = peak;
  const double measured = measure_core_peak(peak.dtype, busy_cores);
  const double floor = achieved / double(std::max(1, p.cores));
  p.per_core = std::max({peak.per_core, measured, floor});
  p.origin = "raised at step " + std::to_string(step) + (measured >= floor ? " (measured again)" : " (the step's own rate)");
  store(peak.dtype, busy_cores, p.per_core, p.origin);
  return p;
}

}  // namespace meshtrain::train
