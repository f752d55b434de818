// `meshtrain ckpt inspect|verify|export|import|diff` (docs/checkpoints.md).
// DIR is a step directory or a checkpoint root with a `latest` pointer.
#pragma once

#include <string>

namespace meshtrain::app {

std::string ckpt_inspect(const std::string& dir);  // metadata and tensor table
std::string ckpt_verify(const std::string& dir);   // "OK ..." (throws on a bad digest)

struct ExportSummary {
  std::string text;  // what was written
};
// A checkpoint's model for other tools (docs/checkpoints.md): format
// "safetensors" (a Hugging Face directory: model.safetensors, config.json,
// generation_config.json, tokenizer files; dtype f32 or bf16) or "gguf" (one
// file for llama.cpp; dtype f32, f16, bf16 or q8_0). `out` is a directory or
// the weights file. Existing files are replaced only with `force`.
ExportSummary ckpt_export(const std::string& dir, const std::string& out, const std::string& format = "safetensors",
                          const std::string& dtype = "f32", bool progress = true, bool force = false);
// A parameters-only checkpoint from a safetensors file (config.json beside
// it); a root that already holds checkpoints only with `force`, NaN or
// infinite weights only with `allow_nonfinite`.
std::string ckpt_import(const std::string& file, const std::string& out_root, bool force = false,
                        bool allow_nonfinite = false);

struct DiffResult {
  bool identical = false;
  std::string text;
};
DiffResult ckpt_diff(const std::string& a, const std::string& b);

}  // namespace meshtrain::app
