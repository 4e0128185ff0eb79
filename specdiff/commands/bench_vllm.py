"""`specdiff bench vllm`: vLLM + specdiff beside specdiff's own engine, tokens/s at 1 and 32 requests.

Run it in the vLLM environment (`scripts/vllm_env.sh VENV`; `VENV/bin/specdiff bench vllm --json`).
On the same models, prompts and settings it times:
- vLLM with the plugin: `draft_model` drafting, Linear(lam) (`additional_config`);
- vLLM with `DiffusionProposer`: a masked diffusion drafter, K steps, point-mass verification;
- specdiff's engine (`SpeculativeGenerator`): the same draft model (autoregressive drafter, greedy,
  point mass as vLLM's default greedy drafting), and the same masked drafter, with the same rule.
At each concurrency c, c requests arrive together and each generates `--tokens` tokens (EOS ignored);
tokens/s = c * tokens / wall time, the median of `--repeats` timed runs after one warm-up. vLLM runs in
this process (VLLM_ENABLE_V1_MULTIPROCESSING=0, one worker) with a fixed torch thread count, as the
engine does. Without --target, a tiny Qwen3 pair (head_dim 32, which vLLM's CPU attention needs) and a
masked drafter from the target's weights are built in a temporary directory: the zoo's testbed models
(head_dim 24 and 16) do not load in vLLM's CPU backend.
"""
from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from specdiff.argtypes import positive_int


