// Training checkpoint <-> deployment artifact (docs/checkpoints.md).
// Export consolidates the parameters of a checkpoint into a Hugging Face
// directory (safetensors with HF names, config.json, tokenizer files) or a
// GGUF file for llama.cpp; import turns a safetensors file
// into a step-00000000 checkpoint holding parameters only, which training
// can start from (metadata "imported" tells the trainer to start the
// optimizer, data position and schedule fresh).
#pragma once

#include <string>

#include "meshtrain/checkpoint/gguf_file.h"
#include "meshtrain/checkpoint/hf_format.h"
#include "meshtrain/checkpoint/reader.h"
#include "meshtrain/core/status_line.h"

namespace meshtrain::checkpoint {

enum class ExportFormat { Safetensors, Gguf };

struct ExportOptions {
  ExportFormat format = ExportFormat::Safetensors;
  DType dtype = DType::F32;             // safetensors: f32 or bf16 (rounded once to nearest even)
  GgmlType gguf_type = GgmlType::F32;   // gguf: f32, f16, bf16 or q8_0
  bool overwrite = false;
  ProgressFn progress;
};

struct ExportResult {
  std::string model_path;          // the weights file
  std::vector<std::string> files;  // every file written, the weights first
  HfArch arch = HfArch::Llama;
  size_t tensors = 0;
  uint64_t bytes = 0;              // of the weights
  std::vector<std::string> notes;  // tensors stored in another type than asked, and why
};

// Needs metadata "model_config" in the checkpoint (f32 master weights).
// `out` is a directory (existing, ending in '/', or without the format's
// extension) that receives model.safetensors or model.gguf, or the weights
// file itself (.safetensors / .gguf). Safetensors comes with the Hugging
// Face files beside it: config.json, generation_config.json and, when the
// checkpoint has a tokenizer, tokenizer_files.h's files. GGUF is one file
// (gguf_export.h). Refuses an `out` inside a checkpoint, and replaces an
// existing file only when `overwrite`. Nothing is left behind on failure.
ExportResult export_model(const CheckpointReader& reader, const std::string& out, const ExportOptions& options);

// export_model in safetensors.
ExportResult export_safetensors(const CheckpointReader& reader, const std::string& out_path,
                                DType dtype = DType::F32, const ProgressFn& progress = {}, bool overwrite = false);

// Needs config.json beside `path`; the tokenizer is the one recorded in the
// file's metadata, else tokenizer.model beside it, else (vocabulary 259) the
// byte tokenizer. Returns the checkpoint directory written under out_root
// (which also gets its `latest` pointer). Refuses an out_root that already
// holds checkpoints (their `latest` would move to the imported step 0)
// unless `overwrite`, and always one that is or lies inside a step directory
// or below another checkpoint root. NaN or infinite weights are refused
// unless `allow_nonfinite`.
std::string import_safetensors(const std::string& path, const std::string& out_root, bool overwrite = false,
                               bool allow_nonfinite = false);

// True when `dir` or one of its ancestors is a checkpoint step directory
// (holds manifest.json) or a checkpoint root (holds `latest`).
bool inside_checkpoint(const std::string& dir);

}  // namespace meshtrain::checkpoint
