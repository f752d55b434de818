// Training checkpoint <-> deployment artifact (SPEC S10: different formats).
// Export consolidates the parameters of a checkpoint into one safetensors
// file with HF names plus config.json beside it; import turns such a file
// into a step-00000000 checkpoint holding parameters only, which training
// can start from (metadata "imported" tells the trainer to start the
// optimizer, data position and schedule fresh).
#pragma once

#include <string>

#include "meshtrain/checkpoint/hf_format.h"
#include "meshtrain/checkpoint/reader.h"
#include "meshtrain/core/status_line.h"

namespace meshtrain::checkpoint {

struct ExportResult {
  std::string safetensors_path, config_path;
  std::string tokenizer_path;  // tokenizer.model beside it (SentencePiece), else ""
  HfArch arch = HfArch::Llama;
  size_t tensors = 0;
  uint64_t bytes = 0;
};

// Needs metadata "model_config" in the checkpoint. The checkpoint keeps f32
// (master) weights; `dtype` (f32 or bf16, rounded once to nearest even) is
// what the deployment file stores. A SentencePiece tokenizer is written
// beside the file as tokenizer.model; config.json gets the special-token ids
// of the checkpoint's tokenizer. Refuses an `out_path` that is a directory
// or lies inside a checkpoint, and replaces an existing file (or the
// config.json beside it) only when `overwrite`. Nothing is left behind on
// failure.
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
