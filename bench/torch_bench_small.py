#!/usr/bin/python3
"""bench-small in PyTorch: the same model, shapes, optimizer and random tokens
as bench/bench_small.cc, fp32, eager mode (Debian's python3-torch).

Llama-style: vocab 8192, d_model 512, 8 layers, 8 query / 4 KV heads of 64,
RMSNorm (eps 1e-5), RoPE (theta 1e4, rotate_half), SwiGLU 1408, untied head,
init std 0.02; sequence 256, micro-batch 8, every position supervised, loss
= mean cross-entropy; AdamW lr 3e-4, betas 0.9/0.95, eps 1e-8, weight decay
0.1, gradient clipping at norm 1.0. Prints the median step time, tokens/s
and tokens per core-second of CPU time (what other processes on the cores
do not dilute).

--model gpt2-124m runs GPT-2 124M instead (vocab 50257, d_model 768, 12
layers, 12 heads of 64, LayerNorm, tanh GELU 3072, learned positions,
biases, tied head; micro-batch 4, sequence 256), written the usual PyTorch
way (one fused q/k/v projection). The last line is the peak resident memory.

    python3 bench/torch_bench_small.py --threads 2 --steps 5 [--model gpt2-124m]
"""
import argparse
import resource
import statistics
import time

import torch
import torch.nn.functional as F

VOCAB, D, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN = 8192, 512, 8, 8, 4, 64, 1408
SEQ, ROWS = 256, 8


class RMSNorm(torch.nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(D), RMSNorm(D)
        self.wq = torch.nn.Linear(D, HEADS * HEAD_DIM, bias=False)
        self.wk = torch.nn.Linear(D, KV_HEADS * HEAD_DIM, bias=False)
        self.wv = torch.nn.Linear(D, KV_HEADS * HEAD_DIM, bias=False)
        self.wo = torch.nn.Linear(HEADS * HEAD_DIM, D, bias=False)
        self.gate = torch.nn.Linear(D, FFN, bias=False)
        self.up = torch.nn.Linear(D, FFN, bias=False)
        self.down = torch.nn.Linear(FFN, D, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(b, t, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.wk(h).view(b, t, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.wv(h).view(b, t, KV_HEADS, HEAD_DIM).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)  # grouped-query attention
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
        scores = (q @ k.transpose(-2, -1)) * HEAD_DIM ** -0.5 + mask
        y = torch.softmax(scores, dim=-1) @ v
        x = x + self.wo(y.transpose(1, 2).reshape(b, t, HEADS * HEAD_DIM))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, D)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = RMSNorm(D)
        self.head = torch.nn.Linear(D, VOCAB, bias=False)
        for p in self.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, std=0.02)
        inv_freq = 10000.0 ** (-torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM)
        angles = torch.arange(SEQ, dtype=torch.float64)[:, None] * inv_freq[None, :]
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos().float())
        self.register_buffer("sin", angles.sin().float())
        self.register_buffer("mask", torch.full((SEQ, SEQ), float("-inf")).triu(1))

    def forward(self, tokens):
        x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x, self.cos, self.sin, self.mask)
        return self.head(self.norm(x))


class Gpt2Block(torch.nn.Module):
    D, HEADS, FFN = 768, 12, 3072

    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(self.D), torch.nn.LayerNorm(self.D)
        self.qkv = torch.nn.Linear(self.D, 3 * self.D)
        self.proj = torch.nn.Linear(self.D, self.D)
        self.fc_in = torch.nn.Linear(self.D, self.FFN)
        self.fc_out = torch.nn.Linear(self.FFN, self.D)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.HEADS, d // self.HEADS).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (d // self.HEADS) ** -0.5 + mask
        y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc_out(F.gelu(self.fc_in(self.ln2(x)), approximate="tanh"))


class Gpt2(torch.nn.Module):
    VOCAB, LAYERS, POSITIONS, ROWS = 50257, 12, 1024, 4

    def __init__(self):
        super().__init__()
        d = Gpt2Block.D
        self.embed = torch.nn.Embedding(self.VOCAB, d)
        self.positions = torch.nn.Embedding(self.POSITIONS, d)
        self.blocks = torch.nn.ModuleList(Gpt2Block() for _ in range(self.LAYERS))
        self.norm = torch.nn.LayerNorm(d)
        for p in self.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, std=0.02)
        self.register_buffer("mask", torch.full((SEQ, SEQ), float("-inf")).triu(1))

    def forward(self, tokens):
        x = self.embed(tokens) + self.positions(torch.arange(tokens.shape[1]))
        for blk in self.blocks:
            x = blk(x, self.mask)
        return F.linear(self.norm(x), self.embed.weight)  # the tied head


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--model", choices=("bench-small", "gpt2-124m"), default="bench-small")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(42)
    model = Gpt2() if args.model == "gpt2-124m" else Model()
    vocab, rows = (Gpt2.VOCAB, Gpt2.ROWS) if args.model == "gpt2-124m" else (VOCAB, ROWS)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    tokens = torch.randint(0, vocab, (rows, SEQ))
    targets = torch.randint(0, vocab, (rows, SEQ))
    times, cpu_times = [], []
    for step in range(args.steps + 2):
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        logits = model(tokens)
        loss = F.cross_entropy(logits.view(-1, vocab), targets.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step >= 2:
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)  # every thread of the process, as bench_small
    t, cpu = statistics.median(times), statistics.median(cpu_times)
    print(f"pytorch {torch.__version__} threads {args.threads}: median step {t * 1e3:.1f} ms over {args.steps} "
          f"steps | {rows * SEQ / t:.0f} tokens/s | {rows * SEQ / cpu:.0f} tokens per core-second | "
          f"loss {loss.item():.3f}")
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident memory of the process after its training steps: {rss_mib:.1f} MiB")


if __name__ == "__main__":
    main()
