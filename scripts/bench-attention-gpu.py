#!/usr/bin/env python3
"""PyTorch side of the attention benchmark (run by scripts/gpu-check on a GPU machine).

  bench-attention-gpu.py [--tokens 32768] [--hs 64] [--nh 8] [--T 128,512,2048,8192]
                         [--causal 0|1] [--dtypes fp32,bf16] [--input padded,unpadded]
                         [--budget-ms 400]
  bench-attention-gpu.py --check FILE      # float64 check of cases dumped by bench_attention

Benchmark: torch.nn.functional.scaled_dot_product_attention on (B, NH, T, HS) tensors with a
boolean key-padding mask (and the causal mask folded in), for the same shapes and lengths as
tests/cuda/bench_attention.cu: B = tokens // T, lengths[b] = T//2 + floor(u_b * (T - T//2 + 1)),
u_b = mha_rng_uniform(7, b) (kernels/rng.h, reimplemented below). FLOPs count real tokens
only (forward 4 L^2 HS per example and head, L(L+1)/2 instead of L^2 when causal; backward
2.5x forward). PyTorch does the work of the padded rows and columns too: the mask is how SDPA
takes lengths; `picked` names the backend SDPA chose for it with gradients (issue 4's target is
that one), `picked_fwd` the one for the forward-only timing.
--input unpadded: every length T and no mask, FLASH forced in bf16 (the kernel PyTorch has for
unpadded input; it has none in fp32, where SDPA's own pick runs). Prints lines
  RESULT impl=torch-sdpa dtype=fp32 input=padded picked=EFFICIENT_ATTENTION T=.. B=.. ...
         fwd_ms=.. fwd_tflops=.. fwdbwd_ms=.. fwdbwd_tflops=.. peak_mib=..

Check: reads the cases bench_attention --dump wrote (our fused and materialising outputs on the
GPU, fp32) and compares them with a float64 PyTorch reference written from the contract in
kernels/backend.h (masking, zeros on padded rows, dropout mask from the same counter RNG).
Exit status 1 when any relative error max|ours - ref| / max|ref| exceeds 2e-5.
"""
import argparse
import math
import struct
import sys

MASK64 = (1 << 64) - 1


def rng_u64(seed, counter):
    """kernels/rng.h mha_rng_u64 (splitmix64 finaliser), plain Python integers."""
    z = (seed * 0x9E3779B97F4A7C15 + counter + 0x632BE59BD9B4E019) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def rng_uniform(seed, counter):
    return (rng_u64(seed, counter) >> 40) / 16777216.0


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def make_lengths(B, T):
    """As bench_attention.cu: T/2 + (int)(u * (float)(T - T/2 + 1)), float32 arithmetic."""
    lo = T // 2
    out = []
    for b in range(B):
        l = lo + int(f32(rng_uniform(7, b) * float(T - lo + 1)))
        out.append(min(T, max(1, l)))
    return out


def flops_fwd(lens, NH, HS, causal):
    return float(sum(4.0 * HS * NH * (L * (L + 1) / 2 if causal else L * L) for L in lens))


def signed64(x):
    return x - (1 << 64) if x >= 1 << 63 else x


