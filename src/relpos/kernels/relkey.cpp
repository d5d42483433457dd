// relpos kernels: the two elementwise passes of the relative-key (Transformer-XL) backward, per block.
//
// The engine's backward recomputes, per block of R query rows and C keys, the content logits
// s = scale q k^T (one matmul) and the position logits by offset pd (one (R, W) matmul, W >= R + C - 1,
// pair (t, j) at column j - t + R - 1). relkey_logits adds the skewed pd and subtracts the row's
// log-sum-exp in one pass (clamped at the floor below which exp is subnormal; PyTorch's vectorised exp
// follows). relkey_ds forms dS = P (dP - delta) in place of dP and writes it a second time laid out by
// offset (the skew, zeros elsewhere), which the position term's two gradient matmuls read. In PyTorch
// the same takes a strided subtraction, a clamp, a negation, a broadcast add and a strided multiply, plus
// zeroing the skewed buffer. relkey_blocks_forward and relkey_blocks_backward are the row-block loops of
// relpos.attention.dense_relkey with their ATen calls made from C++. Built by relpos.kernels
// (torch.utils.cpp_extension); see its docstring.
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

// The row-block loop of relpos.attention.dense_relkey (causal self-attention with relative keys), its ATen calls
// made from C++ rather than Python: the same operations in the same order, so the same numbers as that module's
// PyTorch loop (tested). bounds holds (r0, r1, e) per block, flat. Inputs as that module's forward prepares them:
// qus (H B, N, D) = scale (q + u), qv (B, H, N, D), k3 (H B, N, D), v3 (H B, N, Dv), keys (H, N, D), future (N, N).
// Returns o (H B, N, Dv), then each block's probabilities p (H B, R, e), then each block's rows of qv (H, B R, D).
std::vector<torch::Tensor> relkey_blocks_forward(torch::Tensor qus, torch::Tensor qv, torch::Tensor k3,
                                                 torch::Tensor v3, torch::Tensor keys, torch::Tensor future,
                                                 std::vector<int64_t> bounds) {
  TORCH_CHECK(bounds.size() % 3 == 0 && qv.dim() == 4, "bounds must hold (r0, r1, e) triples and qv be 4-D");
  const int64_t B = qv.size(0), H = qv.size(1), N = qv.size(2), D = qv.size(3), n = bounds.size() / 3;
  torch::Tensor o = at::empty({H * B, N, v3.size(2)}, v3.options());
  std::vector<torch::Tensor> out(1 + 2 * n);
  for (int64_t b = 0; b < n; ++b) {
    const int64_t r0 = bounds[3 * b], r1 = bounds[3 * b + 1], e = bounds[3 * b + 2], R = r1 - r0;
    torch::Tensor qb = qv.slice(2, r0, r1).transpose(0, 1).reshape({H, B * R, D});
    torch::Tensor pd = at::bmm(qb, keys.slice(1, N - e, N).transpose(1, 2)).view({H * B, R, e});
    torch::Tensor skew = pd.as_strided({H * B, R, e}, {pd.stride(0), pd.stride(1) - 1, 1}, pd.storage_offset() + R - 1);
    torch::Tensor s = at::add(skew, future.slice(0, r0, r1).slice(1, 0, e));
    s.baddbmm_(qus.slice(1, r0, r1), k3.slice(1, 0, e).transpose(1, 2));
    torch::Tensor p = at::softmax(s, -1);
    o.slice(1, r0, r1).copy_(at::bmm(p, v3.slice(1, 0, e)));
    out[1 + b] = p;
    out[1 + n + b] = qb;
  }
  out[0] = o;
  return out;
}

// Its backward: returns dqu (H B, N, D), dqv (H, B, N, D), dk (H B, N, D), dv (H B, N, Dv), dkeys (H, N, D);
// ks = scale k3, delta = rowsum(dO o) (H B, N), ps and qbs the forward's blocks.
std::vector<torch::Tensor> relkey_blocks_backward(torch::Tensor go3, torch::Tensor qus, torch::Tensor ks,
                                                  torch::Tensor v3, torch::Tensor keys, torch::Tensor delta,
                                                  std::vector<torch::Tensor> ps, std::vector<torch::Tensor> qbs,
                                                  std::vector<int64_t> bounds, int64_t B) {
  const int64_t n = bounds.size() / 3, H = keys.size(0), N = keys.size(1), D = keys.size(2);
  TORCH_CHECK(bounds.size() % 3 == 0 && (int64_t)ps.size() == n && (int64_t)qbs.size() == n,
              "bounds, ps and qbs must describe the same blocks");
  torch::Tensor dqu = at::empty_like(qus), dqv = at::empty({H, B, N, D}, qus.options());
  torch::Tensor dk = at::zeros_like(ks), dv = at::zeros_like(v3), dkeys = at::zeros({H, N, D}, keys.options());
  torch::Tensor un;  // dS by offset, (H B, R, N): one buffer for the blocks of R rows
  for (int64_t b = 0; b < n; ++b) {
    const int64_t r0 = bounds[3 * b], r1 = bounds[3 * b + 1], e = bounds[3 * b + 2], R = r1 - r0;
    const torch::Tensor& p = ps[b];
    torch::Tensor g = go3.slice(1, r0, r1);
    dv.slice(1, 0, e).add_(at::bmm(p.transpose(1, 2), g));
    torch::Tensor ds = at::bmm(g, v3.slice(1, 0, e).transpose(1, 2));
    if (!un.defined() || un.size(1) != R) un = at::empty({H * B, R, N}, ds.options());
    torch::Tensor z = un.slice(2, 0, e);
    relkey_ds(ds, p, delta.slice(1, r0, r1), z);
    torch::Tensor dpd = z.view({H, B * R, e});
    dqu.slice(1, r0, r1).copy_(at::bmm(ds, ks.slice(1, 0, e)));
    dk.slice(1, 0, e).add_(at::bmm(ds.transpose(1, 2), qus.slice(1, r0, r1)));
    dqv.slice(2, r0, r1).copy_(at::bmm(dpd, keys.slice(1, N - e, N)).view({H, B, R, D}));
    dkeys.slice(1, N - e, N).add_(at::bmm(dpd.transpose(1, 2), qbs[b]));
  }
  return {dqu, dqv, dk, dv, dkeys};
}
