// pybind11 module flashkern._C: a pointer-based API in the style of FlashRT. Device buffers
// travel as integers (torch: tensor.data_ptr()), dtypes as strings, streams as integers
// (torch: torch.cuda.current_stream().cuda_stream; 0 = the legacy default stream).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention/dispatcher.h"
#include "kernels/api.h"

#ifndef FLASHKERN_ARCHS
#define FLASHKERN_ARCHS ""
#endif

namespace py = pybind11;

namespace {

using Ptr = std::uintptr_t;

template <typename T = void>
T* ptr(Ptr p) {
  return reinterpret_cast<T*>(p);
}

cudaStream_t stream_of(Ptr s) { return reinterpret_cast<cudaStream_t>(s); }

fk::DType parse_dtype(const std::string& name) {
  static const std::map<std::string, fk::DType> names = {
      {"float32", fk::DType::kFloat32},    {"float", fk::DType::kFloat32},
      {"fp32", fk::DType::kFloat32},       {"float16", fk::DType::kFloat16},
      {"half", fk::DType::kFloat16},       {"fp16", fk::DType::kFloat16},
      {"bfloat16", fk::DType::kBFloat16},  {"bf16", fk::DType::kBFloat16},
      {"float8_e4m3fn", fk::DType::kFloat8E4M3}, {"fp8_e4m3", fk::DType::kFloat8E4M3},
  };
  std::string key = name;
  if (key.rfind("torch.", 0) == 0) key = key.substr(6);
  const auto it = names.find(key);
  if (it == names.end()) throw std::invalid_argument("flashkern: unknown dtype '" + name + "'");
  return it->second;
}

std::vector<std::string> built_archs() {
  std::vector<std::string> out;
  std::stringstream ss(FLASHKERN_ARCHS);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "flashkern: fast memory-bound CUDA kernels over raw device pointers";

  m.def("built_archs", &built_archs, "GPU architectures compiled into this module (e.g. ['90a']).");
  m.def("sm_version", &fk::current_sm_version, "SM version of the current CUDA device (e.g. 90).");
  m.def("noop", []() {}, "An empty call: measures the Python-to-C++ call overhead alone.");

  m.def("rms_norm",
        [](Ptr out, Ptr x, Ptr weight, int64_t rows, int64_t hidden, float eps,
           const std::string& dtype, Ptr stream) {
          fk::rms_norm(ptr(out), ptr(x), ptr(weight), rows, hidden, eps, parse_dtype(dtype),
                       stream_of(stream));
        },
        py::arg("out"), py::arg("x"), py::arg("weight"), py::arg("rows"), py::arg("hidden"),
        py::arg("eps"), py::arg("dtype"), py::arg("stream") = 0);
  m.def("layer_norm",
        [](Ptr out, Ptr x, Ptr weight, Ptr bias, int64_t rows, int64_t hidden, float eps,
           const std::string& dtype, Ptr stream) {
          fk::layer_norm(ptr(out), ptr(x), ptr(weight), ptr(bias), rows, hidden, eps,
                         parse_dtype(dtype), stream_of(stream));
        },
        py::arg("out"), py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("rows"),
        py::arg("hidden"), py::arg("eps"), py::arg("dtype"), py::arg("stream") = 0);
  m.def("gelu_tanh",
        [](Ptr out, Ptr x, int64_t n, const std::string& dtype, Ptr stream) {
          fk::gelu_tanh(ptr(out), ptr(x), n, parse_dtype(dtype), stream_of(stream));
        },
        py::arg("out"), py::arg("x"), py::arg("n"), py::arg("dtype"), py::arg("stream") = 0);
  m.def("silu",
        [](Ptr out, Ptr x, int64_t n, const std::string& dtype, Ptr stream) {
          fk::silu(ptr(out), ptr(x), n, parse_dtype(dtype), stream_of(stream));
        },
        py::arg("out"), py::arg("x"), py::arg("n"), py::arg("dtype"), py::arg("stream") = 0);
  m.def("quantize_fp8",
        [](Ptr out, Ptr x, int64_t n, float scale, Ptr scale_ptr, const std::string& dtype,
           Ptr stream) {
          fk::quantize_fp8(ptr(out), ptr(x), n, scale, ptr<const float>(scale_ptr),
                           parse_dtype(dtype), stream_of(stream));
        },
        py::arg("out"), py::arg("x"), py::arg("n"), py::arg("scale"), py::arg("scale_ptr"),
        py::arg("dtype"), py::arg("stream") = 0);
  m.def("dequantize_fp8",
        [](Ptr out, Ptr q, int64_t n, float scale, Ptr scale_ptr, const std::string& dtype,
           Ptr stream) {
          fk::dequantize_fp8(ptr(out), ptr(q), n, scale, ptr<const float>(scale_ptr),
                             parse_dtype(dtype), stream_of(stream));
        },
        py::arg("out"), py::arg("q"), py::arg("n"), py::arg("scale"), py::arg("scale_ptr"),
        py::arg("dtype"), py::arg("stream") = 0);
  m.def("residual_add",
        [](Ptr out, Ptr a, Ptr b, int64_t n, const std::string& dtype, Ptr stream) {
          fk::residual_add(ptr(out), ptr(a), ptr(b), n, parse_dtype(dtype), stream_of(stream));
        },
        py::arg("out"), py::arg("a"), py::arg("b"), py::arg("n"), py::arg("dtype"),
        py::arg("stream") = 0);
  m.def("bias_add",
        [](Ptr out, Ptr x, Ptr bias, int64_t rows, int64_t cols, const std::string& dtype,
           Ptr stream) {
          fk::bias_add(ptr(out), ptr(x), ptr(bias), rows, cols, parse_dtype(dtype),
                       stream_of(stream));
        },
        py::arg("out"), py::arg("x"), py::arg("bias"), py::arg("rows"), py::arg("cols"),
        py::arg("dtype"), py::arg("stream") = 0);
  m.def("cast",
        [](Ptr out, const std::string& out_dtype, Ptr x, const std::string& in_dtype, int64_t n,
           Ptr stream) {
          fk::cast(ptr(out), parse_dtype(out_dtype), ptr(x), parse_dtype(in_dtype), n,
                   stream_of(stream));
        },
        py::arg("out"), py::arg("out_dtype"), py::arg("x"), py::arg("in_dtype"), py::arg("n"),
        py::arg("stream") = 0);
  m.def("rope",
        [](Ptr q, Ptr k, Ptr cos, Ptr sin, int64_t tokens, int heads_q, int heads_k,
           int head_dim, const std::string& dtype, Ptr stream) {
          fk::rope(ptr(q), ptr(k), ptr<const float>(cos), ptr<const float>(sin), tokens,
                   heads_q, heads_k, head_dim, parse_dtype(dtype), stream_of(stream));
        },
        py::arg("q"), py::arg("k"), py::arg("cos"), py::arg("sin"), py::arg("tokens"),
        py::arg("heads_q"), py::arg("heads_k"), py::arg("head_dim"), py::arg("dtype"),
        py::arg("stream") = 0);
  m.def("fused_add_rms_norm",
        [](Ptr out, Ptr residual_out, Ptr x, Ptr residual, Ptr weight, int64_t rows,
           int64_t hidden, float eps, const std::string& dtype, Ptr stream) {
          fk::fused_add_rms_norm(ptr(out), ptr(residual_out), ptr(x), ptr(residual),
                                 ptr(weight), rows, hidden, eps, parse_dtype(dtype),
                                 stream_of(stream));
        },
        py::arg("out"), py::arg("residual_out"), py::arg("x"), py::arg("residual"),
        py::arg("weight"), py::arg("rows"), py::arg("hidden"), py::arg("eps"),
        py::arg("dtype"), py::arg("stream") = 0);
  m.def("fused_add_rms_norm_fp8",
        [](Ptr out, Ptr residual_out, Ptr x, Ptr residual, Ptr weight, int64_t rows,
           int64_t hidden, float eps, float scale, Ptr scale_ptr, const std::string& dtype,
           Ptr stream) {
          fk::fused_add_rms_norm_fp8(ptr(out), ptr(residual_out), ptr(x), ptr(residual),
                                     ptr(weight), rows, hidden, eps, scale,
                                     ptr<const float>(scale_ptr), parse_dtype(dtype),
                                     stream_of(stream));
        },
        py::arg("out"), py::arg("residual_out"), py::arg("x"), py::arg("residual"),
        py::arg("weight"), py::arg("rows"), py::arg("hidden"), py::arg("eps"),
        py::arg("scale"), py::arg("scale_ptr"), py::arg("dtype"), py::arg("stream") = 0);
  m.def("softmax",
        [](Ptr out, Ptr x, int64_t rows, int64_t cols, const std::string& dtype, Ptr stream) {
          fk::softmax(ptr(out), ptr(x), rows, cols, parse_dtype(dtype), stream_of(stream));
        },
        py::arg("out"), py::arg("x"), py::arg("rows"), py::arg("cols"), py::arg("dtype"),
        py::arg("stream") = 0);
  m.def("copy",
        [](Ptr dst, Ptr src, int64_t nbytes, Ptr stream) {
          fk::copy(ptr(dst), ptr(src), nbytes, stream_of(stream));
        },
        py::arg("dst"), py::arg("src"), py::arg("nbytes"), py::arg("stream") = 0);
  m.def("copy_impl", &fk::copy_impl, "'sm90_tma' or 'portable': the copy path on this device.");
  m.def("kernel_smem_bytes",
        []() {
          std::map<std::string, int64_t> out;
          out["softmax_tiled"] = fk::softmax_smem_bytes();
          return out;
        },
        "Dynamic shared memory (bytes per block) each tiled kernel requests on this device.");

  m.def("load_attention_plugin", &fk::load_attention_plugin, py::arg("path"),
        "Load (or replace) the attention plugin shared library at `path`.");
  m.def("unload_attention_plugin", &fk::unload_attention_plugin);
  m.def("has_attention_plugin", &fk::has_attention_plugin);
  m.def("attention_plugin_path", &fk::attention_plugin_path);
  m.def("attention_plugin_name", &fk::attention_plugin_name);
  m.def("attention_forward",
        [](Ptr out, Ptr q, Ptr k, Ptr v, int batch, int heads, int seq_q, int seq_k,
           int head_dim, const std::string& dtype, bool causal, float scale, Ptr stream) {
          const fk::DType dt = parse_dtype(dtype);
          fk::attention_forward(ptr(out), ptr(q), ptr(k), ptr(v), batch, heads, seq_q, seq_k,
                                head_dim, static_cast<int>(dt), causal, scale, ptr(stream));
        },
        py::arg("out"), py::arg("q"), py::arg("k"), py::arg("v"), py::arg("batch"),
        py::arg("heads"), py::arg("seq_q"), py::arg("seq_k"), py::arg("head_dim"),
        py::arg("dtype"), py::arg("causal") = false, py::arg("scale") = 0.0f,
        py::arg("stream") = 0);
}
