// Building blocks with explicit forward/backward: Linear and Norm, over the
// kernel table of the tensors' device. Backward is split into the input
// gradient (B) and the weight gradient (W, WeightGrads) so zero-bubble
// pipeline schedules can run W later; both ACCUMULATE into parameter
// gradients. Activations are [n, features] tensors.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/model/model_config.h"
#include "meshtrain/model/parameters.h"

namespace meshtrain::model {

// `t` as a matmul operand of type `dtype`: itself when it already has that
// type (the f32 policy: no copy), else a converted copy (16-bit policies:
// the matmul inputs are rounded once and kept in 16 bits).
Tensor as_operand(const kernels::KernelTable& k, const Tensor& t, DType dtype,
                  const std::shared_ptr<CachingAllocator>& alloc, MemCategory cat = MemCategory::Activations);

// x's values rounded to bf16 in place (x stays f32): the values a bf16
// copy would hold, for a path that computes in f32 on them.
void round_to_bf16(const kernels::KernelTable& k, const Tensor& x, const std::shared_ptr<CachingAllocator>& alloc);

// The dtype an elementwise kernel writes a matmul operand in: the operand's
// own where the kernels round into it (bf16 from f32, kernel_table.h), so
// as_operand makes no copy; else the accumulate dtype (as_operand converts).
inline DType written_operand_dtype(DType op, DType acc) {
  return op == DType::BF16 && acc == DType::F32 ? op : acc;
}

// Matmul operands (x, dy) are in the weight's type; outputs and gradients
// of activations are f32 (or f64): 16-bit inputs accumulate in f32.
struct Linear {
  Parameter* weight = nullptr;  // [out, in] (local)
  Parameter* bias = nullptr;    // [out] or null
  int64_t in = 0, out = 0;

  // y = x W^T + b, or y = x W^T + b + base when base is defined (y itself
  // or a tensor of its shape: the residual added inside the GEMM instead of
  // a separate pass).
  void forward(const kernels::KernelTable& k, const Tensor& x, const Tensor& y, const Tensor& base = {}) const;
  // B: dx = dy W (dx += dy W when accumulate_dx).
  void backward_input(const kernels::KernelTable& k, const Tensor& dy, const Tensor& dx, bool accumulate_dx) const;
  // W: dW += dy^T x, db += colsum(dy).
  void backward_weight(const kernels::KernelTable& k, const Tensor& x, const Tensor& dy) const;
};

// A sublayer's output projection y = x wᵀ (w: [out, in]) run by its caller
// instead of the layer: in row pieces whose tensor-parallel sums start as
// each is written (block.cc, docs/math.md (M.79)). Empty: the layer runs it.
using ProjectOutput = std::function<void(const Tensor& x, const Tensor& w)>;

// A sublayer's input of n rows, `full`. Under sequence parallelism with its
// all-gather still in flight (block.cc, docs/math.md (M.81)) only this
// rank's rows are readable at first: `own`, rows [first, first + own.dim(0))
// of full, which the gather fills once `arrive()` has run. Undefined `own`:
// every row readable.
struct GatheredRows {
  GatheredRows(const Tensor& all) : full(all) {}  // NOLINT(google-explicit-constructor): every row readable
  GatheredRows(const Tensor& all, const Tensor& own_rows, int64_t first_row, std::function<void()> wait)
      : full(all), own(own_rows), first(first_row), arrive(std::move(wait)) {}
  Tensor full, own;
  int64_t first = 0;
  std::function<void()> arrive;

  // Every row, after the arrival.
  const Tensor& arrived() const {
    if (arrive) arrive();
    return full;
  }
  // f(rows, r0) over blocks of rows [r0, r0 + rows.dim(0)) covering all n:
  // this rank's first, then, after the arrival, the others. Row-wise work
  // (projections, activations) runs on the own rows while the rest arrive.
  void for_row_blocks(const std::function<void(const Tensor& rows, int64_t first_row)>& f) const;
  // The same over the rows as matmul operands of type `op`: the blocks
  // themselves, or converted into the returned tensor (full's shape in op,
  // category cat; full itself when already of type op).
  Tensor for_operand_blocks(const kernels::KernelTable& k, DType op, const std::shared_ptr<CachingAllocator>& alloc,
                            MemCategory cat, const std::function<void(const Tensor& rows, int64_t first_row)>& f) const;
};

// W of layers that read one input x (q, k and v; gate and up): each
// backward_weight(x, dys[i]) with one pass over x for all of them.
void backward_weights(const kernels::KernelTable& k, const std::vector<const Linear*>& layers, const Tensor& x,
                      const std::vector<Tensor>& dys);

struct Norm {
  NormKind kind = NormKind::RMSNorm;
  Parameter* weight = nullptr;  // [d]
  Parameter* bias = nullptr;    // [d], LayerNorm only
  int64_t d = 0;
  double eps = 1e-5;

