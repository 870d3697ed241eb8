// Host-side helpers shared by every launcher: device queries (cached per device) and errors.
#include <cuda_runtime.h>

#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "api.h"

namespace fk {

namespace {

struct DeviceInfo {
  int sm_version = 0;
  int sm_count = 0;
};

const DeviceInfo& device_info() {
  static std::mutex mu;
  static std::vector<DeviceInfo> cache;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error("flashkern: no CUDA device is available");
  }
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() <= static_cast<size_t>(dev)) cache.resize(dev + 1);
  DeviceInfo& info = cache[dev];
  if (info.sm_count == 0) {
    int major = 0, minor = 0, count = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev);
    info.sm_version = major * 10 + minor;
    info.sm_count = count > 0 ? count : 1;
  }
  return info;
}

}  // namespace

int current_sm_version() { return device_info().sm_version; }
int current_sm_count() { return device_info().sm_count; }

void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("flashkern: ") + what + " failed to launch: " +
                             cudaGetErrorString(err));
  }
}

void require(bool ok, const char* message) {
  if (!ok) throw std::invalid_argument(std::string("flashkern: ") + message);
}

int dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kFloat8E4M3: return 1;
  }
  throw std::invalid_argument("flashkern: unknown dtype");
}

}  // namespace fk
