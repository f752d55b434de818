// Hung ranks named before the collective timeout (docs/comm.md, "Stragglers
// and hangs"). Every rank's activity (core/rank_activity.h: a progress
// count, the step and phase, whether it is inside a collective call) is
// published by a thread of the rank's own, every interval whatever its
// training thread does, as a small file RUN_DIR/.meshtrain-heartbeat/
// rank-R.json. One code path for both backends: a file needs nothing from
// the rank it describes (a hung rank takes part in no collective), and the
// threads of one process read the same files.
//
// Rank 0 watches every other rank, rank 1 watches rank 0. A peer is hung
// when its progress count has not moved for heartbeat_timeout_s while it
// is outside collective calls (a rank inside one waits for a peer: it is
// not hung itself), or when its file has not been rewritten for that long
// (its process is stopped). The watcher then ends the job, exit code 124
// (as the collective timeout's watchdog), with a message naming the rank,
// its host and where it was last (step, phase). A rank whose file was
// never seen (a run directory not shared between nodes) is not judged.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "meshtrain/comm/process_group.h"
#include "meshtrain/core/rank_activity.h"

namespace meshtrain::train {

// A rank's published activity.
struct Beat {
  uint64_t published = 0;  // files written so far
  uint64_t progress = 0;
  bool waiting = false;    // inside a collective call
  int64_t step = 0;
  std::string phase;
};

// The judgement, apart from files and clocks (tests drive it).
class HangJudge {
 public:
  explicit HangJudge(double timeout_s) : timeout_s_(timeout_s) {}
  // What the watcher read of `rank` at `now_s` (its own clock, seconds);
  // nullopt: nothing published (yet, or any more: the rank left) and not
  // judged. Returns why the rank is hung, or "" when it is not.
  std::string observe(int rank, const std::optional<Beat>& beat, double now_s);

 private:
  struct Seen {
    uint64_t published = 0, progress = 0;
    double published_at = 0, progress_at = 0;
  };
  double timeout_s_;
  std::map<int, Seen> seen_;
};

struct HeartbeatOptions {
  double timeout_s = 60;             // comm.heartbeat_timeout_s
  double collective_timeout_s = 0;   // comm.timeout_s, for the message
  std::string dir;                   // RUN_DIR/.meshtrain-heartbeat
  // Called once with the message when a peer is hung; default: end the job.
  std::function<void(const std::string&)> on_hang;
};

class Heartbeat {
 public:
  // Collective over `world` (rank 0's job id is broadcast, so files of an
  // earlier job are never read as this one's). `mine` and `hosts` (by
  // world rank) outlive the heartbeat.
  Heartbeat(comm::ProcessGroup& world, const activity::RankActivity& mine, const std::vector<std::string>& hosts,
            HeartbeatOptions options);
  ~Heartbeat();  // stops the thread and removes this rank's file
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  static std::string file(const std::string& dir, int rank);
  // The beat in `path` when it is this job's, else nullopt.
  static std::optional<Beat> read(const std::string& path, uint64_t job);

 private:
  void publish();
  void loop();

  const activity::RankActivity& mine_;
  const std::vector<std::string>& hosts_;
  HeartbeatOptions options_;
  int rank_, world_size_;
  bool mpi_;
  uint64_t job_ = 0, published_ = 0;
  std::vector<int> watched_;
  HangJudge judge_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace meshtrain::train
