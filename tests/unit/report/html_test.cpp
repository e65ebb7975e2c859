// The HTML rendering of a synthetic model: well-formed, self-contained, every data string
// escaped, one <svg> per plot.
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>
#include <vector>

#include "report/model.hpp"
#include "report_fixture.hpp"

namespace loupe::report {
namespace {

size_t count(const std::string& text, const std::string& needle) {
  size_t found = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++found;
  }
  return found;
}

// Tags nest and close; void elements and self-closed SVG elements stand alone. Returns the
// first problem, or "" when the page is well-formed.
std::string nesting_problem(const std::string& html) {
  static const std::set<std::string> kVoid = {"meta", "br", "link", "img", "hr", "input"};
  std::vector<std::string> open;
  size_t at = 0;
  while ((at = html.find('<', at)) != std::string::npos) {
    const size_t close = html.find('>', at);
    if (close == std::string::npos) return "a tag at " + std::to_string(at) + " never ends";
    const std::string tag = html.substr(at + 1, close - at - 1);
    at = close + 1;
    if (tag.rfind("!DOCTYPE", 0) == 0) continue;
    if (tag.empty()) return "an empty tag";
    if (std::count(tag.begin(), tag.end(), '"') % 2 != 0) return "unbalanced quotes in <" + tag;
    if (tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (open.empty() || open.back() != name) {
        return "</" + name + "> closes <" + (open.empty() ? "nothing" : open.back()) + ">";
      }
      open.pop_back();
      continue;
    }
    const std::string name = tag.substr(0, tag.find_first_of(" \n/"));
    if (tag.back() == '/' || kVoid.count(name) != 0) continue;
    open.push_back(name);
  }
  if (!open.empty()) return "<" + open.back() + "> is never closed";
  return "";
}

TEST(HtmlEscape, EscapesMarkupAndControlCharacters) {
  EXPECT_EQ(html_escape("a<b>&\"c\"'d'\x01\te\n"), "a&lt;b&gt;&amp;&quot;c&quot;&#39;d&#39; \te\n");
  EXPECT_EQ(html_escape(""), "");
}

TEST(RenderHtml, SelfContainedWellFormedOneSvgPerPlot) {
  const Model model = testing_fixture::synthetic_model();
  const std::string html = render_html(model);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>\n<html lang=\"en\">", 0), 0u);
  EXPECT_EQ(nesting_problem(html), "");
  EXPECT_EQ(count(html, "<svg"),
            model.profiles.size() + model.sweeps.size() + model.timelines.size());
  EXPECT_EQ(count(html, "<svg"), 3u);
  EXPECT_EQ(count(html, "</svg>"), 3u);
  // Nothing to fetch and nothing to run: the only URL is the SVG namespace.
  EXPECT_EQ(count(html, "<script"), 0u);
  EXPECT_EQ(count(html, "src="), 0u);
  EXPECT_EQ(count(html, "href="), 0u);
  EXPECT_EQ(count(html, "url("), 0u);
  EXPECT_EQ(count(html, "://"), count(html, "xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_NE(html.find("Content-Security-Policy\" content=\"default-src 'none'"), std::string::npos);
  // Every '&' starts an entity.
  const std::regex bare_ampersand("&(?!(amp|lt|gt|quot|#39);)");
  EXPECT_FALSE(std::regex_search(html, bare_ampersand));
}

TEST(RenderHtml, EscapesEveryStringFromData) {
  Model model = testing_fixture::synthetic_model();
  model.gates[0].name = "<script>alert(1)</script>";
  model.gates[0].rule = "a \"quoted\" & <b>bold</b> rule";
  model.header.title = "<title>";
  model.notes.push_back("<img src=x onerror=alert(2)>");
  model.sweeps[0].points[0].point = "mode=<evil>";
  const std::string html = render_html(model);
  EXPECT_EQ(nesting_problem(html), "");
  EXPECT_EQ(count(html, "<script"), 0u);
  EXPECT_EQ(count(html, "<img"), 0u);
  EXPECT_EQ(count(html, "<b>"), 0u);
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(html.find("a &quot;quoted&quot; &amp; &lt;b&gt;bold&lt;/b&gt; rule"),
            std::string::npos);
  EXPECT_NE(html.find("error grows along T &lt;x&gt; | *y*"), std::string::npos);
  EXPECT_NE(html.find("prefill &lt;main&gt;"), std::string::npos);
  EXPECT_NE(html.find("moe &amp; experts"), std::string::npos);
  EXPECT_NE(html.find("mode=&lt;evil&gt;"), std::string::npos);
}

