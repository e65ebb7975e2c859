// libFuzzer target: the Chrome trace event / Kineto JSON importer
// (src/trace/import/chrome_json_import.cpp) on arbitrary text, then the model's finish() (sort,
// repair, nest, bind flows). Bad input is repaired and counted or refused with a loupe::Error;
// anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "loupe/error.hpp"
#include "trace/import/import.hpp"
#include "trace/model/model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  loupe::trace::Model model;
  loupe::trace::ModelBuilder builder(model);
  try {
    loupe::trace::import_chrome_json(text, "fuzz.json", builder, 0);
    builder.finish();
  } catch (const loupe::Error&) {
  }
  return 0;
}
