"""The PyTorch peer of Ringmaster's CPU trainer benchmark: the same GPT-2-style model (pre-LN
blocks, causal multi-head attention, tanh-GELU MLP, tied LM head, fp32), the same batch and the
same optimizer (AdamW + global-norm clipping), trained with DistributedDataParallel over gloo.

Run by bench/trainer_vs_pytorch under torchrun (Debian's python3-torch, /usr/bin/python3):
  torchrun --nproc_per_node=2 --redirects=1 --tee=1 bench/pytorch_gpt.py --layers 4 ...
Prints one line: "pytorch tokens/s N step_ms M" (tokens of the whole job per second, median step
after warm-up). The data is random tokens: the compute does not depend on their values.
"""
import argparse
import math
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fcproj = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.proj(y)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, layers, d, heads, seq_len, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq_len, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(d)

    def forward(self, idx, targets):
        t = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for block in self.blocks:
            x = block(x)
        logits = self.lnf(x) @ self.wte.weight.t()  # tied LM head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    p = argparse.ArgumentParser()
    for name in ("layers", "d_model", "heads", "seq_len", "vocab", "micro_batch", "steps"):
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    torch.manual_seed(0)
    padded = (args.vocab + 127) // 128 * 128
    model = nn.parallel.DistributedDataParallel(
        Gpt(args.layers, args.d_model, args.heads, args.seq_len, padded))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    g = torch.Generator().manual_seed(dist.get_rank())
    idx = torch.randint(0, args.vocab, (args.micro_batch, args.seq_len), generator=g)
    tgt = torch.randint(0, args.vocab, (args.micro_batch, args.seq_len), generator=g)
    times = []
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        loss = model(idx, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    median = statistics.median(times)
    tokens = args.micro_batch * args.seq_len * dist.get_world_size()
    if dist.get_rank() == 0:
        print(f"pytorch tokens/s {tokens / median:.0f} step_ms {median * 1e3:.1f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
