// kda/gpu/torch_prefill.cpp — kda's chunked prefill (kda/kernels/cuda/chunk_prefill.cuh) as a
// PyTorch extension, so side_by_side.py can time it in the same process as other libraries'
// kernels. Built at run time by torch.utils.cpp_extension.load with
// kda/kernels/cuda/chunk_intra.cu, chunk_state.cu and chunk_cp.cu; the kernels are kda's own.
//   workspace_elements(batch, tokens, heads, value_heads, total_chunks=0) -> [q_decayed, k_to_end,
//       w, u, a_qk, decay_end] element counts (fp32) for one problem (total_chunks: varlen's).
//   sequence_descriptors(lengths, device) -> (cu_seqlens, cu_chunks, total_chunks): a varlen
//       batch's descriptors (int32 tensors of len(lengths) + 1 on `device`), checked on the host.
//   cp_shards(batch, tokens, heads, value_heads) -> the shard count `shards=0` takes on this GPU.
//   prefill(q, k, v, g, beta, o, state, workspace, scale, tf32x3, stream, h0=None,
//           cu_seqlens=None, cu_chunks=None, total_chunks=0, shards=1)
//       launches the prefill on `stream` (a cudaStream_t as an integer,
//       torch.cuda.current_stream().cuda_stream), from the start states h0 (N, HV, 128, 128) fp32
//       when given, else from zero.
//       q, k (B, T, H, 128) bf16, already L2-normalised; v (B, T, HV, 128) bf16; g (B, T, HV, 128)
//       fp32 log decay; beta (B, T, HV) fp32; o (B, T, HV, 128) fp32 and state (N, HV, 128, 128)
//       fp32 written (N = B); workspace: six fp32 tensors of workspace_elements' sizes. Any T.
//       Varlen: B = 1, the N sequences packed along T as cu_seqlens says (from
//       sequence_descriptors; REQUIRES: its contents unchanged), state holds each one's final
//       state. shards: 1 the one-pass prefill; P >= 2 intra-card context parallelism in P shards
//       (chunk_cp.cu; equal lengths, T a multiple of 64 P; its buffers are allocated here);
//       0 cp_shards' choice.
// Bad input raises a Python exception naming the argument (TORCH_CHECK); nothing is launched then.
// Thread-safety: as the kernels (asynchronous on the stream; inputs only read).
#include <torch/extension.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "kda/kernels/cuda/chunk_prefill.cuh"

namespace {

namespace kc = kda::kernels::cuda;

kc::ChunkPrefillProblem shape_only(int64_t batch, int64_t tokens, int64_t heads,
                                   int64_t value_heads) {
  kc::ChunkPrefillProblem p;
  p.batch = static_cast<int>(batch), p.tokens = static_cast<int>(tokens);
  p.heads = static_cast<int>(heads), p.value_heads = static_cast<int>(value_heads);
  p.key_dim = kc::kPrefillKeyDim, p.value_dim = kc::kPrefillValueDim;
  return p;
}

std::vector<int64_t> workspace_elements(int64_t batch, int64_t tokens, int64_t heads,
                                        int64_t value_heads, int64_t total_chunks) {
  kc::ChunkPrefillProblem p = shape_only(batch, tokens, heads, value_heads);
  if (total_chunks > 0) {  // varlen: only the chunk count matters for the sizes
    static const int kMarker = 0;
    p.cu_seqlens = p.cu_chunks = &kMarker;
    p.total_chunks = static_cast<int>(total_chunks);
  }
  const auto sizes = kc::chunk_workspace_sizes(p);
  return {sizes.q_decayed, sizes.k_to_end, sizes.w, sizes.u, sizes.a_qk, sizes.decay_end};
}

std::tuple<torch::Tensor, torch::Tensor, int64_t> sequence_descriptors(
    const std::vector<int64_t>& lengths, const torch::Device& device) {
  TORCH_CHECK(!lengths.empty() && lengths.size() <= 65535,
              "lengths: expected 1 to 65535 sequence lengths, got ", lengths.size());
  std::vector<int32_t> cu_seqlens{0}, cu_chunks{0};
  int64_t tokens = 0, chunks = 0;
  for (size_t b = 0; b < lengths.size(); ++b) {
    TORCH_CHECK(lengths[b] > 0, "lengths[", b, "] = ", lengths[b], ": expected a positive length");
    tokens += lengths[b];
    chunks += (lengths[b] + kc::kPrefillChunk - 1) / kc::kPrefillChunk;
    TORCH_CHECK(tokens < (int64_t{1} << 31), "lengths: the total ", tokens,
                " tokens exceed int32 offsets");
    cu_seqlens.push_back(static_cast<int32_t>(tokens));
    cu_chunks.push_back(static_cast<int32_t>(chunks));
  }
  auto to_device = [&](const std::vector<int32_t>& host) {
    return torch::tensor(host, torch::dtype(torch::kInt32)).to(device);
  };
  return {to_device(cu_seqlens), to_device(cu_chunks), chunks};
}

int processor_count() {
  int device = 0, processors = 0;
  TORCH_CHECK(cudaGetDevice(&device) == cudaSuccess, "no CUDA device");
  TORCH_CHECK(
      cudaDeviceGetAttribute(&processors, cudaDevAttrMultiProcessorCount, device) == cudaSuccess,
      "cannot read the multiprocessor count");
  return processors;
}

int64_t cp_shards(int64_t batch, int64_t tokens, int64_t heads, int64_t value_heads) {
  return kc::chunk_prefill_cp_shards(shape_only(batch, tokens, heads, value_heads),
                                     processor_count());
}

void check_tensor(const torch::Tensor& t, const char* name, torch::ScalarType type,
                  const std::vector<int64_t>& sizes) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
  TORCH_CHECK(t.scalar_type() == type, name, " must be ", c10::toString(type), ", got ",
              c10::toString(t.scalar_type()));
  TORCH_CHECK(t.sizes() == c10::IntArrayRef(sizes), name, " must have shape ",
              c10::IntArrayRef(sizes), ", got ", t.sizes());
}

