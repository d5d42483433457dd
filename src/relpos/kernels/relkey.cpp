// relpos kernels: the two elementwise passes of the relative-key (Transformer-XL) backward, per block.
//
// The engine's backward recomputes, per block of R query rows and C keys, the content logits
// s = scale q k^T (one matmul) and the position logits by offset pd (one (R, W) matmul, W >= R + C - 1,
// pair (t, j) at column j - t + R - 1). relkey_logits adds the skewed pd and subtracts the row's
// log-sum-exp in one pass (clamped at the floor below which exp is subnormal; PyTorch's vectorised exp
// follows). relkey_ds forms dS = P (dP - delta) in place of dP and writes it a second time laid out by
// offset (the skew, zeros elsewhere), which the position term's two gradient matmuls read. In PyTorch
// the same takes a strided subtraction, a clamp, a negation, a broadcast add and a strided multiply, plus
// zeroing the skewed buffer. Built by relpos.kernels (torch.utils.cpp_extension); see its docstring.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>

namespace {

void check_rows(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.dim() == 3 && t.device().is_cpu() && (t.size(2) <= 1 || t.stride(2) == 1),
              name, " must be a 3-D CPU tensor with unit stride along its last dim");
}

void check_vec(const torch::Tensor& t, const torch::Tensor& ref, const char* name) {
  TORCH_CHECK(t.dim() == 2 && t.device().is_cpu() && t.size(0) == ref.size(0) && t.size(1) == ref.size(1) &&
              t.scalar_type() == ref.scalar_type(), name, " must be an (M, R) CPU tensor of the logits' dtype");
}

}  // namespace

// s[m, t, j] = max(s[m, t, j] + pd[m, t, j - t + R - 1] - lse[m, t], floor)    (NaN stays NaN)
void relkey_logits(torch::Tensor s, torch::Tensor pd, torch::Tensor lse, double floor) {
  check_rows(s, "s");
  check_rows(pd, "pd");
  const int64_t M = s.size(0), R = s.size(1), C = s.size(2);
  TORCH_CHECK(pd.size(0) == M && pd.size(1) == R && pd.size(2) >= R + C - 1 && pd.scalar_type() == s.scalar_type(),
              "pd must be (M, R, >= R + C - 1) of the logits' dtype");
  check_vec(lse, s, "lse");
  AT_DISPATCH_FLOATING_TYPES(s.scalar_type(), "relkey_logits", [&] {
    scalar_t* sd = s.data_ptr<scalar_t>();
    const scalar_t* pdd = pd.data_ptr<scalar_t>();
    const scalar_t* ld = lse.data_ptr<scalar_t>();
    const scalar_t fl = static_cast<scalar_t>(floor);
    const int64_t ss0 = s.stride(0), ss1 = s.stride(1), ps0 = pd.stride(0), ps1 = pd.stride(1);
    const int64_t ls0 = lse.stride(0), ls1 = lse.stride(1);
    at::parallel_for(0, M * R, 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const int64_t m = i / R, t = i % R;
        scalar_t* row = sd + m * ss0 + t * ss1;
        const scalar_t* pr = pdd + m * ps0 + t * ps1 + (R - 1 - t);
        const scalar_t l = ld[m * ls0 + t * ls1];
        for (int64_t j = 0; j < C; ++j) {
          const scalar_t x = row[j] + pr[j] - l;
          row[j] = x < fl ? fl : x;
        }
      }
    });
  });
}

// ds = p (dp - delta[m, t]) written into dp (M, R, C); z[m, t, j - t + R - 1] = ds[m, t, j] on the columns
// [0, z.size(2)) it reaches, every other column of z's rows set to zero
void relkey_ds(torch::Tensor dp, torch::Tensor p, torch::Tensor delta, torch::Tensor z) {
  check_rows(dp, "dp");
  check_rows(p, "p");
  check_rows(z, "z");
  const int64_t M = dp.size(0), R = dp.size(1), C = dp.size(2), W = z.size(2);
  TORCH_CHECK(p.sizes() == dp.sizes() && p.scalar_type() == dp.scalar_type(), "p must be of dp's shape and dtype");
  TORCH_CHECK(z.size(0) == M && z.size(1) == R && z.scalar_type() == dp.scalar_type(),
              "z must be (M, R, W) of dp's dtype");
  check_vec(delta, dp, "delta");
  AT_DISPATCH_FLOATING_TYPES(dp.scalar_type(), "relkey_ds", [&] {
    scalar_t* dd = dp.data_ptr<scalar_t>();
    const scalar_t* pp = p.data_ptr<scalar_t>();
    const scalar_t* de = delta.data_ptr<scalar_t>();
    scalar_t* zd = z.data_ptr<scalar_t>();
    const int64_t ds0 = dp.stride(0), ds1 = dp.stride(1), pp0 = p.stride(0), pp1 = p.stride(1);
    const int64_t zs0 = z.stride(0), zs1 = z.stride(1), es0 = delta.stride(0), es1 = delta.stride(1);
    at::parallel_for(0, M * R, 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const int64_t m = i / R, t = i % R;
        scalar_t* drow = dd + m * ds0 + t * ds1;
        const scalar_t* prow = pp + m * pp0 + t * pp1;
        scalar_t* zrow = zd + m * zs0 + t * zs1;
        const scalar_t d = de[m * es0 + t * es1];
        const int64_t off = R - 1 - t;                       // column of key 0
        const int64_t j1 = std::min(C, W - off);             // keys whose column lies below W
        for (int64_t c = 0; c < std::min(off, W); ++c) zrow[c] = scalar_t(0);
        scalar_t* zk = zrow + off;
        for (int64_t j = 0; j < j1; ++j) {
          const scalar_t v = prow[j] * (drow[j] - d);
          drow[j] = v;
          zk[j] = v;
        }
        for (int64_t j = std::max<int64_t>(j1, 0); j < C; ++j) drow[j] = prow[j] * (drow[j] - d);
        for (int64_t c = off + C; c < W; ++c) zrow[c] = scalar_t(0);
      }
    });
  });
}
