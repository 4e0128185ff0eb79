"""Small vLLM engines on the CPU backend for the tests, and their spec-decode counters (not a test module).

Also runnable as a script, for the engine without specdiff's plugin: `VLLM_PLUGINS=none python
engines.py SPEC.json` prints, as JSON, the greedy tokens of spec decoding and the sampled tokens of
plain decoding for the prompts in SPEC.json (or, where SPEC.json names `speculative_configs`, the
greedy tokens of each of them; where it names `seeded`, what engines that do not ask for specdiff emit,
with or without the plugin: seeded sampled tokens of plain decoding, greedy tokens and the acceptance
of seeded sampled requests under draft_model spec decoding)."""
from __future__ import annotations

import json
import sys

B = 2  # num_speculative_tokens


def llm(target, speculative_config=None, additional_config=None, **kwargs):
    from vllm import LLM

    settings = dict(model=str(target), skip_tokenizer_init=kwargs.pop("skip_tokenizer_init", True), enforce_eager=True,
                    max_model_len=32, dtype="float32", max_num_seqs=1024, max_num_batched_tokens=8192, seed=0,
                    disable_log_stats=False, distributed_executor_backend="uni")
    settings.update(kwargs)
    return LLM(speculative_config=speculative_config, additional_config=additional_config or {}, **settings)


def draft_model(draft, sample_method="greedy"):
    return {"method": "draft_model", "model": str(draft), "num_speculative_tokens": B,
            "draft_sample_method": sample_method}


def counters(engine) -> dict:
    """vLLM's cumulative spec-decode counters: drafts, draft tokens, accepted, accepted per position."""
    out = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": [0] * B}
    names = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
             "vllm:spec_decode_num_accepted_tokens": "accepted"}
    for metric in engine.get_metrics():
        if metric.name in names:
            out[names[metric.name]] = metric.value
        elif metric.name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            out["per_pos"] = list(metric.values)
    return out


def generate(engine, prompts, params):
    """(token ids per request, spec-decode counters of this call alone)."""
    before = counters(engine)
    outputs = engine.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
    after = counters(engine)
    delta = {key: (after[key] - before[key]) if key != "per_pos" else [a - b for a, b in zip(after[key], before[key])]
             for key in after}
    return [list(o.outputs[0].token_ids) for o in outputs], delta


def per_position(delta) -> list[float]:
    """Per-position acceptance: the fraction of rounds whose i-th drafted token was accepted."""
    return [count / max(delta["drafts"], 1) for count in delta["per_pos"]]


def record(label: str, **values) -> None:
    """Append measured figures to $SPECDIFF_VLLM_RECORD (JSON lines) where it is set (docs/vllm.md's table)."""
    import os

    path = os.environ.get("SPECDIFF_VLLM_RECORD")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps({"label": label, **values}) + "\n")


def assert_greedy(model, prompt, tokens) -> None:
    """Each token vLLM emitted at temperature 0 is the target's argmax after the tokens before it, up to
    float32 rounding between vLLM's and transformers' kernels (a logit within 1e-3 of the maximum)."""
    import torch

    ids = torch.tensor([list(prompt) + list(tokens)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1]  # [T, V]
    picked = logits.gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)
    assert bool((picked >= logits.max(dim=-1).values - 1e-3).all()), (tokens, logits.argmax(-1).tolist())


def main(spec_path: str) -> None:
    """Without specdiff's plugin (VLLM_PLUGINS=none): greedy spec-decode tokens and plain sampled tokens."""
    from vllm import SamplingParams

    spec = json.loads(open(spec_path).read())
    if "seeded" in spec:  # on engines that do not ask for specdiff, with or without the plugin loaded
        from specdiff.integrations.vllm import hooks

        prompts = [{"prompt_token_ids": list(spec["prompt"])}] * len(spec["seeded"])
        params = [SamplingParams(temperature=t, top_p=p, max_tokens=spec["length"], ignore_eos=True, seed=seed)
                  for seed, (t, p) in enumerate(spec["seeded"])]
        engine = llm(spec["target"])  # plain sampling
        plain = [list(o.outputs[0].token_ids) for o in engine.generate(prompts, params, use_tqdm=False)]
        del engine
        engine = llm(spec["target"], draft_model(spec["draft"]))  # draft_model spec decoding
        greedy, _ = generate(engine, [spec["prompt"]] * 2, SamplingParams(temperature=0, max_tokens=spec["length"],
                                                                          ignore_eos=True))
        before = counters(engine)
        engine.generate(prompts, params, use_tqdm=False)
        after = counters(engine)
        refused = None
        try:  # a request that asks an engine without specdiff for a rule
            engine.generate(prompts[:1], SamplingParams(max_tokens=2, extra_args={"specdiff": {"rule": "linear",
                                                                                               "leniency": 1.0}}),
                            use_tqdm=False)
        except Exception as error:  # noqa: BLE001
            refused = f"{type(error).__name__}: {error}"
        from vllm.v1.sample import rejection_sampler as v1
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        functions = {"rejection_sample": v1.rejection_sample, "expand_batch_to_tokens": v1.expand_batch_to_tokens,
                     "GPUModelRunner._sample": GPUModelRunner._sample}
        patched = sorted(name for name, function in functions.items() if function.__module__.startswith("specdiff"))
        print("RESULT " + json.dumps({"plain": plain, "greedy": greedy, "refused": refused, "patched": patched,
                                      "accepted": after["accepted"] - before["accepted"],
                                      "drafted": after["draft_tokens"] - before["draft_tokens"],
                                      "gates": hooks.installed(), "active": hooks.active()}), flush=True)
        return
    if "speculative_configs" in spec:  # greedy spec-decode tokens of each method, without the plugin
        greedy = {}
        for name, speculative_config in spec["speculative_configs"].items():
            engine = llm(spec["target"], speculative_config)
            greedy[name], _ = generate(engine, spec["greedy_prompts"],
                                       SamplingParams(temperature=0, max_tokens=spec["greedy_tokens"], ignore_eos=True))
            del engine
        print("RESULT " + json.dumps({"greedy": greedy}), flush=True)
        return
    engine = llm(spec["target"], draft_model(spec["draft"]))
    greedy, _ = generate(engine, spec["greedy_prompts"], SamplingParams(temperature=0, max_tokens=spec["greedy_tokens"],
                                                                          ignore_eos=True))
    del engine
    engine = llm(spec["target"])
    sampled, _ = generate(engine, spec["sampled_prompts"], SamplingParams(temperature=1.0, max_tokens=spec["length"],
                                                                            ignore_eos=True, seed=None))
    print("RESULT " + json.dumps({"greedy": greedy, "sampled": sampled}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
