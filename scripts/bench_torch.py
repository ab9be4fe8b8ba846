#!/usr/bin/python3
"""scripts/bench_torch.py: the PyTorch reference for the benchmarks, and the small helpers
scripts/bench-train and scripts/bench-predict need. Run with Debian's python3-torch:
/usr/bin/python3 scripts/bench_torch.py SUBCOMMAND ...

  train    --batches F.bin [--threads N] [--state-out S.pt] [--json OUT]
           [--device cpu|cuda] [--max-steps N [--warmup-steps W]] [--amp none|bf16]
           [--attention eager|sdpa]
           Builds the model of docs/model.md in float32 eager PyTorch from F.bin.json (the
           resolved config written by tests/bench/export_batches), trains it on the exported
           batches in the exported order (every epoch, grad_accum, warmup + decay, clipping,
           AdamW with decay only on linear weights, the same dropout), evaluates dev after
           every epoch, keeps the best by train.metric, evaluates test on the best, like
           mha-train does. Reports real (non-padding) tokens/s and accuracy.
           --device cuda: the same on the GPU (default cpu).
           --max-steps N: a speed measurement instead: N optimizer updates on the first
           batches of the file (read into memory before the clock starts; no dev/test
           evaluation), the first W updates (default 10) untimed, torch.cuda.synchronize()
           around the clock. Reports real and padded tokens/s of the timed updates, the median
           of the real tokens/s over windows of 10 updates (the first window left out; the
           clock read after each update as mha-train's progress lines read it), ms/update and, on CUDA,
           torch.cuda.max_memory_allocated(); prints one line "TRAINBENCH key=value ..."
           on stderr. --amp bf16: forward and loss under torch.autocast(bfloat16).
           --attention sdpa: F.scaled_dot_product_attention (torch >= 2.0) instead of the
           eager masked softmax (a stronger baseline than the reference; default eager).
  predict  --batches P.bin [--state S.pt] [--threads N] [--json OUT] [--device cpu|cuda]
           Inference under torch.no_grad() over the exported prediction batches
           (probabilities and arg-max of every line); lines/s of the forward loop.
  measure  --out M.json -- CMD ARGS...
           Runs CMD; writes its wall time and peak RSS (resource.getrusage(RUSAGE_CHILDREN)
           .ru_maxrss; this helper is a fresh process, so that is CMD's own peak).
  chars    IN OUT [--text-only] [--limit N]
           TSV label<TAB>text (or one text per line with --text-only) -> fastText input:
           "__label__L c h a r s" (characters separated by spaces, whitespace dropped).
  score    --pred PRED --gold TSV [--json OUT]
           Accuracy and macro-F1 of fastText's predicted labels (__label__L per line).
  stats    --batches F.bin [--json OUT]
           Epochs, examples, batches and real tokens of the exported file.
  selfcheck [FIXTURE.json ...]
           This file's model, loss, schedule and AdamW against tests/fixtures/ref_*.json
           (float64): logits, loss, 10 updates. Exit status 1 when they differ.
  report   ...   (see report_main): the final table and JSON of bench-train / bench-predict.

Threads: torch.set_num_threads(N); run it with OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=2000,
the thread wait mha-train sets for itself (the scripts do).
numpy: needed by every subcommand but `train --max-steps N`, which also runs on a bare PyTorch
install (scripts/gpu-check runs it that way, with torch 2.x, on the GPU machine).
"""
import json
import math
import os
import resource
import statistics
import struct
import subprocess
import sys
import time

try:
    import numpy as np
except ImportError:   # only `train --max-steps` works without numpy (a bare PyTorch install)
    np = None


# ---------------------------------------------------------------------------------------
# The exported batches (layout: tests/bench/export_batches.c)

KIND_NAMES = {0: "train", 1: "dev", 2: "test", 3: "predict"}


