// The run report in a real browser: headless Chromium renders the page of
// two recorded runs to a PNG, which must not be blank and must show the
// plots' colors, and its DOM must hold every SVG plot. Skipped (exit 77,
// with a message) when no Chromium is installed (scripts/install-deps.sh
// installs it).
#include <gtest/gtest.h>

#include <png.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

namespace {

namespace fs = std::filesystem;

std::string chromium() {
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"})
    if (fs::exists(c)) return c;
  return "";
}

std::string run(const std::string& cmd) {
  std::string out;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while (p && (n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  if (p) ::pclose(p);
  return out;
}

// Headless, offline and with a fresh profile: nothing is fetched or kept.
std::string browser(const std::string& profile) {
  return "timeout 120 " + chromium() +
         " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking "
         "--disable-component-update --disable-sync --hide-scrollbars --user-data-dir=" +
         profile + " ";
}

class ReportInBrowser : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/mt_browser_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    const std::string fx = MESHTRAIN_FIXTURES;
    const std::string cmd = std::string(MESHTRAIN_BIN) + " report " + fx + "/run_dp2 " + fx +
                            "/run_dp1_pipeline --out " + (dir_ / "report.html").string() + " 2>&1";
    const std::string out = run(cmd);
    ASSERT_TRUE(fs::exists(dir_ / "report.html")) << out;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

TEST_F(ReportInBrowser, DomHoldsEverySvgPlot) {
  const std::string dom =
      run(browser((dir_ / "profile-dom").string()) + "--dump-dom file://" + (dir_ / "report.html").string() +
          " 2>/dev/null");
  size_t svgs = 0;
  for (size_t at = dom.find("<svg"); at != std::string::npos; at = dom.find("<svg", at + 1)) ++svgs;
  EXPECT_EQ(svgs, 10u) << dom.substr(0, 2000);
  EXPECT_NE(dom.find("Pipeline timeline of run_dp1_pipeline"), std::string::npos);
}

TEST_F(ReportInBrowser, ScreenshotIsNotBlankAndShowsThePlots) {
  const fs::path png = dir_ / "shot.png";
  const std::string log = run(browser((dir_ / "profile-shot").string()) + "--window-size=1280,2600 --screenshot=" +
                              png.string() + " file://" + (dir_ / "report.html").string() + " 2>&1");
  ASSERT_TRUE(fs::exists(png)) << log;
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  ASSERT_TRUE(png_image_begin_read_from_file(&img, png.c_str())) << img.message;
  img.format = PNG_FORMAT_RGB;
  std::vector<unsigned char> px(PNG_IMAGE_SIZE(img));
  ASSERT_TRUE(png_image_finish_read(&img, nullptr, px.data(), 0, nullptr)) << img.message;
  EXPECT_EQ(img.width, 1280u);
  size_t ink = 0, run_colors = 0;
  std::set<uint32_t> colors;
  for (size_t i = 0; i + 2 < px.size(); i += 3) {
    const int r = px[i], g = px[i + 1], b = px[i + 2];
    if (r < 235 || g < 235 || b < 235) ++ink;
    colors.insert(uint32_t(r) << 16 | uint32_t(g) << 8 | uint32_t(b));
    // The first two runs' colors (#1f77b4 blue, #d62728 red) drawn as lines.
    if ((std::abs(r - 0x1f) < 24 && std::abs(g - 0x77) < 24 && std::abs(b - 0xb4) < 24) ||
        (std::abs(r - 0xd6) < 24 && std::abs(g - 0x27) < 24 && std::abs(b - 0x28) < 24))
      ++run_colors;
  }
  const double pixels = double(img.width) * img.height;
  EXPECT_GT(ink / pixels, 0.02) << "the page is (nearly) blank";
  EXPECT_GT(colors.size(), 50u);
  EXPECT_GT(run_colors, 2000u) << "the runs' curves are not drawn";
}

}  // namespace

int main(int argc, char** argv) {
  if (chromium().empty()) {
    std::puts("SKIPPED: no Chromium (chromium package; scripts/install-deps.sh installs it)");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
