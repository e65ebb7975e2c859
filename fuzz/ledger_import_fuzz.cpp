// libFuzzer target: the ledger export reader (src/ledger/exchange.cpp, import_run), which reads a
// document `loupe ledger export` wrote, validates it whole against its schema and returns the run
// `loupe ledger import` records. Error(kInput) is the expected answer to a bad export; anything
// else (a crash, an uncaught foreign exception) is a bug. Nothing touches SQLite here.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ledger/exchange.hpp"
#include "loupe/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const loupe::ledger::RunRecord run = loupe::ledger::import_run(text, "/fuzz/export.json");
    // What `loupe ledger show` and `loupe report` do next with an imported run.
    (void)loupe::ledger::run_to_json(run);
    (void)loupe::ledger::run_verdict(run);
  } catch (const loupe::Error&) {
  }
  return 0;
}