class BatchFile:
    """Index of an export_batches file; batches are read from disk one at a time so that
    the whole file never sits in memory (it would inflate the peak RSS)."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            if f.read(8) != b"MHABATCH":
                sys.exit(f"bench_torch: {path}: not an export_batches file")
            h = struct.unpack("<16i", f.read(64))
            (self.version, self.vocab, self.classes, self.max_len, self.batch_size, self.epochs,
             self.pad, self.add_cls, self.padded, n_sections) = [int(x) for x in h[:10]]
            if self.version != 1:
                sys.exit(f"bench_torch: {path}: layout version {self.version}, expected 1")
            self.sections = []   # (kind, index, [(offset, B, T), ...], n_examples)
            pos = 8 + 16 * 4
            for _ in range(n_sections):
                f.seek(pos)
                kind, index, nb, nex = struct.unpack("<4i", f.read(16))
                pos += 16
                batches = []
                for _ in range(nb):
                    f.seek(pos)
                    B, T = struct.unpack("<2i", f.read(8))
                    batches.append((pos + 8, B, T))
                    pos += 8 + 4 * (B * T + 2 * B)
                self.sections.append((kind, index, batches, nex))
        with open(path + ".json") as f:
            self.config = json.load(f)

    def section(self, kind, index=0):
        for k, i, b, n in self.sections:
            if k == kind and (kind != 0 or i == index):
                return b, n
        return None, 0

    def read(self, f, entry):
        off, B, T = entry
        f.seek(off)
        a = np.fromfile(f, dtype="<i4", count=B * T + 2 * B)
        return a[:B * T].reshape(B, T), a[B * T:B * T + B], a[B * T + B:]

    def read_torch(self, f, entry, torch):
        """As read, as int32 CPU tensors (no numpy)."""
        off, B, T = entry
        f.seek(off)
        n = B * T + 2 * B
        buf = bytearray(f.read(4 * n))
        if len(buf) != 4 * n:
            sys.exit(f"bench_torch: {self.path}: truncated batch at byte {off}")
        if sys.byteorder != "little":
            sys.exit("bench_torch: read_torch assumes a little-endian machine (the file's order)")
        a = torch.frombuffer(buf, dtype=torch.int32)
        return a[:B * T].view(B, T), a[B * T:B * T + B], a[B * T + B:]

    def lengths(self, entries, f):
        for e in entries:
            yield self.read(f, e)[1]


# ---------------------------------------------------------------------------------------
# The model of docs/model.md

def build_model(torch, cfg, V, K, P, sdpa=False):
    """sdpa: attention through F.scaled_dot_product_attention (torch >= 2.0) instead of the
    eager masked softmax; same function, for the GPU benchmark only."""
    nn = torch.nn
    F = torch.nn.functional
    m = cfg["model"]
    C, NH, FF, L = m["d_model"], m["n_heads"], m["d_ff"], m["n_layers"]
    HS = C // NH
    drop, adrop = m["dropout"], m["attn_dropout"]
    gelu = m["activation"] == "gelu"
    pre = m["norm"] == "pre"
    causal = bool(m["causal"])
    pooling = m["pooling"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(C, 3 * C)     # rows [0,C) q, [C,2C) k, [2C,3C) v
            self.proj = nn.Linear(C, C)
            self.ln1 = nn.LayerNorm(C, eps=1e-5)
            self.fc1 = nn.Linear(C, FF)
            self.fc2 = nn.Linear(FF, C)
            self.ln2 = nn.LayerNorm(C, eps=1e-5)
            self.drop = nn.Dropout(drop)
            self.adrop = nn.Dropout(adrop)

        def attn(self, x, masked):
            B, T, _ = x.shape
            q, k, v = self.qkv(x).split(C, dim=2)
            q = q.view(B, T, NH, HS).transpose(1, 2)        # (B, NH, T, HS)
            k = k.view(B, T, NH, HS).transpose(1, 2)
            v = v.view(B, T, NH, HS).transpose(1, 2)
            if sdpa:   # boolean attn_mask: True takes part
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=~masked,
                                                   dropout_p=adrop if self.training else 0.0)
                return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
            scores = q @ k.transpose(-2, -1) / math.sqrt(HS)  # (B, NH, T, T)
            scores = scores.masked_fill(masked, float("-inf"))
            p = self.adrop(F.softmax(scores, dim=-1))
            # every example has >= 1 real token, so no query row is fully masked (no NaN)
            y = (p @ v).transpose(1, 2).contiguous().view(B, T, C)
            return self.proj(y)

        def ffn(self, x):
            h = self.fc1(x)
            return self.fc2(F.gelu(h) if gelu else F.relu(h))

        def forward(self, x, masked):
            if pre:
                x = x + self.drop(self.attn(self.ln1(x), masked))
                return x + self.drop(self.ffn(self.ln2(x)))
            x = self.ln1(x + self.drop(self.attn(x, masked)))
            return self.ln2(x + self.drop(self.ffn(x)))

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_emb = nn.Embedding(V, C)
            if m["position"] == "learned":
                self.pos_emb = nn.Embedding(P, C)
            else:
                t = torch.arange(P, dtype=torch.float64)[:, None]
                i = torch.arange(0, C, 2, dtype=torch.float64)
                freq = torch.pow(10000.0, -i / C)
                pe = torch.zeros(P, C, dtype=torch.float64)
                pe[:, 0::2] = torch.sin(t * freq)
                pe[:, 1::2] = torch.cos(t * freq)[:, :C // 2]
                self.register_buffer("pe", pe)   # float64; cast to the activations' type below
                self.pos_emb = None
            self.drop = nn.Dropout(drop)
            self.layers = nn.ModuleList([Block() for _ in range(L)])
            self.lnf = nn.LayerNorm(C, eps=1e-5) if pre else None
            self.head = nn.Linear(C, K)

        def forward(self, ids, lengths):
            B, T = ids.shape
            emb = self.tok_emb(ids)
            pos = self.pos_emb.weight[:T] if self.pos_emb is not None else self.pe[:T].to(emb.dtype)
            x = self.drop(emb + pos)
            valid = torch.arange(T, device=ids.device)[None, :] < lengths[:, None]  # (B, T)
            masked = ~valid[:, None, None, :]                                  # keys j >= len
            if causal:
                masked = masked | torch.ones(T, T, dtype=torch.bool, device=ids.device).triu(1)
            for blk in self.layers:
                x = blk(x, masked)
            if self.lnf is not None:
                x = self.lnf(x)
            if pooling == "mean":
                pooled = (x * valid[:, :, None]).sum(1) / lengths[:, None]
            elif pooling == "cls":
                pooled = x[:, 0]
            else:
                pooled = x.masked_fill(~valid[:, :, None], float("-inf")).max(1).values
            return self.head(pooled)

    return Classifier()


def param_groups(model, cfg):
    """AdamW groups: decay on linear weights (and embeddings / LayerNorm gains when configured;
    biases never), as mha (docs/model.md)."""
    t = cfg["train"]
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        linear_w = name.endswith(".weight") and any(s in name for s in ("qkv", "proj", "fc1", "fc2", "head"))
        emb = name.startswith(("tok_emb", "pos_emb"))
        norm = name.endswith(".weight") and any(s in name for s in ("ln1", "ln2", "lnf"))   # gains only
        if linear_w or (emb and t["decay_embeddings"]) or (norm and t["decay_norms"]):
            decay.append(p)
        else:
            no_decay.append(p)
    return [{"params": decay, "weight_decay": t["weight_decay"]},
            {"params": no_decay, "weight_decay": 0.0}]


def schedule_lr(t, u, total):
    """model/optimizer.c schedule_lr."""
    # lround: halves away from zero (Python's round() would round them to even)
    w = int(math.floor(t["warmup"] * total + 0.5)) if t["warmup"] < 1 else int(t["warmup"])
    if u < w:
        return t["lr"] * (u + 1) / w
    p = min(1.0, (u - w) / max(1, total - w))
    r = t["min_lr_ratio"]
    if t["decay"] == "linear":
        f = r + (1 - r) * (1 - p)
    elif t["decay"] == "cosine":
        f = r + (1 - r) * 0.5 * (1 + math.cos(math.pi * p))
    else:
        f = 1.0
    return t["lr"] * f


def update_step(torch, model, opt, params, micro, t, lr, autocast=None):
    """One update (docs/model.md): the micro-batches' summed cross-entropy divided by all
    their examples (= one big batch), clipping by global norm, AdamW at lr; an update with a
    non-finite loss or gradient norm is skipped. Returns (loss sum, examples, norm, stepped).
    autocast: None, or a function returning the context (torch.autocast) for forward + loss."""
    F = torch.nn.functional
    opt.zero_grad(set_to_none=True)
    examples = sum(int(b[0].shape[0]) for b in micro)
    loss_sum = 0.0
    for ids, lengths, labels in micro:
        if autocast is None:
            loss = F.cross_entropy(model(ids, lengths), labels, reduction="sum",
                                   label_smoothing=t["label_smoothing"])
        else:
            with autocast():
                loss = F.cross_entropy(model(ids, lengths), labels, reduction="sum",
                                       label_smoothing=t["label_smoothing"])
        (loss / examples).backward()
        loss_sum += float(loss)
    for g in opt.param_groups:
        g["lr"] = lr
    norm = float(torch.nn.utils.clip_grad_norm_(params, t["clip_norm"] if t["clip_norm"] > 0 else float("inf")))
    stepped = math.isfinite(loss_sum) and math.isfinite(norm)
    if stepped:
        opt.step()
    return loss_sum, examples, norm, stepped


def metrics_of(K, gold, pred, loss_sum=0.0):
    gold = np.asarray(gold)
    pred = np.asarray(pred)
    n = len(gold)
    acc = float((gold == pred).mean()) if n else 0.0
    f1s = []
    for k in range(K):
        tp = int(((gold == k) & (pred == k)).sum())
        s = int((gold == k).sum())
        pk = int((pred == k).sum())
        if s == 0 and pk == 0:
            continue
        p = tp / pk if pk else 0.0
        r = tp / s if s else 0.0
        f1s.append(2 * p * r / (p + r) if p + r > 0 else 0.0)
    return {"accuracy": acc, "macro_f1": float(np.mean(f1s)) if f1s else 0.0,
            "loss": loss_sum / n if n else 0.0, "n": n}


def to_device(torch, a, dev):
    """An int32 numpy array as an int64 tensor on dev (on the CPU exactly as before)."""
    if dev is None or dev.type == "cpu":
        return torch.from_numpy(a).long()
    return torch.from_numpy(a).to(dev).long()


def evaluate(torch, model, bf, f, entries, K, dev=None):
    F = torch.nn.functional
    model.eval()
    gold, pred, loss_sum = [], [], 0.0
    with torch.no_grad():
        for e in entries:
            ids, lengths, labels = bf.read(f, e)
            logits = model(to_device(torch, ids, dev), to_device(torch, lengths, dev))
            y = to_device(torch, labels, dev)
            loss_sum += float(F.cross_entropy(logits, y, reduction="sum"))
            gold.extend(labels.tolist())
            pred.extend(logits.argmax(1).tolist())
    model.train()
    return metrics_of(K, gold, pred, loss_sum)


def useful_flops(cfg, lengths_iter, K):
    """Forward matmul FLOPs on the real tokens only (linear layers 2*tokens*weights,
    attention 4*len^2*C per layer), the same for every layout of the same examples."""
    m = cfg["model"]
    C, FF, L = m["d_model"], m["d_ff"], m["n_layers"]
    per_token = 2 * L * (4 * C * C + 2 * C * FF)
    tok = sq = ex = 0
    for lens in lengths_iter:
        lens = lens.astype(np.int64)
        tok += int(lens.sum())
        sq += int((lens * lens).sum())
        ex += len(lens)
    return per_token * tok + 4 * L * C * sq + 2 * ex * C * K


def train_main(args):
    import torch
    a = parse_opts(args, {"--batches": None, "--threads": "2", "--state-out": "", "--json": "",
                          "--device": "cpu", "--max-steps": "0", "--warmup-steps": "10", "--amp": "none",
                          "--attention": "eager"})
    torch.set_num_threads(int(a["--threads"]))
    dev = open_device(torch, a["--device"])
    if a["--amp"] not in ("none", "bf16"):
        sys.exit(f"bench_torch: --amp {a['--amp']!r}: expected none or bf16")
    if a["--attention"] not in ("eager", "sdpa"):
        sys.exit(f"bench_torch: --attention {a['--attention']!r}: expected eager or sdpa")
    if a["--attention"] == "sdpa" and not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        sys.exit(f"bench_torch: --attention sdpa needs torch >= 2.0 (this is {torch.__version__})")
    max_steps = int(a["--max-steps"])
    if max_steps > 0:
        return train_steps(torch, a, dev, max_steps)
    if a["--amp"] != "none" or a["--attention"] != "eager":
        sys.exit("bench_torch: --amp and --attention are for the speed measurement (--max-steps N)")
    bf = BatchFile(a["--batches"])
    cfg = bf.config
    t = cfg["train"]
    torch.manual_seed(t["seed"])
    model = build_model(torch, cfg, bf.vocab, bf.classes, bf.max_len)
    if dev.type != "cpu":
        model = model.to(dev)
    opt = torch.optim.AdamW(param_groups(model, cfg), lr=t["lr"], betas=(t["beta1"], t["beta2"]),
                            eps=t["adam_eps"])
    params = [p for p in model.parameters()]
    ga = t["grad_accum"]
    epochs = bf.epochs
    per_epoch = [len(bf.section(0, e)[0]) for e in range(epochs)]
    total = sum((n + ga - 1) // ga for n in per_epoch)
    dev_entries, _ = bf.section(1)
    test, _ = bf.section(2)
    metric = t["metric"]
    best, best_state, best_epoch = None, None, -1
    update, real_tokens, skipped = 0, 0, 0
    train_s = eval_s = 0.0
    epoch_s, epoch_log = [], []
    f = open(bf.path, "rb")
    model.train()
    for e in range(epochs):
        entries, _ = bf.section(0, e)
        t0 = time.perf_counter()
        loss_epoch, ex_epoch = 0.0, 0
        i = 0
        while i < len(entries):
            micro = []
            for entry in entries[i:i + ga]:
                ids, lengths, labels = bf.read(f, entry)
                real_tokens += int(lengths.sum())
                micro.append((to_device(torch, ids, dev), to_device(torch, lengths, dev),
                              to_device(torch, labels, dev)))
            i += ga
            loss_sum, examples, _, stepped = update_step(torch, model, opt, params, micro, t,
                                                         schedule_lr(t, update, total))
            skipped += not stepped
            update += 1
            loss_epoch += loss_sum
            ex_epoch += examples
        t1 = time.perf_counter()
        train_s += t1 - t0
        rec = {"epoch": e + 1, "train_loss": loss_epoch / max(1, ex_epoch), "train_s": t1 - t0}
        if dev_entries:
            md = evaluate(torch, model, bf, f, dev_entries, bf.classes, dev)
            value = -md["loss"] if metric == "loss" else md[metric]
            if best is None or value > best:
                best, best_epoch = value, e + 1
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            rec.update({"dev_" + k: v for k, v in md.items()})
        t2 = time.perf_counter()
        eval_s += t2 - t1
        rec["epoch_s"] = t2 - t0
        epoch_s.append(t2 - t0)
        epoch_log.append(rec)
        print(f"torch epoch {e + 1}/{epochs}: train loss {rec['train_loss']:.4f}"
              + (f"  dev accuracy {rec['dev_accuracy']:.4f}  macro-F1 {rec['dev_macro_f1']:.4f}" if dev_entries else "")
              + f"  {rec['epoch_s']:.1f} s", file=sys.stderr, flush=True)
    if best_state is not None:
        model.load_state_dict(best_state)
    result = {
        "system": "pytorch", "torch": torch.__version__, "threads": torch.get_num_threads(),
        "batches": bf.path, "padded": bool(bf.padded), "epochs": epochs, "updates": update,
        "skipped_updates": skipped, "real_tokens": real_tokens,
        "train_s": train_s, "dev_eval_s": eval_s, "total_s": train_s + eval_s,
        "epoch_s": epoch_s, "epochs_log": epoch_log, "best_epoch": best_epoch,
        "tokens_per_s": real_tokens / (train_s + eval_s),
        "tokens_per_s_train_only": real_tokens / train_s,
        "useful_flops_per_epoch": useful_flops(cfg, bf.lengths(bf.section(0, 0)[0], f), bf.classes) * 3,
    }
    if test:
        result["test"] = evaluate(torch, model, bf, f, test, bf.classes, dev)
        print(f"torch test: accuracy {result['test']['accuracy']:.4f}  macro-F1 {result['test']['macro_f1']:.4f}",
              file=sys.stderr)
    f.close()
    result["peak_rss_kib_self"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if dev.type == "cuda":
        result.update(device_info(torch, dev))
    if a["--state-out"]:
        torch.save(model.state_dict(), a["--state-out"])
    write_json(a["--json"], result)


def open_device(torch, name):
    if name == "cpu":
        return torch.device("cpu")
    if name != "cuda" and not name.startswith("cuda:"):
        sys.exit(f"bench_torch: --device {name!r}: expected cpu or cuda")
    if not torch.cuda.is_available():
        sys.exit(f"bench_torch: --device {name}: torch {torch.__version__} sees no CUDA device")
    return torch.device(name)


def device_info(torch, dev):
    """The GPU, the float32 matmul mode and the allocator's peaks (bytes -> MiB)."""
    return {"device": torch.cuda.get_device_name(dev),
            "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
            "peak_device_mib": torch.cuda.max_memory_allocated(dev) / 2**20,
            "peak_device_reserved_mib": torch.cuda.max_memory_reserved(dev) / 2**20}


