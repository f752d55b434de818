// Trainer::evaluate: the validation split's loss and bits per byte.
#include "meshtrain/data/bits_per_byte.h"
#include "meshtrain/train/cp_config.h"
#include "meshtrain/train/data_setup.h"
#include "meshtrain/train/trainer.h"

namespace meshtrain::train {

double EvalResult::bits_per_byte() const { return data::bits_per_byte(loss_sum, target_bytes); }

EvalResult Trainer::evaluate() {
  EvalResult r;
  if (!val_) return r;
  data::ValidationIterator it(*val_, data::parse_batch_mode(cfg_.data.mode), cfg_.data.seq_len, sequence_multiple(cfg_));
  data::Batch b;
  comm::ProcessGroup& dp = steps_->dp_group();
  const int64_t B = cfg_.training.micro_batch, R = dp.size();
  const int64_t limit = cfg_.training.eval_rows;
  double sums[3] = {0, 0, 0};  // loss sum, targets, target bytes
  for (int64_t rows = 0; limit == 0 || rows < limit; rows += R * B) {
    // Every rank takes part in every window (the same count on all ranks).
    // The last window is cut at eval_rows, so every layout evaluates the
    // same rows (and validation losses of two layouts compare).
    const int64_t w = limit == 0 ? R * B : std::min(R * B, limit - rows);
    const int64_t first = std::min(dp.rank() * B, w);
    it.next_window(w, first, std::min(B, w - first), &b);
    int64_t any = b.rows;
    dp.all_reduce(&any, 1, DType::I64, comm::ReduceOp::Max);
    if (any == 0) break;
    if (b.rows > 0) {
      const parallel::WindowResult res = steps_->forward_only(b);
      sums[0] += res.loss_sum;
      sums[1] += double(res.count);
      // Bytes where the loss is counted (the last pipeline stage), so the
      // sum over pp below counts them once; this rank's chunks under
      // context parallelism, summed over cp below.
      if (res.count > 0) sums[2] += double(data::supervised_bytes(steps_->local_rows(), val_->tokenizer()));
    } else {
      // Nothing left for this rank: a padding-only row keeps its collectives
      // (stage-3 gathers) in step with the other ranks; it adds no target.
      data::Batch pad;
      pad.reset(1, cfg_.data.seq_len, val_->tokenizer().pad_id());
      steps_->forward_only(pad);
    }
  }
  steps_->release_gathered();
  steps_->data_group().all_reduce(sums, 3, DType::F64, comm::ReduceOp::Sum);
  if (comm::ProcessGroup* pp = steps_->groups().pp) pp->all_reduce(sums, 3, DType::F64, comm::ReduceOp::Sum);
  r.loss_sum = sums[0];
  r.targets = int64_t(sums[1]);
  r.target_bytes = int64_t(sums[2]);
  r.loss = r.targets ? sums[0] / sums[1] : 0.0;
  return r;
}

}  // namespace meshtrain::train