  struct Stats {
    Tensor mean, rstd;  // [n]; mean only for LayerNorm
  };
  Stats forward(const kernels::KernelTable& k, const Tensor& x, const Tensor& y,
                const std::shared_ptr<CachingAllocator>& alloc) const;
  // dx += dnorm/dx . dy (the residual stream's gradient is already there);
  // the weight (and bias) gradients accumulate in the same pass: they are
  // cheap and their per-micro-batch order is kept by the input-gradient order.
  void backward(const kernels::KernelTable& k, const Tensor& x, const Stats& s, const Tensor& dy,
                const Tensor& dx) const;
};

// Weight gradients of one segment for one micro-batch: run at once (fused
// backward) or queued and run by backward_weight (B/W split). Each job keeps
// the tensors it reads alive; `dy_changes` says the caller overwrites dy
// before the job runs, so a deferred job keeps a copy.
class WeightGrads {
 public:
  WeightGrads() = default;
  // token_blocks: the micro-batch's canonical token blocks (TokenBatch;
  // 0: none): every gradient here is then summed block by block over the
  // rows, the blocks in the tree (docs/math.md (M.74)).
  WeightGrads(bool defer, std::shared_ptr<CachingAllocator> alloc, int64_t token_blocks = 0)
      : defer_(defer), token_blocks_(token_blocks), alloc_(std::move(alloc)) {}
  bool deferred() const { return defer_; }
  // Queue the jobs that follow until release(), which runs them: a
  // tensor-parallel sublayer's weight gradients, held while its input
  // gradient is computed and run while that gradient's sum is in flight
  // (docs/math.md (M.78)). Held jobs end inside the sublayer: what they
  // keep stays workspace. No-ops when deferred (the jobs wait longer still).
  void hold();
  void release(const kernels::KernelTable& k);
  // Rows that are not the micro-batch's tokens (an expert's routed rows)
  // are summed as they come: 0 while they are written.
  int64_t token_blocks() const { return token_blocks_; }
  void set_token_blocks(int64_t blocks) { token_blocks_ = blocks; }
  void linear(const kernels::KernelTable& k, const Linear& l, const Tensor& x, const Tensor& dy, bool dy_changes);
  // Layers that read one input (backward_weights), as one job.
  void linears(const kernels::KernelTable& k, std::vector<const Linear*> layers, const Tensor& x,
               const std::vector<Tensor>& dys, bool dy_changes);
  // dbias += colsum(dy): a row-parallel layer's bias, added once after the
  // tensor-parallel reduction (block.h).
  void bias(const kernels::KernelTable& k, Parameter& bias, const Tensor& dy, bool dy_changes);
  // dtable[ids[i] - vocab_begin] += dout[i] for the ids inside the table's
  // rows (a vocabulary slice under tensor parallelism; vocab_begin 0 and
  // every id inside for a whole table).
  void embedding(const kernels::KernelTable& k, Parameter& table, const int32_t* ids, const Tensor& dout,
                 bool dout_changes, int64_t vocab_begin = 0);
  // fn now, or in its place among the queued jobs (a gradient lane switch).
  void call(std::function<void()> fn);
  void run(const kernels::KernelTable& k);  // the queued jobs, in order
  bool empty() const { return jobs_.empty(); }

 private:
  struct Job {
    std::vector<const Linear*> linears;  // with one dy each
    Parameter* bias = nullptr;
    Parameter* table = nullptr;
    const int32_t* ids = nullptr;
    int64_t vocab_begin = 0;
    Tensor x;
    std::vector<Tensor> dys;
    const void* dy_source = nullptr;  // what the last dy copies (two jobs reading one tensor share the copy)
    int64_t token_blocks = 0;         // WeightGrads::token_blocks when queued
    std::function<void()> fn;
  };
  Tensor keep(const kernels::KernelTable& k, const Tensor& t, bool changes) const;
  void weights_now(const kernels::KernelTable& k, const std::vector<const Linear*>& layers, const Tensor& x,
                   const std::vector<Tensor>& dys, int64_t blocks) const;
  void bias_now(const kernels::KernelTable& k, Parameter& bias, const Tensor& dy, int64_t blocks) const;
  void embedding_now(const kernels::KernelTable& k, Parameter& table, const int32_t* ids, const Tensor& dout,
                     int64_t vocab_begin, int64_t blocks) const;
  bool queues() const { return defer_ || holding_; }
  bool defer_ = false;
  bool holding_ = false;
  int64_t token_blocks_ = 0;
  std::shared_ptr<CachingAllocator> alloc_;
  std::vector<Job> jobs_;
};

}  // namespace meshtrain::model
