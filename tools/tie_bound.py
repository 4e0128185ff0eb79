"""The near-tie bound of `greedy_identical_up_to_ties` (issue 41, item 2): how far the verifier's multi-token
forward moves its logits from its one-token forward, measured.

In bfloat16 a forward over W new tokens rounds differently from W one-token forwards, so the top-2 order of
the verifier's logits can flip where the two are close. For every position of the verifier's own texts (the
regenerated conversations of `specdiff distill data`, none of the bench's prompts) this tool computes the logits
twice on a KV cache: one token at a time (plain decoding, HF's greedy `generate`), and in chunks of W tokens
(speculative verification of a chain of W - 1 drafts), for each W of --chunks. Per position it records
- delta_logit: the largest |difference| of any logit between the two;
- delta_gap: |change| of the one-token forward's top-1 minus top-2 logit gap, measured in the chunked forward.
The bound is the largest delta_gap over every position and chunk size: at a first difference from HF greedy, a
specdiff token that is HF's second choice with a top-2 gap at most the bound is a near-tie, not an error.

    python tools/tie_bound.py --dtype bfloat16 --positions 10000 --out docs/results/precision/tie_bound_bfloat16.json

Compiled (`--compile`, issue 53): the same two measurements on the compiled verifier's graphs
(`specdiff.engine.compiled.CompiledVerifier`): the chunk-1 graph (compiled plain decoding) against the chunk-W graph
(compiled verification), which round differently as eager's forwards do. Without distillation data (`--data`) the
sequences are the validation prompts (`--prompts`, never the bench's test prompts) and the chunk-1 graph's own greedy
continuation of each (`--length` new tokens, every one measured):

    python tools/tie_bound.py --compile --chunks 5 9 --tree-leaves 0 --prompts 40 --length 96 \
        --out docs/results/precision/tie_bound_bfloat16_compiled.json

Trees: each forward is also measured as a draft tree (`specdiff.engine.tree.score_tree`) whose one branch is a
chunk of 8 and whose other nodes are random leaves (--tree-leaves), the branch's logits compared.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]


def sequences(data_dir: Path, positions: int, length: int) -> list[list[int]]:
    """Conversations (prompt + response ids) of at least `length` tokens, cut there, enough for `positions`."""
    index = json.loads((data_dir / "index.json").read_text())
    out = []
    for shard in index["shards"][::-1]:  # the newest recipe first
        data = np.load(data_dir / shard["file"])
        lengths = data["prompt_lengths"] + data["response_lengths"]
        for row in np.split(data["tokens"].astype(np.int64), np.cumsum(lengths)[:-1]):
            if len(row) >= length:
                out.append(row[:length].tolist())
            if len(out) * (length // 2) >= positions:
                return out
    return out


@torch.inference_mode()
def logits_by_chunks(model, ids: list[int], start: int, chunk: int, tree_extra: int = 0, seed: int = 0) -> torch.Tensor:
    """[len(ids) - start, V] float32: the logits of positions start..end, the prefix ids[:start] fed at once, then
    `chunk` tokens per forward on the KV cache. tree_extra > 0: each forward is a draft tree whose one branch is
    the chunk (the root and chunk - 1 tokens) and `tree_extra` more nodes hang as random leaves off it
    (`specdiff.engine.tree.score_tree`); only the branch's columns are kept."""
    import random

    from specdiff.drafters.tree import Tree
    from specdiff.engine.tree import score_tree
    from specdiff.lm.cache import cache_kwargs, keep_columns, new_cache

    draw = random.Random(seed)
    cache = new_cache(model)
    tokens = torch.tensor([ids])
    model(input_ids=tokens[:, :start], **cache_kwargs(model, cache))
    out = []
    for i in range(start, len(ids), chunk):
        if not tree_extra:
            out.append(model(input_ids=tokens[:, i:i + chunk], **cache_kwargs(model, cache)).logits[0].float())
            continue
        branch = ids[i + 1:i + chunk]
        leaves = [(draw.randrange(len(branch) + 1), draw.randrange(model.config.vocab_size)) for _ in range(tree_extra)]
        tree = Tree(branch + [token for _, token in leaves], list(range(len(branch))) + [p for p, _ in leaves])
        committed = cache.get_seq_length()
        logits, _ = score_tree(model, cache, ids[i], tree)
        out.append(logits[: len(branch) + 1])
        keep = torch.zeros(1, committed + len(tree) + 1, dtype=torch.bool)
        keep[0, : committed + len(branch) + 1] = True
        keep_columns(cache, keep)
    return torch.cat(out)


