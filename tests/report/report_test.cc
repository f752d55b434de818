// meshtrain report: reading recorded runs (tests/fixtures/run_*) and the
// page they give, parsed as XML (the page is well-formed XHTML).
#include <gtest/gtest.h>

#include <libxml/parser.h>
#include <libxml/xpath.h>
#include <libxml/xpathInternals.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/report/html_report.h"
#include "meshtrain/report/membership_section.h"
#include "meshtrain/report/rank_section.h"
#include "meshtrain/report/run_log.h"
#include "meshtrain/report/svg_plot.h"

namespace meshtrain::report {
namespace {

const std::string kFixtures = MESHTRAIN_FIXTURES;

// Number of nodes an XPath expression selects in the parsed page.
int count(xmlDocPtr doc, const char* xpath) {
  xmlXPathContextPtr ctx = xmlXPathNewContext(doc);
  xmlXPathRegisterNs(ctx, BAD_CAST "h", BAD_CAST "http://www.w3.org/1999/xhtml");
  xmlXPathRegisterNs(ctx, BAD_CAST "s", BAD_CAST "http://www.w3.org/2000/svg");
  xmlXPathObjectPtr r = xmlXPathEvalExpression(BAD_CAST xpath, ctx);
  const int n = r && r->nodesetval ? r->nodesetval->nodeNr : -1;
  xmlXPathFreeObject(r);
  xmlXPathFreeContext(ctx);
  return n;
}

TEST(RunLog, ReadsStepsEvalsAndTheRunRecord) {
  const RunLog r = read_run(kFixtures + "/run_dp2");
  EXPECT_EQ(r.name, "run_dp2");
  ASSERT_EQ(r.steps.size(), 6u);
  EXPECT_EQ(r.steps[0].step, 1);
  EXPECT_DOUBLE_EQ(r.steps[1].tokens, 2 * r.steps[0].tokens) << "tokens accumulate (128 per step)";
  EXPECT_EQ(r.evals.size(), 2u);
  EXPECT_EQ(r.evals[0].tokens, r.steps[2].tokens);
  EXPECT_GT(r.evals[1].bits_per_byte, 0);
  EXPECT_GT(r.peak_gflops(), 0);
  EXPECT_EQ(r.run["layout"]["dp"], 2);
  EXPECT_GT(r.steps[3].comm_s, 0) << "dp=2 records communication time";
  EXPECT_TRUE(r.steps[0].peak_memory.count("params")) << "peak memory by category";

  const RunLog p = read_run(kFixtures + "/run_dp1_pipeline");
  EXPECT_TRUE(p.steps[4].skipped);
  EXPECT_EQ(p.pipeline.size(), 16u);
  EXPECT_EQ(p.pipeline_step, 6);
}

TEST(RunLog, BadInputNamesTheFileAndLine) {
  const std::string dir = ::testing::TempDir() + "/mt_report_bad";
  std::filesystem::create_directories(dir);
  EXPECT_THROW(read_run(dir), DataError);  // no metrics.jsonl
  std::ofstream(dir + "/metrics.jsonl") << "{\"step\":1,\"loss\":2}\nnot json\n{\"step\":2,\"loss\":1}\n";
  try {
    read_run(dir);
    ADD_FAILURE() << "expected a DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("metrics.jsonl:2"), std::string::npos) << e.what();
  }
  // A torn last line (a run killed mid-write) is skipped.
  std::ofstream(dir + "/metrics.jsonl") << "{\"step\":1,\"loss\":2}\n{\"step\":2,\"lo";
  EXPECT_EQ(read_run(dir).steps.size(), 1u);
  std::filesystem::remove_all(dir);
}

TEST(HtmlReport, IsWellFormedWithOnePlotPerTopicAndOverlaidRuns) {
  const std::vector<RunLog> runs = {read_run(kFixtures + "/run_dp2"), read_run(kFixtures + "/run_dp1_pipeline")};
  const std::string html = render_report(runs);
  EXPECT_EQ(html.find("<script"), std::string::npos) << "readable without JavaScript";
  for (const char* link : {"src=", "href=", "url(", "@import"})
    EXPECT_EQ(html.find(link), std::string::npos) << "no network: " << link;
  xmlDocPtr doc = xmlReadMemory(html.data(), int(html.size()), "report.html", nullptr, XML_PARSE_NONET);
  ASSERT_NE(doc, nullptr) << "the page must parse as XML";
  // Loss, bits/byte, tokens/s, MFU, grad norm, LR, memory, comm time,
  // exposed share, pipeline timeline.
  EXPECT_EQ(count(doc, "//s:svg"), 10);
  for (const char* title : {"Loss against supervised tokens", "Throughput", "Model FLOPs utilization",
                            "Gradient norm", "Learning rate", "Peak memory by category", "Communication time",
                            "Exposed share", "Pipeline timeline", "Validation bits per byte"}) {
    const std::string xp = std::string("//s:svg/s:title[contains(., '") + title + "')]";
    EXPECT_EQ(count(doc, xp.c_str()), 1) << title;
  }
  // Both runs overlay: train + validation loss lines per run.
  EXPECT_EQ(count(doc, "//s:svg[s:title[contains(., 'Loss against')]]/s:polyline"), 4);
  EXPECT_EQ(count(doc, "//s:svg[s:title[contains(., 'Throughput')]]/s:polyline"), 2);
  EXPECT_EQ(count(doc, "//s:svg[s:title[contains(., 'Pipeline')]]/s:rect[@class='span']"), 16);
  EXPECT_EQ(count(doc, "//s:rect[@class='bar']"), 2 * int(runs[0].steps[0].peak_memory.size()));
  // The skipped step is listed, the layout and precision tabled.
  EXPECT_NE(html.find("non-finite gradients"), std::string::npos);
  EXPECT_NE(html.find("pp=1 dp=2 cp=1 tp=1, zero_stage=0"), std::string::npos);
  EXPECT_NE(html.find("params f32"), std::string::npos);
  xmlFreeDoc(doc);
}

TEST(SvgPlot, EscapesTextAndHandlesEmptyData) {
  EXPECT_EQ(xml_escape("a<b & \"c\"\x01"), "a&lt;b &amp; &quot;c&quot;");
  LinePlot p{"t <1>", "x", "y", {{"s", {}, {}, 0}}};
  const std::string svg = render(p);
  EXPECT_NE(svg.find("no data recorded"), std::string::npos);
  EXPECT_NE(svg.find("t &lt;1&gt;"), std::string::npos);
  EXPECT_EQ(short_number(12500), "12.5k");
  EXPECT_EQ(short_number(0.5), "0.5");
  EXPECT_EQ(short_number(3512), "3512");
  EXPECT_EQ(short_number(2.5e6), "2.5M");
}

// A run directory holding `lines` as metrics.jsonl.
std::string write_run(const std::string& name, const std::string& lines) {
  const std::string dir = ::testing::TempDir() + "/mt_report_" + name;
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/metrics.jsonl") << lines;
  return dir;
}

// The texts of an SVG's <text> elements, in order.
std::vector<std::string> texts(const std::string& svg) {
  std::vector<std::string> out;
  for (size_t at = svg.find("<text"); at != std::string::npos; at = svg.find("<text", at + 1)) {
    const size_t open = svg.find('>', at), close = svg.find("</text>", open);
    out.push_back(svg.substr(open + 1, close - open - 1));
  }
  return out;
}

TEST(SvgPlot, AnAxisOfOnePointHasDistinctTicks) {
  // One validation point at 41k tokens: the axis around it must not read "41k 41k 41k".
  LinePlot p{"Validation bits per byte", "supervised tokens", "bits/byte", {{"run", {41000}, {2.5}, 0, false, true}}};
  const std::vector<std::string> t = texts(render(p));
  std::map<std::string, int> seen;
  for (const auto& s : t) ++seen[s];
  for (const auto& [label, n] : seen) EXPECT_EQ(n, 1) << "tick label '" << label << "' repeated";
  EXPECT_EQ(seen.count("41k"), 1u);
  // Ticks close together get the digits that tell them apart.
  EXPECT_EQ(tick_labels({40999.5, 41000, 41000.5}), (std::vector<std::string>{"40.9995k", "41k", "41.0005k"}));
  EXPECT_EQ(tick_labels({39000, 40000, 41000}), (std::vector<std::string>{"39k", "40k", "41k"}));
  EXPECT_EQ(tick_labels({0, 0.5, 1}), (std::vector<std::string>{"0", "0.5", "1"}));
}

TEST(SvgPlot, ByteTicksAreRoundBinaryUnits) {
  const double mib = 1024.0 * 1024.0;
  const auto t = byte_ticks(130 * mib);  // e.g. a peak of 129.72 MiB
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].second, "0");
  EXPECT_DOUBLE_EQ(t[1].first, 50 * mib);
  EXPECT_EQ(t[1].second, "50 MiB");
  EXPECT_EQ(t[2].second, "100 MiB");
  EXPECT_EQ(byte_ticks(3.5 * 1024 * mib).back().second, "3 GiB");
  EXPECT_EQ(byte_ticks(600).back().second, "600 B");
  // Many long category names: turned so they do not run into each other.
  BarChart c{"Peak memory", "bytes", {"a"}, {}, true};
  for (const char* k : {"activations", "optimizer", "workspace", "page_padding", "gathered", "params", "grads",
                        "comm", "other"})
    c.groups.push_back({k, {10 * mib}});
  const std::string svg = render(c);
  EXPECT_NE(svg.find("rotate(-35"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">10 MiB<"), std::string::npos) << svg;
}

