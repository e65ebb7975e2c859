// kda/dist/tp_ranks.hpp — tensor-parallel (TP) model prefill across ranks.
//
// Each rank owns a contiguous share of the heads of every KDA layer and of the LM head's
// vocabulary rows (kda/model/model.hpp, TensorParallel): it projects, convolves, runs the KDA
// recurrence and normalises its heads only, and computes the logits of its vocabulary rows. Two
// gathers per layer boundary use the communicator's allgather: the gated attention output of
// every rank's heads before the output projection (which, like the MoE and the norms, runs whole
// on every rank), and every rank's logits after the LM head. Same communicator and launchers as
// CP (communicator.hpp); the same code path as the one-process Model::prefill.
// Thread-safety: collective: every rank of `communicator` calls it with the same model config,
// prompts and shape.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kda/dist/communicator.hpp"
#include "kda/model/model.hpp"

namespace kda::dist {

// The TensorParallel share of this rank of `communicator`, gathering through its allgather:
// blocks of unequal width are padded to the widest, gathered, and placed at their columns.
model::TensorParallel tensor_parallel_of(Communicator& communicator);

// Logits (requests, vocab) of each prompt's last token, on every rank; `hidden_per_layer` (when
// not null) receives the residual stream after every layer (layers, requests · tokens, D).
// Throws loupe::Error(kUsage) before any collective when the model has fewer heads or
// vocabulary rows than there are ranks.
std::vector<float> tp_prefill_across_ranks(const model::Model& model,
                                           std::span<const int32_t> prompts, int64_t requests,
                                           int64_t tokens, Communicator& communicator,
                                           std::vector<float>* hidden_per_layer = nullptr);

}  // namespace kda::dist
