// relpos kernels: a bias piecewise linear in a normalised distance (FIRE), per block of query rows.
//
// For query row t at position i = i0 + t and key j (positions 0, 1, ...), with a per-distance table
// num[d] (nondecreasing in d >= 0) and a per-row factor inv[t] > 0:
//   x = num[|i - j|] * inv[t],   seg = #{k : z[k] < x}   (torch.bucketize, right=False),
//   bias[h, t, j] = alpha[h, seg] * x + beta[h, seg].
// Along a row, x is nonincreasing in j up to the diagonal and nondecreasing after it, so each segment is
// one run of keys on each side: a row finds its runs with one binary search per breakpoint over the
// distance table, then every head walks them (no per-pair segment index). Causal rows see keys j <= i.
//   fire_bias:   out[h, t, j] = bias (masked keys: `masked`), the forward's additive mask;
//   fire_logits: s[m, t, j] = max(s + bias[m % H] - lse[m, t], floor) (masked keys: floor);
//   fire_ds:     dp <- dS = p (dp - delta) (masked keys: 0, and p set to 0), and in the same pass the
//                gradients d_alpha[h, seg] += sum dS x, d_beta[h, seg] += sum dS, and through
//                g = sum_h dS alpha[h, seg]: d_num[|i - j|] += g inv[t], d_inv[t] += g num[|i - j|].
// Gradients are summed in double. On x86-64 the row loops are compiled for the baseline and for AVX2 with
// FMA, picked at run time. Built by relpos.kernels (torch.utils.cpp_extension); see its docstring.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define FIRE_X86 1
#else
#define FIRE_X86 0
#endif
#if defined(__GNUC__) || defined(__clang__)
#define FIRE_INLINE inline __attribute__((always_inline))
#else
#define FIRE_INLINE inline
#endif

