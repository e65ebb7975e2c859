#include "kda/dist/tp_ranks.hpp"

#include <algorithm>

namespace kda::dist {

model::TensorParallel tensor_parallel_of(Communicator& communicator) {
  model::TensorParallel tp;
  tp.rank = communicator.rank();
  tp.ranks = communicator.size();
  tp.gather = [&communicator](const float* block, int64_t rows, std::span<const int64_t> starts,
                              float* full) {
    const int ranks = communicator.size(), rank = communicator.rank();
    const int64_t full_width = starts.back();
    int64_t widest = 0;
    for (int owner = 0; owner < ranks; ++owner) {
      widest = std::max(widest, starts[owner + 1] - starts[owner]);
    }
    // One equal-size allgather: this rank's (rows, width) block padded to (rows, widest).
    const int64_t width = starts[rank + 1] - starts[rank];
    std::vector<float> padded(static_cast<size_t>(rows * widest), 0.0f);
    for (int64_t row = 0; row < rows; ++row) {
      std::copy_n(block + row * width, width, padded.data() + row * widest);
    }
    std::vector<float> all(static_cast<size_t>(ranks) * padded.size());
    communicator.allgather(padded.data(), padded.size() * sizeof(float), all.data());
    for (int owner = 0; owner < ranks; ++owner) {
      const int64_t owner_width = starts[owner + 1] - starts[owner];
      const float* owner_block = all.data() + static_cast<size_t>(owner) * padded.size();
      for (int64_t row = 0; row < rows; ++row) {
        std::copy_n(owner_block + row * widest, owner_width,
                    full + row * full_width + starts[owner]);
      }
    }
  };
  return tp;
}

std::vector<float> tp_prefill_across_ranks(const model::Model& model,
                                           std::span<const int32_t> prompts, int64_t requests,
                                           int64_t tokens, Communicator& communicator,
                                           std::vector<float>* hidden_per_layer) {
  return model.prefill_tensor_parallel(prompts, requests, tokens, tensor_parallel_of(communicator),
                                       hidden_per_layer);
}

}  // namespace kda::dist
