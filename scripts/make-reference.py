#!/usr/bin/python3
"""PyTorch (float64) reference fixtures for the C Transformer classifier.

Builds, at a tiny size, exactly the model of docs/model.md (own modules: embedding
lookup, position table, per-layer qkv linear, manual multi-head attention with a key
padding mask, post-LN or pre-LN, ReLU or erf-GELU, mean / cls / max pooling, final LN
for pre-LN, linear head, cross-entropy with label smoothing) and writes, per case,
tests/fixtures/ref_<name>.json holding the config, the inputs, the parameters (in the
buffer order of docs/model.md), the logits, the loss, the gradients, and 10 AdamW
updates on the same batch (warmup + linear decay, global-norm clipping, decoupled
weight decay only on the *_w matrices of layers and the head).

Cases: post_relu_mean, pre_gelu_mean, post_relu_causal, post_gelu_cls, pre_relu_max,
single_head, sinusoidal, and grad_accum (B=8: gradients of the mean loss over all 8
examples, which equal 2 accumulated micro-batches of 4 scaled by 4/8 each).

Rerun (deterministic, identical files every time):
    /usr/bin/python3 scripts/make-reference.py tests/fixtures
Self-check against torch.nn.MultiheadAttention / TransformerEncoderLayer and
torch.autograd.gradcheck (writes nothing):
    /usr/bin/python3 scripts/make-reference.py --self-check

Parameter values are rounded to 4 decimals at initialisation (they are exactly the
doubles the short decimal strings parse to), which keeps the files small; everything
computed (logits, loss, grads, losses, checksums) is written with repr (full double).
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)

BASE = dict(V=50, T=7, B=4, C=16, NH=4, L=2, F=32, K=3, P=8,
            norm="post", activation="relu", pooling="mean", position="learned",
            causal=0, label_smoothing=0.0)

CASES = [  # name, config overrides, lengths, seed
    ("post_relu_mean", {}, [7, 5, 3, 1], 101),
    ("pre_gelu_mean", dict(norm="pre", activation="gelu"), [7, 5, 3, 1], 102),
    ("post_relu_causal", dict(causal=1), [7, 5, 3, 1], 103),
    ("post_gelu_cls", dict(activation="gelu", pooling="cls"), [7, 5, 3, 1], 104),
    ("pre_relu_max", dict(norm="pre", pooling="max"), [7, 5, 3, 1], 105),
    ("single_head", dict(NH=1, label_smoothing=0.1), [7, 5, 3, 1], 106),
    ("sinusoidal", dict(position="sinusoidal"), [7, 5, 3, 1], 107),
    ("grad_accum", dict(B=8), [7, 5, 3, 1, 6, 2, 4, 7], 108),
]

TRAIN = dict(lr=1e-2, warmup=3, total=10, decay="linear", min_lr_ratio=0.0,
             clip_norm=1.0, weight_decay=0.01, beta1=0.9, beta2=0.999, eps=1e-8)

PAD_ID, CLS_ID = 0, 2
LN_EPS = 1e-5


# ---------------------------------------------------------------- parameters
def param_specs(cfg):
    """(name, shape, kind, decay) in the exact buffer order of docs/model.md."""
    V, C, Fd, K, P = cfg["V"], cfg["C"], cfg["F"], cfg["K"], cfg["P"]
    s = [("tok_emb", (V, C), "emb", False)]
    if cfg["position"] == "learned":
        s.append(("pos_emb", (P, C), "emb", False))
    for l in range(cfg["L"]):
        p = "layers.%d." % l
        s += [(p + "qkv_w", (3 * C, C), "w", True), (p + "qkv_b", (3 * C,), "b", False),
              (p + "proj_w", (C, C), "w", True), (p + "proj_b", (C,), "b", False),
              (p + "ln1_w", (C,), "lnw", False), (p + "ln1_b", (C,), "lnb", False),
              (p + "fc1_w", (Fd, C), "w", True), (p + "fc1_b", (Fd,), "b", False),
              (p + "fc2_w", (C, Fd), "w", True), (p + "fc2_b", (C,), "b", False),
              (p + "ln2_w", (C,), "lnw", False), (p + "ln2_b", (C,), "lnb", False)]
    if cfg["norm"] == "pre":
        s += [("lnf_w", (C,), "lnw", False), ("lnf_b", (C,), "lnb", False)]
    s += [("head_w", (K, C), "w", True), ("head_b", (K,), "b", False)]
    return s


def init_params(cfg, gen):
    params = {}
    for name, shape, kind, _ in param_specs(cfg):
        z = torch.randn(shape, generator=gen)
        if kind == "emb":
            v = 0.5 * z
        elif kind == "w":
            v = 0.3 * z
        elif kind == "b":
            v = 0.1 * z
        elif kind == "lnw":
            v = 1.0 + 0.1 * z
        else:  # lnb
            v = 0.1 * z
        v = torch.round(v * 1e4) / 1e4  # == float("%.4f") exactly; short repr
        params[name] = v.clone().requires_grad_(True)
    return params


def sinusoidal_table(P, C):
    pe = torch.zeros(P, C)
    for t in range(P):
        for i in range(C // 2):
            a = t / (10000.0 ** (2.0 * i / C))
            pe[t, 2 * i] = math.sin(a)
            pe[t, 2 * i + 1] = math.cos(a)
    return pe


# ---------------------------------------------------------------- model
def layer_norm(x, w, b):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + LN_EPS) * w + b


def linear(x, w, b):
    return x @ w.t() + b


def act(x, kind):
    if kind == "relu":
        return torch.relu(x)
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))  # exact GELU


def valid_keys(lengths, T, causal):
    """(B, T_query, T_key) bool: key j valid when j < len[b] (and j <= i when causal)."""
    pos = torch.arange(T)
    valid = (pos[None, None, :] < lengths[:, None, None]).expand(len(lengths), T, T)
    if causal:
        valid = valid & (pos[None, :, None] >= pos[None, None, :])
    return valid


def attention(x, lengths, qkv_w, qkv_b, proj_w, proj_b, NH, causal):
    B, T, C = x.shape
    HS = C // NH
    qkv = linear(x, qkv_w, qkv_b)
    q, k, v = qkv.split(C, dim=-1)
    q = q.reshape(B, T, NH, HS).transpose(1, 2)  # (B, NH, T, HS)
    k = k.reshape(B, T, NH, HS).transpose(1, 2)
    v = v.reshape(B, T, NH, HS).transpose(1, 2)
    scores = q @ k.transpose(-1, -2) / math.sqrt(HS)  # (B, NH, T, T)
    valid = valid_keys(lengths, T, causal)[:, None]  # (B, 1, T, T)
    any_valid = valid.any(-1, keepdim=True)
    scores = scores.masked_fill(~valid, float("-inf"))
    scores = torch.where(any_valid, scores, torch.zeros_like(scores))  # no NaN
    probs = torch.softmax(scores, dim=-1)  # max-subtracted
    probs = torch.where(any_valid, probs, torch.zeros_like(probs))
    y = (probs @ v).transpose(1, 2).reshape(B, T, C)
    return linear(y, proj_w, proj_b)


def forward(cfg, params, ids, lengths):
    """ids (B, T) long, lengths (B,) long -> logits (B, K)."""
    B, T = ids.shape
    x = params["tok_emb"][ids]
    if cfg["position"] == "learned":
        x = x + params["pos_emb"][:T][None]
    else:
        x = x + sinusoidal_table(cfg["P"], cfg["C"])[:T][None]
    for l in range(cfg["L"]):
        p = lambda n: params["layers.%d.%s" % (l, n)]
        att = lambda h: attention(h, lengths, p("qkv_w"), p("qkv_b"), p("proj_w"),
                                  p("proj_b"), cfg["NH"], cfg["causal"])
        ffn = lambda h: linear(act(linear(h, p("fc1_w"), p("fc1_b")), cfg["activation"]),
                               p("fc2_w"), p("fc2_b"))
        if cfg["norm"] == "post":
            x = layer_norm(x + att(x), p("ln1_w"), p("ln1_b"))
            x = layer_norm(x + ffn(x), p("ln2_w"), p("ln2_b"))
        else:
            x = x + att(layer_norm(x, p("ln1_w"), p("ln1_b")))
            x = x + ffn(layer_norm(x, p("ln2_w"), p("ln2_b")))
    if cfg["norm"] == "pre":
        x = layer_norm(x, params["lnf_w"], params["lnf_b"])
    real = (torch.arange(T)[None, :] < lengths[:, None])[:, :, None]  # (B, T, 1)
    if cfg["pooling"] == "mean":
        pooled = (x * real).sum(1) / lengths[:, None].to(x.dtype)
    elif cfg["pooling"] == "cls":
        pooled = x[:, 0]
    else:
        pooled = x.masked_fill(~real, float("-inf")).max(dim=1).values
    logits = linear(pooled, params["head_w"], params["head_b"])
    return logits


def loss_fn(cfg, logits, labels):
    return F.cross_entropy(logits, labels, label_smoothing=cfg["label_smoothing"])


# ---------------------------------------------------------------- training
def lr_at(tr, u):
    U, base, r = tr["total"], tr["lr"], tr["min_lr_ratio"]
    W = tr["warmup"]
    if W < 1:
        W = int(round(W * U))
    if u < W:
        return base * (u + 1) / W
    prog = (u - W) / max(1, U - W)
    if tr["decay"] == "linear":
        return base * (r + (1 - r) * (1 - prog))
    if tr["decay"] == "cosine":
        return base * (r + (1 - r) * 0.5 * (1 + math.cos(math.pi * prog)))
    return base


def train(cfg, params0, ids, lengths, labels, tr):
    specs = param_specs(cfg)
    params = {n: params0[n].detach().clone().requires_grad_(True) for n, *_ in specs}
    order = [params[n] for n, *_ in specs]
    decay = [params[n] for n, _, _, d in specs if d]
    no_decay = [params[n] for n, _, _, d in specs if not d]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": tr["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=tr["lr"], betas=(tr["beta1"], tr["beta2"]), eps=tr["eps"])
    losses, lrs, norms = [], [], []
    for u in range(tr["total"]):
        opt.zero_grad()
        loss = loss_fn(cfg, forward(cfg, params, ids, lengths), labels)
        loss.backward()
        n = torch.nn.utils.clip_grad_norm_(order, tr["clip_norm"])
        lr = lr_at(tr, u)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        losses.append(loss.item())
        lrs.append(lr)
        norms.append(n.item())
    with torch.no_grad():
        sums = [params[n].sum().item() for n, *_ in specs]
        total = sum(p.sum() for p in order).item()
    return dict(losses=losses, lrs=lrs, grad_norms=norms,
                final_params_checksum=total, final_params_sums=sums)


# ---------------------------------------------------------------- cases
def make_inputs(cfg, lengths, gen):
    B, T, V, K = cfg["B"], cfg["T"], cfg["V"], cfg["K"]
    ids = torch.full((B, T), PAD_ID, dtype=torch.long)
    for b, n in enumerate(lengths):
        ids[b, :n] = torch.randint(3, V, (n,), generator=gen)
        if cfg["pooling"] == "cls":
            ids[b, 0] = CLS_ID
    labels = torch.randint(0, K, (B,), generator=gen)
    return ids, torch.tensor(lengths, dtype=torch.long), labels


def build_case(name, over, lengths, seed):
    cfg = dict(BASE)
    cfg.update(over)
    assert len(lengths) == cfg["B"] and max(lengths) <= cfg["T"] <= cfg["P"]
    gen = torch.Generator().manual_seed(seed)
    params = init_params(cfg, gen)
    ids, lens, labels = make_inputs(cfg, lengths, gen)
    return cfg, params, ids, lens, labels


def make_fixture(name, over, lengths, seed):
    cfg, params, ids, lens, labels = build_case(name, over, lengths, seed)
    specs = param_specs(cfg)
    logits = forward(cfg, params, ids, lens)
    loss = loss_fn(cfg, logits, labels)
    loss.backward()
    out = {
        "name": name,
        "config": cfg,
        "inputs": {"ids": ids.flatten().tolist(), "lengths": lens.tolist(),
                   "labels": labels.tolist()},
        "params": [{"name": n, "shape": list(s), "data": params[n].detach().flatten().tolist()}
                   for n, s, _, _ in specs],
        "logits": logits.detach().flatten().tolist(),
        "loss": loss.item(),
        "grads": [{"name": n, "shape": list(s), "data": params[n].grad.flatten().tolist()}
                  for n, s, _, _ in specs],
    }
    t = dict(TRAIN)
    t.update(train(cfg, params, ids, lens, labels, TRAIN))
    out["train"] = t
    if name == "grad_accum":
        out["grad_accum"] = {"micro_batches": 2, "micro_batch_size": cfg["B"] // 2}
    return out


def dump(obj):
    """JSON with one line per top-level key / per tensor; floats via repr."""
    d = lambda v: json.dumps(v, separators=(",", ":"))
    lines = []
    for k, v in obj.items():
        if isinstance(v, list) and v and isinstance(v[0], dict):
            inner = ",\n".join("  " + d(e) for e in v)
            lines.append(" %s: [\n%s\n ]" % (d(k), inner))
        else:
            lines.append(" %s: %s" % (d(k), d(v)))
    return "{\n" + ",\n".join(lines) + "\n}\n"


# ---------------------------------------------------------------- self-check
def self_check():
    ok = True

    def report(what, err, tol):
        nonlocal ok
        good = err <= tol
        ok = ok and good
        print("%-58s max|diff| = %.3e  %s" % (what, err, "ok" if good else "FAIL"))

    for name, over, lengths, seed in CASES:
        cfg, params, ids, lens, labels = build_case(name, over, lengths, seed)
        C, NH, T, B = cfg["C"], cfg["NH"], cfg["T"], cfg["B"]
        real = torch.arange(T)[None, :] < lens[:, None]  # (B, T)
        with torch.no_grad():
            x = torch.randn(B, T, C, generator=torch.Generator().manual_seed(seed + 1000))
            # (a) attention vs torch.nn.MultiheadAttention
            mha = torch.nn.MultiheadAttention(C, NH, dropout=0.0, batch_first=True)
            mha.in_proj_weight.copy_(params["layers.0.qkv_w"])
            mha.in_proj_bias.copy_(params["layers.0.qkv_b"])
            mha.out_proj.weight.copy_(params["layers.0.proj_w"])
            mha.out_proj.bias.copy_(params["layers.0.proj_b"])
            mha.train()  # avoid the inference fast path
            attn_mask = None
            if cfg["causal"]:
                attn_mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
            ref, _ = mha(x, x, x, key_padding_mask=~real, attn_mask=attn_mask,
                         need_weights=False)
            mine = attention(x, lens, params["layers.0.qkv_w"], params["layers.0.qkv_b"],
                             params["layers.0.proj_w"], params["layers.0.proj_b"], NH,
                             cfg["causal"])
            report("%s: attention vs nn.MultiheadAttention" % name,
                   (ref - mine)[real].abs().max().item(), 1e-12)
            # layer vs torch.nn.TransformerEncoderLayer (+ causal mask)
            enc = torch.nn.TransformerEncoderLayer(
                C, NH, dim_feedforward=cfg["F"], dropout=0.0,
                activation=cfg["activation"], layer_norm_eps=LN_EPS, batch_first=True,
                norm_first=(cfg["norm"] == "pre"))
            sd = {"self_attn.in_proj_weight": "qkv_w", "self_attn.in_proj_bias": "qkv_b",
                  "self_attn.out_proj.weight": "proj_w", "self_attn.out_proj.bias": "proj_b",
                  "linear1.weight": "fc1_w", "linear1.bias": "fc1_b",
                  "linear2.weight": "fc2_w", "linear2.bias": "fc2_b",
                  "norm1.weight": "ln1_w", "norm1.bias": "ln1_b",
                  "norm2.weight": "ln2_w", "norm2.bias": "ln2_b"}
            enc.load_state_dict({k: params["layers.0." + v] for k, v in sd.items()})
            enc.train()
            ref = enc(x, src_mask=attn_mask, src_key_padding_mask=~real)
            # the same layer written with this script's pieces, on the same x
            p = lambda n: params["layers.0." + n]
            att = attention(x if cfg["norm"] == "post" else layer_norm(x, p("ln1_w"), p("ln1_b")),
                            lens, p("qkv_w"), p("qkv_b"), p("proj_w"), p("proj_b"), NH,
                            cfg["causal"])
            ffn = lambda h: linear(act(linear(h, p("fc1_w"), p("fc1_b")), cfg["activation"]),
                                   p("fc2_w"), p("fc2_b"))
            if cfg["norm"] == "post":
                y = layer_norm(x + att, p("ln1_w"), p("ln1_b"))
                y = layer_norm(y + ffn(y), p("ln2_w"), p("ln2_b"))
            else:
                y = x + att
                y = y + ffn(layer_norm(y, p("ln2_w"), p("ln2_b")))
            report("%s: layer vs nn.TransformerEncoderLayer" % name,
                   (ref - y)[real].abs().max().item(), 1e-12)
            # layer_norm / gelu / loss vs torch built-ins
            report("%s: layer_norm vs F.layer_norm" % name,
                   (layer_norm(x, p("ln1_w"), p("ln1_b")) -
                    F.layer_norm(x, (C,), p("ln1_w"), p("ln1_b"), LN_EPS)).abs().max().item(),
                   1e-13)
            logits = forward(cfg, params, ids, lens)
            eps = cfg["label_smoothing"]
            logp = torch.log_softmax(logits, -1)
            manual = (-(1 - eps) * logp.gather(1, labels[:, None])[:, 0]
                      - eps * logp.mean(-1)).mean()
            report("%s: loss vs manual smoothed CE" % name,
                   abs(manual.item() - loss_fn(cfg, logits, labels).item()), 1e-13)
            # padding invariance: changing padded ids must not change logits
            ids2 = ids.clone()
            ids2[~real] = 7
            report("%s: logits invariant to padded ids" % name,
                   (forward(cfg, params, ids2, lens) - logits).abs().max().item(), 1e-13)
        # (b) gradcheck of the whole loss w.r.t. every parameter (float64)
        specs = param_specs(cfg)
        names = [n for n, *_ in specs]

        def f(*ts):
            return loss_fn(cfg, forward(cfg, dict(zip(names, ts)), ids, lens), labels)

        g = torch.autograd.gradcheck(f, tuple(params[n] for n in names), eps=1e-6,
                                     atol=1e-7, rtol=1e-5, raise_exception=False)
        print("%-58s %s" % ("%s: gradcheck over all %d params" % (name, sum(
            params[n].numel() for n in names)), "ok" if g else "FAIL"))
        ok = ok and g
    # grad accumulation: two scaled micro-batches of 4 == one batch of 8
    name, over, lengths, seed = CASES[-1]
    cfg, params, ids, lens, labels = build_case(name, over, lengths, seed)
    full = torch.autograd.grad(loss_fn(cfg, forward(cfg, params, ids, lens), labels),
                               list(params.values()))
    acc = [torch.zeros_like(p) for p in params.values()]
    for s in (slice(0, 4), slice(4, 8)):
        l = loss_fn(cfg, forward(cfg, params, ids[s], lens[s]), labels[s]) * (4 / 8)
        for a, gg in zip(acc, torch.autograd.grad(l, list(params.values()))):
            a += gg
    report("grad_accum: 2 x 4 scaled micro-batches vs batch of 8",
           max((a - b).abs().max().item() for a, b in zip(acc, full)), 1e-14)
    # training: torch AdamW + clip_grad_norm_ vs the rules of docs/model.md written out
    for name, over, lengths, seed in CASES[:2]:
        cfg, params, ids, lens, labels = build_case(name, over, lengths, seed)
        tr = TRAIN
        ref = train(cfg, params, ids, lens, labels, tr)
        specs = param_specs(cfg)
        ps = {n: params[n].detach().clone() for n, *_ in specs}
        m = {n: torch.zeros_like(v) for n, v in ps.items()}
        v2 = {n: torch.zeros_like(v) for n, v in ps.items()}
        losses = []
        for u in range(tr["total"]):
            cur = {n: t.clone().requires_grad_(True) for n, t in ps.items()}
            loss = loss_fn(cfg, forward(cfg, cur, ids, lens), labels)
            gs = dict(zip(cur, torch.autograd.grad(loss, list(cur.values()))))
            losses.append(loss.item())
            nrm = math.sqrt(sum((g * g).sum().item() for g in gs.values()))
            if nrm > tr["clip_norm"]:
                gs = {n: g * (tr["clip_norm"] / (nrm + 1e-6)) for n, g in gs.items()}
            lr, b1, b2, t = lr_at(tr, u), tr["beta1"], tr["beta2"], u + 1
            for n, _, _, dec in specs:
                if dec:
                    ps[n] = ps[n] * (1 - lr * tr["weight_decay"])
                m[n] = b1 * m[n] + (1 - b1) * gs[n]
                v2[n] = b2 * v2[n] + (1 - b2) * gs[n] ** 2
                mh, vh = m[n] / (1 - b1 ** t), v2[n] / (1 - b2 ** t)
                ps[n] = ps[n] - lr * mh / (vh.sqrt() + tr["eps"])
        report("%s: 10 AdamW steps vs docs/model.md by hand (losses)" % name,
               max(abs(a - b) for a, b in zip(losses, ref["losses"])), 1e-12)
        report("%s: 10 AdamW steps vs docs/model.md by hand (checksum)" % name,
               abs(sum(p.sum().item() for p in ps.values()) - ref["final_params_checksum"]),
               1e-10)
    print("SELF-CHECK", "PASSED" if ok else "FAILED")
    return ok


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-check":
        return 0 if self_check() else 1
    if len(argv) != 2:
        print(__doc__)
        return 2
    out_dir = argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for name, over, lengths, seed in CASES:
        text = dump(make_fixture(name, over, lengths, seed))
        path = os.path.join(out_dir, "ref_%s.json" % name)
        with open(path, "w") as fh:
            fh.write(text)
        print("wrote %s (%d bytes)" % (path, len(text)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