namespace {

struct FireArgs {
  int64_t H, K, T;
};

FireArgs check_fire(const torch::Tensor& num, const torch::Tensor& inv, const torch::Tensor& alpha,
                    const torch::Tensor& beta, const torch::Tensor& z, int64_t R, at::ScalarType dt) {
  TORCH_CHECK(num.dim() == 1 && inv.dim() == 1 && alpha.dim() == 2 && beta.dim() == 2 && z.dim() == 1,
              "fire: num (T,), inv (R,), alpha and beta (H, K + 1), z (K,)");
  for (const auto* t : {&num, &inv, &alpha, &beta, &z}) {
    TORCH_CHECK(t->is_contiguous() && t->device().is_cpu() && t->scalar_type() == dt,
                "fire: num, inv, alpha, beta and z must be contiguous CPU tensors of the logits' dtype");
  }
  TORCH_CHECK(inv.size(0) == R, "fire: inv must have one entry per block row");
  TORCH_CHECK(alpha.sizes() == beta.sizes() && alpha.size(1) == z.size(0) + 1, "fire: alpha, beta (H, K + 1), z (K,)");
  return {alpha.size(0), z.size(0), num.size(0)};
}

void check_block(const torch::Tensor& t, int64_t R, int64_t C, const char* name) {
  TORCH_CHECK(t.dim() == 3 && t.device().is_cpu() && t.size(1) == R && t.size(2) == C && (C <= 1 || t.stride(2) == 1),
              "fire: ", name, " must be a 3-D CPU tensor (M, R, C) with unit stride along its last dim");
}

// Keys a row sees: [0, C) bidirectional, [0, min(C, i + 1)) causal.
FIRE_INLINE int64_t visible(int64_t i, int64_t C, bool causal) {
  return causal ? std::max<int64_t>(0, std::min(C, i + 1)) : C;
}

// x over keys [0, Cv) into xr, and the runs of one segment each (j0, j1, seg) in key order; returns their
// number (at most 2 (K + 1)).
template <typename T>
FIRE_INLINE int64_t row_runs(const T* num, int64_t Tn, T inv, const T* z, int64_t K, int64_t i, int64_t Cv, T* xr,
                 int64_t* D, int64_t* rj0, int64_t* rj1, int64_t* rseg) {
  if (Cv <= 0) return 0;
  const int64_t dmax = std::max(i, Cv - 1 - i);
  TORCH_CHECK(dmax < Tn, "fire: the distance table covers distances 0..", Tn - 1, ", a row needs ", dmax);
  // D[k]: the first distance whose x passes z[k] (dmax + 1 if none); nondecreasing in k
  int64_t lo = 0;
  for (int64_t k = 0; k < K; ++k) {
    int64_t a = lo, b = dmax + 1;
    while (a < b) {
      const int64_t mid = a + (b - a) / 2;
      const T v = num[mid] * inv;
      if (v > z[k]) b = mid; else a = mid + 1;
    }
    D[k] = a;
    lo = a;
  }
  int64_t n = 0;
  const int64_t jl = std::min(Cv, i + 1);  // left side: keys [0, jl), d = i - j
  if (jl > 0) {
    for (int64_t j = 0; j < jl; ++j) xr[j] = num[i - j] * inv;
    for (int64_t m = K; m >= 0; --m) {  // key order: distance falls, so the segment falls
      const int64_t dlo = m == 0 ? 0 : D[m - 1], dhi = m == K ? dmax + 1 : D[m];
      const int64_t j0 = std::max<int64_t>(0, i - dhi + 1), j1 = std::min(jl, i - dlo + 1);
      if (j0 < j1) { rj0[n] = j0; rj1[n] = j1; rseg[n] = m; ++n; }
    }
  }
  const int64_t jr = std::max<int64_t>(0, i + 1);  // right side: keys [jr, Cv), d = j - i
  if (jr < Cv) {
    for (int64_t j = jr; j < Cv; ++j) xr[j] = num[j - i] * inv;
    for (int64_t m = 0; m <= K; ++m) {
      const int64_t dlo = m == 0 ? 0 : D[m - 1], dhi = m == K ? dmax + 1 : D[m];
      const int64_t j0 = std::max(jr, i + dlo), j1 = std::min(Cv, i + dhi);
      if (j0 < j1) { rj0[n] = j0; rj1[n] = j1; rseg[n] = m; ++n; }
    }
  }
  return n;
}

template <typename T>
struct RowBuf {
  std::vector<T> x;
  std::vector<int64_t> D, j0, j1, seg;
  RowBuf(int64_t C, int64_t K) : x(std::max<int64_t>(C, 1)), D(K + 1), j0(2 * K + 2), j1(2 * K + 2), seg(2 * K + 2) {}
};

// The per-call tables (see the top of the file).
template <typename T>
struct Tabs {
  const T *num, *inv, *alpha, *beta, *z;
  int64_t H, K, Tn;
};

template <typename T>
Tabs<T> tabs_of(const torch::Tensor& num, const torch::Tensor& inv, const torch::Tensor& alpha,
                const torch::Tensor& beta, const torch::Tensor& z, const FireArgs& fa) {
  return {num.data_ptr<T>(), inv.data_ptr<T>(), alpha.data_ptr<T>(), beta.data_ptr<T>(), z.data_ptr<T>(),
          fa.H, fa.K, fa.T};
}

// One block's rows: out/s/dp (M, R, C) at `d` with strides s0, s1 (unit along keys); rows i0 + t; keys [0, C).
template <typename T>
struct Block {
  T* d;
  int64_t s0, s1, M, C, i0;
  bool causal;
};

// Row t of a block: its query index i, its visible keys Cv and the n runs of keys (one segment each) that
// row_runs writes into rb; every pass starts its row with this.
struct Row {
  int64_t i, Cv, n;
};

template <typename T>
FIRE_INLINE Row row_setup(const Tabs<T>& tb_, const Block<T>& bk, RowBuf<T>& rb, int64_t t) {
  const int64_t i = bk.i0 + t, Cv = visible(i, bk.C, bk.causal);
  return {i, Cv, row_runs<T>(tb_.num, tb_.Tn, tb_.inv[t], tb_.z, tb_.K, i, Cv, rb.x.data(), rb.D.data(),
                             rb.j0.data(), rb.j1.data(), rb.seg.data())};
}

// The three passes over rows [tb, te) of a block. They are compiled twice on x86-64 (the baseline and
// AVX2 with FMA, picked at run time; the loops are plain C++ that the compiler vectorises), hence inline.
template <typename T>
FIRE_INLINE void bias_rows(const Tabs<T>& tb_, const Block<T>& bk, T masked, int64_t tb, int64_t te) {
  RowBuf<T> rb(bk.C, tb_.K);
  const int64_t K1 = tb_.K + 1;
  for (int64_t t = tb; t < te; ++t) {
    const Row row_ = row_setup(tb_, bk, rb, t);
    const int64_t Cv = row_.Cv, n = row_.n;
    const T* xr = rb.x.data();
    for (int64_t h = 0; h < tb_.H; ++h) {
      T* row = bk.d + h * bk.s0 + t * bk.s1;
      for (int64_t r = 0; r < n; ++r) {
        const T a = tb_.alpha[h * K1 + rb.seg[r]], b = tb_.beta[h * K1 + rb.seg[r]];
        for (int64_t j = rb.j0[r]; j < rb.j1[r]; ++j) row[j] = a * xr[j] + b;
      }
      for (int64_t j = Cv; j < bk.C; ++j) row[j] = masked;
    }
  }
}

template <typename T>
FIRE_INLINE void logits_rows(const Tabs<T>& tb_, const Block<T>& bk, const T* ld, int64_t ls0, int64_t ls1, T fl,
                             int64_t tb, int64_t te) {
  RowBuf<T> rb(bk.C, tb_.K);
  const int64_t K1 = tb_.K + 1;
  for (int64_t t = tb; t < te; ++t) {
    const Row row_ = row_setup(tb_, bk, rb, t);
    const int64_t Cv = row_.Cv, n = row_.n;
    const T* xr = rb.x.data();
    for (int64_t m = 0; m < bk.M; ++m) {
      const int64_t h = m % tb_.H;
      T* row = bk.d + m * bk.s0 + t * bk.s1;
      const T l = ld[m * ls0 + t * ls1];
      for (int64_t r = 0; r < n; ++r) {
        const T a = tb_.alpha[h * K1 + rb.seg[r]], b = tb_.beta[h * K1 + rb.seg[r]] - l;
        for (int64_t j = rb.j0[r]; j < rb.j1[r]; ++j) {
          const T v = row[j] + (a * xr[j] + b);
          row[j] = v < fl ? fl : v;
        }
      }
      for (int64_t j = Cv; j < bk.C; ++j) row[j] = fl;
    }
  }
}

// One run of keys [j0, j1) of one row: d <- p (d - dl), g += d a; adds sum d and sum d x to s0, s1.
template <typename T>
FIRE_INLINE void ds_run_scalar(const T* __restrict__ p, T* __restrict__ d, const T* __restrict__ x,
                               T* __restrict__ g, int64_t j0, int64_t j1, T dl, T a, double& s0, double& s1) {
  double u0 = 0.0, u1 = 0.0;
  for (int64_t j = j0; j < j1; ++j) {
    const T v = p[j] * (d[j] - dl);
    d[j] = v;
    u0 += v;
    u1 += static_cast<double>(v) * x[j];
    g[j] += v * a;
  }
  s0 += u0;
  s1 += u1;
}

template <typename T>
FIRE_INLINE void ds_run(const T* __restrict__ p, T* __restrict__ d, const T* __restrict__ x, T* __restrict__ g,
                        int64_t j0, int64_t j1, T dl, T a, double& s0, double& s1) {
  ds_run_scalar<T>(p, d, x, g, j0, j1, dl, a, s0, s1);
}

#if defined(__GNUC__) || defined(__clang__)
// float: eight lanes at a time with the compiler's vector extension (the sums are reductions, which the
// compiler does not vectorise by itself without reassociating), the tail scalar
typedef float fire_v8f __attribute__((vector_size(32)));

template <>
FIRE_INLINE void ds_run<float>(const float* __restrict__ p, float* __restrict__ d, const float* __restrict__ x,
                               float* __restrict__ g, int64_t j0, int64_t j1, float dl, float a, double& s0,
                               double& s1) {
  fire_v8f v0 = {0, 0, 0, 0, 0, 0, 0, 0}, v1 = v0;
  const fire_v8f vdl = v0 + dl, va = v0 + a;
  int64_t j = j0;
  for (; j + 8 <= j1; j += 8) {
    fire_v8f pv, dv, xv, gv;
    std::memcpy(&pv, p + j, sizeof pv);
    std::memcpy(&dv, d + j, sizeof dv);
    std::memcpy(&xv, x + j, sizeof xv);
    std::memcpy(&gv, g + j, sizeof gv);
    const fire_v8f v = pv * (dv - vdl);
    std::memcpy(d + j, &v, sizeof v);
    v0 += v;
    v1 += v * xv;
    gv += v * va;
    std::memcpy(g + j, &gv, sizeof gv);
  }
  double u0 = 0.0, u1 = 0.0;
  for (int l = 0; l < 8; ++l) {
    u0 += v0[l];
    u1 += v1[l];
  }
  s0 += u0;
  s1 += u1;
  ds_run_scalar<float>(p, d, x, g, j, j1, dl, a, s0, s1);  // the tail
}
#endif

// Thread-local gradient sums of the ds pass: la, lb (H (K + 1)), ln (Tn), and the largest distance touched.
struct DsLocal {
  std::vector<double> la, lb, ln;
  int64_t dhi = -1;
};

template <typename T>
FIRE_INLINE void ds_rows(const Tabs<T>& tb_, const Block<T>& bk, T* pd, int64_t ps0, int64_t ps1, const T* de,
                         int64_t es0, int64_t es1, DsLocal& acc, double* gid, int64_t tb, int64_t te) {
  RowBuf<T> rb(bk.C, tb_.K);
  std::vector<T> g(std::max<int64_t>(bk.C, 1));
  const int64_t H = tb_.H, K1 = tb_.K + 1;
  for (int64_t t = tb; t < te; ++t) {
    const Row row_ = row_setup(tb_, bk, rb, t);
    const int64_t i = row_.i, Cv = row_.Cv, n = row_.n;
    const T* xr = rb.x.data();
    T* gr = g.data();
    for (int64_t j = 0; j < Cv; ++j) gr[j] = T(0);
    for (int64_t m = 0; m < bk.M; ++m) {
      const int64_t h = m % H;
      T* drow = bk.d + m * bk.s0 + t * bk.s1;
      T* prow = pd + m * ps0 + t * ps1;
      const T dl = de[m * es0 + t * es1];
      for (int64_t r = 0; r < n; ++r) {
        const int64_t sg = rb.seg[r], j1 = rb.j1[r];
        const T a = tb_.alpha[h * K1 + sg];
        double s0 = 0.0, s1 = 0.0;
        ds_run<T>(prow, drow, xr, gr, rb.j0[r], j1, dl, a, s0, s1);
        acc.lb[h * K1 + sg] += s0;
        acc.la[h * K1 + sg] += s1;
      }
      for (int64_t j = std::max<int64_t>(Cv, 0); j < bk.C; ++j) { drow[j] = T(0); prow[j] = T(0); }
    }
    // through x = num[|i - j|] inv[t]
    const T iv = tb_.inv[t];
    double gi = 0.0;
    double* ln = acc.ln.data();
    const int64_t jl = std::min(Cv, i + 1);
    for (int64_t j = 0; j < jl; ++j) {
      ln[i - j] += static_cast<double>(gr[j] * iv);
      gi += static_cast<double>(gr[j]) * tb_.num[i - j];
    }
    for (int64_t j = std::max<int64_t>(0, i + 1); j < Cv; ++j) {
      ln[j - i] += static_cast<double>(gr[j] * iv);
      gi += static_cast<double>(gr[j]) * tb_.num[j - i];
    }
    gid[t] += gi;
    if (Cv > 0) acc.dhi = std::max(acc.dhi, std::max(i, Cv - 1 - i));
  }
}

#if FIRE_X86
template <typename T>
__attribute__((target("avx2,fma"))) void bias_rows_avx2(const Tabs<T>& a, const Block<T>& b, T m, int64_t tb,
                                                       int64_t te) {
  bias_rows<T>(a, b, m, tb, te);
}
template <typename T>
__attribute__((target("avx2,fma"))) void logits_rows_avx2(const Tabs<T>& a, const Block<T>& b, const T* ld,
                                                         int64_t ls0, int64_t ls1, T fl, int64_t tb, int64_t te) {
  logits_rows<T>(a, b, ld, ls0, ls1, fl, tb, te);
}
template <typename T>
__attribute__((target("avx2,fma"))) void ds_rows_avx2(const Tabs<T>& a, const Block<T>& b, T* pd, int64_t ps0,
                                                     int64_t ps1, const T* de, int64_t es0, int64_t es1,
                                                     DsLocal& acc, double* gid, int64_t tb, int64_t te) {
  ds_rows<T>(a, b, pd, ps0, ps1, de, es0, es1, acc, gid, tb, te);
}
bool has_avx2() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}
#define FIRE_ISA(fn, T, ...) (has_avx2() ? fn##_avx2<T>(__VA_ARGS__) : fn<T>(__VA_ARGS__))
#else
#define FIRE_ISA(fn, T, ...) fn<T>(__VA_ARGS__)
#endif

}  // namespace