TEST(HtmlReport, FiguresAreBoundedWhateverTheFileHolds) {
  // A run whose recorded peak is below its steps' rates (measured on a loaded
  // machine) and whose waits exceed its communication time (as files written
  // before exposure was bounded hold).
  const std::string dir = write_run(
      "bounded",
      R"({"event":"run","peak_gflops":100.0,"parameters":1000})" "\n"
      R"({"step":1,"loss":3.0,"gflops":150.0,"comm_s":1e-7,"comm_exposed_s":2e-6,"supervised_targets":10})" "\n"
      R"({"step":2,"loss":2.9,"gflops":200.0,"comm_s":1e-7,"comm_exposed_s":3e-6,"supervised_targets":10})" "\n"
      R"({"event":"peak","step":2,"peak_gflops":180.0})" "\n");
  const RunLog r = read_run(dir);
  EXPECT_DOUBLE_EQ(r.peak_gflops(), 200.0) << "the fastest step bounds the peak from below";
  EXPECT_TRUE(r.peak_from_steps);
  const std::string html = render_report({r});
  EXPECT_NE(html.find("<td>100.0%</td>"), std::string::npos) << "median MFU (the upper of 75% and 100%)";
  EXPECT_NE(html.find("(the fastest step, above the recorded peak)"), std::string::npos);
  xmlDocPtr doc = xmlReadMemory(html.data(), int(html.size()), "report.html", nullptr, XML_PARSE_NONET);
  ASSERT_NE(doc, nullptr);
  // Both shares are drawn on a 0-100% axis that no point leaves.
  for (const char* title : {"Model FLOPs utilization", "Exposed share"}) {
    const size_t at = html.find(std::string("aria-label=\"") + title);
    ASSERT_NE(at, std::string::npos) << title;
    const std::string svg = html.substr(at, html.find("</svg>", at) - at);
    double top_tick = 0;
    for (const auto& label : texts(svg))
      if (!label.empty() && label.find_first_not_of("0123456789.") == std::string::npos)
        top_tick = std::max(top_tick, std::stod(label));
    EXPECT_EQ(top_tick, 100.0) << title << ": the axis must end at 100%\n" << svg;
    const size_t pts = svg.find("points=\"");
    ASSERT_NE(pts, std::string::npos) << title;
    std::istringstream in(svg.substr(pts + 8, svg.find('"', pts + 8) - pts - 8));
    double x = 0, y = 0;
    char comma = 0;
    while (in >> x >> comma >> y) EXPECT_GE(y, 30.0 - 1e-9) << title << ": a point above 100%";
  }
  xmlFreeDoc(doc);
  std::filesystem::remove_all(dir);
}