def train_steps(torch, a, dev, max_steps):
    """--max-steps N: the speed of N updates on the file's first batches (see the usage)."""
    bf = BatchFile(a["--batches"])
    cfg = bf.config
    t = cfg["train"]
    ga = t["grad_accum"]
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    # The updates' batches, in the exported order (epoch after epoch), read before the clock.
    per_epoch = [len(bf.section(0, e)[0]) for e in range(bf.epochs)]
    total = sum((n + ga - 1) // ga for n in per_epoch)
    updates = []   # [[(ids, lengths, labels) int32 CPU tensors, ...], ...]
    with open(bf.path, "rb") as f:
        for e in range(bf.epochs):
            entries, _ = bf.section(0, e)
            for i in range(0, len(entries), ga):
                if len(updates) == max_steps:
                    break
                updates.append([bf.read_torch(f, entry, torch) for entry in entries[i:i + ga]])
    if len(updates) < max_steps:
        print(f"bench_torch: {bf.path} holds {len(updates)} updates, fewer than --max-steps {max_steps}",
              file=sys.stderr)
    n = len(updates)
    warm = min(int(a["--warmup-steps"]), n // 2)
    torch.manual_seed(t["seed"])
    model = build_model(torch, cfg, bf.vocab, bf.classes, bf.max_len, sdpa=a["--attention"] == "sdpa").to(dev)
    opt = torch.optim.AdamW(param_groups(model, cfg), lr=t["lr"], betas=(t["beta1"], t["beta2"]),
                            eps=t["adam_eps"])
    params = list(model.parameters())
    autocast = None
    if a["--amp"] == "bf16":
        autocast = lambda: torch.autocast(device_type=dev.type, dtype=torch.bfloat16)
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    model.train()
    real = [sum(int(m[1].sum()) for m in micro) for micro in updates]
    padded = [sum(int(m[0].numel()) for m in micro) for micro in updates]
    ends, losses, skipped = [], [], 0
    sync()
    start = time.perf_counter()
    for u, micro in enumerate(updates):
        batch = [tuple(x.to(dev).long() for x in m) for m in micro]
        loss_sum, examples, _, stepped = update_step(torch, model, opt, params, batch, t,
                                                     schedule_lr(t, u, total), autocast)
        # update_step waited for the loss and the gradient norm; AdamW may still run, as in
        # mha-train (whose progress lines also read the clock right after launching it): wait
        # for it only at the start and the end of the timed updates
        if u == warm - 1 or u == n - 1:
            sync()
        ends.append(time.perf_counter())
        losses.append(loss_sum / examples)
        skipped += not stepped
    # timed: updates warm .. n-1 (the clock starts when update warm-1 has finished)
    t_begin = ends[warm - 1] if warm > 0 else start
    secs = ends[-1] - t_begin if n else 0.0
    real_timed, padded_timed = sum(real[warm:]), sum(padded[warm:])
    # mha-train's progress lines: real tokens/s over windows of 10 updates; the first left out
    windows = []
    for w in range(10, n - 9, 10):
        windows.append(sum(real[w:w + 10]) / (ends[w + 9] - ends[w - 1]))
    result = {
        "system": "pytorch", "torch": torch.__version__, "device_type": dev.type,
        "threads": torch.get_num_threads(), "batches": bf.path, "padded": bool(bf.padded),
        "batch_size": bf.batch_size, "grad_accum": ga, "amp": a["--amp"], "attention": a["--attention"],
        "updates": n, "warmup_updates": warm, "timed_updates": n - warm, "skipped_updates": skipped,
        "timed_s": secs, "real_tokens_timed": real_timed, "padded_tokens_timed": padded_timed,
        "tokens_per_s": real_timed / secs if secs > 0 else None,
        "padded_tokens_per_s": padded_timed / secs if secs > 0 else None,
        "ms_per_update": 1e3 * secs / (n - warm) if n - warm > 0 else None,
        "window_tokens_per_s": windows,
        "window_median_tokens_per_s": float(statistics.median(windows)) if windows else None,
        "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
        "peak_rss_kib_self": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }
    if cuda:
        result.update(device_info(torch, dev))
    else:
        result["peak_device_mib"] = None
    label = f"{dev.type} {'bf16 autocast' if a['--amp'] == 'bf16' else 'fp32'} {a['--attention']}"

    def num(v, spec):
        return "-" if v is None else format(v, spec)

    print(f"torch train ({label}): {n} updates, {n - warm} timed (after {warm} warm-up) in {secs:.3f} s: "
          f"{num(result['tokens_per_s'], '.0f')} real tokens/s, {num(result['padded_tokens_per_s'], '.0f')} "
          f"padded tokens/s, {num(result['ms_per_update'], '.2f')} ms/update, median of 10-update windows "
          f"{num(result['window_median_tokens_per_s'], '.0f')} real tokens/s; loss {num(result['first_loss'], '.4f')} "
          f"-> {num(result['last_loss'], '.4f')}; peak device memory "
          f"{num(result['peak_device_mib'], '.1f')} MiB (max_memory_allocated)", file=sys.stderr)
    print(f"TRAINBENCH system=pytorch device={dev.type} amp={a['--amp']} attention={a['--attention']} "
          f"updates={n} timed={n - warm} real_tok_s={num(result['tokens_per_s'], '.1f')} "
          f"padded_tok_s={num(result['padded_tokens_per_s'], '.1f')} "
          f"window_median_tok_s={num(result['window_median_tokens_per_s'], '.1f')} "
          f"ms_per_update={num(result['ms_per_update'], '.3f')} peak_mib={num(result['peak_device_mib'], '.1f')}",
          file=sys.stderr, flush=True)
    write_json(a["--json"], result)


def predict_main(args):
    import torch
    a = parse_opts(args, {"--batches": None, "--threads": "2", "--state": "", "--json": "", "--device": "cpu"})
    torch.set_num_threads(int(a["--threads"]))
    dev = open_device(torch, a["--device"])
    bf = BatchFile(a["--batches"])
    cfg = bf.config
    torch.manual_seed(cfg["train"]["seed"])
    model = build_model(torch, cfg, bf.vocab, bf.classes, bf.max_len)
    if a["--state"]:
        model.load_state_dict(torch.load(a["--state"], map_location="cpu"))
    if dev.type != "cpu":
        model = model.to(dev)
        torch.cuda.reset_peak_memory_stats(dev)
    model.eval()
    entries, n = bf.section(3)
    if entries is None:
        sys.exit(f"bench_torch: {bf.path}: no prediction section (export with --predict)")
    f = open(bf.path, "rb")
    lines = 0
    t0 = time.perf_counter()
    with torch.no_grad():
        for e in entries:
            ids, lengths, _ = bf.read(f, e)
            probs = torch.softmax(model(to_device(torch, ids, dev), to_device(torch, lengths, dev)), dim=1)
            top = probs.max(1)
            lines += len(top.values)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    secs = time.perf_counter() - t0
    f.close()
    result = {"system": "pytorch", "batches": bf.path, "padded": bool(bf.padded), "lines": lines,
              "batch_size": bf.batch_size, "threads": torch.get_num_threads(), "forward_s": secs,
              "lines_per_s": lines / secs,
              "peak_rss_kib_self": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}
    if dev.type == "cuda":
        result.update(device_info(torch, dev))
    print(f"torch predict: {lines} lines in {secs:.2f} s, {lines / secs:.0f} lines/s", file=sys.stderr)
    write_json(a["--json"], result)


# ---------------------------------------------------------------------------------------
# Helpers

def parse_opts(args, spec):
    out = dict(spec)
    i = 0
    while i < len(args):
        if args[i] not in spec or i + 1 >= len(args):
            sys.exit(f"bench_torch: unexpected argument {args[i]!r} (expected {' '.join(spec)})")
        out[args[i]] = args[i + 1]
        i += 2
    for k, v in out.items():
        if v is None:
            sys.exit(f"bench_torch: {k} is required")
    return out


def write_json(path, obj):
    s = json.dumps(obj, indent=1, ensure_ascii=False)
    if path:
        with open(path, "w") as f:
            f.write(s + "\n")
    else:
        print(s)


def measure_main(args):
    if "--" not in args:
        sys.exit("usage: bench_torch.py measure --out M.json -- CMD ARGS...")
    k = args.index("--")
    a = parse_opts(args[:k], {"--out": None})
    cmd = args[k + 1:]
    t0 = time.perf_counter()
    rc = subprocess.call(cmd)
    wall = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    write_json(a["--out"], {"cmd": cmd, "rc": rc, "wall_s": wall, "peak_rss_kib": ru.ru_maxrss,
                            "user_s": ru.ru_utime, "sys_s": ru.ru_stime})
    sys.exit(rc)


def chars_main(args):
    text_only = "--text-only" in args
    args = [x for x in args if x != "--text-only"]
    limit = -1
    if "--limit" in args:
        i = args.index("--limit")
        limit = int(args[i + 1])
        del args[i:i + 2]
    src, dst = args
    n = chars = 0
    with open(src, encoding="utf-8", errors="replace") as fi, open(dst, "w", encoding="utf-8") as fo:
        for line in fi:
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                continue
            if text_only:
                label, text = None, line
            else:
                label, _, text = line.partition("\t")
            toks = [c for c in text if not c.isspace()]
            chars += len(toks)
            fo.write((f"__label__{label} " if label is not None else "") + " ".join(toks) + "\n")
            n += 1
            if n == limit:
                break
    print(json.dumps({"lines": n, "tokens": chars}))


def selfcheck_main(args):
    """The model, loss, schedule and optimizer of this file against tests/fixtures/ref_*.json
    (scripts/make-reference.py, float64): logits, loss and 10 AdamW updates."""
    import glob
    import torch
    torch.set_num_threads(1)
    paths = args or sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                  "tests", "fixtures", "ref_*.json")))
    worst = 0.0
    for path in paths:
        with open(path) as f:
            fx = json.load(f)
        c, tr = fx["config"], fx["train"]
        cfg = {"model": {"d_model": c["C"], "n_heads": c["NH"], "d_ff": c["F"], "n_layers": c["L"],
                         "dropout": 0.0, "attn_dropout": 0.0, "activation": c["activation"], "norm": c["norm"],
                         "pooling": c["pooling"], "position": c["position"], "causal": c["causal"]},
               "train": {"lr": tr["lr"], "warmup": tr["warmup"], "decay": tr["decay"],
                         "min_lr_ratio": tr["min_lr_ratio"], "clip_norm": tr["clip_norm"],
                         "weight_decay": tr["weight_decay"], "beta1": tr["beta1"], "beta2": tr["beta2"],
                         "adam_eps": tr["eps"], "label_smoothing": c["label_smoothing"],
                         "decay_embeddings": 0, "decay_norms": 0}}
        model = build_model(torch, cfg, c["V"], c["K"], c["P"]).double()
        state = model.state_dict()
        for prm in fx["params"]:
            if prm["name"] in ("tok_emb", "pos_emb"):
                key = prm["name"] + ".weight"
            else:
                stem, _, wb = prm["name"].rpartition("_")
                key = stem + (".weight" if wb == "w" else ".bias")
            state[key].copy_(torch.tensor(prm["data"], dtype=torch.float64).view(prm["shape"]))
        ids = torch.tensor(fx["inputs"]["ids"]).view(c["B"], c["T"])
        lengths = torch.tensor(fx["inputs"]["lengths"])
        labels = torch.tensor(fx["inputs"]["labels"])
        model.train()
        logits = model(ids, lengths)
        d_logits = float((logits.detach().flatten() - torch.tensor(fx["logits"], dtype=torch.float64)).abs().max())
        t = cfg["train"]
        opt = torch.optim.AdamW(param_groups(model, cfg), lr=t["lr"], betas=(t["beta1"], t["beta2"]),
                                eps=t["adam_eps"])
        params = list(model.parameters())
        losses = []
        for u in range(tr["total"]):
            loss_sum, n, _, _ = update_step(torch, model, opt, params, [(ids, lengths, labels)], t,
                                            schedule_lr(t, u, tr["total"]))
            losses.append(loss_sum / n)
        d_loss = abs(losses[0] - fx["loss"])
        d_train = max(abs(a - b) for a, b in zip(losses, tr["losses"]))
        d_sum = abs(float(sum(p.detach().sum() for p in params)) - tr["final_params_checksum"])
        worst = max(worst, d_logits, d_loss, d_train, d_sum)
        print(f"{os.path.basename(path)}: logits {d_logits:.1e}  loss {d_loss:.1e}  "
              f"10 updates: losses {d_train:.1e}  params checksum {d_sum:.1e}")
    ok = worst < 1e-8
    print(f"selfcheck: largest difference {worst:.1e} ({'ok' if ok else 'FAILED'}, tolerance 1e-8)")
    sys.exit(0 if ok else 1)


