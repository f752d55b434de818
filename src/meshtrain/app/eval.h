// `meshtrain eval`: the loss of a trained model on held-out data, without
// training. The numbers are those `train` prints for its validation split
// on the same data and settings: the same evaluation (Trainer::evaluate)
// runs on one rank, with the checkpoint's precision policy, over the same
// rows whatever layout trained it; docs/cli.md states the tolerance per
// policy.
#pragma once

#include <cstdint>
#include <string>

namespace meshtrain::app {

struct EvalRequest {
  std::string from;              // checkpoint dir or model.safetensors
  std::string data;              // prepared dataset dir, or
  std::string split = "val";     // val (validation) | train
  std::string text;              // a text/JSONL/fortune file tokenized here
  std::string format = "auto";   // of `text`
  int64_t seq_len = 0;           // 0: the checkpoint's data.seq_len, else the model's max_seq_len
  std::string mode;              // packed | padded; "": the checkpoint's, else packed
  int64_t batch = 0;             // rows per forward; 0: the checkpoint's micro_batch, else 8
  std::string precision;         // fp32 | bf16 | fp16; "": the checkpoint's policy, else fp32
  int64_t rows = 0;              // rows evaluated; 0: all
};

struct EvalReport {
  std::string source, data;
  int64_t seq_len = 0, batch = 0;
  std::string mode, precision;
  double loss_sum = 0;           // nats
  int64_t supervised = 0;        // supervised target tokens
  int64_t target_bytes = 0;      // bytes of text behind them
  double nats_per_token = 0;
  double bits_per_byte = 0;
};

EvalReport evaluate(const EvalRequest& request);

}  // namespace meshtrain::app
