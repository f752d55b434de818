#include "meshtrain/data/loader.h"

#include "meshtrain/core/error.h"

namespace meshtrain::data {

const char* batch_mode_name(BatchMode m) { return m == BatchMode::Packed ? "packed" : "padded"; }

BatchMode parse_batch_mode(const std::string& name) {
  if (name == "packed") return BatchMode::Packed;
  if (name == "padded") return BatchMode::Padded;
  MT_THROW(ConfigError, "unknown batch mode '", name, "' (use packed or padded)");
}

LoaderConfig LoaderConfig::validation(BatchMode mode, int64_t seq_len, int64_t seq_multiple) {
  LoaderConfig c;
  c.mode = mode;
  c.seq_len = seq_len;
  c.seq_multiple = seq_multiple;
  c.bucket_pool = 1;
  c.shuffle = false;
  c.max_epochs = 1;
  return c;
}

// ------------------------------------------------------------- state JSON

void to_json(nlohmann::json& j, const LoaderState& s) {
  j = {{"version", 1},
       {"mode", batch_mode_name(s.mode)},
       {"seq_len", s.seq_len},
       {"num_documents", s.num_documents},
       {"sampler", s.sampler},
       {"carry", s.carry},
       {"pool",
        {{"index", s.pool_index}, {"start", s.pool_start}, {"window_rows", s.pool_window_rows},
         {"emitted", s.pool_emitted}}},
       {"windows", s.windows},
       {"rows", s.rows}};
}

void from_json(const nlohmann::json& j, LoaderState& s) {
  try {
    MT_REQUIRE(DataError, j.at("version").get<int>() == 1, "unknown loader state version ", j.at("version").dump());
    s.mode = parse_batch_mode(j.at("mode").get<std::string>());
    s.seq_len = j.at("seq_len").get<int64_t>();
    s.num_documents = j.at("num_documents").get<int64_t>();
    s.sampler = j.at("sampler").get<SamplerState>();
    s.carry = j.at("carry").get<PackCarry>();
    const auto& p = j.at("pool");
    s.pool_index = p.at("index").get<int64_t>();
    s.pool_start = p.at("start").get<SamplerState>();
    s.pool_window_rows = p.at("window_rows").get<int64_t>();
    s.pool_emitted = p.at("emitted").get<int64_t>();
    s.windows = j.at("windows").get<int64_t>();
    s.rows = j.at("rows").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    MT_THROW(DataError, "malformed loader state: ", e.what());
  } catch (const ConfigError& e) {
    MT_THROW(DataError, "malformed loader state: ", e.what());
  }
}

// ------------------------------------------------------------- loader

namespace {

const TokenDataset& checked(const TokenDataset& ds, const LoaderConfig& cfg) {
  MT_REQUIRE(ConfigError, cfg.seq_len > 0, "seq_len must be > 0, got ", cfg.seq_len);
  MT_REQUIRE(ConfigError, cfg.seq_multiple >= 1 && cfg.seq_len % cfg.seq_multiple == 0, "seq_len ", cfg.seq_len,
             " is not a multiple of ", cfg.seq_multiple);
  MT_REQUIRE(ConfigError, cfg.bucket_pool > 0, "bucket_pool must be > 0, got ", cfg.bucket_pool);
  bool usable = false;
  for (int64_t d = 0; d < ds.num_documents() && !usable; ++d) usable = ds.document_length(d) >= 2;
  // An endless stream over documents without a single (input, target) pair would never fill a row.
  MT_REQUIRE(DataError, usable, "split '", ds.split(), "' of ", ds.source(), " has no document with 2 or more tokens (",
             ds.num_documents(), " documents)");
  return ds;
}

}  // namespace

BatchLoader::BatchLoader(const TokenDataset& dataset, LoaderConfig config)
    : ds_(checked(dataset, config)),
      cfg_(config),
      sampler_(dataset.num_documents(), config.seed, config.shuffle, config.max_epochs) {}

bool BatchLoader::exhausted() const {
  if (!sampler_.exhausted()) return false;
  return cfg_.mode == BatchMode::Packed ? carry_.doc < 0 : !pool_.has_next();
}

void BatchLoader::plan_packed(int64_t window_rows) {
  window_.clear(cfg_.seq_len);
  for (int64_t r = 0; r < window_rows; ++r)
    if (!plan_packed_row(ds_, sampler_, carry_, cfg_.seq_len, &window_)) break;
}

void BatchLoader::plan_padded(int64_t window_rows) {
  // Changing W inside a pool would silently re-cut it; resume with the same W.
  MT_REQUIRE(ConfigError, !pool_.has_next() || pool_.window_rows == window_rows, "window of ", window_rows,
             " rows requested while the current length-bucket pool was cut into windows of ", pool_.window_rows,
             " rows (keep R*G*B fixed until the pool is used up)");
  if (!pool_.has_next()) {
    if (sampler_.exhausted()) {
      window_.clear(0);
      return;
    }
    draw_bucket_pool(ds_, sampler_, cfg_.seq_len, window_rows, cfg_.bucket_pool, cfg_.seed, pools_drawn_++, &pool_);
    if (!pool_.has_next()) {
      window_.clear(0);
      return;
    }
  }
  plan_padded_window(ds_, pool_, cfg_.seq_len, &window_, cfg_.seq_multiple);
}

const Window& BatchLoader::next_window(int64_t window_rows) {
  MT_REQUIRE(ConfigError, window_rows > 0, "window_rows must be > 0, got ", window_rows);
  if (cfg_.mode == BatchMode::Packed)
    plan_packed(window_rows);
  else
    plan_padded(window_rows);
  if (window_.rows() > 0) ++windows_;
  rows_ += window_.rows();
  return window_;
}

bool BatchLoader::next_window(int64_t window_rows, int64_t first_row, int64_t n_rows, Batch* out) {
  MT_REQUIRE(ConfigError, first_row >= 0 && n_rows >= 0 && first_row + n_rows <= window_rows, "rows [", first_row,
             ", ", first_row + n_rows, ") are not inside a window of ", window_rows);
  next_window(window_rows);
  window_.materialize(ds_, first_row, n_rows, out);
  return window_.rows() > 0;
}

LoaderState BatchLoader::state() const {
  LoaderState s;
  s.mode = cfg_.mode;
  s.seq_len = cfg_.seq_len;
  s.num_documents = ds_.num_documents();
  s.sampler = sampler_.state();
  s.carry = carry_;
  s.pool_index = pools_drawn_;
  if (pool_.has_next()) {
    s.pool_start = pool_.start;
    s.pool_window_rows = pool_.window_rows;
    s.pool_emitted = pool_.emitted;
  } else {
    s.pool_start = sampler_.state();
  }
  s.windows = windows_;
  s.rows = rows_;
  return s;
}

void BatchLoader::restore(const LoaderState& s) {
  MT_REQUIRE(DataError, s.mode == cfg_.mode && s.seq_len == cfg_.seq_len, "loader state is for ",
             batch_mode_name(s.mode), " rows of ", s.seq_len, " but the loader is configured for ",
             batch_mode_name(cfg_.mode), " rows of ", cfg_.seq_len);
  MT_REQUIRE(DataError, s.num_documents == ds_.num_documents(), "loader state was saved on a split of ",
             s.num_documents, " documents but ", ds_.source(), " has ", ds_.num_documents());
  MT_REQUIRE(DataError, s.carry.doc < 0 || (s.carry.doc < ds_.num_documents() && s.carry.offset >= 0 &&
                                            s.carry.offset < ds_.document_length(s.carry.doc) - 1),
             "loader state carries document ", s.carry.doc, " offset ", s.carry.offset, " which does not fit ",
             ds_.source());
  MT_REQUIRE(DataError, s.pool_window_rows >= 0 && s.pool_emitted >= 0 && s.pool_index >= 0,
             "loader state has a negative pool field");
  carry_ = s.carry;
  pool_ = BucketPool{};
  pools_drawn_ = s.pool_index;
  if (s.pool_window_rows > 0) {
    // Redraw the active pool from where it started; it must end where the saved sampler is.
    MT_REQUIRE(DataError, s.pool_index > 0, "loader state has an active pool but pool index 0");
    sampler_.restore(s.pool_start);
    draw_bucket_pool(ds_, sampler_, cfg_.seq_len, s.pool_window_rows, cfg_.bucket_pool, cfg_.seed,
                     s.pool_index - 1, &pool_);
    MT_REQUIRE(DataError, sampler_.state() == s.sampler && s.pool_emitted <= pool_.num_windows(),
               "loader state's bucket pool does not replay to its sampler position (different dataset or config?)");
    pool_.emitted = s.pool_emitted;
  }
  sampler_.restore(s.sampler);
  windows_ = s.windows;
  rows_ = s.rows;
}

}  // namespace meshtrain::data