def stats_main(args):
    a = parse_opts(args, {"--batches": None, "--json": ""})
    bf = BatchFile(a["--batches"])
    out = {"batches": bf.path, "padded": bool(bf.padded), "epochs": bf.epochs, "batch_size": bf.batch_size,
           "max_len": bf.max_len, "vocab": bf.vocab, "classes": bf.classes}
    with open(bf.path, "rb") as f:
        for kind, index, entries, n in bf.sections:
            if kind == 0 and index > 0:
                continue
            name = KIND_NAMES[kind]
            tok = sum(int(l.sum()) for l in bf.lengths(entries, f))
            pos = sum(B * T for _, B, T in entries)
            out[name] = {"examples": n, "batches": len(entries), "real_tokens": tok, "positions": pos,
                         "padding": 1 - tok / pos if pos else 0.0}
    if "train" in out:
        out["real_tokens_per_epoch"] = out["train"]["real_tokens"]
    write_json(a["--json"], out)


def score_main(args):
    a = parse_opts(args, {"--pred": None, "--gold": None, "--json": ""})
    gold_names = []
    with open(a["--gold"], encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n").rstrip("\r")
            if line.strip():
                gold_names.append(line.partition("\t")[0])
    with open(a["--pred"], encoding="utf-8") as f:
        pred_names = [l.strip().split(" ")[0].replace("__label__", "", 1) for l in f]
    if len(pred_names) != len(gold_names):
        sys.exit(f"bench_torch: {len(pred_names)} predictions for {len(gold_names)} gold labels")
    names = sorted(set(gold_names) | set(pred_names))
    idx = {n: i for i, n in enumerate(names)}
    m = metrics_of(len(names), [idx[g] for g in gold_names], [idx[p] for p in pred_names])
    del m["loss"]   # fastText predict gives labels only
    write_json(a["--json"], m)


# ---------------------------------------------------------------------------------------
# Reports

def load(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def fmt(v, spec):
    return "—" if v is None else format(v, spec)


def ratio(a, b):
    return f"{a / b:.2f}×" if a and b else "—"


def mha_train_result(d):
    """mha-train's numbers from its log, metrics.jsonl and the measure wrapper."""
    r = {"system": "mha"}
    m = load(os.path.join(d, "measure.json"), {})
    r["wall_s"] = m.get("wall_s")
    r["peak_rss_kib"] = m.get("peak_rss_kib")
    r["rc"] = m.get("rc")
    try:
        with open(os.path.join(d, "train.log"), encoding="utf-8", errors="replace") as f:
            log = f.read().splitlines()
    except OSError:
        log = []
    tps = []
    for line in log:
        if line.startswith("training done:"):
            parts = line.split()
            r["updates"] = int(parts[2])
            r["total_s"] = float(parts[5])
        if line.startswith("step ") and " tok/s " in line:
            tps.append(float(line.split(" tok/s ")[1].split()[0]))
    if tps:
        r["progress_tok_s_median"] = float(np.median(tps))
    try:
        with open(os.path.join(d, "out", "metrics.jsonl")) as f:
            for line in f:
                rec = json.loads(line)
                if rec.get("type") == "test":
                    r["test"] = {k: rec[k] for k in ("accuracy", "macro_f1", "loss")}
    except OSError:
        pass
    return r


def report_main(args):
    """report train|predict --work DIR --datasets a,b --out-json F --out-md F [--threads N]
    [--meta k=v ...]: the final table (markdown) and JSON from the results under DIR/<dataset>/."""
    mode = args[0]
    a = {"--work": None, "--datasets": None, "--out-json": None, "--out-md": None, "--threads": "2"}
    meta = {}
    i = 1
    while i < len(args):
        if args[i] == "--meta":
            k, _, v = args[i + 1].partition("=")
            meta[k] = v
        elif args[i] in a:
            a[args[i]] = args[i + 1]
        else:
            sys.exit(f"bench_torch: report: unexpected {args[i]!r}")
        i += 2
    out = {"meta": meta, "datasets": {}}
    md = []
    if mode == "train":
        md.append("| dataset | system | train tok/s (real) | s/epoch | peak RSS MiB | test accuracy | "
                  "predict lines/s | mha fp32 ÷ row (train tok/s, predict lines/s) | "
                  "mha bf16 ÷ row (train tok/s, predict lines/s) | mha int8 ÷ row (predict lines/s) |")
        md.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    else:
        md.append("| dataset | system | lines/s | timed s | peak RSS MiB | mha fp32 ÷ row (lines/s) | "
                  "mha bf16 ÷ row (lines/s) | mha int8 ÷ row (lines/s) |")
        md.append("|---|---|---:|---:|---:|---:|---:|---:|")
    for ds in a["--datasets"].split(","):
        w = os.path.join(a["--work"], ds)
        rows = []
        pred = {
            "mha": load(os.path.join(w, "pred", "mha.measure.json")),
            "mha_bf16": load(os.path.join(w, "pred", "mha_bf16.measure.json")),
            "mha_int8": load(os.path.join(w, "pred", "mha_int8.measure.json")),
            "torch_same": load(os.path.join(w, "pred", "torch_same.json")),
            "torch_articles": load(os.path.join(w, "pred", "torch_articles.json")),
            "fasttext": load(os.path.join(w, "pred", "fasttext.measure.json")),
        }
        pinfo = load(os.path.join(w, "pred", "info.json"), {})
        nlines = pinfo.get("lines")

        def pred_lps(key):
            p = pred[key]
            if not p:
                return None
            if "lines_per_s" in p:
                return p["lines_per_s"]
            return nlines / p["wall_s"] if nlines and p.get("wall_s") and p.get("rc") == 0 else None

        if mode == "train":
            info = load(os.path.join(w, "info.json"), {})
            tokens = info.get("real_tokens_per_epoch")
            epochs = info.get("epochs")
            mha = mha_train_result(os.path.join(w, "mha"))
            mhb = mha_train_result(os.path.join(w, "mha_bf16"))
            for m in (mha, mhb):
                if m.get("total_s") and tokens:
                    m["tokens_per_s"] = tokens * epochs / m["total_s"]
                    m["epoch_s"] = m["total_s"] / epochs
            ts = load(os.path.join(w, "torch_same", "result.json"), {})
            ts.update({"wall_s": load(os.path.join(w, "torch_same", "measure.json"), {}).get("wall_s"),
                       "peak_rss_kib": load(os.path.join(w, "torch_same", "measure.json"), {}).get("peak_rss_kib")})
            ta = load(os.path.join(w, "torch_articles", "result.json"), {})
            ta.update({"wall_s": load(os.path.join(w, "torch_articles", "measure.json"), {}).get("wall_s"),
                       "peak_rss_kib": load(os.path.join(w, "torch_articles", "measure.json"), {}).get("peak_rss_kib")})
            for t in (ts, ta):
                if t.get("epoch_s"):
                    t["epoch_s_mean"] = float(np.mean(t["epoch_s"]))
            ftm = load(os.path.join(w, "fasttext", "measure.json"), {})
            fti = load(os.path.join(w, "fasttext", "info.json"), {})
            ft = {"system": "fasttext", "wall_s": ftm.get("wall_s"), "peak_rss_kib": ftm.get("peak_rss_kib"),
                  "rc": ftm.get("rc"), "test": load(os.path.join(w, "fasttext", "test_scores.json")),
                  "epochs": fti.get("epochs"), "tokens_per_epoch": fti.get("tokens")}
            if ft["wall_s"] and fti.get("tokens") and ft["rc"] == 0:
                ft["tokens_per_s"] = fti["tokens"] * fti["epochs"] / ft["wall_s"]
                ft["epoch_s"] = ft["wall_s"] / fti["epochs"]
            # int8 inference of the fp32 model (same weights as the mha fp32 row): no training
            # columns; its test accuracy from mha-predict --eval --precision int8
            mhi = {"system": "mha int8 inference", "test": load(os.path.join(w, "pred", "mha_int8_eval.json"))}
            flops = ts.get("useful_flops_per_epoch")
            systems = [("mha fp32", mha, mha.get("tokens_per_s"), mha.get("epoch_s"), "mha"),
                       ("mha bf16 (train.precision=bf16)", mhb, mhb.get("tokens_per_s"), mhb.get("epoch_s"), "mha_bf16"),
                       ("mha int8 inference (mha-predict --precision int8 on the fp32 model)", mhi, None, None,
                        "mha_int8"),
                       ("PyTorch eager (same batches)", ts, ts.get("tokens_per_s"), ts.get("epoch_s_mean"), "torch_same"),
                       ("PyTorch eager (articles' style: random batches padded to max_len)", ta,
                        ta.get("tokens_per_s"), ta.get("epoch_s_mean"), "torch_articles"),
                       ("fastText (chars, -wordNgrams 2, 25 epochs)", ft, ft.get("tokens_per_s"), ft.get("epoch_s"),
                        "fasttext")]
            mha_tps, mha_lps = mha.get("tokens_per_s"), pred_lps("mha")
            mhb_tps, mhb_lps = mhb.get("tokens_per_s"), pred_lps("mha_bf16")
            mhi_lps = pred_lps("mha_int8")
            for name, r, tps, eps, key in systems:
                lps = pred_lps(key)
                acc = (r.get("test") or {}).get("accuracy")
                rss = r.get("peak_rss_kib")
                if flops and tps and key != "fasttext" and tokens:
                    r["useful_gflops_per_s"] = flops * epochs / (tokens * epochs / tps) / 1e9
                r["predict"] = pred[key]
                r["predict_lines_per_s"] = lps
                rows.append(r)
                md.append(f"| {ds} | {name} | {fmt(tps, ',.0f')} | {fmt(eps, '.1f')} | "
                          f"{fmt(rss / 1024 if rss else None, '.0f')} | {fmt(acc, '.4f')} | {fmt(lps, ',.0f')} | "
                          f"{ratio(mha_tps, tps)}, {ratio(mha_lps, lps)} | "
                          f"{ratio(mhb_tps, tps)}, {ratio(mhb_lps, lps)} | {ratio(mhi_lps, lps)} |")
            out["datasets"][ds] = {"info": info, "predict_info": pinfo,
                                   "systems": {k: r for (_, r, _, _, k) in systems}}
        else:
            names = [("mha", "mha-predict --precision fp32 (end to end: read, tokenize, forward, write)"),
                     ("mha_bf16", "mha-predict --precision bf16 (end to end)"),
                     ("mha_int8", "mha-predict --precision int8 (end to end)"),
                     ("torch_same", "PyTorch eager no_grad (sorted batches of 64 texts, forward only)"),
                     ("torch_articles", "PyTorch eager no_grad (padded to max_len, forward only)"),
                     ("fasttext", "fasttext predict (end to end, 1 thread)")]
            mha_lps, mhb_lps, mhi_lps = pred_lps("mha"), pred_lps("mha_bf16"), pred_lps("mha_int8")
            for key, name in names:
                p = pred[key] or {}
                lps = pred_lps(key)
                wall = p.get("forward_s", p.get("wall_s"))
                rss = p.get("peak_rss_kib")
                md.append(f"| {ds} | {name} | {fmt(lps, ',.0f')} | {fmt(wall, '.2f')} | "
                          f"{fmt(rss / 1024 if rss else None, '.0f')} | {ratio(mha_lps, lps)} | "
                          f"{ratio(mhb_lps, lps)} | {ratio(mhi_lps, lps)} |")
                p["lines_per_s"] = lps
            out["datasets"][ds] = {"predict_info": pinfo, "systems": pred}
    text = "\n".join(md) + "\n"
    with open(a["--out-md"], "w", encoding="utf-8") as f:
        f.write(text)
    write_json(a["--out-json"], out)
    print(text, end="")


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return
    cmd, args = sys.argv[1], sys.argv[2:]
    if np is None and not (cmd == "train" and "--max-steps" in args):
        sys.exit(f"bench_torch: {cmd} needs numpy, which this python3 ({sys.executable}) lacks "
                 "(only `train --max-steps N` works without it)")
    {"train": train_main, "predict": predict_main, "measure": measure_main, "chars": chars_main,
     "score": score_main, "stats": stats_main, "selfcheck": selfcheck_main, "report": report_main}.get(cmd, lambda _: sys.exit(f"bench_torch: unknown {cmd!r}"))(args)


if __name__ == "__main__":
    main()