// out (H, R, C): the bias of block rows at positions i0 .. i0 + R - 1 against keys 0 .. C - 1; masked keys
// (causal: j > i) get `masked`
void fire_bias(torch::Tensor out, torch::Tensor num, torch::Tensor inv, torch::Tensor alpha, torch::Tensor beta,
               torch::Tensor z, int64_t i0, bool causal, double masked) {
  TORCH_CHECK(out.dim() == 3, "fire: out must be (H, R, C)");
  const int64_t R = out.size(1), C = out.size(2);
  check_block(out, R, C, "out");
  const FireArgs fa = check_fire(num, inv, alpha, beta, z, R, out.scalar_type());
  TORCH_CHECK(out.size(0) == fa.H, "fire: out must have one slice per head of alpha");
  AT_DISPATCH_FLOATING_TYPES(out.scalar_type(), "fire_bias", [&] {
    const Tabs<scalar_t> tabs = tabs_of<scalar_t>(num, inv, alpha, beta, z, fa);
    const Block<scalar_t> bk{out.data_ptr<scalar_t>(), out.stride(0), out.stride(1), fa.H, C, i0, causal};
    const scalar_t mv = static_cast<scalar_t>(masked);
    at::parallel_for(0, R, 8, [&](int64_t tb, int64_t te) { FIRE_ISA(bias_rows, scalar_t, tabs, bk, mv, tb, te); });
  });
}

