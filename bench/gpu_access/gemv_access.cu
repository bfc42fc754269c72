// The decode GEMV's weight stream measured apart from the GEMV: which layout of the 4-bit codes
// and which grid let 16-row warp tiles read a matrix near the device's copy bandwidth.
//
// Why (dev/NOTES.md, sessions 17-21): the tensor-core GEMV (src/backend/gpu/qgemv_mma.cu) reads
// the 8B's gate_up at ~1.8 TB/s of the H100's ~2.95, its memory round trips take ~2 us, and
// every attempt to put more requests in flight (L2 prefetch, 256-byte L2 fetches, a cp.async
// ring, a deeper register prefetch) made it slower or left it unchanged. That reads as a memory
// system saturated by the access pattern itself, which only a pure-load kernel can show: this
// program streams the same bytes with the GEMV's lane mapping and grids, and with alternatives.
// It found otherwise (runs 42-44, dev/NOTES.md session 22): the stream is near the copy rate;
// the GEMV's scale / bias and x loads are its loss.
//
// Layouts (a chunk = 128 bytes = 256 codes of each of a warp tile's 16 rows; lane (g, t) holds
// rows g and g + 8, four 16-byte words per chunk):
//   row-quad    MLX's row-major codes, lane t reading its group's 32 bytes as two 16-byte loads
//               (bytes [32 t + 16 i, +16)): the GEMV's mapping; each load touches 4 half-used
//               sectors per row;
//   tile        the 16 rows' chunk stored as one contiguous 2 KB block (tile-major, then chunk),
//               each load a contiguous 512 bytes of the warp: a repacked layout.
// Grids: "tiled" as the GEMV (8 warps per block, ks warps per tile splitting its chunks);
// "fill" exactly the resident warps (blocks per SM x SMs x 8), each taking an equal contiguous
// range of (tile, chunk) units across tile boundaries (stream-K style).
// Work, added step by step: "load" folds the words with XOR; "mma" runs the GEMV's per-chunk
// arithmetic on them (a LOP3 and shift per code pair, 16 code mma and 16 ones mma against fixed
// x); "mma+s" also loads and folds each chunk's scale and bias pairs (MLX's row-major bf16
// arrays, 12.5 % more bytes); "mma+s+x" also loads x for the lane's group from one activation
// row (as at batch 1: 4 of 32 lanes give x) with two PRMT per mma: all of
// qgemv_mma_gpl_kernel<bf16, 2, 1, *, true>'s loop but the K-split reduction and the stores.
//
// Each launch reads a different copy of the matrix (the copies exceed the L2), as a decode step
// does (4+ GB between two reads of a matrix). Each row: the median time of one launch alone
// ("one", with its ramp, drain and launch latency) and per launch of 10 back to back ("chain"),
// each against a plain streaming read of the same copies timed the same way. GB/s counts what
// the row's work reads (codes, plus scales and biases from mma+s on).
// Runs 43-44 capped blocks per SM with shared memory for every row, which also shrank the L1
// (see run()); the scale and x rows of those runs are therefore pessimistic.
// Run 42 (dev/runs/run42-gemv-access.txt) ran this program's first form: load and mma only,
// one-launch timing, a third layout (row-sector: lane t's load i at bytes [64 i + 16 t, +16))
// and 3-4 blocks per SM for all; none of those changed the picture, so they were dropped.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

#define CHECK(x)                                                                         \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

constexpr int kWarps = 8;
constexpr int kChunkU4 = 8;    // uint4 per row per chunk (128 bytes)
constexpr int kTileU4 = 128;   // uint4 per tile chunk (16 rows x 128 bytes)

enum Layout { kRowQuad = 0, kTile = 1 };
const char* const kLayoutName[] = {"row-quad", "tile"};

struct Job {
  const uint4* w;
  const std::uint32_t* scales;  // MLX's row-major bf16 scales (G per row), then the biases
  const std::uint32_t* biases;
  const uint4* x;               // one activation row (K bf16): L1 / L2 resident, as in a step
  long long row_u4;  // uint4 per row
  int chunks;        // per row
  int groups;        // per row (group size 64)
  long long tiles;
  int ks;            // tiled grid: warps per tile (0: fill grid)
  unsigned* sink;
};

