// core/tensor_file_bytes.hpp — the bytes a tensor file starts with, in memory.
//
// write_npy and write_safetensors (include/loupe/tensor.hpp) write these heads followed by each
// tensor's data; a writer that must know exactly what it wrote (the subject runtime seals every
// file with the SHA-256 of the bytes it wrote, not of what a re-read finds) builds the file from
// them. `file` names the file in errors only. Thread-safety: pure functions.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "loupe/tensor.hpp"

namespace loupe {

// The magic, version, header length and padded header of a .npy file holding `tensor`; its data
// follows. Throws Error(kInput) as write_npy does (a dtype .npy cannot name, the empty tensor).
std::string npy_head(const std::string& file, const Tensor& tensor);

// The header length and padded JSON header of a .safetensors file holding `tensors` in order;
// their data follows, concatenated. Throws Error(kInput) as write_safetensors does.
std::string safetensors_head(const std::string& file, const std::vector<NamedTensor>& tensors,
                             const std::map<std::string, std::string>& metadata);

}  // namespace loupe
