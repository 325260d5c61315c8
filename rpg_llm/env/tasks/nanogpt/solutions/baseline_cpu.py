"""nanogpt-cpu baseline: a 3-layer byte-level GPT trained with AdamW under torchrun (gloo).

Contract of the task: import the guarded ``ngpt_data`` (data) and ``ngpt_eval`` (evaluation)
modules from ./input, call ``ngpt_eval.log_val`` at step 0, every ``ngpt_eval.VAL_EVERY`` steps
and at the last step, and end with ``ngpt_eval.save_model(model)``.
"""

import math
import time

import ngpt_data
import ngpt_eval
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

SEED = 0
N_LAYER = 3
N_HEAD = 4
D_MODEL = 128
BATCH = 16
SEQ = ngpt_data.SEQ_LEN
NUM_STEPS = 250
WARMUP = 25
LR = 3e-3


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        V = ngpt_data.VOCAB_SIZE
        self.tok = nn.Embedding(V, D_MODEL)
        self.pos = nn.Embedding(SEQ, D_MODEL)
        self.blocks = nn.ModuleList(Block(D_MODEL, N_HEAD) for _ in range(N_LAYER))
        self.ln = nn.LayerNorm(D_MODEL)
        self.head = nn.Linear(D_MODEL, V, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.size(1)))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(SEED)
    model = GPT()
    ddp = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.1)
    loader = ngpt_data.TrainLoader(BATCH, SEQ, rank, world, seed=SEED)
    train_time = 0.0
    for step in range(NUM_STEPS + 1):
        last = step == NUM_STEPS
        if last or step % ngpt_eval.VAL_EVERY == 0:
            ngpt_eval.log_val(step, NUM_STEPS, model, train_time)
        if last:
            break
        t0 = time.perf_counter()
        frac = step / NUM_STEPS
        lr = LR * min(1.0, (step + 1) / WARMUP) * 0.5 * (1 + math.cos(math.pi * frac))
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = loader.next()
        loss = F.cross_entropy(ddp(x).view(-1, ngpt_data.VOCAB_SIZE), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        train_time += time.perf_counter() - t0
    ngpt_eval.save_model(model)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
