#include "report/html_report.h"

#include <cctype>

#include "core/atomic_file.h"
#include "report/command_line.h"
#include "report/escape.h"

namespace attnlab::report {
namespace {

// Colours: text #1f2937 on white cards over a light grey page; the accent is Okabe-Ito blue,
// the caveat colour Okabe-Ito orange (both distinguishable with colour-vision deficiencies).
constexpr std::string_view kStyle = R"css(
:root { --fg: #1f2937; --muted: #5b6472; --bg: #f3f4f6; --card: #ffffff; --border: #e5e7eb;
  --accent: #0072b2; --zebra: #f8fafc; --head: #f1f3f6; --note-bg: #fff8e8; --note: #e69f00;
  --sans: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "Noto Sans",
    "Liberation Sans", sans-serif;
  --mono: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", "Liberation Mono",
    monospace; }
* { box-sizing: border-box; }
html { background: var(--bg); }
body { margin: 0; padding: 24px 16px 40px; font: 15px/1.55 var(--sans); color: var(--fg);
  background: var(--bg); }
main { max-width: 1040px; margin: 0 auto; background: var(--card); border: 1px solid var(--border);
  border-radius: 10px; padding: 28px 36px 20px; }
h1 { font-size: 26px; line-height: 1.25; margin: 0 0 4px; }
.subtitle { color: var(--muted); margin: 0 0 16px; }
h2 { font-size: 20px; line-height: 1.3; margin: 34px 0 10px; padding-bottom: 6px;
  border-bottom: 1px solid var(--border); }
h3 { font-size: 16px; margin: 22px 0 8px; }
p { margin: 8px 0 12px; }
a { color: var(--accent); }
.summary { background: #eef6fb; border: 1px solid #bcd8ea; border-left: 5px solid var(--accent);
  border-radius: 8px; padding: 14px 18px 16px; margin: 18px 0 20px; }
.summary h2 { border: 0; margin: 0 0 4px; padding: 0; font-size: 12.5px; letter-spacing: .07em;
  text-transform: uppercase; color: #1f4e79; }
.answer { font-size: 17px; margin: 0 0 12px; }
.facts { display: flex; flex-wrap: wrap; gap: 10px; }
.fact { background: #ffffff; border: 1px solid #d3e4f0; border-radius: 6px; padding: 8px 14px;
  min-width: 130px; }
.fact-value { font-size: 20px; font-weight: 600; font-variant-numeric: tabular-nums; }
.fact-label { font-size: 12.5px; color: var(--muted); }
nav.toc { font-size: 14px; margin: 0 0 8px; }
nav.toc ol { margin: 4px 0 0; padding-left: 22px; columns: 2; column-gap: 32px; }
.table-wrap { overflow-x: auto; margin: 10px 0 16px; }
table { border-collapse: collapse; font-size: 14px; }
caption { caption-side: bottom; text-align: left; color: var(--muted); font-size: 13px;
  padding-top: 6px; }
th, td { padding: 5px 12px; border-bottom: 1px solid var(--border); text-align: left;
  vertical-align: top; }
thead th { background: var(--head); font-weight: 600; border-bottom: 1px solid #d1d5db; }
tbody tr:nth-child(even) { background: var(--zebra); }
.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.kv th { font-weight: 500; color: var(--muted); background: none; white-space: nowrap; }
table.kv td { font-variant-numeric: tabular-nums; }
figure { margin: 16px 0 24px; }
figure svg { display: block; max-width: 100%; height: auto; }
figcaption { color: var(--muted); font-size: 13.5px; margin-top: 6px; max-width: 80ch; }
.note { background: var(--note-bg); border-left: 4px solid var(--note); border-radius: 4px;
  padding: 8px 12px; margin: 12px 0; }
pre { background: #f6f8fa; border: 1px solid var(--border); border-radius: 6px; padding: 10px 12px;
  overflow-x: auto; font: 13px/1.45 var(--mono); }
code { font-family: var(--mono); font-size: 0.92em; }
footer { margin-top: 36px; padding-top: 12px; border-top: 1px solid var(--border);
  color: var(--muted); font-size: 13px; }
footer p { margin: 4px 0; }
footer code { word-break: break-all; }
@media print { html, body { background: #ffffff; padding: 0; }
  main { border: 0; padding: 0; max-width: none; } section { break-inside: avoid-page; } }
)css";

constexpr std::string_view kReservedIds[] = {"summary", "contents", "footer"};

bool IsNeutralCell(std::string_view s) {
  return s.empty() || s == "-" || s == "\u2014" || s == "n/a" || s == "N/A";
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

bool LooksNumeric(std::string_view cell) {
  std::string_view s = Trim(cell);
  if (s.starts_with("\u2212")) {
    s.remove_prefix(3);  // U+2212 MINUS SIGN
  } else if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    s.remove_prefix(1);
  }
  if (s == "inf" || s == "nan" || s == "Inf" || s == "NaN" || s == "\u221E") return true;
  size_t i = 0, digits = 0;
  const auto digit = [&](size_t k) { return k < s.size() && s[k] >= '0' && s[k] <= '9'; };
  while (i < s.size() && (digit(i) || (s[i] == ',' && digits > 0 && digit(i + 1)))) {
    digits += digit(i);
    ++i;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (digit(i)) {
      ++digits;
      ++i;
    }
  }
  if (digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    size_t k = i + 1;
    if (k < s.size() && (s[k] == '-' || s[k] == '+')) ++k;
    if (digit(k)) {
      i = k;
      while (digit(i)) ++i;
    }
  }
  // An optional unit: a space, then up to 4 letters, '%', 'µ' or '×' ("12.5%", "4 GiB", "3x").
  std::string_view unit = s.substr(i);
  if (!unit.empty() && unit[0] == ' ') unit.remove_prefix(1);
  size_t chars = 0;
  for (size_t k = 0; k < unit.size();) {
    if (unit.substr(k).starts_with("\u00B5") || unit.substr(k).starts_with("\u00D7")) {
      k += 2;
    } else if (std::isalpha(static_cast<unsigned char>(unit[k])) || unit[k] == '%' ||
               unit[k] == '/') {
      k += 1;
    } else {
      return false;
    }
    ++chars;
  }
  return chars <= 4;
}

HtmlReport::HtmlReport(std::string title)
    : title_(std::move(title)), date_(CurrentUtcTime()), command_line_(CurrentCommandLine()) {
  for (std::string_view id : kReservedIds) used_ids_.insert(std::string(id));
  sections_.push_back(Section{});
}

void HtmlReport::SetSubtitle(std::string text) { subtitle_ = std::move(text); }
void HtmlReport::SetDate(std::string date) { date_ = std::move(date); }
void HtmlReport::SetCommandLine(std::string command_line) {
  command_line_ = std::move(command_line);
}
void HtmlReport::SetSummary(std::string answer) { summary_ = std::move(answer); }
void HtmlReport::AddSummaryFact(std::string label, std::string value) {
  facts_.emplace_back(std::move(label), std::move(value));
}

std::string HtmlReport::UniqueId(std::string_view wanted) {
  std::string id;
  for (char c : wanted) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
    id += ok ? c : '-';
  }
  if (id.empty() || !std::isalpha(static_cast<unsigned char>(id[0]))) id = "s-" + id;
  std::string unique = id;
  for (int k = 2; used_ids_.count(unique) > 0; ++k) unique = id + "-" + std::to_string(k);
  used_ids_.insert(unique);
  return unique;
}

std::string HtmlReport::AddSection(std::string_view id, std::string title) {
  Section s;
  s.id = UniqueId(id);
  s.title = std::move(title);
  sections_.push_back(std::move(s));
  return sections_.back().id;
}

void HtmlReport::AddHeading(std::string text) {
  current().body += "<h3>" + EscapeHtml(text) + "</h3>\n";
}

void HtmlReport::AddParagraph(std::string text) {
  current().body += "<p>" + EscapeHtml(text) + "</p>\n";
}

void HtmlReport::AddLinkParagraph(std::string before, std::string link, std::string href,
                                  std::string after) {
  current().body += "<p>" + EscapeHtml(before) + "<a href=\"" + EscapeHtml(href) + "\">" +
                    EscapeHtml(link) + "</a>" + EscapeHtml(after) + "</p>\n";
}

void HtmlReport::AddNote(std::string text) {
  current().body += "<p class=\"note\">" + EscapeHtml(text) + "</p>\n";
}

void HtmlReport::AddBulletList(const std::vector<std::string>& items) {
  std::string& b = current().body;
  b += "<ul>\n";
  for (const std::string& item : items) b += "<li>" + EscapeHtml(item) + "</li>\n";
  b += "</ul>\n";
}

void HtmlReport::AddCode(std::string text) {
  current().body += "<pre><code>" + EscapeHtml(text) + "</code></pre>\n";
}

void HtmlReport::AddKeyValueTable(const std::vector<std::pair<std::string, std::string>>& rows) {
  std::string& b = current().body;
  b += "<div class=\"table-wrap\"><table class=\"kv\">\n<tbody>\n";
  for (const auto& [key, value] : rows) {
    b += "<tr><th scope=\"row\">" + EscapeHtml(key) + "</th><td>" + EscapeHtml(value) +
         "</td></tr>\n";
  }
  b += "</tbody>\n</table></div>\n";
}

void HtmlReport::AddTable(const std::vector<std::string>& columns,
                          const std::vector<std::vector<std::string>>& rows, std::string caption) {
  size_t width = columns.size();
  for (const auto& row : rows) width = std::max(width, row.size());
  std::vector<bool> numeric(width, false);
  for (size_t c = 0; c < width; ++c) {
    bool any = false, all = true;
    for (const auto& row : rows) {
      const std::string_view cell = c < row.size() ? Trim(row[c]) : "";
      if (IsNeutralCell(cell)) continue;
      const bool num = LooksNumeric(cell);
      any |= num;
      all &= num;
    }
    numeric[c] = any && all;
  }
  std::string& b = current().body;
  b += "<div class=\"table-wrap\"><table>\n";
  if (!caption.empty()) b += "<caption>" + EscapeHtml(caption) + "</caption>\n";
  b += "<thead><tr>";
  for (size_t c = 0; c < width; ++c) {
    b += std::string(numeric[c] ? "<th scope=\"col\" class=\"num\">" : "<th scope=\"col\">") +
         (c < columns.size() ? EscapeHtml(columns[c]) : "") + "</th>";
  }
  b += "</tr></thead>\n<tbody>\n";
  for (const auto& row : rows) {
    b += "<tr>";
    for (size_t c = 0; c < width; ++c) {
      b += std::string(numeric[c] ? "<td class=\"num\">" : "<td>") +
           (c < row.size() ? EscapeHtml(row[c]) : "") + "</td>";
    }
    b += "</tr>\n";
  }
  b += "</tbody>\n</table></div>\n";
}

std::string HtmlReport::AddFigure(const SvgImage& svg, std::string caption, std::string_view id) {
  std::string used;
  std::string& b = current().body;
  if (id.empty()) {
    b += "<figure>\n";
  } else {
    used = UniqueId(id);
    current().figure_ids.push_back(used);
    b += "<figure id=\"" + used + "\">\n";
  }
  b += svg.markup;
  b += "\n";
  if (!caption.empty()) b += "<figcaption>" + EscapeHtml(caption) + "</figcaption>\n";
  b += "</figure>\n";
  return used;
}

std::string HtmlReport::Render() const {
  std::string h;
  h.reserve(4096 + [&] {
    size_t n = 0;
    for (const Section& s : sections_) n += s.body.size();
    return n;
  }());
  h += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  h += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  // Nothing may be fetched or run: styles and images are inline, there is no script.
  h += "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
       "style-src 'unsafe-inline'; img-src data:\">\n";
  h += "<meta name=\"generator\" content=\"attnlab\">\n";
  h += "<title>" + EscapeHtml(title_) + "</title>\n<style>" + std::string(kStyle) + "</style>\n";
  h += "</head>\n<body>\n<main>\n<header>\n<h1>" + EscapeHtml(title_) + "</h1>\n";
  if (!subtitle_.empty()) h += "<p class=\"subtitle\">" + EscapeHtml(subtitle_) + "</p>\n";
  h += "</header>\n";
  if (!summary_.empty() || !facts_.empty()) {
    h += "<section id=\"summary\" class=\"summary\">\n<h2>At a glance</h2>\n";
    if (!summary_.empty()) h += "<p class=\"answer\">" + EscapeHtml(summary_) + "</p>\n";
    if (!facts_.empty()) {
      h += "<div class=\"facts\">\n";
      for (const auto& [label, value] : facts_) {
        h += "<div class=\"fact\"><div class=\"fact-value\">" + EscapeHtml(value) +
             "</div><div class=\"fact-label\">" + EscapeHtml(label) + "</div></div>\n";
      }
      h += "</div>\n";
    }
    h += "</section>\n";
  }
  h += sections_[0].body;
  if (sections_.size() > 2) {
    h += "<nav id=\"contents\" class=\"toc\" "
         "aria-label=\"Contents\"><strong>Contents</strong>\n<ol>\n";
    for (size_t i = 1; i < sections_.size(); ++i) {
      h += "<li><a href=\"#" + sections_[i].id + "\">" + EscapeHtml(sections_[i].title) +
           "</a></li>\n";
    }
    h += "</ol>\n</nav>\n";
  }
  for (size_t i = 1; i < sections_.size(); ++i) {
    const Section& s = sections_[i];
    h += "<section id=\"" + s.id + "\">\n<h2>" + EscapeHtml(s.title) + "</h2>\n" + s.body +
         "</section>\n";
  }
  h += "<footer id=\"footer\">\n<p>Generated by attnlab on " + EscapeHtml(date_) + ".</p>\n";
  if (!command_line_.empty())
    h += "<p>Command: <code>" + EscapeHtml(command_line_) + "</code></p>\n";
  h += "</footer>\n</main>\n</body>\n</html>\n";
  return h;
}

Status HtmlReport::WriteTo(const std::string& path) const {
  return WriteFileAtomically(path, Render());
}

nlohmann::json HtmlReport::Outline() const {
  nlohmann::json sections = nlohmann::json::array();
  for (size_t i = 1; i < sections_.size(); ++i) {
    sections.push_back({{"id", sections_[i].id},
                        {"title", sections_[i].title},
                        {"figures", sections_[i].figure_ids}});
  }
  nlohmann::json facts = nlohmann::json::array();
  for (const auto& [label, value] : facts_) facts.push_back({{"label", label}, {"value", value}});
  return {{"title", title_},
          {"subtitle", subtitle_},
          {"summary", {{"answer", summary_}, {"facts", facts}}},
          {"sections", sections},
          {"intro_figures", sections_[0].figure_ids},
          {"date", date_},
          {"command_line", command_line_}};
}

}  // namespace attnlab::report
