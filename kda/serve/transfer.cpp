#include "kda/serve/transfer.hpp"

#include <cstring>
#include <string>

#include "kda/faults.hpp"
#include "loupe/error.hpp"

namespace kda::serve {

namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

uint64_t fnv_bytes(uint64_t hash, const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t idx = 0; idx < size; ++idx) {
    hash ^= bytes[idx];
    hash *= kFnvPrime;
  }
  return hash;
}

std::string hex(uint64_t value) {
  char text[19];
  std::snprintf(text, sizeof(text), "0x%016llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace

uint64_t state_digest(int64_t request, int64_t layer, const model::LayerState& state) {
  uint64_t hash = fnv_bytes(kFnvOffset, &request, sizeof(request));
  // Planted faults transfer_digest_skips_layer / transfer_digest_skips_conv: the digest leaves out
  // the layer label, or the convolution state's bytes.
  if (!fault("transfer_digest_skips_layer")) hash = fnv_bytes(hash, &layer, sizeof(layer));
  // Planted fault transfer_digest_count_as_bytes: the recurrent state's element count passed as its
  // byte count, so the digest covers only its first quarter.
  const size_t recurrent_bytes =
      state.recurrent.size() * (fault("transfer_digest_count_as_bytes") ? 1 : sizeof(float));
  hash = fnv_bytes(hash, state.recurrent.data(), recurrent_bytes);
  if (fault("transfer_digest_skips_conv")) return hash;
  return fnv_bytes(hash, state.conv.data(), state.conv.size() * sizeof(float));
}

DecodeIntake::DecodeIntake(model::StateCache& cache, bool verify)
    : cache_(cache), verify_(verify) {}

void DecodeIntake::receive(StatePacket packet) {
  const std::string where =
      "request " + std::to_string(packet.request) + ", layer " + std::to_string(packet.layer);
  bool check = verify_;
  // Planted fault intake_trusts_verified_layer: once one packet of a layer has been verified and
  // stored, the layer's other packets are taken as having come over the same checked link and
  // stored without their digest being recomputed (and still counted as verified).
  if (check && fault("intake_trusts_verified_layer")) {
    std::lock_guard lock(mutex_);
    for (int64_t request = 0; request < cache_.requests() && check; ++request) {
      if (cache_.has(request, packet.layer)) check = false;
    }
  }
  // Planted fault intake_trusts_after_warmup (written after the verifier check's transfers, to
  // test them with a verifier whose memory is not per layer): once eight packets have verified,
  // the link is taken as healthy and later packets are stored unchecked.
  if (check && fault("intake_trusts_after_warmup")) {
    std::lock_guard lock(mutex_);
    if (verified_ >= 8) check = false;
  }
  if (check) {
    const uint64_t digest = state_digest(packet.request, packet.layer, packet.state);
    if (digest != packet.digest) {
      throw loupe::Error(loupe::ErrorCode::kInput,
                         "kda serve: state transfer of " + where + ": digest " + hex(digest) +
                             " computed at the decode side differs from the sender's " +
                             hex(packet.digest),
                         "the state was corrupted in transit or delivered to the wrong request");
    }
  }
  std::lock_guard lock(mutex_);
  if (verify_ && cache_.has(packet.request, packet.layer)) {
    throw loupe::Error(loupe::ErrorCode::kInput,
                       "kda serve: state transfer of " + where + " arrived twice",
                       "another request's state was probably delivered under this label");
  }
  cache_.store(packet.request, packet.layer, packet.state);
  ++received_;
  if (verify_) ++verified_;
  changed_.notify_all();
}

void DecodeIntake::finish(const model::LayerState& zero_state) {
  std::lock_guard lock(mutex_);
  // Checked before waking the waiters: a decode worker must never see an incomplete cache as
  // finished (the sender's error is recorded first, then abandon() wakes it).
  for (int64_t request = 0; request < cache_.requests(); ++request) {
    for (int64_t layer : cache_.missing_layers(request)) {
      if (verify_) {
        throw loupe::Error(loupe::ErrorCode::kInput,
                           "kda serve: state transfer of request " + std::to_string(request) +
                               ", layer " + std::to_string(layer) + ": the state never arrived",
                           "the transfer thread dropped this layer (see --drop-state-layer)");
      }
      cache_.store(request, layer, zero_state);
    }
  }
  finished_ = true;
  changed_.notify_all();
}

void DecodeIntake::abandon() {
  std::lock_guard lock(mutex_);
  finished_ = true;
  changed_.notify_all();
}

bool DecodeIntake::wait_complete() {
  std::unique_lock lock(mutex_);
  const int64_t expected = cache_.requests() * cache_.layers();
  // Waits for finish() (or abandon()), not just for the count: finish() still reads the cache,
  // and the decode worker writes it.
  changed_.wait(lock, [&] { return finished_; });
  return received_ >= expected;
}

int64_t DecodeIntake::received() const {
  std::lock_guard lock(mutex_);
  return received_;
}

int64_t DecodeIntake::verified() const {
  std::lock_guard lock(mutex_);
  return verified_;
}

}  // namespace kda::serve
