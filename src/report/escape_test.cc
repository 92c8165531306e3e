// Escaping: markup in model text must come out as text, and any byte string must come out as
// valid UTF-8 (one U+FFFD per maximal ill-formed subpart, as browsers decode).
#include "report/escape.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "report/report_test_util.h"

namespace attnlab::report {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(ReportEscape, MarkupBecomesText) {
  EXPECT_EQ(EscapeHtml("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;");
  EXPECT_EQ(EscapeHtml("a < b > c"), "a &lt; b &gt; c");
  EXPECT_EQ(EscapeHtml("&amp;"), "&amp;amp;");  // already-escaped text is escaped again
  EXPECT_EQ(EscapeHtml(""), "");
  EXPECT_EQ(EscapeHtml("plain text, unchanged"), "plain text, unchanged");
}

TEST(ReportEscape, WellFormedUtf8IsKept) {
  const std::string s = "h\xC3\xA9llo \xF0\x9F\x98\x80 \xE6\x97\xA5\xE6\x9C\xAC \xE2\x82\xAC";
  EXPECT_EQ(SanitizeUtf8(s), s);
  EXPECT_EQ(EscapeHtml(s), s);
  // The largest code point and the ends of the surrogate gap are well-formed.
  for (const std::string& t : {std::string("\xF4\x8F\xBF\xBF"), std::string("\xED\x9F\xBF"),
                               std::string("\xEE\x80\x80")}) {
    EXPECT_EQ(SanitizeUtf8(t), t);
  }
}

TEST(ReportEscape, IllFormedUtf8GetsOneReplacementPerMaximalSubpart) {
  EXPECT_EQ(SanitizeUtf8("\xFF"), kFffd);
  EXPECT_EQ(SanitizeUtf8("a\x80"
                         "b"),
            "a" + kFffd + "b");                   // stray continuation
  EXPECT_EQ(SanitizeUtf8("a\xC3"), "a" + kFffd);  // truncated at the end
  EXPECT_EQ(SanitizeUtf8("\xE2\x82"
                         "A"),
            kFffd + "A");  // truncated 3-byte: one
  EXPECT_EQ(SanitizeUtf8("\xF0\x9F\x98"
                         "x"),
            kFffd + "x");                                          // truncated 4-byte: one
  EXPECT_EQ(SanitizeUtf8("\xC0\xAF"), kFffd + kFffd);              // overlong '/'
  EXPECT_EQ(SanitizeUtf8("\xE0\x80\xAF"), kFffd + kFffd + kFffd);  // overlong, 3 bytes
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // surrogate U+D800
  EXPECT_EQ(SanitizeUtf8("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
  EXPECT_EQ(SanitizeUtf8("\xF5\x80"), kFffd + kFffd);                          // past U+10FFFF
  // The example of Unicode 15, Table 3-8: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64.
  EXPECT_EQ(SanitizeUtf8("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a" + kFffd + kFffd + kFffd + "b" + kFffd + "c" + kFffd + kFffd + "d");
}

TEST(ReportEscape, ControlCharactersAreReplacedInMarkupOnly) {
  const std::string s = std::string(
                            "a\x01"
                            "b\tc\nd\re\x7F"
                            "f") +
                        "\xC2\x85" + "\xEF\xBF\xBE";
  EXPECT_EQ(SanitizeUtf8(s), s);  // valid UTF-8: kept for data files
  EXPECT_EQ(EscapeHtml(s), "a" + kFffd + "b\tc\nd\re" + kFffd + "f" + kFffd + kFffd);
  EXPECT_EQ(EscapeHtml(std::string("\0", 1)), kFffd);
}

TEST(ReportEscape, RandomBytesAlwaysGiveValidUtf8AndNoMarkup) {
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s(rng() % 40, '\0');
    for (char& c : s) {
      // Mostly interesting bytes: lead bytes, continuations, markup characters.
      const uint32_t r = rng() % 10;
      c = static_cast<char>(r < 3   ? 0x80 + rng() % 64
                            : r < 6 ? 0xC0 + rng() % 64
                            : r < 8 ? "<>&\"'a"[rng() % 6]
                                    : rng() % 256);
    }
    const std::string clean = SanitizeUtf8(s);
    ASSERT_TRUE(testing::IsValidUtf8(clean));
    ASSERT_EQ(SanitizeUtf8(clean), clean);  // idempotent
    const std::string esc = EscapeHtml(s);
    ASSERT_TRUE(testing::IsValidUtf8(esc));
    ASSERT_EQ(esc.find_first_of("<>\"'"), std::string::npos);
    ASSERT_TRUE(testing::CheckXml("<t>" + esc + "</t>").ok())
        << testing::CheckXml("<t>" + esc + "</t>").error;
  }
}

TEST(ReportEscape, VisibleToken) {
  EXPECT_EQ(VisibleToken(" the"), "\u2423the");
  EXPECT_EQ(VisibleToken("\n\n"), "\u21B5\u21B5");
  EXPECT_EQ(VisibleToken("a\tb\r"), "a\u21E5b\u240D");
  EXPECT_EQ(VisibleToken(""), "\u2205");
  EXPECT_EQ(VisibleToken("<b>"), "<b>");  // escaping is EscapeHtml's job
}

TEST(ReportEscape, Utf8Length) {
  EXPECT_EQ(Utf8Length(""), 0u);
  EXPECT_EQ(Utf8Length("abc"), 3u);
  EXPECT_EQ(Utf8Length("h\xC3\xA9\xF0\x9F\x98\x80"), 3u);
}

}  // namespace
}  // namespace attnlab::report
