#include "meshtrain/core/status_line.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace meshtrain {

bool is_interactive_terminal(std::FILE* f) {
  if (!f || !::isatty(::fileno(f))) return false;
  const char* term = std::getenv("TERM");
  return !(term && std::strcmp(term, "dumb") == 0);
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
