// kda/model/state_cache.hpp — the decode-side cache of per-(request, layer) recurrent states.
//
// A layer's state for one request is the KDA state S (HV, K, V) plus the short convolution's
// history (conv_width − 1 previous inputs of the q, k and v channels). The cache stores S in one
// of three element types; the convolution history always stays fp32:
//   f32   as is
//   bf16  rounded to bfloat16, to nearest even
//   int8  per row of V values one scale max |row| / 127 (rows are (head, key channel) pairs)
// Decode reads a state (load: widened to fp32), advances it, and writes it back (store: rounded
// again), so a lossy cache re-rounds the state at every step; the state_cache_vs_fp32 check
// measures what that does to the logits along decode steps.
// Thread-safety: none; the server guards its cache with its own mutex.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace kda::model {

enum class CacheDType { kF32, kBf16, kInt8 };

std::string_view cache_dtype_name(CacheDType dtype);
// Throws loupe::Error(kUsage) unless `name` is f32, bf16 or int8.
CacheDType parse_cache_dtype(std::string_view name);

// One request's state after one layer, in fp32.
struct LayerState {
  std::vector<float> recurrent;  // (HV, K, V)
  std::vector<float> conv;       // (conv_width − 1, q + k + v channels)
};

class StateCache {
 public:
  // `row_length` is V: int8 scales are per row of that many values.
  StateCache(CacheDType dtype, int64_t requests, int64_t layers, int64_t row_length);

  void store(int64_t request, int64_t layer, const LayerState& state);
  // Throws loupe::Error(kInput) naming the request and the layer when it was never stored.
  void load(int64_t request, int64_t layer, LayerState& state) const;
  bool has(int64_t request, int64_t layer) const;
  // The layers of `request` that were never stored, in order.
  std::vector<int64_t> missing_layers(int64_t request) const;

  CacheDType dtype() const { return dtype_; }
  int64_t requests() const { return requests_; }
  int64_t layers() const { return layers_; }

 private:
  struct Slot {
    bool present = false;
    std::vector<float> f32;
    std::vector<uint16_t> bf16;
    std::vector<int8_t> int8;
    std::vector<float> scales;
    std::vector<float> conv;
  };
  size_t slot_index(int64_t request, int64_t layer) const;

  CacheDType dtype_;
  int64_t requests_, layers_, row_length_;
  std::vector<Slot> slots_;
};

// bfloat16 conversions (round to nearest even; NaN stays NaN).
uint16_t float_to_bf16(float value);
float bf16_to_float(uint16_t bits);

}  // namespace kda::model