// Work levels (kWorkName): 0 load, 1 mma, 2 mma+s, 3 mma+s+x (the GEMV's loop), then candidate
// changes to 3: 4 x loaded with the chunk's codes (one chunk ahead, 32 more registers per set);
// 5 x interleaved (unit (group 4c + t, word w) stored at (8 c + w) * 4 + t, so the 4 lanes
// giving x read 64 contiguous bytes per load, one L1 wavefront instead of 4: what x's producer
// could write); 6 that and the scales interleaved with the biases (each row's group pair as one
// 8-byte (scales, biases) word: 2 loads per chunk and lane instead of 4); 7 only the scales
// interleaved; 8 the scales interleaved and x a chunk ahead (the GEMV under
// MLXCEL_GPU_PAIRED_SCALES=1 MLXCEL_GPU_QGEMV_XPF=1, session 23).
__host__ __device__ constexpr int scale_mode(int w) {
  return w < 2 ? 0 : (w == 6 || w == 7 || w == 8) ? 2 : 1;
}
__host__ __device__ constexpr int x_mode(int w) {
  return w < 3 ? 0 : (w == 3 || w == 7) ? 1 : (w == 4 || w == 8) ? 3 : 2;
}

// What a lane holds of one chunk: the code words of its two rows, the scale and bias pairs of
// its two groups of each row (as the GEMV's ChunkLoad), and at levels 4 and 8 its x.
template <int Work>
struct Unit {
  uint4 v[4];
  std::uint32_t sw[4];
  uint4 xv[x_mode(Work) == 3 ? 8 : 1];
};

template <int L, int Work>
__device__ __forceinline__ void load_unit(const Job& j, long long u, int lane, Unit<Work>& r) {
  const int g = lane / 4, t = lane % 4;
  const long long tile = u / j.chunks;
  const int c = static_cast<int>(u % j.chunks);
  if constexpr (L == kTile) {
    const uint4* b = j.w + u * kTileU4;
#pragma unroll
    for (int i = 0; i < 4; ++i) r.v[i] = b[i * 32 + lane];
  } else {
    const uint4* ra = j.w + (tile * 16 + g) * j.row_u4 + c * kChunkU4;
    const uint4* rb = ra + 8 * j.row_u4;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      r.v[i] = ra[2 * t + i];
      r.v[2 + i] = rb[2 * t + i];
    }
  }
  const long long half = j.groups / 2;  // pairs per row
  const long long a = (tile * 16 + g) * half + 2 * c + (t % 2), b = a + 8 * half;
  if constexpr (scale_mode(Work) == 1) {
    // The GEMV's scale loads: the 4-byte pair of groups 4c + 2 (t % 2), +1 of rows g, g + 8.
    r.sw[0] = j.scales[a], r.sw[1] = j.biases[a], r.sw[2] = j.scales[b], r.sw[3] = j.biases[b];
  } else if constexpr (scale_mode(Work) == 2) {
    const uint2* sb = reinterpret_cast<const uint2*>(j.scales);
    const uint2 pa = sb[a], pb = sb[b];
    r.sw[0] = pa.x, r.sw[1] = pa.y, r.sw[2] = pb.x, r.sw[3] = pb.y;
  }
  if constexpr (x_mode(Work) == 3) {
    const bool gives = g < 4 && t == g;
#pragma unroll
    for (int w = 0; w < 8; ++w)
      r.xv[w] = gives ? j.x[(4 * c + t) * 8 + w] : make_uint4(0, 0, 0, 0);
  }
}

