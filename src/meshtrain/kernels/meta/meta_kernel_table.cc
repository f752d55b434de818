#include "meshtrain/kernels/meta/meta_kernel_table.h"

#include <algorithm>

#include "meshtrain/kernels/cpu/cpu_kernel_table.h"

namespace meshtrain::kernels {

namespace {

int64_t supervised(const int32_t* targets, int64_t n) {
  return targets ? std::count_if(targets, targets + n, [](int32_t t) { return t >= 0; }) : 0;
}

class MetaKernels final : public KernelTable {
 public:
  Device device() const override { return Device::Meta; }

  void gemm(bool, bool, double, const Tensor&, const Tensor&, double, const Tensor&) const override {}
  void gemm_onto(bool, bool, double, const Tensor&, const Tensor&, const Tensor&, const Tensor&) const override {}
  void gemm_shared_b(bool, bool, double, const std::vector<GemmRows>&, const Tensor&) const override {}
  bool gemm_block_tree(const std::vector<BlockTerm>& terms, bool, const Tensor& c) const override {
    return cpu_gemm_block_tree_runs(terms, c);  // the host's choice: its leaves, or none
  }
  void convert(const Tensor&, const Tensor&) const override {}
  void add_row_bias(const Tensor&, const Tensor&) const override {}
  void bias_grad(const Tensor&, const Tensor&) const override {}
  void add(const Tensor&, const Tensor&) const override {}
  void copy(const Tensor&, const Tensor&) const override {}
  void copy_columns(const Tensor&, const Tensor&, int64_t) const override {}
  void put_columns(const Tensor&, const Tensor&, int64_t) const override {}
  void fill(const Tensor&, double) const override {}
  void scale(const Tensor&, double) const override {}
  double sum_squares(const Tensor&) const override { return 0.0; }
  void block_sum_squares(const Tensor& x, int64_t block, double* out) const override {
    std::fill(out, out + (block > 0 ? (x.numel() + block - 1) / block : 0), 0.0);
  }
  bool all_finite(const Tensor&) const override { return true; }
  double sum_in_order(const Tensor&, const std::vector<std::pair<int64_t, int64_t>>&) const override { return 0.0; }

  void embedding_forward(const int32_t*, const Tensor&, const Tensor&) const override {}
  void embedding_backward(const int32_t*, const Tensor&, const Tensor&) const override {}
  void norm_forward(const Tensor&, const Tensor&, const Tensor&, double, const Tensor&, const Tensor&,
                    const Tensor&) const override {}
  void norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                     const Tensor&, const Tensor&) const override {}
  void rope(const Tensor&, const int32_t*, int64_t, int64_t, const RopeTable&, bool) const override {}
  void swiglu_forward(const Tensor&, const Tensor&, const Tensor&) const override {}
  void swiglu_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) const override {}
  void gelu_forward(const Tensor&, const Tensor&) const override {}
  void gelu_backward(const Tensor&, const Tensor&, const Tensor&) const override {}
  void attention_forward(const AttentionShape&, const Tensor&, const Tensor&, const Tensor&, const int32_t*, double,
                         const Tensor&, const Tensor&) const override {}
  void attention_backward(const AttentionShape&, const Tensor&, const Tensor&, const Tensor&, const int32_t*, double,
                          const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const Tensor&) const override {}
  CrossEntropyResult cross_entropy(const Tensor& logits, const int32_t* targets) const override {
    return {0.0, supervised(targets, logits.dim(0))};
  }
  CrossEntropyResult cross_entropy_backward(const Tensor& logits, const int32_t* targets, double,
                                            const Tensor&) const override {
    return {0.0, supervised(targets, logits.dim(0))};
  }

  void softmax_state_init(const SoftmaxStateRef&) const override {}
  void attention_partial_forward(const AttentionShape&, const Tensor&, AttentionSpan, const Tensor&, const Tensor&,
                                 AttentionSpan, double, const SoftmaxStateRef&) const override {}
  void softmax_state_finalize(const AttentionShape&, int64_t, const SoftmaxStateRef&, const Tensor&,
                              const Tensor&) const override {}
  void attention_partial_backward(const AttentionShape&, const Tensor&, AttentionSpan, const Tensor&, const Tensor&,
                                  AttentionSpan, double, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                  const Tensor&, const Tensor&) const override {}
  void attention_chunk_tree_backward(const AttentionShape&, const std::vector<AttentionChunkRef>&, const Tensor&,
                                     const Tensor&, double, const Tensor&, const Tensor&) const override {}

  void embedding_slice_forward(const int32_t*, const Tensor&, int64_t, int64_t, const Tensor&) const override {}
  void embedding_slice_backward(const int32_t*, const Tensor&, int64_t, const Tensor&) const override {}
  void vocab_ce_max(const Tensor&, const int32_t*, int64_t, const Tensor&) const override {}
  void vocab_ce_sums(const Tensor&, const int32_t*, int64_t, const Tensor&, const Tensor&, const Tensor&,
                     const Tensor&, int64_t, int64_t) const override {}
  CrossEntropyResult vocab_ce_finish(const int32_t* targets, int64_t, const Tensor& row_max, const Tensor&,
                                     const Tensor&, double, const Tensor&) const override {
    return {0.0, supervised(targets, row_max.numel())};
  }

  MoeRouting route(const MoeRoutingConfig& cfg, const Tensor& logits) const override {
    return balanced_routing(cfg, logits.dim(0));
  }
  void router_backward(const MoeRouting&, const MoeRoutingConfig&, const double*, double,
                       const Tensor&) const override {}
  void gather_rows(const Tensor&, const int32_t*, int64_t, const Tensor&) const override {}
  void add_rows(const Tensor&, const int32_t*, const Tensor&, const int32_t*, const double*,
                int64_t) const override {}
  void dot_rows(const Tensor&, const int32_t*, const Tensor&, const int32_t*, double* out,
                int64_t count) const override {
    std::fill(out, out + count, 0.0);
  }

  void adamw(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const AdamWHyper&, double,
             const Tensor&) const override {}
};

}  // namespace

const KernelTable& meta_kernel_table() {
  static const MetaKernels table;
  return table;
}

}  // namespace meshtrain::kernels
