// Checkpoint throughput on a bench-small-sized training state: parameters
// plus two AdamW moments in f32 (~28M params x 3 = ~330 MB), written by 2
// ranks (threads), against a plain sequential write/read of the same bytes
// with fsync. Prints save/load GB/s, verify time and the pause an
// asynchronous save costs the caller. Reads hit the page cache (the files
// were just written), as does the plain read it is compared with.
//   checkpoint_bench [DIR]   (default: a directory under /tmp)
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "meshtrain/checkpoint/async_checkpointer.h"
#include "meshtrain/checkpoint/fs_util.h"
#include "meshtrain/checkpoint/reader.h"
#include "meshtrain/checkpoint/writer.h"
#include "meshtrain/comm/launch.h"
#include "meshtrain/model/param_spec.h"
#include "meshtrain/model/presets.h"

namespace {

namespace ck = meshtrain::checkpoint;

// Save options keeping only the newest checkpoint.
ck::SaveOptions keep_one() {
  ck::SaveOptions o;
  o.keep_last = 1;
  return o;
}

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

meshtrain::model::ModelConfig bench_small() { return meshtrain::model::bench_small_config(); }

struct State {
  std::vector<std::string> names;
  std::vector<meshtrain::Shape> shapes;
  std::vector<std::vector<float>> values;  // full tensors (every rank's view of the same memory)
  uint64_t bytes = 0;
};

State make_state() {
  State s;
  const auto spec = meshtrain::model::build_model_spec(bench_small());
  for (const char* prefix : {"", "optimizer/exp_avg/", "optimizer/exp_avg_sq/"})
    for (const auto& p : spec.params) {
      s.names.push_back(prefix + p.name);
      s.shapes.push_back(p.shape);
      std::vector<float> v(size_t(p.numel()));
      for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % 1013) * 1e-3f;
      s.bytes += v.size() * 4;
      s.values.push_back(std::move(v));
    }
  return s;
}

// Rank `rank`'s pieces: its flat half of every tensor (ZeRO-style).
ck::SaveRequest request(const State& s, int64_t step, int world, int rank) {
  ck::SaveRequest req;
  req.step = step;
  for (size_t i = 0; i < s.names.size(); ++i) {
    int64_t flat = int64_t(meshtrain::comm::chunk_offset(size_t(s.shapes[i].numel()), world, rank));
    for (const auto& b : ck::balanced_part_boxes(s.shapes[i], world, rank)) {
      req.pieces.push_back({s.names[i], s.shapes[i], meshtrain::DType::F32, b, s.values[i].data() + flat});
      flat += b.numel();
    }
  }
  return req;
}

void plain_write_read(const fs::path& dir, const State& s, double& write_s, double& read_s) {
  const std::string path = (dir / "plain.bin").string();
  auto t0 = Clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  for (const auto& v : s.values) ck::write_all(fd, v.data(), v.size() * 4, path);
  ck::fsync_fd(fd, path);
  ::close(fd);
  write_s = since(t0);
  std::vector<std::vector<float>> dst;
  for (const auto& v : s.values) dst.emplace_back(v.size());  // touched before timing, like the load below
  t0 = Clock::now();
  fd = ::open(path.c_str(), O_RDONLY);
  uint64_t off = 0;
  for (size_t i = 0; i < s.values.size(); ++i) {
    const auto& v = s.values[i];
    ck::pread_all(fd, dst[i].data(), v.size() * 4, off, path);
    off += v.size() * 4;
  }
  ::close(fd);
  read_s = since(t0);
  fs::remove(path);
}

}  // namespace

int main(int argc, char** argv) {
  const fs::path dir = argc > 1 ? fs::path(argv[1]) : fs::temp_directory_path() / "meshtrain-checkpoint-bench";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const State s = make_state();
  const double gb = double(s.bytes) / 1e9;
  std::printf("state: %zu tensors, %.1f MB (bench-small params + 2 AdamW moments, f32)\n", s.names.size(), gb * 1e3);

  double plain_w = 0, plain_r = 0;
  plain_write_read(dir, s, plain_w, plain_r);

  const int world = 2;
  double save_s = 0;
  for (int64_t step = 1; step <= 2; ++step) {  // second run: warm allocator and directory
    auto t0 = Clock::now();
    meshtrain::comm::launch_threads(world, [&](meshtrain::comm::ParallelContext& ctx) {
      ck::save_checkpoint(*ctx.world, dir.string(), request(s, step, world, ctx.rank), keep_one());
    });
    save_s = since(t0);
  }

  auto t0 = Clock::now();
  const auto reader = ck::CheckpointReader::open(dir.string());  // parses + verifies every digest
  const double verify_s = since(t0);
  // Load into a different layout: 2 ranks, each its dim-0 half of every tensor.
  std::vector<std::vector<float>> dst;
  for (const auto& v : s.values) dst.emplace_back(v.size());
  t0 = Clock::now();
  meshtrain::comm::launch_threads(world, [&](meshtrain::comm::ParallelContext& ctx) {
    for (size_t i = 0; i < s.names.size(); ++i) {
      if (int(i % size_t(world)) != ctx.rank) continue;  // tensors spread over ranks
      reader.read_all(s.names[i], dst[i].data(), meshtrain::DType::F32);
    }
  });
  const double load_s = since(t0);
  for (size_t i = 0; i < s.names.size(); ++i)
    if (dst[i] != s.values[i]) {
      std::printf("MISMATCH in %s\n", s.names[i].c_str());
      return 1;
    }

  // Asynchronous: the caller's pause is staging (a memcpy) + directory setup.
  double pause_first = 0, pause_reused = 0, async_total = 0;
  meshtrain::comm::launch_threads(world, [&](meshtrain::comm::ParallelContext& ctx) {
    ck::AsyncCheckpointer ckpt(*ctx.world, dir.string(), keep_one());
    for (int64_t step = 3; step <= 4; ++step) {
      const auto a0 = Clock::now();
      ckpt.save(request(s, step, world, ctx.rank));
      const double pause = since(a0);
      ckpt.wait();
      if (ctx.rank == 0) (step == 3 ? pause_first : pause_reused) = pause, async_total = since(a0);
    }
  });

  std::printf("plain sequential write+fsync  %7.3f s  %6.2f GB/s\n", plain_w, gb / plain_w);
  std::printf("plain sequential read         %7.3f s  %6.2f GB/s   (page cache)\n", plain_r, gb / plain_r);
  std::printf("checkpoint save (2 ranks)     %7.3f s  %6.2f GB/s   (SHA-256, fsync, manifest, rename)\n", save_s,
              gb / save_s);
  std::printf("checkpoint open+verify        %7.3f s  %6.2f GB/s   (SHA-256 of every piece)\n", verify_s,
              gb / verify_s);
  std::printf("checkpoint load (2 ranks)     %7.3f s  %6.2f GB/s   (resharded reads, page cache)\n", load_s,
              gb / load_s);
  std::printf("async save pause              %7.3f s first, %.3f s with reused staging (save+wait %.3f s)\n",
              pause_first, pause_reused, async_total);
  fs::remove_all(dir);
  return 0;
}
