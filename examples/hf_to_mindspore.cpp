// examples/hf_to_mindspore.cpp: a Hugging Face model (sharded safetensors, Float32) made into a
// MindSpore checkpoint for 8 ranks in BFloat16 under MindSpore's parameter names, and back.
//
//   1. The Hugging Face checkpoint: a small decoder (embedding, 2 layers of attention and MLP
//      weights with their norms, the final norm and the output head), Float32, written as
//      model-0000k-of-0000K.safetensors shards of at most 256 KB with model.safetensors.index.json.
//   2. The 8-rank strategy (device matrix [2, 4]: data parallel 2 x model parallel 4), under the
//      MindSpore names: the embedding, q and up projections and the head split by rows, the down
//      projection by columns, the norms replicated.
//   3. split_checkpoint from the HF directory with rename rules (regular expressions, as
//      --rename) and a cast of every floating-point parameter to BFloat16 (--dtype bfloat16):
//      each rank reads only the ranges of the shards it needs. Every value of every rank's file is
//      checked: the BFloat16 of the full tensor's element there (round to nearest even).
//   4. merge_checkpoints back into a Hugging Face directory, with the inverse names (an exact
//      map, as --rename-map) and a cast to Float32: every value is checked again, the Float32 of
//      the BFloat16 (exact), and the shards follow Hugging Face's rule.
//
// The same with the command-line program:
//   reshard split --checkpoint hf --dst-strategy ms_strategy.ckpt --dst-dir ms --dtype bfloat16
//       --rename '\.self_attn\.q_proj\.=.attention.wq.' ...
//   reshard merge --src-dir ms --src-strategy ms_strategy.ckpt --out hf_back --format hf
//       --max-shard-size 256KB --dtype float32 --rename-map names.json
//
// Usage: example_hf_to_mindspore [WORK_DIR]   (default: a temporary directory, removed at the end)
#include <reshard/io/cast.hpp>
#include <reshard/io/name_rules.hpp>

#include "scenario.hpp"

using namespace scenario;

namespace {

// Hugging Face's names -> MindSpore's (the first rule that matches applies, as in name_rules).
const std::vector<std::pair<std::string, std::string>> rules{
    {R"(^model\.embed_tokens\.weight$)", "model.tok_embeddings.embedding_weight"},
    {R"(\.self_attn\.q_proj\.)", ".attention.wq."},
    {R"(\.mlp\.up_proj\.)", ".feed_forward.w3."},
    {R"(\.mlp\.down_proj\.)", ".feed_forward.w2."},
    {R"(\.input_layernorm\.)", ".attention_norm."},
    {R"(^model\.norm\.)", "model.norm_out."},
};

std::string ms_name_of(const std::string& hf) {
  static const io::name_rules names{.rename = rules};
  static const io::renamer rename(names, "hf_to_mindspore");
  return rename(hf).name;
}

// The model, under Hugging Face's names, and how MindSpore splits each weight on 8 ranks
// (device matrix [2, 4]; map entries count device axes from the right: 0 = the model-parallel 4).
struct weight {
  param p;
  std::vector<std::int64_t> map;  // empty: replicated
};
std::vector<weight> model() {
  const index_t vocab = 512, hidden = 64, ffn = 256;
  std::vector<weight> w{{{"model.embed_tokens.weight", io::dtype::float32, {vocab, hidden}}, {0, -1}}};
  for (int l = 0; l < 2; ++l) {
    const std::string at = "model.layers." + std::to_string(l) + ".";
    w.push_back({{at + "self_attn.q_proj.weight", io::dtype::float32, {hidden, hidden}}, {0, -1}});
    w.push_back({{at + "mlp.up_proj.weight", io::dtype::float32, {ffn, hidden}}, {0, -1}});
    w.push_back({{at + "mlp.down_proj.weight", io::dtype::float32, {hidden, ffn}}, {-1, 0}});
    w.push_back({{at + "input_layernorm.weight", io::dtype::float32, {hidden}}, {}});
  }
  w.push_back({{"model.norm.weight", io::dtype::float32, {hidden}}, {}});
  w.push_back({{"lm_head.weight", io::dtype::float32, {vocab, hidden}}, {0, -1}});
  return w;
}

// Element e of weight k: a value with bits below BFloat16's precision, so the cast rounds.
float value(std::size_t k, index_t e) {
  return static_cast<float>((static_cast<double>(e % 1009) - 504.0) * 0.001237 + static_cast<double>(k) * 0.25);
}

std::vector<std::byte> floats(std::size_t k, const box& b, const index_list& shape) {
  std::vector<std::byte> out(static_cast<std::size_t>(reshard::volume(b)) * 4);
  std::vector<index_t> at(shape.size(), 0);
  for (std::size_t i = 0; i < out.size(); i += 4) {
    index_t e = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) e = e * shape[d] + b.offset[d] + at[d];
    const float v = value(k, e);
    std::memcpy(out.data() + i, &v, 4);
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (++at[d] < b.extent[d]) break;
      at[d] = 0;
    }
  }
  return out;
}

