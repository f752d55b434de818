#include "meshtrain/model/layers.h"

namespace meshtrain::model {

namespace {
// The adding writers of a gradient: a stale one (Parameter::grad_stale) is zeroed first.
void add_bias_grad(const kernels::KernelTable& k, Parameter& bias, const Tensor& dy) {
  bias.settle_grad();
  k.bias_grad(bias.grad, dy);
}

void add_embedding_grad(const kernels::KernelTable& k, Parameter& table, const int32_t* ids, const Tensor& dout,
                        int64_t vocab_begin) {
  table.settle_grad();
  k.embedding_slice_backward(ids, dout, vocab_begin, table.grad);
}
}  // namespace

Tensor as_operand(const kernels::KernelTable& k, const Tensor& t, DType dtype,
                  const std::shared_ptr<CachingAllocator>& alloc, MemCategory cat) {
  if (!t.defined() || t.dtype() == dtype) return t;
  Tensor out = Tensor::empty(t.shape(), dtype, alloc, cat);
  k.convert(out, t);
  return out;
}

void Linear::forward(const kernels::KernelTable& k, const Tensor& x, const Tensor& y, const Tensor& base) const {
  if (base.defined())
    k.gemm_onto(false, true, 1.0, x, weight->value, base, y);
  else
    k.gemm(false, true, 1.0, x, weight->value, 0.0, y);
  if (bias) k.add_row_bias(y, bias->value);
}

void Linear::backward_input(const kernels::KernelTable& k, const Tensor& dy, const Tensor& dx,
                            bool accumulate_dx) const {
  k.gemm(false, false, 1.0, dy, weight->value, accumulate_dx ? 1.0 : 0.0, dx);
}

void Linear::backward_weight(const kernels::KernelTable& k, const Tensor& x, const Tensor& dy) const {
  backward_weights(k, {this}, x, {dy});
}

void backward_weights(const kernels::KernelTable& k, const std::vector<const Linear*>& layers, const Tensor& x,
                      const std::vector<Tensor>& dys) {
  MT_CHECK(layers.size() == dys.size(), layers.size(), " layers with ", dys.size(), " output gradients");
  std::vector<kernels::KernelTable::GemmRows> rows;
  for (size_t i = 0; i < layers.size(); ++i) {
    Parameter& w = *layers[i]->weight;
    rows.push_back({dys[i], w.take_first_grad_write() ? 0.0 : 1.0, w.grad});
  }
  k.gemm_shared_b(true, false, 1.0, rows, x);
  for (size_t i = 0; i < layers.size(); ++i)
    if (layers[i]->bias) add_bias_grad(k, *layers[i]->bias, dys[i]);
}

Norm::Stats Norm::forward(const kernels::KernelTable& k, const Tensor& x, const Tensor& y,
                          const std::shared_ptr<CachingAllocator>& alloc) const {
  const int64_t n = x.numel() / d;
  Stats s;
  s.rstd = Tensor::empty(Shape{n}, x.dtype(), alloc, MemCategory::Activations);
  if (kind == NormKind::LayerNorm) s.mean = Tensor::empty(Shape{n}, x.dtype(), alloc, MemCategory::Activations);
  k.norm_forward(x, weight->value, bias ? bias->value : Tensor(), eps, y, s.mean, s.rstd);
  return s;
}

void Norm::backward(const kernels::KernelTable& k, const Tensor& x, const Stats& s, const Tensor& dy,
                    const Tensor& dx) const {
  weight->settle_grad();
  if (bias) bias->settle_grad();
  k.norm_backward(x, weight->value, s.mean, s.rstd, dy, dx, weight->grad, bias ? bias->grad : Tensor());
}

Tensor WeightGrads::keep(const kernels::KernelTable& k, const Tensor& t, bool changes) const {
  if (!changes) return t;
  if (!jobs_.empty() && !jobs_.back().dys.empty()) {
    const Job& last = jobs_.back();
    const Tensor& copied = last.dys.back();
    if (last.dy_source == t.raw() && copied.raw() != t.raw() && copied.numel() == t.numel())
      return copied;  // the previous job already copied it
  }
  Tensor copy = Tensor::empty(t.shape(), t.dtype(), alloc_, MemCategory::Activations);
  k.copy(copy, t);
  return copy;
}

void WeightGrads::linear(const kernels::KernelTable& k, const Linear& l, const Tensor& x, const Tensor& dy,
                         bool dy_changes) {
  linears(k, {&l}, x, {dy}, dy_changes);
}

void WeightGrads::linears(const kernels::KernelTable& k, std::vector<const Linear*> layers, const Tensor& x,
                          const std::vector<Tensor>& dys, bool dy_changes) {
  if (!defer_) return backward_weights(k, layers, x, dys);
  Job j;
  j.linears = std::move(layers);
  j.x = x;
  for (const Tensor& dy : dys) j.dys.push_back(keep(k, dy, dy_changes));
  j.dy_source = dys.back().raw();
  jobs_.push_back(std::move(j));
}

void WeightGrads::bias(const kernels::KernelTable& k, Parameter& bias, const Tensor& dy, bool dy_changes) {
  if (!defer_) return add_bias_grad(k, bias, dy);
  Job j;
  j.bias = &bias;
  j.dys = {keep(k, dy, dy_changes)};
  j.dy_source = dy.raw();
  jobs_.push_back(std::move(j));
}

void WeightGrads::embedding(const kernels::KernelTable& k, Parameter& table, const int32_t* ids,
                            const Tensor& dout, bool dout_changes, int64_t vocab_begin) {
  if (!defer_) return add_embedding_grad(k, table, ids, dout, vocab_begin);
  Job j;
  j.table = &table;
  j.ids = ids;
  j.vocab_begin = vocab_begin;
  j.dys = {keep(k, dout, dout_changes)};
  j.dy_source = dout.raw();
  jobs_.push_back(std::move(j));
}

void WeightGrads::call(std::function<void()> fn) {
  if (!defer_) return fn();
  Job j;
  j.fn = std::move(fn);
  jobs_.push_back(std::move(j));
}

void WeightGrads::run(const kernels::KernelTable& k) {
  for (Job& j : jobs_) {
    if (j.fn)
      j.fn();
    else if (!j.linears.empty())
      backward_weights(k, j.linears, j.x, j.dys);
    else if (j.bias)
      add_bias_grad(k, *j.bias, j.dys[0]);
    else
      add_embedding_grad(k, *j.table, j.ids, j.dys[0], j.vocab_begin);
  }
  jobs_.clear();
}

}  // namespace meshtrain::model
