// Parameter storage: one flat value buffer and one flat gradient buffer per
// unit (FSDP-style), each parameter a view into them, in the dtypes of the
// precision policy (values: params, gradients: grad_accum). Initialization
// is a pure function of (seed, parameter name, GLOBAL element index) via the
// counter RNG, so any sharding of a parameter initializes identically.
//
// The store either owns its buffers (materialize = true: a model on its own)
// or leaves them to a parallel engine that binds, releases and re-binds unit
// buffers (ZeRO: gathered parameters, transient gradients). Units the
// partition does not hold have no buffers.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "meshtrain/core/precision.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/model/param_spec.h"

namespace meshtrain::model {

struct Parameter {
  const ParamSpec* spec = nullptr;
  Tensor value;  // view into the unit's flat value buffer
  Tensor grad;   // view into the unit's flat grad buffer
  // The gradient holds no sum yet this window: it reads as zero but its
  // memory is stale (ParameterStore::zero_grads_lazily), so the first
  // writer overwrites instead of adding: a pass over the gradients saved.
  bool grad_stale = false;

  // For a writer that can overwrite (a GEMM's beta 0): whether it must,
  // and from now on it adds.
  bool take_first_grad_write() { return std::exchange(grad_stale, false); }
  // For a writer that can only add (a scatter, a norm's sums): zeroes a
  // stale gradient first.
  void settle_grad();
};

class ParameterStore {
 public:
  ParameterStore(ModelSpec spec, const PrecisionPolicy& precision, const std::shared_ptr<CachingAllocator>& alloc,
                 bool materialize = true);
  ParameterStore(const ParameterStore&) = delete;
  ParameterStore& operator=(const ParameterStore&) = delete;

  void initialize(uint64_t seed);  // every bound value buffer
  void zero_grads();               // every bound grad buffer

  // Unit u's gradients read as zero from now on without a pass over them:
  // each parameter's first writer overwrites (Parameter::grad_stale).
  // Whoever reads them as a whole (reductions, the optimizer) calls
  // settle_grads(u) first, which zeroes what no backward wrote. The unit's
  // buffer outside its parameters (padding) must already be zero.
  void zero_grads_lazily(int u);
  void settle_grads(int u);
  // bind_unit_grads of a buffer whose contents are garbage, zeroed lazily:
  // what lies between and after the parameters (alignment, padding) is
  // zeroed now, the parameters are stale.
  void bind_unit_grads_lazily(int u, const Tensor& flat);
  // Fill stale gradients with NaN instead of leaving them: a writer that
  // adds without asking turns the loss NaN (ExecOptions::poison_stale_grads).
  void set_poison_stale_grads(bool on) { poison_stale_grads_ = on; }

  // Points unit `u`'s parameter views at `flat` (numel >= the unit's; extra
  // elements are padding). An undefined tensor unbinds.
  void bind_unit_values(int u, const Tensor& flat);
  void bind_unit_grads(int u, const Tensor& flat);
  // Reproducible mode under expert parallelism: an expert's owner keeps
  // each source rank's gradient apart (parallel/grad_tree.h, lanes). The
  // engine installs how to point unit u's gradient views at a source's
  // lane; layers call switch_grad_lane before each source's blocks.
  using GradLaneSwitch = std::function<void(int unit, int lane)>;
  void set_grad_lane_switch(GradLaneSwitch f) { lane_switch_ = std::move(f); }
  bool has_grad_lanes() const { return bool(lane_switch_); }
  void switch_grad_lane(int unit, int lane) const {
    if (lane_switch_) lane_switch_(unit, lane);
  }

  const ModelSpec& spec() const { return spec_; }
  const PrecisionPolicy& precision() const { return precision_; }
  Parameter& get(int index) { return params_[size_t(index)]; }
  const Parameter& get(int index) const { return params_[size_t(index)]; }
  Parameter& find(const std::string& name);
  Parameter* find_or_null(const std::string& name);
  int size() const { return int(params_.size()); }
  Tensor& unit_values(int unit) { return unit_values_[size_t(unit)]; }
  Tensor& unit_grads(int unit) { return unit_grads_[size_t(unit)]; }
  int num_units() const { return int(spec_.units.size()); }

 private:
  void bind(int u, const Tensor& flat, Tensor Parameter::*field, std::vector<Tensor>& unit_buffers);
  ModelSpec spec_;
  PrecisionPolicy precision_;
  std::vector<Tensor> unit_values_, unit_grads_;
  std::vector<Parameter> params_;
  GradLaneSwitch lane_switch_;
  bool poison_stale_grads_ = false;
};

// Fills `out` (dtype of the tensor) with parameter `spec`'s initial values
// for its LOCAL flat element range [begin, begin + out.numel()).
void init_param_range(const ParamSpec& spec, uint64_t seed, int64_t begin, const Tensor& out);

}  // namespace meshtrain::model