__device__ __forceinline__ std::uint32_t pair_of(std::uint32_t w, int i) {
  std::uint32_t r;
  asm("lop3.b32 %0, %1, 0x000F000F, %2, 0xEA;" : "=r"(r) : "r"(w >> (4 * i)), "r"(0x43004300u));
  return r;
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const std::uint32_t (&a)[4],
                                         std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The GEMV's arithmetic on one chunk: words 0-1 are row g's, 2-3 row g + 8's (16 code words).
// From level 1 the code decode and 32 mma (fixed x below level 3); from 2 the scales' decode
// and fold; from 3 x for the lane's group (nonzero on the 4 lanes that give x at batch 1) and
// its two PRMT per mma, as qgemv_mma_gpl_kernel<bf16, 2, 1, *, true>.
template <int Work>
__device__ __forceinline__ void use_unit(const Job& j, long long u, int lane, const Unit<Work>& r,
                                         float (&acc)[4], unsigned& fold) {
  if constexpr (Work == 0) {
#pragma unroll
    for (int i = 0; i < 4; ++i) fold ^= r.v[i].x ^ r.v[i].y ^ r.v[i].z ^ r.v[i].w;
  } else {
    const int g = lane / 4, t = lane % 4;
    const int c = static_cast<int>(u % j.chunks);
    const bool gives = x_mode(Work) != 0 && g < 4 && t == g;
    float d[4] = {0, 0, 0, 0}, e[4] = {0, 0, 0, 0};
    const std::uint32_t ones[4] = {0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u};
    const std::uint32_t wa[8] = {r.v[0].x, r.v[0].y, r.v[0].z, r.v[0].w,
                                 r.v[1].x, r.v[1].y, r.v[1].z, r.v[1].w};
    const std::uint32_t wb[8] = {r.v[2].x, r.v[2].y, r.v[2].z, r.v[2].w,
                                 r.v[3].x, r.v[3].y, r.v[3].z, r.v[3].w};
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      std::uint32_t x0 = 0x3F803F80u ^ (lane << 3), x1 = 0x3F003F00u ^ lane;
      if constexpr (x_mode(Work) != 0) {
        uint4 xv;
        if constexpr (x_mode(Work) == 3)
          xv = r.xv[w];
        else if constexpr (x_mode(Work) == 2)
          xv = gives ? j.x[(8 * c + w) * 4 + t] : make_uint4(0, 0, 0, 0);
        else
          xv = gives ? j.x[(4 * c + t) * 8 + w] : make_uint4(0, 0, 0, 0);
        x0 = __byte_perm(xv.x, xv.z, 0x5410u), x1 = __byte_perm(xv.x, xv.z, 0x7632u);
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const std::uint32_t a[4] = {pair_of(wa[w], 2 * h), pair_of(wb[w], 2 * h),
                                    pair_of(wa[w], 2 * h + 1), pair_of(wb[w], 2 * h + 1)};
        mma_bf16(d, a, x0, x1);
        mma_bf16(e, ones, x0, x1);
      }
    }
    if constexpr (scale_mode(Work) != 0) {
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const float sa = __uint_as_float(q ? r.sw[0] & 0xFFFF0000u : r.sw[0] << 16);
        const float ba = __uint_as_float(q ? r.sw[1] & 0xFFFF0000u : r.sw[1] << 16);
        const float sb = __uint_as_float(q ? r.sw[2] & 0xFFFF0000u : r.sw[2] << 16);
        const float bb = __uint_as_float(q ? r.sw[3] & 0xFFFF0000u : r.sw[3] << 16);
        acc[q] = fmaf(sa, d[q], fmaf(ba - 128.0f * sa, e[q], acc[q]));
        acc[2 + q] = fmaf(sb, d[2 + q], fmaf(bb - 128.0f * sb, e[q], acc[2 + q]));
      }
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[i] = fmaf(0.5f, d[i], fmaf(0.25f, e[i], acc[i]));
    }
  }
}

template <int L, int Work>
__global__ void __launch_bounds__(kWarps * 32) stream_kernel(Job j) {
  extern __shared__ char occupancy_limit[];  // sized only to cap blocks per SM
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  long long u0, u1;
  if (j.ks > 0) {
    const long long tile = static_cast<long long>(blockIdx.x) * (kWarps / j.ks) + warp / j.ks;
    const int kw = warp % j.ks;
    if (tile >= j.tiles) return;
    u0 = tile * j.chunks + static_cast<long long>(j.chunks) * kw / j.ks;
    u1 = tile * j.chunks + static_cast<long long>(j.chunks) * (kw + 1) / j.ks;
  } else {
    const long long total = static_cast<long long>(gridDim.x) * kWarps;
    const long long gw = static_cast<long long>(blockIdx.x) * kWarps + warp;
    const long long units = j.tiles * j.chunks;
    u0 = units * gw / total;
    u1 = units * (gw + 1) / total;
  }
  float acc[4] = {0, 0, 0, 0};
  unsigned fold = 0;
  Unit<Work> a, b;
  if (u0 < u1) load_unit<L, Work>(j, u0, lane, a);
  long long u = u0;
  for (; u + 1 < u1; u += 2) {
    load_unit<L, Work>(j, u + 1, lane, b);
    use_unit<Work>(j, u, lane, a, acc, fold);
    load_unit<L, Work>(j, u + 2 < u1 ? u + 2 : u + 1, lane, a);
    use_unit<Work>(j, u + 1, lane, b, acc, fold);
  }
  if (u < u1) use_unit<Work>(j, u, lane, a, acc, fold);
  fold ^= __float_as_uint(acc[0] + acc[1] + acc[2] + acc[3]);
  if (fold == 0x9E3779B9u) j.sink[0] = fold;  // keeps the loads; practically never stores
}

