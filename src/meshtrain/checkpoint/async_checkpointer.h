// Asynchronous save: save() copies the pieces into staging memory (reused
// between saves) and returns; a background thread per rank writes the shard
// file. The background thread never communicates (the group belongs to
// training): the collective commit happens in poll()/wait(), which the
// trainer calls on every rank at the same points (e.g. once per step).
//
//   AsyncCheckpointer ckpt(ctx.group(comm::Axis::Dp), "runs/x/ckpt", {.keep_last = 3});
//   ... each step:  ckpt.poll();            // commits when all writers are done
//   ... at a save boundary:  ckpt.save(request);  // waits for the previous save first
//   ... at exit:    ckpt.wait();
//
// A writer failure on any rank makes poll()/wait() throw the same
// CheckpointError on every rank at the next call.
#pragma once

#include <atomic>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "meshtrain/checkpoint/shard_writer.h"
#include "meshtrain/checkpoint/writer.h"

namespace meshtrain::checkpoint {

class AsyncCheckpointer {
 public:
  AsyncCheckpointer(comm::ProcessGroup& group, std::string ckpt_root, SaveOptions options = {});
  // Joins the writer; an uncommitted save is abandoned (its temporary
  // directory is removed by the next save). Call wait() to keep it.
  ~AsyncCheckpointer();
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;

  // Collective. Completes a pending save (wait()), then stages `request`
  // and starts the background write. The caller may modify its tensors as
  // soon as this returns.
  void save(const SaveRequest& request);
  // Collective when a save is pending (every rank has the same pending
  // state). Commits once all writers finished; throws on every rank when
  // any writer failed. Returns true when nothing is pending any more.
  bool poll();
  // Collective: waits for this rank's writer, then commits. Returns the
  // committed directory, or "" when nothing was pending.
  std::string wait();

  bool pending() const { return pending_; }
  const std::string& last_committed() const { return last_committed_; }
  double last_stage_seconds() const { return stage_seconds_; }  // the caller's pause in save()

 private:
  std::string finish();  // collective commit of the pending save; joins the writer

  comm::ProcessGroup& group_;
  std::filesystem::path root_;
  SaveOptions options_;
  std::vector<char> staging_;
  std::vector<TensorPiece> staged_;
  std::thread writer_;
  std::atomic<bool> done_{false}, failed_{false}, cancel_{false}, cancelled_{false};
  std::optional<LocalShard> result_;
  std::string error_;
  bool pending_ = false;
  int64_t step_ = 0;
  nlohmann::json metadata_;
  std::filesystem::path tmp_;
  std::string last_committed_;
  double stage_seconds_ = 0;
};

}  // namespace meshtrain::checkpoint