@torch.inference_mode()
def compiled_logits_by_chunks(verifiers: dict, ids: list[int], start: int, chunk: int) -> torch.Tensor:
    """[len(ids) - start, V] float32: the logits of positions start..end from the compiled verifier of chunk width
    `chunk` (`verifiers[chunk]`, built at temperature 1: its scores are the raw logits), the prefix ids[:start]
    prefilled, then `chunk` tokens per forward (the last forward padded to the graph's width)."""
    verifier = verifiers[chunk]
    tokens = torch.tensor([ids])
    verifier.reserve(len(ids) + chunk + 1)
    verifier.start(tokens[:, :start], torch.ones(1, start, dtype=torch.bool))  # prefills ids[:start - 1]
    out = []
    for i in range(start - 1, len(ids) - 1, chunk):  # chunk i.. scores the tokens after ids[i..]
        piece = tokens[:, i:min(i + chunk, len(ids) - 1)]
        logits, _ = verifier.score(piece)
        out.append(logits[0].float())
        verifier.commit(torch.tensor([piece.shape[1]]))
    return torch.cat(out)


def compiled_sequences(model, tokenizer, prompts: int, length: int) -> list[tuple[list[int], int]]:
    """(ids, start) per validation prompt: the prompt and the chunk-1 graph's greedy continuation of `length` tokens
    (EOS included where it comes), measured from the prompt's last token on."""
    from specdiff.engine.baselines import verifier_generate
    from specdiff.engine.compiled import CompiledVerifier
    from specdiff.runs.prompts import validation_prompts

    greedy = CompiledVerifier(model, temperature=0.0)
    out = []
    for prompt in validation_prompts(tokenizer, prompts):
        new, _ = verifier_generate(greedy, [prompt.ids], length, set())
        out.append((prompt.ids + new[0], len(prompt.ids)))
    return out


def kernels() -> str:
    """The kernel family this process runs (issue 54): ATen's vector ISA, and the caps set in the environment."""
    import os

    caps = [f"{k}={os.environ[k]}" for k in ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR")
            if os.environ.get(k)]
    return " ".join([f"aten={torch.backends.cpu.get_cpu_capability()}", *caps])


