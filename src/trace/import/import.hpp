// trace/import/import.hpp — reads trace files into the columnar model.
//
// Formats, detected by content: loupe's binary format (magic "LOUPETRC"), Chrome trace event JSON
// and PyTorch profiler (Kineto) JSON, plain or gzip, array or object form. Bulk readers repair or
// drop malformed records and count each kind in Model::stats; input that cannot be read at all
// throws loupe::Error(kInput) naming the file, the offset and what was expected.
// Thread-safety: free functions over caller-owned state.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "trace/model/model.hpp"

namespace loupe::trace {

// Adds one file to `builder` as file number `file_index` and appends its FileInfo.
void import_file(const std::string& path, ModelBuilder& builder, uint32_t file_index);

// How the JSON importer spreads one text over threads. The defaults choose by the text's size and
// the machine's cores; tests force each path, and the model is the same whichever runs.
struct JsonReadOptions {
  // 0: by size and cores; 1: the calling thread alone; 2 or more: threads allowed.
  unsigned threads = 0;
  // Offsets where the event list is cut into parts read on threads of their own; empty: found
  // near equal parts of a large text. An offset that is not where an element of the event list
  // starts is dropped (the part before it reads on), so any offsets give the one-thread model.
  std::vector<uint64_t> split_at;
  // When given: set to the number of parts read on threads of their own and joined (1 when one
  // reader read the whole text).
  size_t* parts_joined = nullptr;
};

// Format-specific entry points over bytes already in memory (`name` appears in errors).
void import_loupe_binary(std::string_view bytes, const std::string& name, ModelBuilder& builder,
                         uint32_t file_index);
// `text` is streamed through the reader's window (repairs are made there; `text` is not changed).
void import_chrome_json(std::string& text, const std::string& name, ModelBuilder& builder,
                        uint32_t file_index, const JsonReadOptions& options = {});
// The same, read from the file at `path` in pieces of a few MiB (read(2), not a mapping): peak
// memory is the model plus the window, whatever the file's size. REQUIRES: the file is plain JSON
// (import_file detects gzip and the binary format first).
void import_chrome_json_file(const std::string& path, ModelBuilder& builder, uint32_t file_index,
                             const JsonReadOptions& options = {});

// The JSON importer keeps one window buffer per thread (a few MiB) between imports, so a later
// import skips the page faults of a fresh one. This frees the calling thread's; the next import
// allocates it again. A long-lived process calls it after an import it does not expect to repeat.
void release_import_buffers();

// Reads the whole file, inflating gzip. Throws Error(kInput) when it cannot be read.
std::string read_trace_bytes(const std::string& path);

// Imports every file into one model, aligns clocks where the files share a domain (the model's
// `alignment` says what was done) and finishes it.
// `keep_args`: keep each slice's args object for export (trace/export); the analyses of one file
// do not need it (several files keep it: the collectives across ranks read the process group).
// `ranks` (empty, or one per path; -1 keeps what the file says) overrides each file's rank.
// A file whose rank neither distributedInfo nor `ranks` gives takes it from its name (rank-3,
// rank_3, rank3) when the name says. Throws Error(kUsage) when `ranks` has the wrong length.
// Several files are parsed on up to `threads` worker threads (0: one per core; 1: one file after
// the other on the calling thread) and merged in the files' order as they finish: the model is
// the one a serial import builds, and the first bad file in the files' order is the error.
Model load_traces(const std::vector<std::string>& paths, bool keep_args = false,
                  const std::vector<int>& ranks = {}, unsigned threads = 0);

}  // namespace loupe::trace