def register(which) -> None:
    parser = which.add_parser("vllm", help="vLLM + specdiff (plugin, DiffusionProposer) against specdiff's engine")
    parser.add_argument("--json", action="store_true", help="print only the JSON result")
    parser.add_argument("--target", help="target checkpoint (default: a tiny Qwen3 built here)")
    parser.add_argument("--draft", help="draft model for draft_model drafting (default: built with the target)")
    parser.add_argument("--masked", help="masked diffusion drafter for DiffusionProposer (default: built)")
    parser.add_argument("--concurrency", type=positive_int, nargs="+", default=[1, 32])
    parser.add_argument("--tokens", type=positive_int, default=64, help="tokens generated per request")
    parser.add_argument("--block", type=positive_int, default=4, help="drafted tokens per round (B)")
    parser.add_argument("--lam", type=float, default=0.5, help="Linear's lam")
    parser.add_argument("--steps", type=positive_int, default=2, help="the masked drafter's K")
    parser.add_argument("--repeats", type=positive_int, default=3)
    parser.add_argument("--threads", type=positive_int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(handler=run)


def build_models(root: Path, vocab: int = 512, seed: int = 0) -> tuple[Path, Path, Path]:
    """A 4-layer Qwen3 target, a 1-layer draft sharing its embedding, first layer and head, and a
    Dream-style masked drafter (bidirectional, shifted logits, mask id vocab - 1) from the target's
    weights; head_dim 32. Returns their directories under root."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    def make(layers, bidirectional=False):
        extra = dict(logits_shift=1, mask_token_id=vocab - 1, is_causal=False) if bidirectional else {}
        config = Qwen3Config(vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=layers,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
                             tie_word_embeddings=False, pad_token_id=0, bos_token_id=None, eos_token_id=None, **extra)
        return Qwen3ForCausalLM(config).eval()

    torch.manual_seed(seed)
    target = make(4)
    with torch.no_grad():
        target.lm_head.weight.normal_(0.0, 0.15)
    draft = make(1)
    draft.load_state_dict({k: v for k, v in target.state_dict().items()
                           if not k.startswith(tuple(f"model.layers.{i}." for i in range(1, 4)))})
    masked = make(4, bidirectional=True)
    masked.load_state_dict(target.state_dict())
    paths = root / "target", root / "draft", root / "masked"
    for model, path in zip((target, draft, masked), paths):
        model.save_pretrained(path)
    config = json.loads((paths[2] / "config.json").read_text())
    config["specdiff_role"] = "masked-drafter"
    (paths[2] / "config.json").write_text(json.dumps(config, indent=2))
    return paths


def run(args) -> int:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # vLLM logs to stdout: keep --json's output JSON only
    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as scratch:
        if args.target is None:
            target, draft, masked = build_models(Path(scratch))
        else:
            target, draft, masked = Path(args.target), Path(args.draft), Path(args.masked)
        vocab = json.loads((Path(target) / "config.json").read_text())["vocab_size"]
        generator = torch.Generator().manual_seed(args.seed)
        prompts = torch.randint(1, vocab - 1, (max(args.concurrency), 16), generator=generator).tolist()
        results = []
        for name, speculative, extra in _vllm_cases(args, draft, masked):
            results += _time_vllm(args, target, prompts, name, speculative, extra)
            _log(args, results[-len(args.concurrency):])
        results += _time_engine(args, target, draft, masked, prompts)
        _log(args, results[-2 * len(args.concurrency):])
    report = {"settings": {"tokens": args.tokens, "block": args.block, "lam": args.lam, "steps": args.steps,
                           "threads": args.threads, "engine_threads": torch.get_num_threads(), "repeats": args.repeats, "temperature": 1.0,
                           "models": "built (tiny Qwen3, head_dim 32)" if args.target is None else str(target)},
              "results": results, "ratios": _ratios(results)}
    print(json.dumps(report, indent=None if args.json else 2))
    return 0


def _vllm_cases(args, draft, masked):
    linear = {"specdiff": {"rule": "linear", "leniency": args.lam}}
    yield ("vllm draft_model linear", {"method": "draft_model", "model": str(draft),
                                       "num_speculative_tokens": args.block}, linear)
    yield ("vllm DiffusionProposer linear",
           {"method": "custom_class", "model": "specdiff.integrations.vllm.DiffusionProposer",
            "num_speculative_tokens": args.block},
           {"specdiff": {**linear["specdiff"], "drafter": str(masked), "steps": args.steps, "seed": args.seed}})


def _time_vllm(args, target, prompts, name, speculative, extra) -> list[dict]:
    import gc

    from vllm import LLM, SamplingParams

    llm = LLM(model=str(target), skip_tokenizer_init=True, enforce_eager=True, dtype="float32", seed=args.seed,
              max_model_len=16 + args.tokens + args.block + 8, max_num_seqs=max(args.concurrency),
              disable_log_stats=False, distributed_executor_backend="uni", speculative_config=speculative,
              additional_config=extra)
    params = SamplingParams(temperature=1.0, max_tokens=args.tokens, ignore_eos=True)
    out = []
    for concurrency in args.concurrency:
        batch = [{"prompt_token_ids": p} for p in prompts[:concurrency]]
        llm.generate(batch, params, use_tqdm=False)  # warm-up
        before = _counters(llm)
        walls = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            llm.generate(batch, params, use_tqdm=False)
            walls.append(time.perf_counter() - start)
        after = _counters(llm)
        drafted = after[1] - before[1]
        out.append(_row(name, concurrency, args.tokens, walls, (after[0] - before[0]) / drafted if drafted else None))
    del llm
    gc.collect()
    return out


def _counters(llm) -> tuple[float, float]:
    accepted = drafted = 0.0
    for metric in llm.get_metrics():
        if metric.name == "vllm:spec_decode_num_accepted_tokens":
            accepted = metric.value
        elif metric.name == "vllm:spec_decode_num_draft_tokens":
            drafted = metric.value
    return accepted, drafted


def _time_engine(args, target, draft, masked, prompts) -> list[dict]:
    import torch

    import specdiff as sd
    from specdiff.models import load_model

    target_model, draft_model = load_model(str(target))[0], load_model(str(draft))[0]
    masked_model = load_model(str(masked))[0]
    rule = sd.Linear(args.lam)
    cases = [("specdiff engine ar-drafter linear", lambda: sd.AutoregressiveDrafter(draft_model, temperature=0.0,
                                                                                    top_p=1.0, top_k=0)),
             ("specdiff engine masked-drafter linear", lambda: sd.MaskedDiffusionDrafter(masked_model, steps=args.steps))]
    out = []
    for name, make in cases:
        for concurrency in args.concurrency:
            gen = sd.SpeculativeGenerator(make(), sd.Verifier(target_model, temperature=1.0, top_p=1.0, top_k=0),
                                          block_size=args.block, rule=rule, proposal="point_mass", eos_token_id=[],
                                          batch_size=concurrency)
            batch = prompts[:concurrency]
            generator = torch.Generator().manual_seed(args.seed)
            gen.generate(batch, max_new_tokens=args.tokens, generator=generator)  # warm-up
            walls, accepted, drafted = [], 0, 0
            for _ in range(args.repeats):
                start = time.perf_counter()
                result = gen.generate(batch, max_new_tokens=args.tokens, generator=generator)
                walls.append(time.perf_counter() - start)
                accepted += sum(sum(s.accepted) for s in result.stats)
                drafted += sum(s.rounds for s in result.stats) * args.block
            out.append(_row(name, concurrency, args.tokens, walls, accepted / drafted if drafted else None))
    return out


def _row(name, concurrency, tokens, walls, acceptance) -> dict:
    wall = statistics.median(walls)
    return {"engine": name, "concurrency": concurrency, "wall_s": round(wall, 4),
            "tokens_per_s": round(concurrency * tokens / wall, 1),
            "acceptance": None if acceptance is None else round(acceptance, 4)}


def _ratios(results) -> dict:
    """tokens/s of each vLLM case over the engine's with the same drafter, per concurrency."""
    by = {(r["engine"], r["concurrency"]): r["tokens_per_s"] for r in results}
    pairs = {"draft_model": ("vllm draft_model linear", "specdiff engine ar-drafter linear"),
             "diffusion": ("vllm DiffusionProposer linear", "specdiff engine masked-drafter linear")}
    out = {}
    for label, (ours, engine) in pairs.items():
        for (name, concurrency), value in by.items():
            if name == ours and (engine, concurrency) in by:
                out[f"vllm_over_engine_{label}_c{concurrency}"] = round(value / by[(engine, concurrency)], 3)
    return out


def _log(args, rows) -> None:
    if not args.json:
        for row in rows:
            print(f"{row['engine']:40s} c={row['concurrency']:3d}  {row['tokens_per_s']:9.1f} tok/s  "
                  f"acceptance {row['acceptance']}", flush=True)