std::vector<std::byte> content(const io::tensor_ref& e) {
  std::vector<std::byte> out;
  for (auto p : e.pieces) out.insert(out.end(), p.begin(), p.end());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  return run(argc, argv, "hf_to_mindspore", [](const fs::path& work) {
    const auto w = model();

    // 1. The Hugging Face checkpoint: one safetensors file of full tensors, sharded by the engine.
    {
      std::vector<std::vector<std::byte>> data;
      std::vector<std::vector<std::int64_t>> shapes;
      for (std::size_t k = 0; k < w.size(); ++k) {
        data.push_back(floats(k, whole(w[k].p.shape), w[k].p.shape));
        shapes.push_back(w[k].p.shape.to_vector());
      }
      std::vector<io::safetensors_tensor_view> views;
      for (std::size_t k = 0; k < w.size(); ++k) views.push_back({w[k].p.name, w[k].p.type, shapes[k], data[k]});
      io::write_safetensors(work / "full.safetensors", views, {.metadata = {{"format", "pt"}}});
      io::transform_options opts{.format = io::checkpoint_format::hf, .sync = false};
      opts.max_shard_bytes = 256'000;
      io::convert_checkpoint(work / "full.safetensors", work / "hf", opts);
    }
    const io::checkpoint_reader hf(work / "hf");
    std::printf("hf/: %zu tensors, %llu bytes in %zu shards + %s\n", hf.entries().size(),
                static_cast<unsigned long long>(hf.file_size()), reshard::io::hf_checkpoint(work / "hf").shard_paths().size(),
                std::string(io::hf_index_name).c_str());

    // 2. The MindSpore strategy for 8 ranks, under MindSpore's names.
    network net;
    strategy s8{{matmul("Default/network/MatMul-op0", {2, 4}, {4, 1})}, {}};
    for (const auto& x : w) {
      net.push_back({ms_name_of(x.p.name), x.p.type, x.p.shape});
      s8.layouts.push_back({ms_name_of(x.p.name), x.map.empty() ? stored({2, 4}, std::vector<std::int64_t>(x.p.shape.size(), -1))
                                                                : stored({2, 4}, x.map)});
    }
    write_strategy(work / "ms_strategy.ckpt", net, s8);

    // 3. HF -> 8 MindSpore ranks, renamed, in BFloat16.
    io::transform_options to_ms{.sync = false};
    to_ms.names.rename = rules;
    to_ms.casts.all = io::dtype::bfloat16;
    const auto sum = io::split_checkpoint(work / "hf", work / "ms", work / "ms_strategy.ckpt", "checkpoint_", to_ms);
    std::printf("split hf/ -> ms/rank_<t>/checkpoint_<t>.ckpt: %zu files, %zu parameters cast to BFloat16\n",
                sum.files, sum.casts.size());
    int bad = 0;
    for (index_t t = 0; t < 8; ++t) {
      const io::checkpoint_reader rd(rank_file(work / "ms", "checkpoint_", t));
      for (std::size_t k = 0; k < w.size(); ++k) {
        const io::tensor_ref* e = rd.find(net[k].name);
        const box b = reshard::box_of(layout_of(net, s8.layouts[k]), t);
        if (!e || e->type != io::dtype::bfloat16 || e->dims != b.extent.to_vector()) {
          std::printf("rank %lld: %s: missing, or not BFloat16 %s\n", static_cast<long long>(t), net[k].name.c_str(),
                      reshard::to_string(b.extent).c_str());
          ++bad;
          continue;
        }
        const auto f32 = floats(k, b, w[k].p.shape);
        std::vector<std::byte> want(f32.size() / 2);
        for (std::size_t i = 0; i < f32.size() / 4; ++i) {
          float v;
          std::memcpy(&v, f32.data() + 4 * i, 4);
          const std::uint16_t h = io::to_bf16_bits(v);
          std::memcpy(want.data() + 2 * i, &h, 2);
        }
        if (content(*e) != want) {
          std::printf("rank %lld: %s: values differ\n", static_cast<long long>(t), net[k].name.c_str());
          ++bad;
        }
      }
    }

    // 4. And back: 8 ranks -> one Hugging Face checkpoint, HF names, Float32.
    io::transform_options to_hf{.format = io::checkpoint_format::hf, .sync = false};
    to_hf.max_shard_bytes = 256'000;
    for (const auto& x : w) to_hf.names.rename_exact[ms_name_of(x.p.name)] = x.p.name;
    to_hf.casts.all = io::dtype::float32;
    const auto back = io::merge_checkpoints(work / "ms", work / "hf_back", work / "ms_strategy.ckpt", to_hf);
    std::printf("merged ms/ -> hf_back/: %zu files\n", back.files);
    const io::checkpoint_reader rb(work / "hf_back");
    for (std::size_t k = 0; k < w.size(); ++k) {
      const io::tensor_ref* e = rb.find(w[k].p.name);
      const auto f32 = floats(k, whole(w[k].p.shape), w[k].p.shape);
      std::vector<std::byte> want(f32.size());
      for (std::size_t i = 0; i < f32.size() / 4; ++i) {
        float v;
        std::memcpy(&v, f32.data() + 4 * i, 4);
        const float r = io::from_bf16_bits(io::to_bf16_bits(v));  // the BFloat16 value, exactly
        std::memcpy(want.data() + 4 * i, &r, 4);
      }
      if (!e || e->type != io::dtype::float32 || content(*e) != want) {
        std::printf("hf_back: %s: missing or differs\n", w[k].p.name.c_str());
        ++bad;
      }
    }
    if (rb.entries().size() != w.size()) ++bad;
    const std::size_t shards = reshard::io::hf_checkpoint(work / "hf_back").shard_paths().size();
    std::printf("hf_back/: %zu shards\n", shards);
    return verdict(bad, "every value of the 8 BFloat16 ranks and of the Float32 model merged back");
  });
}
