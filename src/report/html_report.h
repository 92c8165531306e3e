// A report as one self-contained HTML file: inline CSS and inline SVG, no script, no external
// resource of any kind (a Content-Security-Policy meta tag forbids the browser to fetch one),
// readable offline, printable, attachable to an e-mail.
//
// Layout, top to bottom:
//   <h1> title, subtitle
//   <section id="summary">   "At a glance": the answer in a sentence, a few key figures as tiles
//   <nav id="contents">      links to the sections (when there are two or more)
//   <section id="...">       one per AddSection, in order, each with its <h2>
//   <footer id="footer">     date and the command line that produced the report
// Usage:
//   HtmlReport r("Attention sinks in gpt2");
//   r.SetSummary("62% of the last query's attention goes to token 0 in layers 2-11.");
//   r.AddSummaryFact("Sink_1 (eps = 0.3)", "0.81");
//   r.AddSection("sinks", "Attention on the first token");
//   r.AddParagraph(...); r.AddFigure(RenderHeatmap(map), "Layer x head ...", "fig-sink-map");
//   ATTNLAB_RETURN_IF_ERROR(r.WriteTo(out_dir + "/report.html"));
//
// All text arguments are plain text, escaped on output (escape.h), so model text is safe
// anywhere: markup shows as text, invalid UTF-8 shows as U+FFFD. The only markup a report
// includes verbatim is an SvgImage, which only the plotters (svg_plot.h) produce.
//
// Ids are the stable interface tests and links rely on. An id is sanitised rather than
// rejected (a report written after hours of computation must not abort): characters outside
// [A-Za-z0-9_-] become '-', an id not starting with a letter gets an "s-" prefix, and a
// duplicate gets "-2", "-3"... The functions that take an id return the one used.
// "summary", "contents" and "footer" are reserved.
#ifndef ATTNLAB_REPORT_HTML_REPORT_H_
#define ATTNLAB_REPORT_HTML_REPORT_H_

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attnlab/status.h"
#include "report/svg_plot.h"

namespace attnlab::report {

class HtmlReport {
 public:
  // The date defaults to the time of construction (UTC), the command line to this process'
  // (/proc/self/cmdline); set both for byte-reproducible output.
  explicit HtmlReport(std::string title);

  void SetSubtitle(std::string text);
  void SetDate(std::string date);
  void SetCommandLine(std::string command_line);

  // The summary box ("the answer at a glance"), always rendered right under the title.
  void SetSummary(std::string answer);
  void AddSummaryFact(std::string label, std::string value);

  // Starts a section; what is added next goes into it until the next AddSection. Content added
  // before the first section goes between the summary and the contents.
  std::string AddSection(std::string_view id, std::string title);

  void AddHeading(std::string text);  // a sub-heading (<h3>) in the current section
  void AddParagraph(std::string text);
  void AddNote(std::string text);  // a highlighted caveat
  // "before <a href=href>link</a> after" as a paragraph: href is a relative path or fragment
  // (a link to a file written beside the report); all three escaped.
  void AddLinkParagraph(std::string before, std::string link, std::string href,
                        std::string after = "");
  void AddBulletList(const std::vector<std::string>& items);
  void AddCode(std::string text);  // preformatted, monospace (commands, token dumps)
  // Two columns, keys on the left; values left-aligned (rows mix numbers and text).
  void AddKeyValueTable(const std::vector<std::pair<std::string, std::string>>& rows);
  // A header row and data rows. Columns whose cells all look numeric ("0.25", "-3", "1.2e-5",
  // "12.5%", "4.0 GiB", "3x"; empty cells, "-", "nan" and "n/a" do not count against it) are
  // right-aligned with tabular figures. Short rows are padded with empty cells.
  void AddTable(const std::vector<std::string>& columns,
                const std::vector<std::vector<std::string>>& rows, std::string caption = "");
  // A plot with a caption; id is optional ("" for none). Returns the id used.
  std::string AddFigure(const SvgImage& svg, std::string caption, std::string_view id = "");

  // The whole page. A pure function of what was added (and the date and command line).
  std::string Render() const;
  // Render() written atomically (core/atomic_file.h).
  Status WriteTo(const std::string& path) const;

  // What the page contains, for a JSON sidecar and for tests: title, summary, sections with
  // their ids, titles and figure ids, date, command line.
  nlohmann::json Outline() const;

 private:
  struct Section {
    std::string id, title;  // empty id: the untitled intro before the first section
    std::string body;       // rendered HTML
    std::vector<std::string> figure_ids;
  };
  std::string UniqueId(std::string_view wanted);
  Section& current() { return sections_.back(); }

  std::string title_, subtitle_, date_, command_line_;
  std::string summary_;
  std::vector<std::pair<std::string, std::string>> facts_;
  std::vector<Section> sections_;  // sections_[0] is the intro
  std::set<std::string> used_ids_;
};

// True if a table cell reads as a number (see AddTable).
bool LooksNumeric(std::string_view cell);

}  // namespace attnlab::report

#endif  // ATTNLAB_REPORT_HTML_REPORT_H_
