// The HTML report: self-contained, injection-safe, stable ids, deterministic bytes.
#include "report/html_report.h"

#include <errno.h>  // program_invocation_short_name (glibc)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <regex>

#include "core/atomic_file.h"
#include "report/report_test_util.h"

namespace attnlab::report {
namespace {

const std::string kEvil = "<script>alert(\"x\")</script> & <img src=x onerror=alert(1)> \xFF\xC3";

HtmlReport Sample() {
  HtmlReport r("Sinks in " + kEvil);
  r.SetDate("2025-01-01 00:00 UTC");
  r.SetCommandLine("attnlab analyze --text '<b>bold</b>'");
  r.SetSubtitle("subtitle " + kEvil);
  r.AddParagraph("intro before any section");
  r.AddSection("sinks", "Attention sinks");
  r.AddParagraph("paragraph " + kEvil);
  r.AddHeading("heading " + kEvil);
  r.AddNote("note " + kEvil);
  r.AddLinkParagraph("before " + kEvil, "link " + kEvil, "view.html#" + kEvil, " after " + kEvil);
  r.AddBulletList({"item " + kEvil, "second"});
  r.AddCode("code " + kEvil);
  r.AddKeyValueTable({{"key " + kEvil, "value " + kEvil}, {"tokens", "1,024"}});
  r.AddSection("tables", "Tables");
  r.AddTable({"token", "alpha", "share"},
             {{kEvil, "0.25", "12.5%"}, {"the", "-1.5e-3", "n/a"}, {"short row"}},
             "caption " + kEvil);
  XyPlot p;
  p.title = "plot " + kEvil;
  p.series.push_back({"s", {1, 2, 3}, {1, 4, 9}});
  r.AddFigure(RenderLinePlot(p), "caption " + kEvil, "fig-plot");
  r.SetSummary("answer " + kEvil);  // set last, rendered first
  r.AddSummaryFact("fact " + kEvil, "0.81");
  return r;
}

TEST(ReportHtml, EverythingTheCallerWroteIsEscaped) {
  const std::string html = Sample().Render();
  EXPECT_TRUE(testing::IsValidUtf8(html));
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_EQ(html.find("<b>"), std::string::npos);
  EXPECT_EQ(html.find("\xFF"), std::string::npos);
  const std::string escaped =
      "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;img src=x onerror=alert(1)&gt; "
      "\xEF\xBF\xBD\xEF\xBF\xBD";
  // title (twice), subtitle, summary, fact, paragraph, heading, note, link paragraph (before,
  // link, href, after), item, code, key, value, table cell, table caption, plot title (text and
  // aria-label), figure caption.
  size_t n = 0;
  for (size_t p = html.find(escaped); p != std::string::npos; p = html.find(escaped, p + 1)) ++n;
  EXPECT_EQ(n, 21u);
  EXPECT_NE(html.find("<a href=\"view.html#" + escaped + "\">link " + escaped + "</a>"),
            std::string::npos);
}

TEST(ReportHtml, SelfContained) {
  const std::string html = Sample().Render();
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("<meta charset=\"utf-8\">"), std::string::npos);
  EXPECT_NE(html.find("Content-Security-Policy\" content=\"default-src 'none'"), std::string::npos);
  // No fetches: the only URL is the SVG namespace name, which is never fetched.
  std::string rest = html;
  for (size_t p; (p = rest.find("xmlns=\"http://www.w3.org/2000/svg\"")) != std::string::npos;) {
    rest.erase(p, 34);
  }
  for (const char* bad : {"http:", "https:", "<link", "<script", "@import", "url(", "src=\""}) {
    EXPECT_EQ(rest.find(bad), std::string::npos) << bad;
  }
}

TEST(ReportHtml, LayoutAndStableIds) {
  const std::string html = Sample().Render();
  const size_t summary = html.find("<section id=\"summary\""),
               contents = html.find("<nav id=\"contents\""),
               intro = html.find("intro before any section"),
               sinks = html.find("<section id=\"sinks\">"),
               tables = html.find("<section id=\"tables\">"),
               footer = html.find("<footer id=\"footer\">");
  ASSERT_NE(summary, std::string::npos);
  ASSERT_NE(contents, std::string::npos);
  ASSERT_NE(sinks, std::string::npos);
  ASSERT_NE(tables, std::string::npos);
  ASSERT_NE(footer, std::string::npos);
  EXPECT_LT(html.find("<h1>"), summary);
  EXPECT_LT(summary, intro);
  EXPECT_LT(intro, contents);
  EXPECT_LT(contents, sinks);
  EXPECT_LT(sinks, tables);
  EXPECT_LT(tables, footer);
  EXPECT_NE(html.find("<a href=\"#sinks\">Attention sinks</a>"), std::string::npos);
  EXPECT_NE(html.find("<figure id=\"fig-plot\">"), std::string::npos);
  EXPECT_NE(html.find("2025-01-01 00:00 UTC"), std::string::npos);
  EXPECT_NE(html.find("<code>attnlab analyze --text &#39;&lt;b&gt;bold&lt;/b&gt;&#39;</code>"),
            std::string::npos);
  // Balanced blocks.
  const auto count = [&](const std::string& s) {
    size_t n = 0;
    for (size_t p = html.find(s); p != std::string::npos; p = html.find(s, p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("<section"), count("</section>"));
  EXPECT_EQ(count("<table"), count("</table>"));
  EXPECT_EQ(count("<figure"), count("</figure>"));
  EXPECT_EQ(count("<svg"), count("</svg>"));
}

TEST(ReportHtml, IdsAreSanitisedAndUnique) {
  HtmlReport r("t");
  EXPECT_EQ(r.AddSection("sinks", "a"), "sinks");
  EXPECT_EQ(r.AddSection("sinks", "b"), "sinks-2");
  EXPECT_EQ(r.AddSection("my section!", "c"), "my-section-");
  EXPECT_EQ(r.AddSection("summary", "d"), "summary-2");  // reserved
  EXPECT_EQ(r.AddSection("1st", "e"), "s-1st");
  EXPECT_EQ(r.AddSection("", "f"), "s-");
  EXPECT_EQ(r.AddSection("\"><script>", "g"), "s----script-");
  EXPECT_EQ(r.AddFigure(SvgImage{}, "", "sinks"), "sinks-3");
  EXPECT_EQ(r.AddFigure(SvgImage{}, ""), "");
  const auto outline = r.Outline();
  ASSERT_EQ(outline["sections"].size(), 7u);
  EXPECT_EQ(outline["sections"][1]["id"], "sinks-2");
  EXPECT_EQ(outline["sections"][6]["figures"][0], "sinks-3");
}

TEST(ReportHtml, NumericColumnsAreRightAligned) {
  HtmlReport r("t");
  r.AddTable({"name", "value", "mixed"}, {{"a", "1.5", "x"}, {"b", "-", "2"}, {"c", "1e-3", ""}});
  const std::string html = r.Render();
  EXPECT_NE(html.find("<th scope=\"col\">name</th><th scope=\"col\" class=\"num\">value</th>"
                      "<th scope=\"col\">mixed</th>"),
            std::string::npos);
  EXPECT_NE(html.find("<tr><td>a</td><td class=\"num\">1.5</td><td>x</td></tr>"),
            std::string::npos);
  for (const char* yes : {"0", "-3", "+2", "1.2e-5", "1E+3", "12.5%", "4.0 GiB", "3x", "1,024",
                          "\u2212"
                          "1.5",
                          "nan", "-inf", " 7 ", "2.5\u00D7", "3 ms", "10 GB/s"}) {
    EXPECT_TRUE(LooksNumeric(yes)) << yes;
  }
  for (const char* no :
       {"", "-", "abc", "1.2.3", "e5", "layer 3", "0x1F", "12 apples", ",5", "1,"}) {
    EXPECT_FALSE(LooksNumeric(no)) << no;
  }
}

TEST(ReportHtml, RenderIsDeterministicAndWriteToMatches) {
  EXPECT_EQ(Sample().Render(), Sample().Render());
  const char* base = std::getenv("TMPDIR");
  std::string dir = std::string(base && *base ? base : "/tmp") + "/attnlab_html_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const HtmlReport r = Sample();
  ASSERT_TRUE(r.WriteTo(dir + "/report.html").ok());
  auto read = ReadFileToString(dir + "/report.html", 1 << 24);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read.value(), r.Render());
  EXPECT_FALSE(r.WriteTo(dir + "/no/such/dir/report.html").ok());
  std::filesystem::remove_all(dir);
}

TEST(ReportHtml, DefaultsNameTheDateAndCommandLine) {
  HtmlReport r("t");
  const std::string html = r.Render();
  EXPECT_TRUE(std::regex_search(
      html,
      std::regex("Generated by attnlab on 20[0-9]{2}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2} UTC")));
  EXPECT_NE(html.find(program_invocation_short_name), std::string::npos);  // this binary
  EXPECT_EQ(html.find("<section id=\"summary\""), std::string::npos);      // no summary set
  EXPECT_EQ(html.find("<nav"), std::string::npos);                         // no sections
}

}  // namespace
}  // namespace attnlab::report
