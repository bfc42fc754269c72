#include "ops/sample.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace mlxcel::ops {
namespace {

std::size_t align_up(std::size_t n) { return (n + 255) / 256 * 256; }

// A device buffer of at least `bytes`, grown (doubled) when too small.
void* ensure(Backend& be, std::shared_ptr<backend::DeviceBuffer>& b, std::size_t bytes,
             backend::MemoryKind kind) {
  if (!b || b->bytes() < bytes)
    b = std::make_shared<backend::DeviceBuffer>(
        be.allocate(kind, std::max<std::size_t>(bytes * 2, 4096)));
  return b->data();
}

}  // namespace

std::vector<SampleOut> Sampling::run(const Exec& e, Act logits, std::span<const SampleRow> rows,
                                     std::span<const SampleProc> procs,
                                     std::span<const std::uint32_t> masks, std::int64_t words) {
  const auto n = static_cast<std::int64_t>(rows.size());
  std::vector<SampleOut> result(static_cast<std::size_t>(n));
  if (n == 0) return result;
  e.require({backend::Op::kSample, e.act()});
  const std::int64_t vocab = logits.cols;
  const auto n_procs = static_cast<std::int32_t>(procs.size());
  const std::int64_t n_masks = words > 0 ? static_cast<std::int64_t>(masks.size()) / words : 0;
  for (const SampleRow& r : rows) {
    MLXCEL_CHECK(r.logit_row >= 0 && r.logit_row < logits.rows && r.n_top >= 0 &&
                     r.n_top <= backend::kSampleMaxTop && r.proc_begin >= 0 &&
                     r.proc_begin <= r.proc_end && r.proc_end <= n_procs && r.mask_row < n_masks,
                 ErrorCategory::kInternal, "sample: inconsistent row arguments");
    MLXCEL_CHECK(r.mask_row < 0 || words == mask_words(vocab), ErrorCategory::kInternal,
                 "sample: mask width does not match the vocabulary");
  }
  Backend& be = e.backend();
  const bool unified = be.host_memory_is_device_memory();
  // One staging block: rows | procs | masks; on a GPU it is page-locked, as is the result's.
  const std::size_t b_rows = align_up(rows.size_bytes()), b_procs = align_up(procs.size_bytes());
  const std::size_t total = b_rows + b_procs + masks.size_bytes();
  const std::size_t out_bytes = result.size() * sizeof(SampleOut);
  std::uint8_t* host;
  if (unified) {
    staging_.resize(total);
    host = staging_.data();
  } else {
    host = static_cast<std::uint8_t*>(ensure(be, host_in_, total, backend::MemoryKind::kPinnedHost));
  }
  std::memcpy(host, rows.data(), rows.size_bytes());
  if (!procs.empty()) std::memcpy(host + b_rows, procs.data(), procs.size_bytes());
  if (!masks.empty()) std::memcpy(host + b_rows + b_procs, masks.data(), masks.size_bytes());
  const std::uint8_t* dev = host;
  if (!unified) {
    dev = static_cast<const std::uint8_t*>(ensure(be, in_, total, backend::MemoryKind::kWorkspace));
    be.copy(const_cast<std::uint8_t*>(dev), host, total, backend::CopyKind::kHostToDevice);
  }

  backend::SampleArgs a;
  a.logits = logits;
  a.n = n;
  a.rows = reinterpret_cast<const SampleRow*>(dev);
  a.procs = reinterpret_cast<const SampleProc*>(dev + b_rows);
  a.masks = reinterpret_cast<const std::uint32_t*>(dev + b_rows + b_procs);
  a.mask_words = words;
  a.scratch = static_cast<float*>(
      ensure(be, scratch_, backend::sample_scratch_bytes(n, vocab), backend::MemoryKind::kWorkspace));
  a.out = unified ? result.data()
                  : static_cast<SampleOut*>(ensure(be, out_, out_bytes, backend::MemoryKind::kWorkspace));
  be.sample(a);
  if (!unified) {
    auto* pinned = static_cast<SampleOut*>(ensure(be, host_out_, out_bytes, backend::MemoryKind::kPinnedHost));
    be.copy(pinned, a.out, out_bytes, backend::CopyKind::kDeviceToHost);
    std::copy_n(pinned, result.size(), result.data());
  }
  return result;
}

}  // namespace mlxcel::ops