// s (M, R, C), M = batch x heads (head m % H): s = max(s + bias - lse[m, t], floor), masked keys floor
void fire_logits(torch::Tensor s, torch::Tensor lse, torch::Tensor num, torch::Tensor inv, torch::Tensor alpha,
                 torch::Tensor beta, torch::Tensor z, int64_t i0, bool causal, double floor) {
  TORCH_CHECK(s.dim() == 3, "fire: s must be (M, R, C)");
  const int64_t M = s.size(0), R = s.size(1), C = s.size(2);
  check_block(s, R, C, "s");
  const FireArgs fa = check_fire(num, inv, alpha, beta, z, R, s.scalar_type());
  TORCH_CHECK(M % fa.H == 0, "fire: s's first dim must be batch x heads");
  TORCH_CHECK(lse.dim() == 2 && lse.size(0) == M && lse.size(1) == R && lse.scalar_type() == s.scalar_type() &&
              lse.device().is_cpu(), "fire: lse must be an (M, R) CPU tensor of s's dtype");
  AT_DISPATCH_FLOATING_TYPES(s.scalar_type(), "fire_logits", [&] {
    const Tabs<scalar_t> tabs = tabs_of<scalar_t>(num, inv, alpha, beta, z, fa);
    const Block<scalar_t> bk{s.data_ptr<scalar_t>(), s.stride(0), s.stride(1), M, C, i0, causal};
    const scalar_t* ld = lse.data_ptr<scalar_t>();
    const int64_t ls0 = lse.stride(0), ls1 = lse.stride(1);
    const scalar_t fl = static_cast<scalar_t>(floor);
    at::parallel_for(0, R, 8, [&](int64_t tb, int64_t te) {
      FIRE_ISA(logits_rows, scalar_t, tabs, bk, ld, ls0, ls1, fl, tb, te);
    });
  });
}

