// libFuzzer target: the objective parser (src/gate/objective.cpp, parse_objective from text),
// which validates the TOML and parses every gate expression. Error(kConfig) is the expected
// answer to a bad objective; anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "gate/objective.hpp"
#include "loupe/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const loupe::gate::Objective objective =
        loupe::gate::parse_objective(text, "/fuzz/objective.toml");
    // Expanding the sweeps is what `loupe plan` and `loupe run` do next; a product of thousands
    // of points is legitimate and only slow, so large sweeps are counted, not expanded.
    size_t points = 0;
    for (const auto layer : {loupe::Layer::kCheck, loupe::Layer::kBench, loupe::Layer::kScenario}) {
      for (const loupe::gate::ProbeEntry& entry : objective.entries(layer)) {
        double product = 1;
        for (const loupe::gate::ParamAxis& axis : entry.params) product *= axis.values.size();
        if (product <= 4096) points += loupe::gate::expand_points(entry).size();
      }
    }
    (void)points;
  } catch (const loupe::Error&) {
  }
  return 0;
}