def cpu_name() -> str:
    """The CPU's model name and whether it has AVX-512 BF16 / AMX (from /proc/cpuinfo; "unknown" elsewhere)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    flags = set(next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), []))
    extras = [f for f in ("avx512f", "avx512_bf16", "amx_bf16") if f in flags] or ["avx2 only" if "avx2" in flags else ""]
    return f"{name} ({', '.join(e for e in extras if e)})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verifier", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="bfloat16")
    parser.add_argument("--positions", type=int, default=10_000, help="positions measured (at least)")
    parser.add_argument("--length", type=int, default=384, help="tokens per sequence; the second half is measured")
    parser.add_argument("--chunks", type=int, nargs="+", default=[2, 4, 8, 16], help="W: tokens per forward")
    parser.add_argument("--tree-leaves", type=int, default=8,
                        help="also trees: each chunk of 8 a branch with this many random leaves (0: chains only)")
    parser.add_argument("--data", default=None, help="default data/distill/VERIFIER")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--compile", action="store_true",
                        help="the compiled verifier's graphs: chunk 1 against chunk W (module docstring)")
    parser.add_argument("--prompts", type=int, default=40, help="--compile without --data: validation prompts")
    parser.add_argument("--out", default=None, help="the JSON result (default: print it)")
    parser.add_argument("--record", action="store_true",
                        help="also record the bound in specdiff/bench/tie_bounds.json (the bench's near-tie bound)")
    args = parser.parse_args(argv)
    from specdiff import models
    from specdiff.progress import progress

    torch.set_num_threads(args.threads)
    model = models.load(args.verifier, dtype=args.dtype).model.eval()
    shapes = [(w, 0) for w in args.chunks] + ([(8, args.tree_leaves)] if args.tree_leaves else [])
    began = time.time()
    if args.compile:
        if args.tree_leaves:
            raise SystemExit("--compile measures chains only (the compiled verifier scores no trees): --tree-leaves 0")
        from specdiff.engine.compiled import CompiledVerifier, compile_mode

        verifiers = {w: CompiledVerifier(model, temperature=1.0) for w in [1, *args.chunks]}  # raw logits
        if args.data:
            seqs = [(ids, args.length // 2) for ids in sequences(Path(args.data), args.positions, args.length)]
        else:
            seqs = compiled_sequences(model, models.load_tokenizer(args.verifier), args.prompts, args.length)

        def chunked(ids, start, w, leaves):
            return compiled_logits_by_chunks(verifiers, ids, start, w)
    else:
        seqs = [(ids, args.length // 2)
                for ids in sequences(Path(args.data or ROOT / "data" / "distill" / args.verifier), args.positions,
                                     args.length)]

        def chunked(ids, start, w, leaves):
            return logits_by_chunks(model, ids, start, w, leaves)
    start = min(s for _, s in seqs)
    per_chunk = {shape: {"delta_logit": [], "delta_gap": []} for shape in shapes}
    for ids, begin in progress(seqs, desc=f"tie bound ({args.dtype}{', compiled' if args.compile else ''})",
                               unit="sequence"):
        one = chunked(ids, begin, 1, 0)  # [T, V]: one token at a time
        top = one.topk(2, dim=-1).indices  # [T, 2]
        gap = one.gather(-1, top[:, :1]) - one.gather(-1, top[:, 1:])  # [T, 1]
        for w, leaves in shapes:
            multi = chunked(ids, begin, w, leaves)
            moved = multi.gather(-1, top[:, :1]) - multi.gather(-1, top[:, 1:])
            per_chunk[(w, leaves)]["delta_logit"] += (multi - one).abs().amax(-1).tolist()
            per_chunk[(w, leaves)]["delta_gap"] += (moved - gap).abs()[:, 0].tolist()
    summary = {(f"chain{w}" if not leaves else f"tree{w}+{leaves}"): {
        "positions": len(v["delta_gap"]), "max_delta_logit": max(v["delta_logit"]), "max_delta_gap": max(v["delta_gap"]),
        "p999_delta_gap": float(np.quantile(v["delta_gap"], 0.999))} for (w, leaves), v in per_chunk.items()}
    result = {"verifier": args.verifier, "dtype": args.dtype, "kernels": kernels(), "cpu": cpu_name(),
              "compiled": bool(args.compile), **({"mode": compile_mode()} if args.compile else {}),
              "sequences": len(seqs), "measured_from": start,
              "threads": args.threads, "torch": torch.__version__, "seconds": round(time.time() - began, 1),
              "bound": max(s["max_delta_gap"] for s in summary.values()),
              "per_shape": summary}
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    if args.record:
        bounds_file = ROOT / "specdiff" / "bench" / "tie_bounds.json"
        bounds = json.loads(bounds_file.read_text()) if bounds_file.is_file() else {}
        entry = bounds.get(args.dtype, {})
        family = entry.setdefault("per_kernels", {})
        family[result["kernels"]] = {"bound": result["bound"], "cpu": result["cpu"], "results": args.out,
                                     "positions": min(s["positions"] for s in summary.values())}
        # the bound: the largest over the kernel families measured (issue 54), each named with its CPU
        entry.update(bound=max(f["bound"] for f in family.values()), verifier=args.verifier, shapes=sorted(summary),
                     torch=torch.__version__)
        entry.pop("positions", None), entry.pop("results", None)
        bounds[args.dtype] = entry
        bounds_file.write_text(json.dumps(bounds, indent=1, sort_keys=True) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
