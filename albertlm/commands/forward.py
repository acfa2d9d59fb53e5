"""``albertlm forward``: build a preset (or load a model directory) and run one forward pass.

    albertlm forward --preset albert-base-v2 --batch-size 8 --seq-len 128
    albertlm forward --model runs/pretrain/final --seq-len 64
"""

from __future__ import annotations

import argparse
import time

from albertlm.commands import flags


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("forward", help="one forward pass of a preset or model directory on random tokens")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", default="albert-base-v2", help="preset name (see `albertlm params`)")
    src.add_argument("--model", help="a model directory in the HF layout (config.json + weights)")
    p.add_argument("--batch-size", type=flags.count, default=2, help="sequences per batch")
    p.add_argument("--seq-len", type=flags.count, default=128, help="tokens per sequence")
    p.add_argument("--seed", type=flags.seed, default=0, help="seed for the weights and the tokens")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from albertlm import AlbertConfig, AlbertModel
    from albertlm.errors import UserError

    torch.manual_seed(args.seed)
    if args.model:
        model = AlbertModel.from_pretrained(args.model)
    else:
        model = AlbertModel(AlbertConfig.from_preset(args.preset))
    c = model.config
    if not 1 <= args.seq_len <= c.max_position_embeddings:
        raise UserError(f"--seq-len {args.seq_len} must be in [1, {c.max_position_embeddings}]")
    if args.batch_size < 1:
        raise UserError(f"--batch-size must be >= 1, got {args.batch_size}")
    ids = torch.randint(5, c.vocab_size, (args.batch_size, args.seq_len))
    model.eval()
    with torch.inference_mode():
        start = time.perf_counter()
        out = model(ids)
        seconds = time.perf_counter() - start
    tokens = ids.numel()
    print(f"model: {args.model or args.preset}  parameters: {model.num_parameters():,}  "
          f"L={c.num_hidden_layers} G={c.num_hidden_groups} K={c.inner_group_num} E={c.embedding_size} "
          f"H={c.hidden_size} sharing={c.sharing}")
    print(f"input {tuple(ids.shape)} -> last_hidden_state {tuple(out.last_hidden_state.shape)}, "
          f"pooler_output {tuple(out.pooler_output.shape)}")
    print(f"forward: {seconds * 1000:.1f} ms, {tokens / seconds:,.0f} tokens/s "
          f"(fp32, {torch.get_num_threads()} threads)")
    return 0
