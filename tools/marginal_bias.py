"""How inexact is the paper's marginal mode on the testbed? (docs/engine.md, "Exactness")

For a few arith test prompts, the exact distribution of the verifier's first `--length` sampled
tokens (temperature 0.7, top-p 0.8, top-k 20) is enumerated over its support tree. Lossless
speculative diffusion with a diffusion drafter (`--drafter`: the masked drafter by default, K steps,
entropy order, marginal proposal: not proven exact; or the uniform or block drafter) and the same
drafter in point-mass mode (exact) each draw `--rows` samples per
prompt in one batched call; the script prints the total variation of each to the exact
distribution and a chi-square p-value, as JSON.

    python tools/marginal_bias.py --rows 4000 --prompts 4 > docs/results/engine/engine_marginal_bias_t02.json
    python tools/marginal_bias.py --drafter uniform-drafter --steps 4 > docs/results/engine/engine_marginal_bias_uniform.json
"""
from __future__ import annotations

import argparse
import json
import sys

import torch
from scipy import stats

import specdiff as sd
from specdiff import zoo
from specdiff.eval import tasks
from specdiff.lm.sampling import sampling_probs


def support_tree(model, prompt: list[int], length: int, sampling: dict) -> dict[tuple, float]:
    """Every continuation of `length` tokens with positive probability, and its probability."""
    paths = {(): 1.0}
    for _ in range(length):
        prefixes = list(paths)
        ids = torch.tensor([prompt + list(prefix) for prefix in prefixes])
        with torch.no_grad():
            probs = sampling_probs(model(input_ids=ids).logits[:, -1].double(), **sampling)  # [n, V]
        paths = {prefix + (token,): paths[prefix] * float(row[token])
                 for prefix, row in zip(prefixes, probs) for token in row.nonzero().squeeze(1).tolist()}
    return paths


def uncertain_contexts(model, tokenizer, count: int, length: int, sampling: dict):
    """Contexts (an arith test prompt and a prefix of the verifier's own greedy answer) after which the
    verifier's next `length` tokens are uncertain (more than one continuation, none above 0.95):
    the testbed's answers are otherwise near-deterministic, which would hide any bias."""
    found = 0
    for problem in tasks.arith_problems("test", 200):
        ids = tokenizer(problem.prompt).input_ids
        with torch.no_grad():
            answer = model.generate(input_ids=torch.tensor([ids]), max_new_tokens=60, do_sample=False,
                                    pad_token_id=0)[0, len(ids):].tolist()
        for cut in range(len(answer)):
            context = ids + answer[:cut]
            exact = support_tree(model, context, length, sampling)
            if len(exact) > 1 and max(exact.values()) < 0.95:
                yield context, exact
                found += 1
                break
        if found == count:
            return


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=3)
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--length", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--block", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--drafter", default="masked-drafter",
                        help="a zoo diffusion drafter: masked-drafter, uniform-drafter or block-drafter")
    parser.add_argument("--drafter-temperature", type=float, default=None,
                        help="the drafter's sampling temperature (default: the zoo's, 0.2 for the masked drafter)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    tokenizer, verifier_model = zoo.tokenizer(), zoo.load("verifier")
    sampling = dict(zoo.SAMPLING["verifier"])
    from specdiff import models
    results = []
    for prompt, exact in uncertain_contexts(verifier_model, tokenizer, args.prompts, args.length, sampling):
        row = {"context": tokenizer.decode(prompt, skip_special_tokens=True), "support": len(exact),
               "max_probability": max(exact.values())}
        for proposal in ("marginal", "point_mass"):
            options = {} if args.drafter_temperature is None else {"temperature": args.drafter_temperature}
            drafter = models.load(args.drafter, role="drafter", steps=args.steps, **options)
            gen = sd.SpeculativeGenerator(drafter, sd.Verifier(verifier_model, **sampling), block_size=args.block,
                                          proposal=proposal, eos_token_id=[], batch_size=args.rows)
            out = gen.generate([prompt] * args.rows, max_new_tokens=args.length,
                               generator=torch.Generator().manual_seed(args.seed))
            counts = {}
            for ids in out.token_ids:
                counts[tuple(ids)] = counts.get(tuple(ids), 0) + 1
            keys = sorted(set(exact) | set(counts))
            observed = torch.tensor([counts.get(k, 0) for k in keys], dtype=torch.float64)
            expected = torch.tensor([exact.get(k, 0.0) for k in keys], dtype=torch.float64)
            tv = 0.5 * (observed / args.rows - expected).abs().sum().item()
            outside = int(sum(c for k, c in counts.items() if k not in exact))
            keep = expected * args.rows >= 5
            obs = torch.cat([observed[keep], observed[~keep].sum().reshape(1)])
            exp = torch.cat([expected[keep] * args.rows, (expected[~keep] * args.rows).sum().reshape(1)])
            if exp[-1] < 5:
                obs, exp = obs[:-1], exp[:-1]
            pvalue = float(stats.chisquare(obs.numpy(), exp.numpy() * obs.sum().item() / exp.sum().item()).pvalue) \
                if len(obs) > 1 else 1.0
            row[proposal] = {"tv": tv, "chi2_pvalue": pvalue, "outside_support": outside,
                             "acceptance_rate": out.summary.acceptance_rate, "exact_flag": out.summary.exact}
        results.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    noise = 0.4 * (max(r["support"] for r in results) / args.rows) ** 0.5
    print(json.dumps({"drafter": args.drafter,
                      "drafter_temperature": args.drafter_temperature or zoo.SAMPLING[args.drafter]["temperature"],
                      "rows_per_prompt": args.rows, "length": args.length, "steps": args.steps, "block": args.block,
                      "order": zoo.SAMPLING[args.drafter]["order"], "tv_noise_bound": noise, "prompts": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
