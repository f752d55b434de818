// meshtrain report: reading recorded runs (tests/fixtures/run_*) and the
// page they give, parsed as XML (the page is well-formed XHTML).
#include <gtest/gtest.h>

#include <libxml/parser.h>
#include <libxml/xpath.h>
#include <libxml/xpathInternals.h>

#include <filesystem>
#include <fstream>

#include "meshtrain/core/error.h"
#include "meshtrain/report/html_report.h"
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

}  // namespace
}  // namespace meshtrain::report