TEST(HtmlReport, ThePipelineTimelineHasALegend) {
  const std::string html = render_report({read_run(kFixtures + "/run_dp1_pipeline")});
  xmlDocPtr doc = xmlReadMemory(html.data(), int(html.size()), "report.html", nullptr, XML_PARSE_NONET);
  ASSERT_NE(doc, nullptr);
  EXPECT_EQ(count(doc, "//s:svg[s:title[contains(., 'Pipeline')]]/s:rect[@class='swatch']"), 2) << "F and B";
  EXPECT_EQ(count(doc, "//s:svg[s:title[contains(., 'Pipeline')]]/s:text[. = 'F forward']"), 1);
  EXPECT_EQ(count(doc, "//s:svg[s:title[contains(., 'Pipeline')]]/s:text[. = 'B backward']"), 1);
  xmlFreeDoc(doc);
}

}  // namespace
}  // namespace meshtrain::report

namespace meshtrain::report {
namespace {

TEST(HtmlReport, RanksSectionShowsEveryRanksComputeAndTheStragglers) {
  // Three ranks; rank 2 the slowest from step 2 on and named after step 4.
  std::string lines = R"({"event":"run","peak_gflops":100.0})" "\n";
  for (int step = 1; step <= 4; ++step) {
    const double slow = step == 1 ? 0.1 : 0.4;
    lines += R"({"step":)" + std::to_string(step) + R"(,"loss":3.0,"supervised_targets":10,)" +
             R"("ranks":{"step_s":[0.5,0.5,0.5],"compute_s":[0.1,0.12,)" + std::to_string(slow) +
             R"(],"median_compute_s":0.12,"slowest":2})" +
             (step == 4 ? R"(,"straggler":[{"rank":2,"host":"node-7","ratio":3.33,"steps":3}])" : "") + "}\n";
  }
  const RunLog r = read_run(write_run("ranks", lines));
  ASSERT_EQ(r.steps[0].rank_compute_s.size(), 3u);
  EXPECT_DOUBLE_EQ(r.steps[1].rank_compute_s[2], 0.4);
  ASSERT_EQ(r.steps[3].stragglers.size(), 1u);
  EXPECT_EQ(r.steps[3].stragglers[0].host, "node-7");
  const std::string html = render_report({r});
  xmlDocPtr doc = xmlReadMemory(html.data(), int(html.size()), "report.html", nullptr, XML_PARSE_NONET);
  ASSERT_NE(doc, nullptr);
  EXPECT_EQ(count(doc, "//s:svg[s:title[contains(., 'Compute time per step across ranks')]]/s:polyline"), 3)
      << "median, slowest and fastest";
  xmlFreeDoc(doc);
  // Rank 2: the slowest in steps 2-4 (step 1: rank 1 at 0.12), named once.
  EXPECT_NE(html.find("<td>2</td><td>0.5000</td><td>0.3250</td><td>0.1750</td><td>3 of 4 steps</td><td>1 of 4 steps</td>"),
            std::string::npos) << html;
  EXPECT_NE(html.find("<td>2</td><td>node-7</td><td>4 to 4</td><td>1</td><td>3.33x</td>"), std::string::npos);
  // The page's section is rank_section's, whole.
  const std::string section = ranks_section({r});
  ASSERT_NE(section.find("<td>2</td><td>node-7</td>"), std::string::npos) << section;
  EXPECT_NE(html.find(section), std::string::npos);

  // Runs written before per-rank times: the section says so.
  const std::string old = render_report({read_run(kFixtures + "/run_dp2")});
  EXPECT_NE(old.find("No per-rank step times were recorded"), std::string::npos);
  EXPECT_NE(ranks_section({read_run(kFixtures + "/run_dp2")}).find("No per-rank step times were recorded"),
            std::string::npos);
}

TEST(HtmlReport, RestartsAndMembershipShowTheLayoutOverTime) {
  // An elastic run (train/elastic.h): rank 3 lost in step 3 (a restart and a
  // membership change, written as two records), then grown back after step 5.
  std::string lines = R"({"event":"run","peak_gflops":100.0})" "\n";
  for (int step = 1; step <= 6; ++step)
    lines += R"({"step":)" + std::to_string(step) + R"(,"loss":3.0,"supervised_targets":10})" "\n";
  lines += R"({"event":"membership","change":"4 ranks: dp=4, grad_accum=1 -> 2 ranks: dp=2, grad_accum=2",)"
           R"("ranks":2,"dp":2,"grad_accum":2,"resumed_step":2,"lost_steps":1,"reason":"rank 3 died"})" "\n"
           R"({"event":"restart","restart":1,"resumed_step":2,"lost_steps":1,"reason":"rank 3 died"})" "\n"
           R"({"event":"membership","change":"2 ranks: dp=2, grad_accum=2 -> 4 ranks: dp=4, grad_accum=1",)"
           R"("ranks":4,"dp":4,"grad_accum":1,"resumed_step":5,"lost_steps":0,"reason":"capacity changed"})" "\n"
           R"({"event":"restart","restart":2,"resumed_step":5,"lost_steps":2,"recovery_s":1.5,)"
           R"("reason":"a disk filled up"})" "\n";
  const RunLog r = read_run(write_run("membership", lines));
  ASSERT_EQ(r.resumes.size(), 3u) << "a restart that comes with its membership change is one row";
  EXPECT_EQ(r.resumes[0].dp, 2);
  EXPECT_EQ(r.resumes[1].ranks, 4);
  EXPECT_TRUE(r.resumes[2].change.empty());
  const std::string section = membership_section({r});
  EXPECT_NE(section.find("3 resume(s), 3 step(s) lost in all"), std::string::npos) << section;
  EXPECT_NE(section.find("<td>2</td><td>2 ranks: dp=2, grad_accum=2</td>"), std::string::npos) << section;
  EXPECT_NE(section.find("<td>5</td><td>unchanged</td><td>-</td><td>2</td><td>1.50 s</td><td>a disk filled up</td>"),
            std::string::npos) << section;
  const std::string html = render_report({r});
  EXPECT_NE(html.find(section), std::string::npos);
  EXPECT_NE(membership_section({read_run(kFixtures + "/run_dp2")}).find("No restarts or membership changes"),
            std::string::npos);
}

}  // namespace
}  // namespace meshtrain::report