// The ceiling: every thread reads 16-byte words in a grid-stride loop, 4 in flight.
__global__ void __launch_bounds__(256) plain_read(const uint4* w, long long n_u4, unsigned* sink) {
  unsigned fold = 0;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n_u4; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = w[i + k * stride];
#pragma unroll
    for (int k = 0; k < 4; ++k) fold ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
  }
  for (; i < n_u4; i += stride) fold ^= w[i].x ^ w[i].w;
  if (fold == 0x9E3779B9u) sink[0] = fold;
}

struct Shape {
  const char* name;
  long long n, k;  // rows, codes per row
  int ks;          // the GEMV's K split for this shape (qgemv_mma.cu's plan on 132 SMs)
};

// Per-launch time two ways: "single" (events around one launch: its own ramp and drain and the
// launch latency, as ncu's view of one kernel plus ~2 us) and "chain" (10 launches back to back
// between two events, divided by 10: the next launch's ramp overlaps this one's drain, as in a
// decode step's stream). Medians of 9.
template <typename Launch>
void time_us(Launch launch, int copies, double& single, double& chain) {
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) launch(i % copies);
  std::vector<float> one, ten;
  int next = 3;
  for (int i = 0; i < 9; ++i) {
    float t = 0;
    CHECK(cudaEventRecord(e0));
    launch(next++ % copies);
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    CHECK(cudaEventElapsedTime(&t, e0, e1));
    one.push_back(t);
    CHECK(cudaEventRecord(e0));
    for (int r = 0; r < 10; ++r) launch(next++ % copies);
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    CHECK(cudaEventElapsedTime(&t, e0, e1));
    ten.push_back(t / 10);
  }
  CHECK(cudaGetLastError());
  std::sort(one.begin(), one.end());
  std::sort(ten.begin(), ten.end());
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  single = one[one.size() / 2] * 1000.0;
  chain = ten[ten.size() / 2] * 1000.0;
}

