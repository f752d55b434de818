#include "meshtrain/core/status_line.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "meshtrain/core/error.h"

namespace meshtrain {

namespace {

std::atomic<int> g_progress_mode{int(ProgressMode::Auto)};

// Whether output written to `fd` reaches a terminal: under a launcher that
// hands ranks a pseudo-terminal of its own (Open MPI: OMPI_COMM_WORLD_RANK;
// PMIx launchers: PMIX_RANK), whether the launcher's `fd` is one.
bool launcher_writes_to_terminal(int fd) {
  if (!std::getenv("OMPI_COMM_WORLD_RANK") && !std::getenv("PMIX_RANK")) return true;
  char link[64], target[256];
  std::snprintf(link, sizeof link, "/proc/%d/fd/%d", int(::getppid()), fd);
  const ssize_t n = ::readlink(link, target, sizeof target);
  if (n <= 0) return false;  // unknown: plain lines are safe everywhere
  const std::string t(target, size_t(n));
  return t.rfind("/dev/pts/", 0) == 0 || t.rfind("/dev/tty", 0) == 0;
}

}  // namespace

void set_progress_mode(ProgressMode mode) { g_progress_mode = int(mode); }
ProgressMode progress_mode() { return ProgressMode(g_progress_mode.load()); }

const char* progress_mode_name(ProgressMode mode) {
  return mode == ProgressMode::Plain ? "plain" : mode == ProgressMode::Live ? "live" : "auto";
}

ProgressMode parse_progress_mode(const std::string& name) {
  for (ProgressMode m : {ProgressMode::Auto, ProgressMode::Plain, ProgressMode::Live})
    if (name == progress_mode_name(m)) return m;
  MT_THROW(ConfigError, "progress mode '", name, "': expected auto, plain or live");
}

bool is_interactive_terminal(std::FILE* f) {
  if (!f) return false;
  const ProgressMode mode = progress_mode();
  if (mode != ProgressMode::Auto) return mode == ProgressMode::Live;
  if (!::isatty(::fileno(f))) return false;
  const char* term = std::getenv("TERM");
  if (term && std::strcmp(term, "dumb") == 0) return false;
  return launcher_writes_to_terminal(::fileno(f));
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const long t = std::lround(s);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

StatusLine::StatusLine(std::FILE* out, double plain_every_s, double show_after_s)
    : out_(out), live_(is_interactive_terminal(out)), plain_every_s_(plain_every_s), show_after_s_(show_after_s),
      start_(Clock::now()) {}

StatusLine::~StatusLine() { finish(); }

void StatusLine::update(const std::string& text) {
  text_ = text;
  const auto now = Clock::now();
  if (std::chrono::duration<double>(now - start_).count() < show_after_s_) return;
  if (live_) {
    if (shown_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    draw();
  } else if (plain_every_s_ > 0 &&
             (last_plain_ == Clock::time_point{} ||
              std::chrono::duration<double>(now - last_plain_).count() >= plain_every_s_)) {
    last_plain_ = now;
    std::fprintf(out_, "%s\n", text_.c_str());
    std::fflush(out_);
  }
}

void StatusLine::print(const std::string& line) {
  if (shown_) clear();
  std::fprintf(out_, "%s\n", line.c_str());
  if (shown_) draw();
  std::fflush(out_);
}

void StatusLine::finish() {
  if (shown_) clear();
  shown_ = false;
  live_ = false;
  std::fflush(out_);
}

void StatusLine::draw() {
  // '\r' + text + erase to the end of the line (ANSI EL); a line wider than
  // the terminal would wrap and could no longer be redrawn in place.
  std::string shown = text_;
  winsize ws{};
  if (::ioctl(::fileno(out_), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 && shown.size() >= ws.ws_col)
    shown.resize(ws.ws_col - 1);
  std::fprintf(out_, "\r%s\x1b[K", shown.c_str());
  std::fflush(out_);
  shown_ = true;
}

void StatusLine::clear() { std::fputs("\r\x1b[K", out_); }

}  // namespace meshtrain
