// Decoder-only transformer with explicit forward/backward. One micro-batch:
// forward, loss SUM and COUNT (never a mean), backward seeded with the loss
// coefficient chosen by the trainer (SPEC (29.3)-(29.4)); parameter grads
// accumulate across micro-batches.
//
// Units (the FSDP-style flat buffers of ModelSpec): 0 = embed, 1..L = layers,
// L+1 = final norm and head. Hooks let data/ZeRO parallelism act around each
// unit's use (gather before forward, reduce when its grads are complete).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "meshtrain/kernels/cpu/cross_entropy.h"
#include "meshtrain/kernels/cpu/rope.h"
#include "meshtrain/model/block.h"

namespace meshtrain::model {

struct UnitHooks {
  std::function<void(int unit)> before_forward;      // parameters of `unit` must be present
  std::function<void(int unit)> after_forward;       // `unit` finished its forward
  std::function<void(int unit)> before_backward;     // parameters needed again
  std::function<void(int unit)> grads_ready;         // `unit`'s grads are final for this micro-batch
};

struct ExecOptions {
  bool recompute = false;         // activation recomputation per block (SPEC S3)
  bool materialize_params = true;  // false: a parallel engine binds unit buffers
};

template <typename T>
class Transformer {
 public:
  Transformer(const ModelConfig& cfg, std::shared_ptr<CachingAllocator> alloc, ExecOptions exec = {});
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelConfig& config() const { return cfg_; }
  ParameterStore<T>& params() { return params_; }
  const std::shared_ptr<CachingAllocator>& allocator() const { return alloc_; }
  void set_hooks(UnitHooks hooks) { hooks_ = std::move(hooks); }
  int num_units() const { return params_.num_units(); }

  // Forward + backward of one micro-batch; grads += loss_coeff * d(loss sum).
  kernels::CrossEntropyResult forward_backward(const TokenBatch& b, T loss_coeff);
  // Forward only: loss sum and count (validation).
  kernels::CrossEntropyResult forward_loss(const TokenBatch& b);
  // Logits [n, vocab] of every position (generation, tests).
  Tensor forward_logits(const TokenBatch& b);

 private:
  struct Forward {
    std::vector<typename Block<T>::Saved> blocks;
    Tensor x_final, xf, mean_f, rstd_f;
  };
  void check_batch(const TokenBatch& b) const;
  Tensor embed(const TokenBatch& b);
  Forward run_trunk(const TokenBatch& b, bool keep_saved);
  Tensor head_logits(const Forward& f, int64_t n);
  void call(const std::function<void(int)>& hook, int unit) const {
    if (hook) hook(unit);
  }

  ModelConfig cfg_;
  std::shared_ptr<CachingAllocator> alloc_;
  ExecOptions exec_;
  ParameterStore<T> params_;
  kernels::RopeTable rope_;
  std::vector<Block<T>> blocks_;
  Norm<T> final_norm_;
  Linear<T> head_;
  Parameter* tok_emb_;
  Parameter* pos_emb_ = nullptr;
  UnitHooks hooks_;
};

}  // namespace meshtrain::model
