#pragma once
// The sampling op on the host (backend/sample_math.h has the shared arithmetic and the rule that
// makes the CPU and the GPU draw the same token).
#include <cstdint>

#include "backend/sample_math.h"

namespace mlxcel::cpu {

// Samples one row. `work` holds `vocab` floats of scratch. With `processed` non-null it also
// receives the distribution the draw samples from before the temperature (log-probabilities after
// the processors and the filters, -inf for removed tokens; mlx-lm's logprobs as they reach
// categorical_sampling), for tests against mlx-lm.
void sample_row(const float* logits, std::int64_t vocab, const backend::SampleRow& row,
                const backend::SampleProc* procs, const std::uint32_t* mask, float* work,
                backend::SampleOut* out, float* processed = nullptr);

}  // namespace mlxcel::cpu