void prefill(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
             const torch::Tensor& g, const torch::Tensor& beta, const torch::Tensor& o,
             const torch::Tensor& state, const std::vector<torch::Tensor>& workspace, double scale,
             bool tf32x3, int64_t stream, const std::optional<torch::Tensor>& h0,
             const std::optional<torch::Tensor>& cu_seqlens,
             const std::optional<torch::Tensor>& cu_chunks, int64_t total_chunks, int64_t shards) {
  TORCH_CHECK(q.dim() == 4, "q must be (B, T, H, 128), got ", q.sizes());
  TORCH_CHECK(v.dim() == 4, "v must be (B, T, HV, 128), got ", v.sizes());
  TORCH_CHECK(cu_seqlens.has_value() == cu_chunks.has_value(),
              "cu_seqlens and cu_chunks go together (sequence_descriptors makes both)");
  const bool packed = cu_seqlens.has_value();
  const int64_t batch = q.size(0), tokens = q.size(1), heads = q.size(2);
  const int64_t value_heads = v.size(2), dim = kc::kPrefillKeyDim;
  int64_t sequences = batch;
  if (packed) {
    TORCH_CHECK(batch == 1,
                "varlen: q must be (1, T, H, 128) with the sequences packed, got B = ", batch);
    TORCH_CHECK(cu_seqlens->dim() == 1 && cu_seqlens->size(0) >= 2,
                "cu_seqlens must be (N + 1), got ", cu_seqlens->sizes());
    sequences = cu_seqlens->size(0) - 1;
    check_tensor(*cu_seqlens, "cu_seqlens", torch::kInt32, {sequences + 1});
    check_tensor(*cu_chunks, "cu_chunks", torch::kInt32, {sequences + 1});
    TORCH_CHECK(total_chunks >= sequences && total_chunks <= tokens,
                "total_chunks = ", total_chunks,
                ": expected cu_chunks[N] from sequence_descriptors");
    TORCH_CHECK(shards <= 1, "shards = ", shards, ": context parallelism takes no varlen batch");
  }
  TORCH_CHECK(shards >= 0, "shards = ", shards, ": expected 0 (automatic), 1 or more");
  check_tensor(q, "q", torch::kBFloat16, {batch, tokens, heads, dim});
  check_tensor(k, "k", torch::kBFloat16, {batch, tokens, heads, dim});
  check_tensor(v, "v", torch::kBFloat16, {batch, tokens, value_heads, dim});
  check_tensor(g, "g", torch::kFloat32, {batch, tokens, value_heads, dim});
  check_tensor(beta, "beta", torch::kFloat32, {batch, tokens, value_heads});
  check_tensor(o, "o", torch::kFloat32, {batch, tokens, value_heads, dim});
  check_tensor(state, "state", torch::kFloat32, {sequences, value_heads, dim, dim});
  if (h0.has_value()) check_tensor(*h0, "h0", torch::kFloat32, {sequences, value_heads, dim, dim});
  const auto elements =
      workspace_elements(batch, tokens, heads, value_heads, packed ? total_chunks : 0);
  TORCH_CHECK(workspace.size() == elements.size(), "workspace must hold ", elements.size(),
              " tensors, got ", workspace.size());
  for (size_t i = 0; i < elements.size(); ++i) {
    const std::string name = "workspace[" + std::to_string(i) + "]";
    check_tensor(workspace[i], name.c_str(), torch::kFloat32, {elements[i]});
  }

  kc::ChunkPrefillProblem p = shape_only(sequences, tokens, heads, value_heads);
  if (packed) {
    p.cu_seqlens = cu_seqlens->data_ptr<int32_t>();
    p.cu_chunks = cu_chunks->data_ptr<int32_t>();
    p.total_chunks = static_cast<int>(total_chunks);
  }
  p.q_global = reinterpret_cast<const __nv_bfloat16*>(q.data_ptr());
  p.k_global = reinterpret_cast<const __nv_bfloat16*>(k.data_ptr());
  p.v_global = reinterpret_cast<const __nv_bfloat16*>(v.data_ptr());
  p.g_global = g.data_ptr<float>();
  p.beta_global = beta.data_ptr<float>();
  p.o_global = o.data_ptr<float>();
  p.state_global = state.data_ptr<float>();
  p.h0_global = h0.has_value() ? h0->data_ptr<float>() : nullptr;
  p.scale = static_cast<float>(scale);
  p.precision = tf32x3 ? kc::ChainPrecision::kTf32x3 : kc::ChainPrecision::kTf32;
  p.workspace = {workspace[0].data_ptr<float>(), workspace[1].data_ptr<float>(),
                 workspace[2].data_ptr<float>(), workspace[3].data_ptr<float>(),
                 workspace[4].data_ptr<float>(), workspace[5].data_ptr<float>()};
  if (const char* error = kc::chunk_prefill_shape_error(p)) {
    TORCH_CHECK(false, "kda prefill: ", error, " (B=", batch, ", T=", tokens, ", H=", heads,
                ", HV=", value_heads, ")");
  }
  const auto cuda_stream = reinterpret_cast<cudaStream_t>(static_cast<intptr_t>(stream));
  if (shards == 0) shards = kc::chunk_prefill_cp_shards(p, processor_count());
  cudaError_t status = cudaSuccess;
  if (shards == 1) {
    status = kc::launch_chunk_prefill(p, cuda_stream);
  } else {
    if (const char* error = kc::chunk_prefill_cp_error(p, static_cast<int>(shards))) {
      TORCH_CHECK(false, "kda prefill, shards = ", shards, ": ", error, " (B=", batch,
                  ", T=", tokens, ")");
    }
    // The CP buffers from torch's caching allocator: ordered on the current stream, which is the
    // one side_by_side.py passes.
    const int64_t elements_cp = kc::chunk_cp_workspace_elements(p, static_cast<int>(shards));
    const auto options = torch::dtype(torch::kFloat32).device(q.device());
    const torch::Tensor transitions = torch::empty({elements_cp}, options);
    const torch::Tensor shard_ends = torch::empty({elements_cp}, options);
    const torch::Tensor starts = torch::empty({elements_cp}, options);
    status = kc::launch_chunk_prefill_cp(
        p, static_cast<int>(shards),
        {transitions.data_ptr<float>(), shard_ends.data_ptr<float>(), starts.data_ptr<float>()},
        cuda_stream);
  }
  TORCH_CHECK(status == cudaSuccess, "kda prefill launch failed: ", cudaGetErrorName(status), " (",
              cudaGetErrorString(status), ")");
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "kda's chunked prefill (kda/kernels/cuda) for side-by-side timing";
  m.def("workspace_elements", &workspace_elements,
        "fp32 element counts of the six workspace arrays", pybind11::arg("batch"),
        pybind11::arg("tokens"), pybind11::arg("heads"), pybind11::arg("value_heads"),
        pybind11::arg("total_chunks") = 0);
  m.def("sequence_descriptors", &sequence_descriptors,
        "cu_seqlens, cu_chunks (int32, on device) and the chunk count of a varlen batch");
  m.def("cp_shards", &cp_shards, "the shard count shards=0 takes for this shape on this GPU");
  m.def("prefill", &prefill, "launch kda's chunked prefill on the given stream", pybind11::arg("q"),
        pybind11::arg("k"), pybind11::arg("v"), pybind11::arg("g"), pybind11::arg("beta"),
        pybind11::arg("o"), pybind11::arg("state"), pybind11::arg("workspace"),
        pybind11::arg("scale"), pybind11::arg("tf32x3"), pybind11::arg("stream"),
        pybind11::arg("h0") = pybind11::none(), pybind11::arg("cu_seqlens") = pybind11::none(),
        pybind11::arg("cu_chunks") = pybind11::none(), pybind11::arg("total_chunks") = 0,
        pybind11::arg("shards") = 1);
}
