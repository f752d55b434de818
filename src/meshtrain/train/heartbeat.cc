#include "meshtrain/train/heartbeat.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "meshtrain/comm/mpi_world.h"
#include "meshtrain/core/error.h"

namespace meshtrain::train {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

// Exit code of a job ended for a rank that stopped making progress (the
// collective timeout's watchdog uses the same).
constexpr int kHangExitCode = 124;

[[noreturn]] void end_job(bool mpi, const std::string& message) {
  // MPI cannot wake peers blocked inside it; a thread of this process
  // cannot be stopped: either way the job ends here. Everything already
  // saved stays (metrics are flushed per record, checkpoints commit whole).
  if (mpi) comm::mpi_abort(message, kHangExitCode);
  std::fprintf(stderr, "meshtrain: %s\n", message.c_str());
  std::fflush(nullptr);
  std::_Exit(kHangExitCode);
}

uint64_t random_job_id() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ uint64_t(rd());
}

}  // namespace

std::string HangJudge::observe(int rank, const std::optional<Beat>& beat, double now_s) {
  if (!beat) {
    seen_.erase(rank);
    return "";
  }
  auto [it, first] = seen_.try_emplace(rank, Seen{beat->published, beat->progress, now_s, now_s});
  Seen& s = it->second;
  if (first) return "";
  if (beat->published != s.published) s.published = beat->published, s.published_at = now_s;
  if (beat->progress != s.progress) s.progress = beat->progress, s.progress_at = now_s;
  char why[200];
  if (now_s - s.published_at > timeout_s_) {
    std::snprintf(why, sizeof why, "its heartbeat has not been published for %.1f s (its process is stopped or gone)",
                  now_s - s.published_at);
    return why;
  }
  if (!beat->waiting && now_s - s.progress_at > timeout_s_) {
    std::snprintf(why, sizeof why, "no progress for %.1f s outside any collective", now_s - s.progress_at);
    return why;
  }
  return "";
}

std::string Heartbeat::file(const std::string& dir, int rank) {
  return (fs::path(dir) / ("rank-" + std::to_string(rank) + ".json")).string();
}

std::optional<Beat> Heartbeat::read(const std::string& path, uint64_t job) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("job", uint64_t(0)) != job) return std::nullopt;
  Beat b;
  b.published = j.value("published", uint64_t(0));
  b.progress = j.value("progress", uint64_t(0));
  b.waiting = j.value("waiting", false);
  b.step = j.value("step", int64_t(0));
  b.phase = j.value("phase", std::string());
  return b;
}

Heartbeat::Heartbeat(comm::ProcessGroup& world, const activity::RankActivity& mine,
                     const std::vector<std::string>& hosts, HeartbeatOptions options)
    : mine_(mine),
      hosts_(hosts),
      options_(std::move(options)),
      rank_(world.rank()),
      world_size_(world.size()),
      mpi_(world.backend() == "mpi"),
      judge_(options_.timeout_s) {
  int64_t job = rank_ == 0 ? int64_t(random_job_id()) : 0;
  world.broadcast(&job, 1, DType::I64, 0);
  job_ = uint64_t(job);
  if (rank_ == 0)
    for (int r = 1; r < world_size_; ++r) watched_.push_back(r);
  if (rank_ == 1) watched_.push_back(0);
  std::error_code ec;
  fs::create_directories(options_.dir, ec);
  publish();
  thread_ = std::thread([this] { loop(); });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::error_code ec;
  fs::remove(file(options_.dir, rank_), ec);
  fs::remove(options_.dir, ec);  // by the last rank to leave (only an empty directory goes)
}

void Heartbeat::publish() {
  const nlohmann::json j = {{"job", job_},
                            {"published", ++published_},
                            {"progress", mine_.progress.load(std::memory_order_relaxed)},
                            {"waiting", mine_.collective_depth.load(std::memory_order_relaxed) > 0},
                            {"step", mine_.step.load(std::memory_order_relaxed)},
                            {"phase", mine_.phase.load(std::memory_order_relaxed)},
                            {"pid", int64_t(::getpid())}};
  // Written whole, then renamed: a reader sees the old beat or the new one.
  const std::string path = file(options_.dir, rank_), tmp = path + ".tmp";
  if (std::FILE* f = std::fopen(tmp.c_str(), "w")) {
    const std::string text = j.dump() + "\n";
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (std::fclose(f) == 0 && ok) std::rename(tmp.c_str(), path.c_str());
  }
}

void Heartbeat::loop() {
  // Ten looks per timeout: a hang is named within 1.1 timeouts.
  const auto interval = std::chrono::duration<double>(std::clamp(options_.timeout_s / 10, 0.02, 1.0));
  const auto t0 = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, interval, [this] { return stop_; })) {
    publish();
    const double now = std::chrono::duration<double>(Clock::now() - t0).count();
    for (int peer : watched_) {
      const std::optional<Beat> beat = read(file(options_.dir, peer), job_);
      const std::string why = judge_.observe(peer, beat, now);
      if (why.empty()) continue;
      char where[160];
      std::snprintf(where, sizeof where, "; last at step %lld, %s", static_cast<long long>(beat->step),
                    beat->phase.c_str());
      char text[768];
      std::snprintf(text, sizeof text, "heartbeat: rank %d (host %s) is hung: %s (comm.heartbeat_timeout_s = %g)%s. "
                    "Ending the job now rather than when the collective timeout (comm.timeout_s = %g) expires; "
                    "resume from the latest complete checkpoint", peer, hosts_[size_t(peer)].c_str(), why.c_str(),
                    options_.timeout_s, where, options_.collective_timeout_s);
      lock.unlock();
      if (options_.on_hang) {
        options_.on_hang(text);
        return;
      }
      end_job(mpi_, text);
    }
  }
}

}  // namespace meshtrain::train
