// relpos kernels: CoPE's position term from the content logits, one pass per query row.
//
// For a row with gates g_j = sigmoid(z_j) of the scaled content logits z_j (PyTorch's vectorised
// sigmoid computes them), the last key it may see `last` and the row's logits against the integer
// positions L[0 .. P-1]:
//   p_j = min(sum_{t = j .. last} g_t, cap),  term_j = L[floor p_j] (1 - w_j) + L[ceil p_j] w_j,
//   w_j = p_j - floor p_j   for j <= last;  term_j = 0 for j > last.
// The forward walks the keys from `last` down, so the suffix sum is one register. The backward
// walks them down again (the interpolation's gradients into dL and each p_j's gradient), then up
// (the gradient of g_t is the prefix sum of those over j <= t), and writes dz = dg g (1 - g).
// Positions are never negative, so floor is an integer conversion (no libm call per pair). Sums run in
// double, as PyTorch's CPU cumsum does, so a count that lands on an integer floors the same way.
// PyTorch needs about a dozen N x N temporaries for the same (flip, cumsum, clamp, floor, ceil, two
// gathers, their scatters). Built by relpos.kernels (torch.utils.cpp_extension); see its docstring.
#include <torch/extension.h>
#include <ATen/AccumulateType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace {

void check_args(const torch::Tensor& g, const torch::Tensor& L, const torch::Tensor& last) {
  TORCH_CHECK(g.dim() == 3 && L.dim() == 3 && last.dim() == 2, "g (M, R, C), L (M, R, P), last (M, R)");
  TORCH_CHECK(g.is_contiguous() && L.is_contiguous() && last.is_contiguous(), "g, L and last must be contiguous");
  TORCH_CHECK(g.device().is_cpu() && L.device().is_cpu() && last.device().is_cpu(), "CPU tensors only");
  TORCH_CHECK(g.scalar_type() == L.scalar_type(), "g and L must share a dtype");
  TORCH_CHECK(last.scalar_type() == torch::kLong, "last must be int64");
  TORCH_CHECK(L.size(0) == g.size(0) && L.size(1) == g.size(1) && last.size(0) == g.size(0) &&
              last.size(1) == g.size(1), "g, L and last must agree on (M, R)");
  TORCH_CHECK(L.size(2) >= 2, "L needs at least 2 positions");
}

// `t` must be contiguous, of `ref`'s shape and dtype
void check_like(const torch::Tensor& t, const torch::Tensor& ref, const char* name, const char* ref_name) {
  TORCH_CHECK(t.sizes() == ref.sizes() && t.is_contiguous() && t.scalar_type() == ref.scalar_type(),
              name, " must be contiguous, of ", ref_name, "'s shape and dtype");
}

// the interpolation at count acc (>= 0, or NaN), acc rounded to the term's dtype first: p = min(acc, cap), i0 = floor p, i1 = ceil p, w = p - i0
template <typename T>
struct Interp {
  int64_t i0, i1; T w; bool nan;
  T count;  // acc in T, before clipping
  template <typename A>
  inline Interp(A acc, T cap) {
    count = static_cast<T>(acc);
    nan = count != count;
    const T p = nan ? T(0) : (count < cap ? count : cap);
    i0 = static_cast<int64_t>(p);  // truncation is floor: p >= 0
    w = p - static_cast<T>(i0);
    i1 = w > T(0) ? i0 + 1 : i0;
  }
};

}  // namespace

// out (M, R, C) += term, from the gates g (M, R, C), L (M, R, P) and last (M, R); cap = P - 1. Only the keys
// j <= last are written (the term is 0 past them). `out` may hold the content logits g came from.
void cope_forward(torch::Tensor out, torch::Tensor g, torch::Tensor L, torch::Tensor last) {
  check_args(g, L, last);
  check_like(out, g, "out", "g");
  const int64_t M = g.size(0), R = g.size(1), C = g.size(2), P = L.size(2);
  AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "cope_forward", [&] {
    const scalar_t* gd = g.data_ptr<scalar_t>();
    const scalar_t* ld = L.data_ptr<scalar_t>();
    const int64_t* lastd = last.data_ptr<int64_t>();
    scalar_t* od = out.data_ptr<scalar_t>();
    using acc_t = at::acc_type<scalar_t, false>;  // double, as PyTorch's CPU cumsum accumulates
    const scalar_t cap = scalar_t(P - 1);
    const scalar_t nan = std::numeric_limits<scalar_t>::quiet_NaN();
    at::parallel_for(0, M * R, 16, [&](int64_t s, int64_t e) {
      for (int64_t row = s; row < e; ++row) {
        const scalar_t* gr = gd + row * C;
        const scalar_t* lr = ld + row * P;
        scalar_t* orow = od + row * C;
        acc_t acc = 0;
        for (int64_t j = std::min(lastd[row], C - 1); j >= 0; --j) {
          acc += gr[j];
          const Interp<scalar_t> t(acc, cap);
          orow[j] += t.nan ? nan : lr[t.i1] * t.w + lr[t.i0] * (scalar_t(1) - t.w);
        }
      }
    });
  });
}