template <int L, int Work>
void set_smem(int bytes) {
  CHECK(cudaFuncSetAttribute(stream_kernel<L, Work>,
                            cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

const char* const kWorkName[] = {"load", "mma",  "mma+s",     "mma+s+x",
                                 "x-pf", "x-il", "s-il+x-il", "s-il", "s-il+x-pf"};

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  const Shape shapes[] = {
      {"8b-gate_up", 28672, 4096, 2},
      {"8b-down", 4096, 14336, 8},
      {"8b-qkv", 6144, 4096, 8},
      {"8b-o", 4096, 4096, 8},
      {"8b-lm_head", 128256, 4096, 1},
  };
  // Copies: enough that a launch never finds its matrix in the L2 (>= 3x the L2 in all).
  const long long l2 = prop.l2CacheSize;
  std::printf("device %s, %d SMs, L2 %lld MB\n", prop.name, sms, l2 >> 20);
  std::vector<uint4*> bufs;
  unsigned* sink = nullptr;
  uint4* x = nullptr;
  CHECK(cudaMalloc(&sink, 64));
  CHECK(cudaMalloc(&x, 16384 * 2));
  CHECK(cudaMemset(x, 0x3C, 16384 * 2));  // bf16 values near 0.0115: finite products
  std::printf("%-11s %-10s %-6s %4s %4s %-8s %8s %8s %7s %8s %7s\n", "shape", "layout", "grid",
              "bps", "ks", "work", "us-one", "us-chain", "/plain", "GB/s", "/plain");
  for (const Shape& s : shapes) {
    const long long bytes = s.n * s.k / 2;
    const long long scale_bytes = s.n * (s.k / 64) * 2;  // bf16 per group of 64, each array
    const long long total = bytes + 2 * scale_bytes;     // what a GEMV step streams
    const int copies = static_cast<int>(std::max<long long>(2, (3 * l2 + total - 1) / total));
    for (uint4* b : bufs) CHECK(cudaFree(b));
    bufs.assign(copies, nullptr);
    for (uint4*& b : bufs) {
      CHECK(cudaMalloc(&b, total));
      CHECK(cudaMemset(b, 0x5A, bytes));
      CHECK(cudaMemset(reinterpret_cast<char*>(b) + bytes, 0x3C, 2 * scale_bytes));
    }
    const long long n_u4 = bytes / 16;
    double p1 = 0, pc = 0, c1 = 0, cc = 0;
    time_us([&](int c) { plain_read<<<sms * 8, 256>>>(bufs[c], n_u4, sink); }, copies, p1, pc);
    auto row = [&](const char* layout, const char* grid, int bps, int ks, const char* work,
                   double one, double chain, long long moved) {
      std::printf("%-11s %-10s %-6s %4d %4d %-8s %8.1f %8.1f %7.3f %8.0f %7.3f\n", s.name, layout,
                  grid, bps, ks, work, one, chain, p1 / one, moved / chain / 1e3, pc / chain);
    };
    row("plain", "-", 0, 0, "load", p1, pc, bytes);
    time_us(
        [&](int c) {
          CHECK(cudaMemcpyAsync(bufs[(c + 1) % copies], bufs[c], bytes / 2,
                                cudaMemcpyDeviceToDevice));
        },
        copies, c1, cc);
    row("d2d-copy", "-", 0, 0, "-", c1, cc, bytes);
    Job j{};
    j.row_u4 = s.k / 32;
    j.chunks = static_cast<int>(s.k / 256);
    j.groups = static_cast<int>(s.k / 64);
    j.tiles = s.n / 16;
    j.x = x;
    j.sink = sink;
    auto run = [&](auto layout, auto work, int bps, bool fill) {
      constexpr int L = decltype(layout)::value;
      constexpr int Wk = decltype(work)::value;
      // bps > 0: dynamic shared memory that lets at most `bps` blocks share an SM. That also
      // shrinks the L1 (the carve-out follows the shared memory asked for: ~32 KB of L1 at 2
      // blocks of 112 KB), which the scale and x loads hit; bps 0: no shared memory, the
      // occupancy the registers allow and the whole L1, as the GEMV has.
      const int smem = bps > 0 ? static_cast<int>(prop.sharedMemPerMultiprocessor / bps) -
                                     static_cast<int>(prop.reservedSharedMemPerBlock) - 1024
                               : 0;
      set_smem<L, Wk>(smem);
      int occ = 0;
      CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, stream_kernel<L, Wk>,
                                                          kWarps * 32, smem));
      Job jj = j;
      jj.ks = fill ? 0 : s.ks;
      const long long blocks =
          fill ? static_cast<long long>(occ) * sms : (j.tiles * s.ks + kWarps - 1) / kWarps;
      double one = 0, chain = 0;
      time_us(
          [&](int c) {
            jj.w = bufs[c];
            jj.scales = reinterpret_cast<const std::uint32_t*>(
                reinterpret_cast<const char*>(bufs[c]) + bytes);
            jj.biases = jj.scales + scale_bytes / 4;
            stream_kernel<L, Wk><<<static_cast<unsigned>(blocks), kWarps * 32, smem>>>(jj);
          },
          copies, one, chain);
      row(kLayoutName[L], fill ? "fill" : "tiled", occ, fill ? 0 : s.ks, kWorkName[Wk], one,
          chain, scale_mode(Wk) != 0 ? total : bytes);
    };
    using RQ = std::integral_constant<int, kRowQuad>;
    using TL = std::integral_constant<int, kTile>;
    auto levels = [&](auto layout, int bps, bool fill, auto... w) {
      (run(layout, w, bps, fill), ...);
    };
    using W0 = std::integral_constant<int, 0>;
    using W1 = std::integral_constant<int, 1>;
    using W2 = std::integral_constant<int, 2>;
    using W3 = std::integral_constant<int, 3>;
    using W4 = std::integral_constant<int, 4>;
    using W5 = std::integral_constant<int, 5>;
    using W6 = std::integral_constant<int, 6>;
    using W7 = std::integral_constant<int, 7>;
    using W8 = std::integral_constant<int, 8>;
    levels(RQ{}, 0, false, W0{}, W1{}, W2{}, W3{}, W4{}, W5{}, W6{}, W7{}, W8{});
    levels(TL{}, 0, false, W3{}, W6{});
    levels(RQ{}, 0, true, W3{}, W6{});
    if (!quick) levels(RQ{}, 2, false, W3{}, W6{});
    std::fflush(stdout);
  }
  for (uint4* b : bufs) CHECK(cudaFree(b));
  CHECK(cudaFree(sink));
  CHECK(cudaFree(x));
  return 0;
}
