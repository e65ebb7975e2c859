// kda/faults.hpp — planted faults, for loupe's own tests of what its objective catches
// (tests/planted). Compiled in only where KDA_FAULT_INJECTION is defined: the `kda_faulty`
// executable, built with the tests; in `kda` every fault() is a constant false the optimiser
// removes. `KDA_FAULT=NAME kda_faulty ...` turns one fault on; tests/planted/README.md lists them.
// Thread-safety: fault() reads the environment once.
#pragma once

#ifdef KDA_FAULT_INJECTION
#include <cstdlib>
#include <string_view>

namespace kda {
inline bool fault(std::string_view name) {
  static const char* const chosen = std::getenv("KDA_FAULT");
  return chosen != nullptr && name == chosen;
}
}  // namespace kda
#else
#include <string_view>

// kda_faulty compiles again only the files kda/CMakeLists.txt found including this header and
// links kda's own objects for the rest: a file it did not list would keep its faults off there,
// so it does not compile.
#if defined(KDA_FAULT_HOOKS_CHECKED) && !defined(KDA_FAULT_HOOKS_LISTED)
#error "kda/faults.hpp: include it from the .cpp file itself, then re-run cmake"
#endif

namespace kda {
constexpr bool fault(std::string_view) { return false; }
}  // namespace kda
#endif
