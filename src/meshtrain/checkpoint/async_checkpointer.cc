#include "meshtrain/checkpoint/async_checkpointer.h"

#include <chrono>
#include <cstring>

#include "meshtrain/checkpoint/commit.h"
#include "meshtrain/core/error.h"

namespace meshtrain::checkpoint {

AsyncCheckpointer::AsyncCheckpointer(comm::ProcessGroup& group, std::string ckpt_root, SaveOptions options)
    : group_(group), root_(std::move(ckpt_root)), options_(std::move(options)) {}

AsyncCheckpointer::~AsyncCheckpointer() {
  cancel_ = true;
  if (writer_.joinable()) writer_.join();
}

void AsyncCheckpointer::save(const SaveRequest& request) {
  if (pending_) wait();
  const auto t0 = std::chrono::steady_clock::now();
  check_pieces(request.pieces, group_.rank());
  size_t total = 0;
  for (const auto& p : request.pieces) total += size_t(p.box.numel()) * dtype_size(p.dtype);
  if (staging_.size() < total) staging_.resize(total);  // grows once, then reused
  staged_ = request.pieces;
  size_t off = 0;
  for (auto& p : staged_) {
    const size_t n = size_t(p.box.numel()) * dtype_size(p.dtype);
    std::memcpy(staging_.data() + off, p.data, n);
    p.data = staging_.data() + off;
    off += n;
  }
  stage_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Collective (rank 0 prepares the directory); after staging so a bad
  // piece fails before any collective.
  tmp_ = prepare_save_dir(group_, root_, request.step);
  step_ = request.step;
  metadata_ = request.metadata;
  done_ = false;
  failed_ = false;
  cancel_ = false;
  cancelled_ = false;
  result_.reset();
  error_.clear();
  pending_ = true;
  writer_ = std::thread([this] {
    try {
      result_ = write_rank_shard(tmp_, group_.rank(), staged_, options_, &cancel_);
    } catch (const std::exception& e) {
      error_ = e.what();
      cancelled_ = cancel_.load();
      failed_ = true;
    }
    done_ = true;
  });
}

bool AsyncCheckpointer::poll() {
  if (!pending_) return true;
  // [still writing, failed] over all ranks.
  int64_t state[2] = {done_ ? 0 : 1, failed_ ? 1 : 0};
  group_.all_reduce(state, 2, DType::I64, comm::ReduceOp::Max);
  if (state[1] == 0 && state[0] != 0) return false;
  if (state[1] != 0) cancel_ = true;  // stop the healthy writers early
  finish();
  return true;
}

std::string AsyncCheckpointer::wait() {
  if (!pending_) return "";
  return finish();
}

std::string AsyncCheckpointer::finish() {
  if (writer_.joinable()) writer_.join();
  pending_ = false;
  std::optional<LocalShard> local = failed_ ? std::nullopt : std::move(result_);
  last_committed_ = commit_save(group_, root_, step_, tmp_, local, error_, metadata_, options_, cancelled_);
  return last_committed_;
}

}  // namespace meshtrain::checkpoint