// For the term's gradient dterm (M, R, C): dz (M, R, C) += the gradient of the logits z (g = sigmoid(z)) and
// dL (M, R, P) += that of L. dz may be dterm itself (each row reads dterm before it writes dz).
void cope_backward(torch::Tensor dz, torch::Tensor dL, torch::Tensor g, torch::Tensor L, torch::Tensor last,
                   torch::Tensor dterm) {
  check_args(g, L, last);
  check_like(dterm, g, "dterm", "g");
  check_like(dz, g, "dz", "g");
  check_like(dL, L, "dL", "L");
  const int64_t M = g.size(0), R = g.size(1), C = g.size(2), P = L.size(2);
  AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "cope_backward", [&] {
    const scalar_t* gd = g.data_ptr<scalar_t>();
    const scalar_t* ld = L.data_ptr<scalar_t>();
    const scalar_t* dd = dterm.data_ptr<scalar_t>();
    const int64_t* lastd = last.data_ptr<int64_t>();
    scalar_t* dzd = dz.data_ptr<scalar_t>();
    scalar_t* dld = dL.data_ptr<scalar_t>();
    using acc_t = at::acc_type<scalar_t, false>;  // double, as PyTorch's CPU cumsum accumulates
    const scalar_t cap = scalar_t(P - 1);
    const scalar_t nan = std::numeric_limits<scalar_t>::quiet_NaN();
    at::parallel_for(0, M * R, 16, [&](int64_t s, int64_t e) {
      std::vector<scalar_t> dp(C);
      for (int64_t row = s; row < e; ++row) {
        const scalar_t* gr = gd + row * C;
        const scalar_t* lr = ld + row * P;
        const scalar_t* dr = dd + row * C;
        scalar_t* dzr = dzd + row * C;
        scalar_t* dlr = dld + row * P;
        const int64_t hi_j = std::min(lastd[row], C - 1);
        // down: the interpolation's gradients. The counts only grow as j falls, so the table rows i0 and
        // i0 + 1 a run of keys reads stay in two registers until i0 moves (no store-to-load chain on dL).
        acc_t acc = 0;
        scalar_t a_lo = 0, a_hi = 0;
        int64_t cur = -1;
        bool saw_nan = false;
        for (int64_t j = hi_j; j >= 0; --j) {
          acc += gr[j];
          const Interp<scalar_t> t(acc, cap);
          const scalar_t d = dr[j];
          if (t.nan) {  // NaN in z: every gradient it reaches is NaN, as through autograd
            saw_nan = true;
            dp[j] = nan;
            continue;
          }
          if (t.i0 != cur) {
            if (cur >= 0) { dlr[cur] += a_lo; if (cur + 1 < P) dlr[cur + 1] += a_hi; }
            cur = t.i0; a_lo = 0; a_hi = 0;
          }
          a_lo += d * (scalar_t(1) - t.w);
          a_hi += d * t.w;  // 0 when p is an integer (then i1 = i0 and w = 0)
          // clamp(max=cap) passes the gradient where acc <= cap (as PyTorch's clamp does)
          dp[j] = t.count <= cap ? d * (lr[t.i1] - lr[t.i0]) : scalar_t(0);
        }
        if (cur >= 0) { dlr[cur] += a_lo; if (cur + 1 < P) dlr[cur + 1] += a_hi; }
        if (saw_nan) dlr[0] += nan;
        acc_t pre = 0;
        for (int64_t j = 0; j <= hi_j; ++j) {  // up: dg_t = sum_{j <= t} dp_j; dz = dg g (1 - g)
          pre += dp[j];
          dzr[j] += static_cast<scalar_t>(pre) * (scalar_t(1) - gr[j]) * gr[j];
        }
      }
    });
  });
}