def rng_uniform_torch(torch, seed, n):
    """mha_rng_uniform(seed, 0 .. n-1) vectorised on int64 tensors: + and * wrap mod 2^64 the
    same as uint64; right shifts are made logical with a mask."""
    def shr(z, s):
        return (z >> s) & ((1 << (64 - s)) - 1)
    c = torch.arange(n, dtype=torch.int64)
    z = c + signed64((seed * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & MASK64)
    z = (z ^ shr(z, 30)) * signed64(0xBF58476D1CE4E5B9)
    z = (z ^ shr(z, 27)) * signed64(0x94D049BB133111EB)
    z = z ^ shr(z, 31)
    u = shr(z, 40).to(torch.float64) / 16777216.0
    for i in list(range(min(n, 64))) + [n - 1]:   # self-check against the scalar version
        if i >= 0 and float(u[i]) != rng_uniform(seed, i):
            raise SystemExit(f"rng_uniform_torch disagrees with rng_uniform at {i}")
    return u


# ---------------------------------------------------------------- benchmark

SDP_NAMES = {-1: "ERROR", 0: "MATH", 1: "FLASH_ATTENTION", 2: "EFFICIENT_ATTENTION",
             3: "CUDNN_ATTENTION", 4: "OVERRIDEABLE"}   # ATen's sdp::SDPBackend values


def sdp_picked(torch, q, k, v, mask, causal):
    """The SDPA backend PyTorch picks for these inputs (torch._fused_sdp_choice, private but
    present since 2.0), or "unknown"."""
    try:
        return SDP_NAMES.get(int(torch._fused_sdp_choice(q, k, v, mask, 0.0, causal)), "unknown")
    except Exception:   # noqa: BLE001 - any failure only loses the label
        return "unknown"


def sdp_only(torch, name):
    """A context manager that lets SDPA use backend `name` only (torch >= 2.3: sdpa_kernel;
    2.0-2.2: torch.backends.cuda.sdp_kernel)."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel([getattr(SDPBackend, name)])
    except ImportError:
        flags = {"FLASH_ATTENTION": "enable_flash", "EFFICIENT_ATTENTION": "enable_mem_efficient",
                 "MATH": "enable_math"}
        kw = {f: f == flags[name] for f in flags.values()}
        return torch.backends.cuda.sdp_kernel(**kw)


def bench(args, torch):
    """Per T, input kind and dtype one RESULT line. padded: lengths U[T/2, T] as a boolean key
    mask, the backend SDPA picks for it (the issue's target); unpadded: every length T, no mask,
    FLASH forced in bf16 (it has no fp32 kernel: fp32 takes SDPA's pick), TFLOP/s on all T."""
    F = torch.nn.functional
    dev = torch.device("cuda")
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)
    for T in [int(t) for t in args.T.split(",") if t]:
        B = max(1, args.tokens // T)
        for kind in [x for x in args.input.split(",") if x]:
            unpadded = kind == "unpadded"
            lens = [T] * B if unpadded else make_lengths(B, T)
            fl = flops_fwd(lens, args.nh, args.hs, args.causal)
            real = int(sum(lens))
            for name in [d for d in args.dtypes.split(",") if d]:
                bench_one(args, torch, F, dev, dtypes[name], name, kind, T, B, lens, fl, real)


def bench_one(args, torch, F, dev, dt, name, kind, T, B, lens, fl, real):
    import contextlib
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    g = torch.Generator(device=dev).manual_seed(1)
    q, k, v = (torch.empty(B, args.nh, T, args.hs, device=dev, dtype=dt).uniform_(-1.5, 1.5, generator=g)
               for _ in range(3))
    dout = torch.empty_like(q).uniform_(-1, 1, generator=g)
    causal = bool(args.causal)
    mask = None
    if kind == "padded":
        lt = torch.tensor(lens, device=dev)
        keep = torch.arange(T, device=dev)[None, :] < lt[:, None]          # (B, T) valid keys
        mask = keep[:, None, None, :]                                      # (B, 1, 1, T)
        if causal:
            mask = mask & torch.ones(T, T, device=dev, dtype=torch.bool).tril()[None, None]
        causal = False                                                     # folded into the mask
    qg, kg, vg = (x.detach().requires_grad_(True) for x in (q, k, v))
    # the choice may depend on requires_grad: the forward-only timing runs without gradients
    ctx = contextlib.nullcontext
    picked = sdp_picked(torch, qg, kg, vg, mask, causal)
    with torch.no_grad():
        picked_fwd = sdp_picked(torch, q, k, v, mask, causal)
    if kind == "unpadded" and name == "bf16":
        ctx = lambda: sdp_only(torch, "FLASH_ATTENTION")   # noqa: E731
        picked = picked_fwd = "FLASH_ATTENTION(forced)"

    def fwd():
        with torch.no_grad(), ctx():
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)

    def fwdbwd():
        with ctx():
            o = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=mask, is_causal=causal)
        o.backward(dout)

    try:
        f_ms = time_ms(torch, fwd, args.budget_ms)
        fb_ms = time_ms(torch, fwdbwd, args.budget_ms)
    except RuntimeError as e:   # e.g. out of memory, or no kernel for the forced backend
        print(f"NOTE torch-sdpa {name} {kind} T={T}: {str(e).splitlines()[0]}", flush=True)
        return
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    print(f"RESULT impl=torch-sdpa dtype={name} input={kind} picked={picked} "
          f"picked_fwd={picked_fwd} T={T} B={B} "
          f"NH={args.nh} HS={args.hs} causal={args.causal} real_tokens={real} fwd_ms={f_ms:.4f} "
          f"fwd_tflops={fl / (f_ms * 1e9):.2f} fwdbwd_ms={fb_ms:.4f} "
          f"fwdbwd_tflops={3.5 * fl / (fb_ms * 1e9):.2f} peak_mib={peak:.1f}", flush=True)


def time_ms(torch, fn, budget_ms):
    fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    fn()
    b.record()
    b.synchronize()
    once = a.elapsed_time(b)
    iters = max(3, min(50, int(budget_ms / once) if once > 0 else 50))
    a.record()
    for _ in range(iters):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / iters


# ---------------------------------------------------------------- check

def read_cases(path, torch):
    data = bytearray(open(path, "rb").read())
    pos, cases = 0, []

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return v

    def floats(n):
        nonlocal pos
        t = torch.frombuffer(data, dtype=torch.float32, count=n, offset=pos).clone()
        pos += 4 * n
        return t

    while pos < len(data):
        if data[pos:pos + 4] != b"MHAC":
            raise SystemExit(f"{path}: bad record at byte {pos}")
        pos += 4
        B, T, C, NH, causal = take("<5i")
        (p,) = take("<f")
        (seed,) = take("<Q")
        c = dict(B=B, T=T, C=C, NH=NH, causal=causal, p=p, seed=seed)
        c["lengths"] = list(take(f"<{B}i"))
        for name, n in [("qkv", B * T * 3 * C), ("dout", B * T * C), ("out", B * T * C),
                        ("lse", B * NH * T), ("dqkv", B * T * 3 * C), ("out_math", B * T * C),
                        ("dqkv_math", B * T * 3 * C)]:
            c[name] = floats(n)
        cases.append(c)
    return cases


def reference(torch, c):
    B, T, C, NH, causal, p, seed = c["B"], c["T"], c["C"], c["NH"], c["causal"], c["p"], c["seed"]
    HS = C // NH
    f64 = torch.float64
    qkv = c["qkv"].to(f64).reshape(B, T, 3, NH, HS).requires_grad_(True)
    q, k, v = (qkv[:, :, i].permute(0, 2, 1, 3) for i in range(3))     # (B, NH, T, HS)
    lens = torch.tensor(c["lengths"], dtype=torch.int64)
    ar = torch.arange(T)
    valid = ar[None, None, None, :] < lens[:, None, None, None]          # keys
    if causal:
        valid = valid & (ar[None, None, None, :] <= ar[None, None, :, None])
    row = ar[None, None, :, None] < lens[:, None, None, None]            # real query rows
    s = (q @ k.transpose(-1, -2)) / math.sqrt(HS)
    s = s.masked_fill(~valid, float("-inf"))
    s_safe = torch.where(row, s, torch.zeros_like(s))                    # padded rows: no NaN
    lse = torch.logsumexp(s_safe, dim=-1)
    P = torch.softmax(s_safe, dim=-1) * row
    if p > 0:
        keep = (rng_uniform_torch(torch, seed, B * NH * T * T) >= p).reshape(B, NH, T, T)
        P = P * keep / (1 - p)
    y = (P @ v) * row                                                    # (B, NH, T, HS)
    out = y.permute(0, 2, 1, 3).reshape(B, T, C)
    dout = c["dout"].to(f64).reshape(B, T, C)
    (out * dout).sum().backward()
    lse = torch.where(row[..., 0], lse, torch.zeros_like(lse))
    return out.detach(), lse.detach(), qkv.grad.reshape(B, T, 3 * C)


def rel(a, ref):
    a = a.reshape(-1).double()
    ref = ref.reshape(-1).double()
    den = float(ref.abs().max()) if ref.numel() else 0.0
    num = float((a - ref).abs().max()) if a.numel() else 0.0
    if not math.isfinite(num):
        return float("inf")
    return num / den if den > 0 else num


def check(path, torch):
    cases = read_cases(path, torch)
    bad = 0
    for i, c in enumerate(cases):   # case i: bench_attention's "dumped case i: ... kernel=" line
        out, lse, dqkv = reference(torch, c)
        tag = (f"case {i}: B={c['B']} T={c['T']} C={c['C']} NH={c['NH']} causal={c['causal']} "
               f"p={c['p']:.2f}")
        for name, ours, ref in [("fused out", c["out"], out), ("fused lse", c["lse"], lse),
                                ("fused dqkv", c["dqkv"], dqkv), ("math out", c["out_math"], out),
                                ("math dqkv", c["dqkv_math"], dqkv)]:
            e = rel(ours, ref)
            ok = e < 2e-5
            bad += not ok
            print(f"CHECK {'ok  ' if ok else 'FAIL'} {tag} {name}: rel {e:.3g}", flush=True)
    print(f"CHECK summary: {len(cases) * 5 - bad} ok, {bad} failed", flush=True)
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=32768)
    ap.add_argument("--hs", type=int, default=64)
    ap.add_argument("--nh", type=int, default=8)
    ap.add_argument("--T", default="128,512,2048,8192")
    ap.add_argument("--causal", type=int, default=0)
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--input", default="padded,unpadded")
    ap.add_argument("--budget-ms", type=float, default=400)
    ap.add_argument("--check", metavar="FILE")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("SKIP: PyTorch is not installed" + ("; cannot check" if args.check else ""))
        return 1 if args.check else 0
    if args.check:
        return check(args.check, torch)
    bad = [x for x in args.input.split(",") if x not in ("padded", "unpadded", "")]
    if bad:
        print(f"bench-attention-gpu.py: --input {bad[0]!r}: expected padded and/or unpadded",
              file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device")
        return 0
    bench(args, torch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
