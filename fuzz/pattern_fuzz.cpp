// libFuzzer target: patterns × names. The input is a selector (trace `--class` syntax, whose
// name terms are patterns; core/pattern.hpp), a newline, and a slice name. The name is used as
// given and also grown to a long one (the given bytes repeated to 256 KiB), because the patterns
// that hurt backtracking engines ((a|b)*c, ^(a+)+$) do it on long names. The selector picks
// slices of a model holding both names, and the same text is compiled as a kernel filter and
// searched in both, as `loupe counters --kernel` does. A loupe::Error (a pattern that does not
// compile) is expected; a crash, a sanitizer report or a hang (libFuzzer's -timeout) is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/pattern.hpp"
#include "loupe/error.hpp"
#include "trace/analyze/analyze.hpp"
#include "trace/model/model.hpp"

namespace {

constexpr size_t kLongNameBytes = size_t{256} << 10;

std::string grown(std::string_view name) {
  if (name.empty()) return std::string(kLongNameBytes, 'a');
  std::string out;
  out.reserve(kLongNameBytes);
  while (out.size() + name.size() <= kLongNameBytes) out.append(name);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  const std::string selector_text(input.substr(0, newline));
  const std::string_view name =
      newline == std::string_view::npos ? std::string_view() : input.substr(newline + 1);
  const std::string long_name = grown(name);

  using namespace loupe::trace;
  Model model;
  ModelBuilder builder(model);
  const TrackId thread = builder.track(0, TrackKind::kThread, "1", "10");
  const TrackId stream = builder.track(0, TrackKind::kGpuStream, "0", "7");
  builder.add_slice(thread, 0, 100, builder.intern(name), builder.intern("user_annotation"));
  builder.add_slice(stream, 10, 50, builder.intern(long_name), builder.intern("kernel"));
  builder.finish();
  try {
    const Selector selector(selector_text);
    const auto selected = selector.select(model);
    if (selected.size() != 2) __builtin_trap();
  } catch (const loupe::Error&) {
  }
  try {
    const loupe::Pattern kernel = loupe::Pattern::compile(selector_text, "--kernel");
    const bool short_found = kernel.search(name);
    const bool long_found = kernel.search(long_name);
    // A full match of the short name is a search hit of it too.
    if (kernel.full_match(name) && !short_found) __builtin_trap();
    (void)long_found;
  } catch (const loupe::Error&) {
  }
  return 0;
}
