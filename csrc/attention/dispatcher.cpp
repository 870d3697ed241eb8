// Loads the attention plugin with dlopen and resolves its entry points with dlsym through
// typedef'd function pointers (plugin_abi.h). POSIX-only as written: flashbuild's
// dynamic-loading transform makes it portable (LoadLibraryExW / GetProcAddress) or stubs it.
#include "dispatcher.h"

#include <dlfcn.h>

#include <mutex>
#include <stdexcept>
#include <string>

#include "plugin_abi.h"

namespace fk {

namespace {

struct Plugin {
  void* handle = nullptr;
  std::string path;
  fk_attn_forward_fn forward = nullptr;
  fk_attn_name_fn name = nullptr;
  fk_attn_error_string_fn error_string = nullptr;
};

std::mutex g_mu;
Plugin g_plugin;

std::string last_dl_error() {
  const char* msg = dlerror();
  return msg != nullptr ? std::string(msg) : std::string("unknown dynamic loader error");
}

void* must_resolve(void* handle, const char* symbol, const std::string& path) {
  dlerror();  // clear any stale message so a null symbol value is told apart from a failure
  void* sym = dlsym(handle, symbol);
  if (sym == nullptr) {
    const std::string why = last_dl_error();
    dlclose(handle);
    throw std::runtime_error("flashkern: attention plugin " + path + " lacks " + symbol + ": " +
                             why);
  }
  return sym;
}

void close_locked() {
  if (g_plugin.handle != nullptr) dlclose(g_plugin.handle);
  g_plugin = Plugin{};
}

}  // namespace

void load_attention_plugin(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    throw std::runtime_error("flashkern: cannot load attention plugin " + path + ": " +
                             last_dl_error());
  }
  auto version = reinterpret_cast<fk_attn_abi_version_fn>(
      must_resolve(handle, "fk_attn_abi_version", path));
  if (version() != FK_ATTN_ABI_VERSION) {
    dlclose(handle);
    throw std::runtime_error("flashkern: attention plugin " + path + " has ABI version " +
                             std::to_string(version()) + ", expected " +
                             std::to_string(FK_ATTN_ABI_VERSION));
  }
  Plugin p;
  p.handle = handle;
  p.path = path;
  p.forward = reinterpret_cast<fk_attn_forward_fn>(must_resolve(handle, "fk_attn_forward", path));
  p.name = reinterpret_cast<fk_attn_name_fn>(must_resolve(handle, "fk_attn_name", path));
  p.error_string = reinterpret_cast<fk_attn_error_string_fn>(
      must_resolve(handle, "fk_attn_error_string", path));
  std::lock_guard<std::mutex> lock(g_mu);
  close_locked();
  g_plugin = p;
}

void unload_attention_plugin() {
  std::lock_guard<std::mutex> lock(g_mu);
  close_locked();
}

bool has_attention_plugin() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_plugin.handle != nullptr;
}

std::string attention_plugin_path() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_plugin.path;
}

std::string attention_plugin_name() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_plugin.name != nullptr ? std::string(g_plugin.name()) : std::string();
}

void attention_forward(void* out, const void* q, const void* k, const void* v, int batch,
                       int heads, int seq_q, int seq_k, int head_dim, int dtype, bool causal,
                       float scale, void* stream) {
  fk_attn_forward_fn forward = nullptr;
  fk_attn_error_string_fn error_string = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    forward = g_plugin.forward;
    error_string = g_plugin.error_string;
  }
  if (forward == nullptr) {
    throw std::runtime_error(
        "flashkern: no attention plugin is loaded (call load_attention_plugin first)");
  }
  const int rc = forward(q, k, v, out, batch, heads, seq_q, seq_k, head_dim, dtype,
                         causal ? 1 : 0, scale, stream);
  if (rc != 0) {
    const std::string msg = "flashkern: attention plugin failed: " + std::string(error_string(rc));
    if (rc < 0) throw std::invalid_argument(msg);
    throw std::runtime_error(msg);
  }
}

}  // namespace fk
