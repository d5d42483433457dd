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
// Gradients are summed in double. Built by relpos.kernels (torch.utils.cpp_extension); see its docstring.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <mutex>
#include <vector>

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
inline int64_t visible(int64_t i, int64_t C, bool causal) {
  return causal ? std::max<int64_t>(0, std::min(C, i + 1)) : C;
}

// x over keys [0, Cv) into xr, and the runs of one segment each (j0, j1, seg) in key order; returns their
// number (at most 2 (K + 1)).
template <typename T>
int64_t row_runs(const T* num, int64_t Tn, T inv, const T* z, int64_t K, int64_t i, int64_t Cv, T* xr,
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
  int64_t runs(const T* num, int64_t Tn, T inv, const T* z, int64_t K, int64_t i, int64_t Cv) {
    return row_runs<T>(num, Tn, inv, z, K, i, Cv, x.data(), D.data(), j0.data(), j1.data(), seg.data());
  }
};

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
    scalar_t* od = out.data_ptr<scalar_t>();
    const scalar_t *nd = num.data_ptr<scalar_t>(), *id = inv.data_ptr<scalar_t>(), *zd = z.data_ptr<scalar_t>();
    const scalar_t *ad = alpha.data_ptr<scalar_t>(), *bd = beta.data_ptr<scalar_t>();
    const scalar_t mv = static_cast<scalar_t>(masked);
    const int64_t os0 = out.stride(0), os1 = out.stride(1), K1 = fa.K + 1;
    at::parallel_for(0, R, 8, [&](int64_t tb, int64_t te) {
      RowBuf<scalar_t> rb(C, fa.K);
      for (int64_t t = tb; t < te; ++t) {
        const int64_t i = i0 + t, Cv = visible(i, C, causal);
        const int64_t n = rb.runs(nd, fa.T, id[t], zd, fa.K, i, Cv);
        const scalar_t* xr = rb.x.data();
        for (int64_t h = 0; h < fa.H; ++h) {
          scalar_t* row = od + h * os0 + t * os1;
          for (int64_t r = 0; r < n; ++r) {
            const scalar_t a = ad[h * K1 + rb.seg[r]], b = bd[h * K1 + rb.seg[r]];
            for (int64_t j = rb.j0[r]; j < rb.j1[r]; ++j) row[j] = a * xr[j] + b;
          }
          for (int64_t j = Cv; j < C; ++j) row[j] = mv;
        }
      }
    });
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
    scalar_t* sd = s.data_ptr<scalar_t>();
    const scalar_t* ld = lse.data_ptr<scalar_t>();
    const scalar_t *nd = num.data_ptr<scalar_t>(), *id = inv.data_ptr<scalar_t>(), *zd = z.data_ptr<scalar_t>();
    const scalar_t *ad = alpha.data_ptr<scalar_t>(), *bd = beta.data_ptr<scalar_t>();
    const scalar_t fl = static_cast<scalar_t>(floor);
    const int64_t ss0 = s.stride(0), ss1 = s.stride(1), ls0 = lse.stride(0), ls1 = lse.stride(1), K1 = fa.K + 1;
    at::parallel_for(0, R, 8, [&](int64_t tb, int64_t te) {
      RowBuf<scalar_t> rb(C, fa.K);
      for (int64_t t = tb; t < te; ++t) {
        const int64_t i = i0 + t, Cv = visible(i, C, causal);
        const int64_t n = rb.runs(nd, fa.T, id[t], zd, fa.K, i, Cv);
        const scalar_t* xr = rb.x.data();
        for (int64_t m = 0; m < M; ++m) {
          const int64_t h = m % fa.H;
          scalar_t* row = sd + m * ss0 + t * ss1;
          const scalar_t l = ld[m * ls0 + t * ls1];
          for (int64_t r = 0; r < n; ++r) {
            const scalar_t a = ad[h * K1 + rb.seg[r]], b = bd[h * K1 + rb.seg[r]] - l;
            for (int64_t j = rb.j0[r]; j < rb.j1[r]; ++j) {
              const scalar_t v = row[j] + (a * xr[j] + b);
              row[j] = v < fl ? fl : v;
            }
          }
          for (int64_t j = Cv; j < C; ++j) row[j] = fl;
        }
      }
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
  const int64_t H = fa.H, K1 = fa.K + 1, Tn = fa.T;
  double* gad = d_alpha.data_ptr<double>();
  double* gbd = d_beta.data_ptr<double>();
  double* gnd = d_num.data_ptr<double>();
  double* gid = d_inv.data_ptr<double>();
  std::mutex merge;
  AT_DISPATCH_FLOATING_TYPES(dp.scalar_type(), "fire_ds", [&] {
    scalar_t* dd = dp.data_ptr<scalar_t>();
    scalar_t* pd = p.data_ptr<scalar_t>();
    const scalar_t* de = delta.data_ptr<scalar_t>();
    const scalar_t *nd = num.data_ptr<scalar_t>(), *id = inv.data_ptr<scalar_t>(), *zd = z.data_ptr<scalar_t>();
    const scalar_t* ad = alpha.data_ptr<scalar_t>();
    const int64_t ds0 = dp.stride(0), ds1 = dp.stride(1), ps0 = p.stride(0), ps1 = p.stride(1);
    const int64_t es0 = delta.stride(0), es1 = delta.stride(1);
    at::parallel_for(0, R, 8, [&](int64_t tb, int64_t te) {
      RowBuf<scalar_t> rb(C, fa.K);
      std::vector<scalar_t> g(std::max<int64_t>(C, 1));
      std::vector<double> la(H * K1, 0.0), lb(H * K1, 0.0), ln(Tn, 0.0);
      int64_t dhi = -1;  // the largest distance this chunk touched
      for (int64_t t = tb; t < te; ++t) {
        const int64_t i = i0 + t, Cv = visible(i, C, causal);
        const int64_t n = rb.runs(nd, Tn, id[t], zd, fa.K, i, Cv);
        const scalar_t* xr = rb.x.data();
        std::fill(g.begin(), g.begin() + std::max<int64_t>(Cv, 0), scalar_t(0));
        for (int64_t m = 0; m < M; ++m) {
          const int64_t h = m % H;
          scalar_t* drow = dd + m * ds0 + t * ds1;
          scalar_t* prow = pd + m * ps0 + t * ps1;
          const scalar_t dl = de[m * es0 + t * es1];
          for (int64_t r = 0; r < n; ++r) {
            const int64_t sg = rb.seg[r], j1 = rb.j1[r];
            const scalar_t a = ad[h * K1 + sg];
            scalar_t sv[8] = {0}, svx[8] = {0};  // eight partial sums: the loop vectorises
            int64_t j = rb.j0[r];
            for (; j + 8 <= j1; j += 8) {
              for (int l = 0; l < 8; ++l) {
                const scalar_t v = prow[j + l] * (drow[j + l] - dl);
                drow[j + l] = v;
                sv[l] += v;
                svx[l] += v * xr[j + l];
                g[j + l] += v * a;
              }
            }
            double s0 = 0.0, s1 = 0.0;
            for (; j < j1; ++j) {
              const scalar_t v = prow[j] * (drow[j] - dl);
              drow[j] = v;
              s0 += v;
              s1 += static_cast<double>(v) * xr[j];
              g[j] += v * a;
            }
            for (int l = 0; l < 8; ++l) { s0 += sv[l]; s1 += svx[l]; }
            lb[h * K1 + sg] += s0;
            la[h * K1 + sg] += s1;
          }
          for (int64_t j = std::max<int64_t>(Cv, 0); j < C; ++j) { drow[j] = scalar_t(0); prow[j] = scalar_t(0); }
        }
        // through x = num[|i - j|] inv[t]
        const scalar_t iv = id[t];
        double gi = 0.0;
        const int64_t jl = std::min(Cv, i + 1);
        for (int64_t j = 0; j < jl; ++j) {
          ln[i - j] += static_cast<double>(g[j] * iv);
          gi += static_cast<double>(g[j]) * nd[i - j];
        }
        for (int64_t j = std::max<int64_t>(0, i + 1); j < Cv; ++j) {
          ln[j - i] += static_cast<double>(g[j] * iv);
          gi += static_cast<double>(g[j]) * nd[j - i];
        }
        gid[t] += gi;
        if (Cv > 0) dhi = std::max(dhi, std::max(i, Cv - 1 - i));
      }
      std::lock_guard<std::mutex> lock(merge);
      for (int64_t e = 0; e < H * K1; ++e) { gad[e] += la[e]; gbd[e] += lb[e]; }
      for (int64_t d = 0; d <= std::min(dhi, Tn - 1); ++d) gnd[d] += ln[d];
    });
  });
}
