// kda/gpu/torch_prefill.cpp — kda's chunked prefill (kda/kernels/cuda/chunk_prefill.cuh) as a
// PyTorch extension, so side_by_side.py can time it in the same process as other libraries'
// kernels. Built at run time by torch.utils.cpp_extension.load with kda/kernels/cuda/chunk_intra.cu
// and chunk_state.cu; the kernels are kda's own, unchanged.
//   workspace_elements(batch, tokens, heads, value_heads) -> [q_decayed, k_to_end, w, u, a_qk,
//       decay_end] element counts (fp32) for one problem.
//   prefill(q, k, v, g, beta, o, state, workspace, scale, tf32x3, stream, h0=None) launches
//       chunk_intra then chunk_state on `stream` (a cudaStream_t as an integer,
//       torch.cuda.current_stream().cuda_stream), from the start states h0 (B, HV, 128, 128) fp32
//       when given, else from zero.
//       q, k (B, T, H, 128) bf16, already L2-normalised; v (B, T, HV, 128) bf16; g (B, T, HV, 128)
//       fp32 log decay; beta (B, T, HV) fp32; o (B, T, HV, 128) fp32 and state (B, HV, 128, 128)
//       fp32 written; workspace: six fp32 tensors of workspace_elements' sizes.
// Bad input raises a Python exception naming the argument (TORCH_CHECK); nothing is launched then.
// Thread-safety: as the kernels (asynchronous on the stream; inputs only read).
#include <torch/extension.h>

#include <cstdint>
#include <optional>
#include <string>
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
                                        int64_t value_heads) {
  const auto sizes = kc::chunk_workspace_sizes(shape_only(batch, tokens, heads, value_heads));
  return {sizes.q_decayed, sizes.k_to_end, sizes.w, sizes.u, sizes.a_qk, sizes.decay_end};
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
             bool tf32x3, int64_t stream, const std::optional<torch::Tensor>& h0) {
  TORCH_CHECK(q.dim() == 4, "q must be (B, T, H, 128), got ", q.sizes());
  TORCH_CHECK(v.dim() == 4, "v must be (B, T, HV, 128), got ", v.sizes());
  const int64_t batch = q.size(0), tokens = q.size(1), heads = q.size(2);
  const int64_t value_heads = v.size(2), dim = kc::kPrefillKeyDim;
  check_tensor(q, "q", torch::kBFloat16, {batch, tokens, heads, dim});
  check_tensor(k, "k", torch::kBFloat16, {batch, tokens, heads, dim});
  check_tensor(v, "v", torch::kBFloat16, {batch, tokens, value_heads, dim});
  check_tensor(g, "g", torch::kFloat32, {batch, tokens, value_heads, dim});
  check_tensor(beta, "beta", torch::kFloat32, {batch, tokens, value_heads});
  check_tensor(o, "o", torch::kFloat32, {batch, tokens, value_heads, dim});
  check_tensor(state, "state", torch::kFloat32, {batch, value_heads, dim, dim});
  if (h0.has_value()) check_tensor(*h0, "h0", torch::kFloat32, {batch, value_heads, dim, dim});
  const auto elements = workspace_elements(batch, tokens, heads, value_heads);
  TORCH_CHECK(workspace.size() == elements.size(), "workspace must hold ", elements.size(),
              " tensors, got ", workspace.size());
  for (size_t i = 0; i < elements.size(); ++i) {
    const std::string name = "workspace[" + std::to_string(i) + "]";
    check_tensor(workspace[i], name.c_str(), torch::kFloat32, {elements[i]});
  }

  kc::ChunkPrefillProblem p = shape_only(batch, tokens, heads, value_heads);
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
  const cudaError_t status =
      kc::launch_chunk_prefill(p, reinterpret_cast<cudaStream_t>(static_cast<intptr_t>(stream)));
  TORCH_CHECK(status == cudaSuccess, "kda prefill launch failed: ", cudaGetErrorName(status), " (",
              cudaGetErrorString(status), ")");
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "kda's chunked prefill (kda/kernels/cuda) for side-by-side timing";
  m.def("workspace_elements", &workspace_elements,
        "fp32 element counts of the six workspace arrays");
  m.def("prefill", &prefill, "launch chunk_intra and chunk_state on the given stream",
        pybind11::arg("q"), pybind11::arg("k"), pybind11::arg("v"), pybind11::arg("g"),
        pybind11::arg("beta"), pybind11::arg("o"), pybind11::arg("state"),
        pybind11::arg("workspace"), pybind11::arg("scale"), pybind11::arg("tf32x3"),
        pybind11::arg("stream"), pybind11::arg("h0") = pybind11::none());
}