// dp, p (M, R, C), delta (M, R); the gradients are added into d_alpha, d_beta (H, K + 1), d_num (T,) and
// d_inv (R,), all float64
void fire_ds(torch::Tensor dp, torch::Tensor p, torch::Tensor delta, torch::Tensor num, torch::Tensor inv,
             torch::Tensor alpha, torch::Tensor beta, torch::Tensor z, int64_t i0, bool causal,
             torch::Tensor d_alpha, torch::Tensor d_beta, torch::Tensor d_num, torch::Tensor d_inv) {
  TORCH_CHECK(dp.dim() == 3, "fire: dp must be (M, R, C)");
  const int64_t M = dp.size(0), R = dp.size(1), C = dp.size(2);
  check_block(dp, R, C, "dp");
  check_block(p, R, C, "p");
  TORCH_CHECK(p.size(0) == M && p.scalar_type() == dp.scalar_type(), "fire: p must be of dp's shape and dtype");
  const FireArgs fa = check_fire(num, inv, alpha, beta, z, R, dp.scalar_type());
  TORCH_CHECK(M % fa.H == 0, "fire: dp's first dim must be batch x heads");
  TORCH_CHECK(delta.dim() == 2 && delta.size(0) == M && delta.size(1) == R && delta.scalar_type() == dp.scalar_type() &&
              delta.device().is_cpu(), "fire: delta must be an (M, R) CPU tensor of dp's dtype");
  for (const auto* t : {&d_alpha, &d_beta, &d_num, &d_inv}) {
    TORCH_CHECK(t->is_contiguous() && t->device().is_cpu() && t->scalar_type() == torch::kDouble,
                "fire: the gradient accumulators must be contiguous float64 CPU tensors");
  }
  TORCH_CHECK(d_alpha.sizes() == alpha.sizes() && d_beta.sizes() == alpha.sizes() && d_num.sizes() == num.sizes() &&
              d_inv.sizes() == inv.sizes(), "fire: each gradient accumulator must have its input's shape");
  const int64_t HK = fa.H * (fa.K + 1), Tn = fa.T;
  double* gad = d_alpha.data_ptr<double>();
  double* gbd = d_beta.data_ptr<double>();
  double* gnd = d_num.data_ptr<double>();
  double* gid = d_inv.data_ptr<double>();
  std::mutex merge;
  AT_DISPATCH_FLOATING_TYPES(dp.scalar_type(), "fire_ds", [&] {
    const Tabs<scalar_t> tabs = tabs_of<scalar_t>(num, inv, alpha, beta, z, fa);
    const Block<scalar_t> bk{dp.data_ptr<scalar_t>(), dp.stride(0), dp.stride(1), M, C, i0, causal};
    scalar_t* pd = p.data_ptr<scalar_t>();
    const scalar_t* de = delta.data_ptr<scalar_t>();
    const int64_t ps0 = p.stride(0), ps1 = p.stride(1), es0 = delta.stride(0), es1 = delta.stride(1);
    at::parallel_for(0, R, 8, [&](int64_t tb, int64_t te) {
      DsLocal acc;
      acc.la.assign(HK, 0.0);
      acc.lb.assign(HK, 0.0);
      acc.ln.assign(Tn, 0.0);
      FIRE_ISA(ds_rows, scalar_t, tabs, bk, pd, ps0, ps1, de, es0, es1, acc, gid, tb, te);
      std::lock_guard<std::mutex> lock(merge);
      for (int64_t e = 0; e < HK; ++e) { gad[e] += acc.la[e]; gbd[e] += acc.lb[e]; }
      for (int64_t d = 0; d <= std::min(acc.dhi, Tn - 1); ++d) gnd[d] += acc.ln[d];
    });
  });
}
