#include "kda/model/state_cache.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <span>
#include <string>

#include "kda/faults.hpp"
#include "kda/model/linear.hpp"
#include "loupe/error.hpp"

namespace kda::model {

std::string_view cache_dtype_name(CacheDType dtype) {
  switch (dtype) {
    case CacheDType::kF32:
      return "f32";
    case CacheDType::kBf16:
      return "bf16";
    case CacheDType::kInt8:
      return "int8";
  }
  return "f32";
}

CacheDType parse_cache_dtype(std::string_view name) {
  if (name == "f32") return CacheDType::kF32;
  if (name == "bf16") return CacheDType::kBf16;
  if (name == "int8") return CacheDType::kInt8;
  throw loupe::Error(loupe::ErrorCode::kUsage,
                     "unknown state cache type '" + std::string(name) + "'",
                     "use f32, bf16 or int8");
}

uint16_t float_to_bf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // keep NaN quiet
  }
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float bf16_to_float(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

StateCache::StateCache(CacheDType dtype, int64_t requests, int64_t layers, int64_t row_length)
    : dtype_(dtype),
      requests_(requests),
      layers_(layers),
      row_length_(row_length),
      slots_(static_cast<size_t>(requests * layers)) {}

size_t StateCache::slot_index(int64_t request, int64_t layer) const {
  if (request < 0 || request >= requests_ || layer < 0 || layer >= layers_) {
    throw loupe::Error(loupe::ErrorCode::kInput,
                       "kda state cache: request " + std::to_string(request) + ", layer " +
                           std::to_string(layer) + " is outside the cache of " +
                           std::to_string(requests_) + " requests and " + std::to_string(layers_) +
                           " layers",
                       "a state was addressed to a request or layer the decode side does not hold");
  }
  return static_cast<size_t>(request * layers_ + layer);
}

void StateCache::store(int64_t request, int64_t layer, const LayerState& state) {
  Slot& slot = slots_[slot_index(request, layer)];
  slot.present = true;
  slot.conv = state.conv;
  const std::vector<float>& values = state.recurrent;
  switch (dtype_) {
    case CacheDType::kF32:
      slot.f32 = values;
      break;
    case CacheDType::kBf16:
      slot.bf16.resize(values.size());
      for (size_t idx = 0; idx < values.size(); ++idx) slot.bf16[idx] = float_to_bf16(values[idx]);
      break;
    case CacheDType::kInt8: {
      const size_t rows = values.size() / static_cast<size_t>(row_length_);
      slot.int8.resize(values.size());
      slot.scales.resize(rows);
      for (size_t row = 0; row < rows; ++row) {
        slot.scales[row] = quantize_row_int8(
            std::span<const float>(values).subspan(row * row_length_, row_length_),
            std::span<int8_t>(slot.int8).subspan(row * row_length_, row_length_));
      }
      // Planted fault state_cache_slot_scale: one scale for the whole slot (its largest row's),
      // not one per row: rows of small magnitude keep few significant bits.
      if (fault("state_cache_slot_scale") && rows > 0) {
        const float scale = *std::max_element(slot.scales.begin(), slot.scales.end());
        for (size_t idx = 0; idx < values.size(); ++idx) {
          slot.int8[idx] =
              static_cast<int8_t>(std::clamp(std::round(values[idx] / scale), -127.0f, 127.0f));
        }
        std::fill(slot.scales.begin(), slot.scales.end(), scale);
      }
      // Planted fault state_cache_drop_bit: the lowest bit of every int8 is lost (7 bits).
      if (fault("state_cache_drop_bit")) {
        for (int8_t& value : slot.int8) value = static_cast<int8_t>(value & ~1);
      }
      break;
    }
  }
}

void StateCache::load(int64_t request, int64_t layer, LayerState& state) const {
  const Slot& slot = slots_[slot_index(request, layer)];
  if (!slot.present) {
    throw loupe::Error(loupe::ErrorCode::kInput,
                       "kda state cache: request " + std::to_string(request) + ", layer " +
                           std::to_string(layer) + ": no state arrived",
                       "the transfer dropped this layer's state; decoding from a zero state would "
                       "produce fluent but wrong text");
  }
  state.conv = slot.conv;
  switch (dtype_) {
    case CacheDType::kF32:
      state.recurrent = slot.f32;
      break;
    case CacheDType::kBf16:
      state.recurrent.resize(slot.bf16.size());
      for (size_t idx = 0; idx < slot.bf16.size(); ++idx) {
        state.recurrent[idx] = bf16_to_float(slot.bf16[idx]);
      }
      break;
    case CacheDType::kInt8:
      state.recurrent.resize(slot.int8.size());
      for (size_t idx = 0; idx < slot.int8.size(); ++idx) {
        state.recurrent[idx] = static_cast<float>(slot.int8[idx]) * slot.scales[idx / row_length_];
      }
      break;
  }
}

bool StateCache::has(int64_t request, int64_t layer) const {
  return slots_[slot_index(request, layer)].present;
}

std::vector<int64_t> StateCache::missing_layers(int64_t request) const {
  std::vector<int64_t> missing;
  for (int64_t layer = 0; layer < layers_; ++layer) {
    if (!has(request, layer)) missing.push_back(layer);
  }
  return missing;
}

}  // namespace kda::model
