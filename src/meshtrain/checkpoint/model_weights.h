// Moving model parameters between checkpoints / safetensors files and a
// ParameterStore (tensor names are ParamSpec names in checkpoints, HF names
// in safetensors). Used by generate, export/import and the trainer's
// weight-only restore.
#pragma once

#include <string>

#include "meshtrain/checkpoint/hf_format.h"
#include "meshtrain/checkpoint/reader.h"
#include "meshtrain/checkpoint/safetensors.h"
#include "meshtrain/core/status_line.h"
#include "meshtrain/model/transformer.h"

namespace meshtrain::checkpoint {

// Every parameter of `store`, full tensors, converted to f32 (any float
// dtype in the checkpoint). Shapes are checked first; CheckpointError names
// the tensor.
void load_parameters(const CheckpointReader& reader, model::ParameterStore& store);
void load_model_weights(const CheckpointReader& reader, model::Transformer& model);
// From a Llama- or GPT-2-named safetensors file (hf_format.h mapping).
void load_model_weights(const SafetensorsReader& file, model::Transformer& model);

// All parameters of `cfg` as f32 values keyed by ParamSpec name.
// `progress` ("reading", tensors done, total) is called after each tensor.
ParamValues read_param_values(const CheckpointReader& reader, const model::ModelConfig& cfg,
                              const ProgressFn& progress = {});
ParamValues read_param_values(const SafetensorsReader& file, const model::ModelConfig& cfg);
ParamValues param_values(model::ParameterStore& store);
void set_param_values(model::ParameterStore& store, const ParamValues& values);

// The model config a checkpoint or safetensors file describes: checkpoint
// metadata "model_config"; for safetensors, config.json beside the file
// (HF fields), refined by __metadata__ "meshtrain.model_config" when present.
model::ModelConfig model_config_of(const CheckpointReader& reader);
model::ModelConfig model_config_of(const SafetensorsReader& file);

}  // namespace meshtrain::checkpoint
