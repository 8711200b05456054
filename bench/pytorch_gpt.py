"""The PyTorch peer of Ringmaster's CPU trainer benchmark: the same GPT-2-style model (pre-LN
blocks, causal multi-head attention, tanh-GELU MLP, tied LM head, fp32), the same batch and the
same optimizer (AdamW + global-norm clipping), trained with DistributedDataParallel over gloo.

Run by bench/trainer_vs_pytorch under torchrun (Debian's python3-torch, /usr/bin/python3):
  torchrun --nproc_per_node=2 --redirects=1 --tee=1 bench/pytorch_gpt.py --layers 4 ...
Prints one line: "pytorch tokens/s N step_ms M" (tokens of the whole job per second, median step
after warm-up). The data is random tokens: the compute does not depend on their values.

On a GPU (bench/gpu_bench's `torch` step), one process, no torchrun:
  python3 bench/pytorch_gpt.py --device cuda --layers 12 ... [--compile]
it trains as a PyTorch user would on one GPU: fp32 parameters under bf16 autocast, fused
scaled-dot-product (flash) attention, fused AdamW, and torch.compile with --compile. The line
then also has the peak memory PyTorch allocated.
"""
import argparse
import contextlib
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
        if x.is_cuda:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(t, t, dtype=torch.bool).tril()
            att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(b, t, c)
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
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.lnf(x) @ self.wte.weight.t()  # tied LM head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    p = argparse.ArgumentParser()
    for name in ("layers", "d_model", "heads", "seq_len", "vocab", "micro_batch", "steps"):
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--peak_tflops", type=float, default=0,
                   help="the device's peak for MFU (llm.c's 6N + 6LCT FLOPs per token); 0: none")
    args = p.parse_args()
    cuda = args.device == "cuda"
    distributed = "RANK" in os.environ  # under torchrun
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    torch.manual_seed(0)
    padded = (args.vocab + 127) // 128 * 128
    model = Gpt(args.layers, args.d_model, args.heads, args.seq_len, padded).to(args.device)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    if args.compile:
        model = torch.compile(model)
    fused = {"fused": True} if cuda else {}  # (PyTorch 1.13's AdamW has no `fused`)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            **fused)
    g = torch.Generator().manual_seed(rank)
    idx = torch.randint(0, args.vocab, (args.micro_batch, args.seq_len), generator=g)
    tgt = torch.randint(0, args.vocab, (args.micro_batch, args.seq_len), generator=g)
    idx, tgt = idx.to(args.device), tgt.to(args.device)
    times = []
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16) if cuda else contextlib.nullcontext():
            loss = model(idx, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    median = statistics.median(times)
    tokens = args.micro_batch * args.seq_len * world
    if rank == 0:
        extra = f" peak_mib {torch.cuda.max_memory_allocated() / 2**20:.0f}" if cuda else ""
        if args.peak_tflops > 0:
            n = sum(p.numel() for p in model.parameters())  # vocabulary padded, as llm.c's N
            per_token = 6 * n + 6 * args.layers * args.d_model * args.seq_len
            extra += f" mfu {tokens / median * per_token / (args.peak_tflops * 1e12):.3f}"
        print(f"pytorch tokens/s {tokens / median:.0f} step_ms {median * 1e3:.1f}{extra}",
              flush=True)
    if distributed:
        dist.destroy_process_group()

if __name__ == "__main__":
    main()