TEST(RenderHtml, PlotsCarryTheirData) {
  const Model model = testing_fixture::synthetic_model();
  const std::string html = render_html(model);
  // The profile: one bar per bucket and the tolerance line.
  EXPECT_EQ(count(html, "fill=\"#cf222e\" fill-opacity=\"0.75\""), 8u);
  EXPECT_NE(html.find("tolerance rms_ratio 2.00e-06"), std::string::npos);
  // The sweep: the SAME band, one circle per point.
  EXPECT_NE(html.find("verdict band [0.95, 1.05]"), std::string::npos);
  EXPECT_EQ(count(html, "<circle"), 2u);
  // The timeline: the highlighted wait and hold, and the rows' omissions said.
  EXPECT_EQ(count(html, "(top contention)</title>"), 2u);
  EXPECT_NE(html.find("3 not drawn"), std::string::npos);
  // Caps and notes are said.
  EXPECT_NE(html.find("2 more error profile(s) not drawn."), std::string::npos);
  EXPECT_NE(html.find("3 more findings"), std::string::npos);
  EXPECT_NE(html.find("trace_zone_unclosed</code> 4"), std::string::npos);
}

// Issue 19: the tolerance line sat invisible at the foot of a linear axis running four decades past
// it, under its own label on the bars; timeline bars had no names; "3 not drawn" said not why.
TEST(RenderHtml, ProfileGoesLogAndTimelineExplainsItself) {
  Model model = testing_fixture::synthetic_model();
  model.sweeps[0].points[1].failing = true;
  model.sweeps[0].gate = "decode_kernel_not_slower";
  model.timelines[0].min_width_ns = 5000;
  model.timelines[0].zone_depth = 3;
  model.timelines[0].zones_per_row = 400;
  const std::string html = render_html(model);
  EXPECT_EQ(nesting_problem(html), "");
  EXPECT_NE(html.find("(growing), log scale</text>"), std::string::npos);
  // The label is in the title row (y=16), not on the bars; the line sits above the axis's foot.
  EXPECT_NE(html.find("y=\"16\" text-anchor=\"end\" fill=\"#1a7f37\">- - - tolerance rms_ratio "
                      "2.00e-06</text>"),
            std::string::npos);
  static const std::regex dashed(
      R"re(<line x1="70.00" y1="([0-9.]+)" x2="740.00" y2="[0-9.]+" stroke="#1a7f37")re");
  std::smatch line;
  ASSERT_TRUE(std::regex_search(html, line, dashed));
  const double tolerance_y = std::stod(line[1]);
  EXPECT_GT(tolerance_y, 24.0 + 20);  // below the top
  // Above the foot (y = 220), where a linear axis put it (at 220 - 2e-6 / 8.8e-3 * 196 = 219.96).
  EXPECT_LT(tolerance_y, 24.0 + 196 - 10);
  // The failing point is ringed and said.
  EXPECT_EQ(count(html, "class=\"failing\""), 1u);
  EXPECT_NE(html.find("ringed: the verdict gate decode_kernel_not_slower fails on."),
            std::string::npos);
  EXPECT_NE(html.find("Drawn as gate decode_kernel_not_slower states it: merged vs tiled. "),
            std::string::npos);
  // Zone names on their bars, and what "not drawn" means.
  EXPECT_NE(html.find("class=\"zone-label\">kv_transfer</text>"), std::string::npos);
  EXPECT_NE(html.find("\"N not drawn\" under a thread counts its zones and lock intervals "
                      "shorter than 5 us (a 2000th of the window), nested deeper than 3 levels, "
                      "or past its 400 longest."),
            std::string::npos);
}

TEST(RenderHtml, EmptyModelHasNoPlots) {
  Model model;
  model.header.run_id = "r";
  const std::string html = render_html(model);
  EXPECT_EQ(nesting_problem(html), "");
  EXPECT_EQ(count(html, "<svg"), 0u);
  EXPECT_NE(html.find("No gates."), std::string::npos);
}

}  // namespace
}  // namespace loupe::report
