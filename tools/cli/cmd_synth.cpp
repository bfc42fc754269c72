// `mlxcel synth --like SHAPE --quant MODE OUT`: a random-weight MLX checkpoint with a real
// model's shapes, for benchmarks that need no download (src/io/synth.h says how it is filled).
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/synth.h"
#include "tools/cli/args.h"
#include "tools/cli/command.h"

namespace mlxcel::cli {
namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : "|") + x;
  return s;
}

int cmd_synth(const std::vector<std::string>& args) {
  synth::SynthOptions o;
  std::string out;
  bool dry_run = false;
  auto app_owner = make_app(
      "synth",
      "Writes an MLX-format checkpoint with a real model's shapes and random weights (dequantized\n"
      "std 1/sqrt(fan_in), unit norms: activations stay finite), for benchmarks without "
      "downloads.\n"
      "The tokenizer is copied from the test fixtures (--tokenizer DIR to choose the folder).");
  CLI::App& app = *app_owner;
  app.add_option("--like", o.like, "shape: " + joined(synth::shape_names()))
      ->required()
      ->type_name("SHAPE");
  app.add_option("--quant", o.quant,
                 "weights: " + joined(synth::quant_names()) + " (default affine4)")
      ->type_name("MODE");
  app.add_option("--group-size", o.group_size,
                 "quantization group size (default: the mode's, affine 64)")
      ->type_name("G")
      ->check(in_range(1, 1024));
  app.add_option("--seed", o.seed, "random seed (default 0)")->type_name("S");
  app.add_option("--layers", o.layers, "override the layer count (small test checkpoints)")
      ->type_name("N")
      ->check(in_range(1, 1000));
  app.add_option("--vocab", o.vocab, "override the vocabulary size (small test checkpoints)")
      ->type_name("N")
      ->check(in_range(1, 1 << 22));
  app.add_option(
         "--tokenizer", o.tokenizer_dir,
         "fixture tokenizer folder (default: $MLXCEL_TOKENIZERS or shared/fixtures/tokenizers)")
      ->type_name("DIR");
  app.add_option("--max-shard-bytes", o.shard_bytes, "shard size limit (default 5 GiB, as mlx-lm)")
      ->type_name("N")
      ->check(CLI::Range(std::uint64_t{1} << 20, std::uint64_t{1} << 40).description(""));
  app.add_flag("--no-tokenizer", o.no_tokenizer,
               "write no tokenizer files (mlxcel bench needs none)");
  app.add_flag("--force", o.force, "replace the checkpoint in a non-empty OUT");
  app.add_option("-t,--threads", o.threads, "writer threads (default: all cores)")
      ->type_name("N")
      ->check(in_range(1, 1024));
  app.add_flag("--dry-run", dry_run, "print the tensor plan and sizes, write nothing");
  app.add_option("OUT", out, "output folder")->type_name("OUT");
  if (!parse_args(app, args)) return 0;
  if (dry_run) {
    const auto pl = synth::plan(o);
    for (const auto& t : pl.tensors) {
      std::string shape;
      for (auto d : t.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
      std::printf("%s\t%s\t[%s]\t%llu\n", t.name.c_str(), std::string(dtype_name(t.dtype)).c_str(),
                  shape.c_str(), static_cast<unsigned long long>(t.nbytes()));
    }
    std::printf("total\t%llu bytes in %zu tensors\n",
                static_cast<unsigned long long>(pl.total_bytes()), pl.tensors.size());
    return 0;
  }
  if (out.empty())
    throw_error(ErrorCategory::kBadInput, "synth: give the output folder OUT (or --dry-run)");
  const auto r = synth::write_checkpoint(o, out);
  if (r.tokenizer.empty() && !o.no_tokenizer)
    std::fprintf(
        stderr,
        "mlxcel synth: warning: no fixture tokenizer found (searched $MLXCEL_TOKENIZERS and "
        "shared/fixtures/tokenizers); %s has none: mlxcel bench works, generate needs "
        "--tokenizer DIR\n",
        out.c_str());
  std::printf(
      "wrote %s: %s %s, %.2f GB in %zu tensors, %zu shard(s), %.1f s (%.2f GB/s, %d threads)%s%s\n",
      out.c_str(), o.like.c_str(), o.quant.c_str(), r.bytes / 1e9, r.tensors, r.shards, r.seconds,
      r.bytes / 1e9 / r.seconds, r.threads, r.tokenizer.empty() ? "" : ", tokenizer from ",
      r.tokenizer.c_str());
  return 0;
}

}  // namespace

MLXCEL_COMMAND("synth", "random-weight checkpoint with a real model's shapes (for benchmarks)",
               cmd_synth);

}  // namespace mlxcel::cli
