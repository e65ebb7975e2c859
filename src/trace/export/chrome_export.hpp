// trace/export/chrome_export.hpp — writes a model as Chrome trace event JSON (opens in Perfetto UI
// and chrome://tracing).
//
// Tracks become pid/tid pairs with process_name and thread_name metadata; slices become X events
// (ts and dur in µs with ns precision); instants i, counters C, flows s/f ("bp":"e"); lock waits
// and holds become X events on the waiting thread and on one extra thread per lock.
// Thread-safety: reads a finished Model.
#pragma once

#include <ostream>
#include <string>

#include "trace/model/model.hpp"

namespace loupe::trace {

void write_chrome_json(const Model& model, std::ostream& out);
// Throws Error(kInput) when `path` cannot be written.
void export_chrome_json(const Model& model, const std::string& path);

}  // namespace loupe::trace
