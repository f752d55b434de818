#include "meshtrain/model/parameters.h"

#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "meshtrain/core/rng.h"
#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain::model {

namespace {

template <typename T>
void init_typed(const ParamSpec& spec, uint64_t seed, int64_t begin, int64_t n, T* out) {
  switch (spec.init) {
    case InitKind::Ones:
      for (int64_t i = 0; i < n; ++i) out[i] = T(1);
      return;
    case InitKind::Zeros:
      for (int64_t i = 0; i < n; ++i) out[i] = T(0);
      return;
    case InitKind::Normal: {
      const CounterRng rng(seed);
      const uint64_t stream = stream_id(spec.name.c_str());
      const T std = T(spec.init_std);
#pragma omp parallel for if (n > 65536)
      for (int64_t i = 0; i < n; ++i) out[i] = T(rng.normal(stream, uint64_t(spec.global_flat(begin + i)))) * std;
      return;
    }
  }
}

}  // namespace

void init_param_range(const ParamSpec& spec, uint64_t seed, int64_t begin, const Tensor& out) {
  MT_CHECK(begin >= 0 && begin + out.numel() <= spec.numel(), spec.name, ": init range outside the local tensor");
  if (out.device() == Device::Meta) return;  // sizes without values (core/meta_memory.h)
  switch (out.dtype()) {
    case DType::F32: return init_typed(spec, seed, begin, out.numel(), out.data<float>());
    case DType::F64: return init_typed(spec, seed, begin, out.numel(), out.data<double>());
    case DType::BF16:
    case DType::F16: {
      // The f32 initial value rounded once: what an f32 master converts to.
      std::vector<float> f(static_cast<size_t>(out.numel()));
      init_typed(spec, seed, begin, out.numel(), f.data());
      kernels::kernels_for(out).convert(out, Tensor::wrap(f.data(), out.shape(), DType::F32));
      return;
    }
    default: MT_THROW(ConfigError, "parameters initialize in a floating type, not ", dtype_name(out.dtype()));
  }
}

ParameterStore::ParameterStore(ModelSpec spec, const PrecisionPolicy& precision,
                               const std::shared_ptr<CachingAllocator>& alloc, bool materialize)
    : spec_(std::move(spec)),
      precision_(precision),
      unit_values_(spec_.units.size()),
      unit_grads_(spec_.units.size()) {
  params_.resize(spec_.params.size());
  for (size_t i = 0; i < spec_.params.size(); ++i) params_[i].spec = &spec_.params[i];
  if (!materialize) return;
  for (int u = 0; u < num_units(); ++u) {
    if (!spec_.units[size_t(u)].held) continue;
    const int64_t n = spec_.units[size_t(u)].numel;
    bind_unit_values(u, Tensor::zeros(Shape{n}, precision_.params, alloc, MemCategory::Params));
    bind_unit_grads(u, Tensor::zeros(Shape{n}, precision_.grad_accum, alloc, MemCategory::Grads));
  }
}

void ParameterStore::bind(int u, const Tensor& flat, Tensor Parameter::*field, std::vector<Tensor>& unit_buffers) {
  const ParamUnit& unit = spec_.units[size_t(u)];
  MT_CHECK(!flat.defined() || flat.numel() >= unit.numel, "unit ", u, " needs ", unit.numel, " elements");
  unit_buffers[size_t(u)] = flat.defined() ? flat.flat_slice(0, unit.numel) : Tensor();
  for (int i : unit.params) {
    const ParamSpec& p = spec_.params[size_t(i)];
    params_[size_t(i)].*field =
        flat.defined() ? flat.flat_slice(p.unit_offset, p.unit_offset + p.numel()).view(p.shape) : Tensor();
    if (field == &Parameter::grad) params_[size_t(i)].grad_stale = false;  // a new buffer holds what it holds
  }
}

void ParameterStore::bind_unit_values(int u, const Tensor& flat) { bind(u, flat, &Parameter::value, unit_values_); }
void ParameterStore::bind_unit_grads(int u, const Tensor& flat) { bind(u, flat, &Parameter::grad, unit_grads_); }

void ParameterStore::initialize(uint64_t seed) {
  for (auto& p : params_)
    if (p.value.defined()) init_param_range(*p.spec, seed, 0, p.value.flat_slice(0, p.value.numel()));
}

void ParameterStore::zero_grads() {
  for (auto& g : unit_grads_)
    if (g.defined()) kernels::kernels_for(g).fill(g, 0.0);
}

void Parameter::settle_grad() {
  if (take_first_grad_write()) kernels::kernels_for(grad).fill(grad, 0.0);
}

void ParameterStore::zero_grads_lazily(int u) {
  for (int i : spec_.units[size_t(u)].params) {
    Parameter& p = params_[size_t(i)];
    if (!p.grad.defined()) continue;
    if (poison_stale_grads_) kernels::kernels_for(p.grad).fill(p.grad, std::numeric_limits<double>::quiet_NaN());
    p.grad_stale = true;
  }
}

void ParameterStore::bind_unit_grads_lazily(int u, const Tensor& flat) {
  bind_unit_grads(u, flat);
  const auto& k = kernels::kernels_for(flat);
  int64_t end = 0;  // of the parameters so far, in storage order
  for (int i : spec_.units[size_t(u)].params) {
    const ParamSpec& p = spec_.params[size_t(i)];
    if (p.unit_offset > end) k.fill(flat.flat_slice(end, p.unit_offset), 0.0);
    end = p.unit_offset + p.numel();
  }
  if (flat.numel() > end) k.fill(flat.flat_slice(end, flat.numel()), 0.0);
  zero_grads_lazily(u);
}

void ParameterStore::settle_grads(int u) {
  for (int i : spec_.units[size_t(u)].params) {
    Parameter& p = params_[size_t(i)];
    if (p.grad.defined()) p.settle_grad();
  }
}

Parameter* ParameterStore::find_or_null(const std::string& name) {
  for (auto& p : params_)
    if (p.spec->name == name) return &p;
  return nullptr;
}

Parameter& ParameterStore::find(const std::string& name) {
  if (Parameter* p = find_or_null(name)) return *p;
  MT_THROW(InternalError, "no parameter named '", name, "' on this rank");
}

}  // namespace meshtrain::model
