// Untrusted bytes quoted in an error message: what a parser shows of a name or a header it
// refuses, readable and bounded whatever the file holds.
#ifndef ATTNLAB_CORE_PRINTABLE_H_
#define ATTNLAB_CORE_PRINTABLE_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace attnlab {

// At most `max` bytes of `s`: printable ASCII as is, '\\' as "\\\\", '\n' as "\\n", any other
// byte as "\\xHH"; "..." appended when `s` is longer than `max`.
std::string PrintableExcerpt(std::string_view s, size_t max = 80);

}  // namespace attnlab

#endif  // ATTNLAB_CORE_PRINTABLE_H_
