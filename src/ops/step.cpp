#include "ops/step.h"

#include "core/error.h"

namespace mlxcel::ops {

backend::StepView StepBlock::upload(backend::Backend& be, const StepInputs& s, bool bucket_blocks) {
  const std::int64_t T = s.n_tokens();
  MLXCEL_CHECK(T > 0 && static_cast<std::int64_t>(s.positions.size()) == T &&
                   static_cast<std::int64_t>(s.seq_of_token.size()) == T &&
                   static_cast<std::int64_t>(s.block_tables.size()) == s.n_seqs * s.max_blocks &&
                   static_cast<std::int64_t>(s.seq_lens.size()) == s.n_seqs,
               ErrorCategory::kInternal, "step metadata: inconsistent sizes");
  // Layout: tokens | positions | seq_of_token | block_tables | seq_lens | logit_rows.
  packed_.clear();
  auto append = [&](const std::vector<std::int32_t>& v) {
    const std::size_t at = packed_.size();
    packed_.insert(packed_.end(), v.begin(), v.end());
    return at;
  };
  std::int64_t max_blocks = s.max_blocks;
  if (bucket_blocks)
    while (max_blocks & (max_blocks - 1)) max_blocks += max_blocks & -max_blocks;  // next 2^k
  const std::size_t o_tok = append(s.tokens), o_pos = append(s.positions),
                    o_seq = append(s.seq_of_token);
  const std::size_t o_bt = packed_.size();
  for (std::int64_t i = 0; i < s.n_seqs; ++i) {
    const auto row = s.block_tables.begin() + static_cast<std::ptrdiff_t>(i * s.max_blocks);
    packed_.insert(packed_.end(), row, row + static_cast<std::ptrdiff_t>(s.max_blocks));
    packed_.insert(packed_.end(), static_cast<std::size_t>(max_blocks - s.max_blocks), -1);
  }
  const std::size_t o_len = append(s.seq_lens), o_rows = append(s.logit_rows);
  const std::size_t bytes = packed_.size() * sizeof(std::int32_t);
  const std::int32_t* host = packed_.data();
  const std::int32_t* dev = host;
  if (!be.host_memory_is_device_memory()) {
    if (!buf_ || buf_->bytes() < bytes)
      buf_ = std::make_shared<backend::DeviceBuffer>(
          be.allocate(backend::MemoryKind::kWorkspace, bytes * 2));
    be.copy(buf_->data(), host, bytes, backend::CopyKind::kHostToDevice);
    dev = static_cast<const std::int32_t*>(buf_->data());
  }
  backend::StepView v;
  v.n_tokens = T;
  v.n_seqs = s.n_seqs;
  v.max_blocks = max_blocks;
  v.tokens = dev + o_tok;
  v.positions = dev + o_pos;
  v.seq_of_token = dev + o_seq;
  v.block_tables = dev + o_bt;
  v.seq_lens = dev + o_len;
  v.host_tokens = host + o_tok;
  v.host_positions = host + o_pos;
  v.host_seq_of_token = host + o_seq;
  v.host_block_tables = host + o_bt;
  v.window_order = s.window_order.empty() ? nullptr : &s.window_order;
  logit_rows_ = dev + o_rows;
  host_logit_rows_ = host + o_rows;
  return v;
}

}  // namespace mlxcel::ops
