// Text that came from anywhere (model output, file names, user flags) made safe for a report.
//
// Model text can hold anything: markup, control bytes, bytes that are not UTF-8 at all (a BPE
// token is often half of a multi-byte character). Every piece of text a report shows goes
// through one of these, so a report is always valid UTF-8 and never contains markup it did not
// write itself.
#ifndef ATTNLAB_REPORT_ESCAPE_H_
#define ATTNLAB_REPORT_ESCAPE_H_

#include <string>
#include <string_view>

namespace attnlab::report {

// Valid UTF-8 with each ill-formed sequence replaced by U+FFFD, one replacement per maximal
// subpart (the W3C/WHATWG decoder's rule, Unicode ch. 3 "U+FFFD Substitution of Maximal
// Subparts"): overlong forms, surrogates (ED A0..BF ..), code points past U+10FFFF, stray
// continuation bytes and truncated sequences are all ill-formed. Well-formed input comes back
// byte for byte.
std::string SanitizeUtf8(std::string_view text);

// Text for HTML or XML (SVG), in element content or in a quoted attribute value: SanitizeUtf8,
// then & < > " ' become entities, and characters XML 1.0 forbids or HTML calls control
// characters (C0 except tab, LF and CR; DEL; C1; U+FFFE and U+FFFF) become U+FFFD.
std::string EscapeHtml(std::string_view text);

// A token's text with its whitespace made visible, for tables of tokens: space -> U+2423 '␣',
// newline -> U+21B5 '↵', tab -> U+21E5 '⇥', CR -> U+240D '␍'; an empty token -> U+2205 '∅'.
// Other text is unchanged (escape it as usual). " the" -> "␣the", "\n\n" -> "↵↵".
std::string VisibleToken(std::string_view token);

// Number of code points in valid UTF-8 (for estimating how wide a label is drawn).
size_t Utf8Length(std::string_view valid_utf8);

}  // namespace attnlab::report

#endif  // ATTNLAB_REPORT_ESCAPE_H_
