// Attention dispatcher: loads the optional attention plugin at run time and forwards calls to
// it. Without a plugin loaded, has_attention_plugin() is false and attention_forward throws.
#pragma once

#include <cstdint>
#include <string>

namespace fk {

// Loads (or replaces) the plugin. Throws std::runtime_error with the loader's message when the
// library cannot be opened, lacks a symbol, or has another ABI version.
void load_attention_plugin(const std::string& path);
void unload_attention_plugin();
bool has_attention_plugin();
// The path given to load_attention_plugin ("" when none) and the plugin's own name.
std::string attention_plugin_path();
std::string attention_plugin_name();

// q, k, v, out: contiguous [batch, heads, seq, head_dim] device buffers of `dtype`
// (0 fp32, 1 fp16, 2 bf16). scale <= 0 means 1/sqrt(head_dim).
void attention_forward(void* out, const void* q, const void* k, const void* v, int batch,
                       int heads, int seq_q, int seq_k, int head_dim, int dtype, bool causal,
                       float scale, void* stream);

}  // namespace fk
