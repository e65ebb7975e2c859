// kda/probes/with_device.cuh — the one guard every GPU probe body runs under: no CUDA device is
// the subject's error (exit 3, said as such), and the harness's CUDA failures become subject
// errors naming the probe and how to localise them. Shared by gpu_probes.cu and
// prefill_gpu_probes.cu.
#pragma once

#include <loupe/probe.hpp>

#include <string>

#include "kda/gpu/harness.cuh"

namespace kda::probes {

template <class Body>
auto with_device(const char* probe, Body body) {
  if (!loupe::cuda_device_available()) {
    throw loupe::Error(loupe::ErrorCode::kSubject,
                       std::string(probe) + ": no CUDA device (the GPU path cannot run here)",
                       "run on the GPU machine (scripts/gpu-validate); CPU probes run anywhere");
  }
  try {
    return body();
  } catch (const gpu::CudaFailure& failure) {
    throw loupe::Error(loupe::ErrorCode::kSubject, std::string(probe) + ": " + failure.what(),
                       "rerun alone on the device; `compute-sanitizer build/bin/kda probe run " +
                           std::string(probe) + " ...` localises a bad access");
  }
}

}  // namespace kda::probes
