"""`specdiff bench stateful`'s measurement: the rollback cost of a hybrid (recurrent-state) verifier beside an
attention one of the same size, with specdiff's engine and HF assisted generation (`tiny_pair` builds the tiny
Qwen3.5-shaped pair when none is given)."""
from __future__ import annotations


def tiny_pair(architecture: str, layers: int = 4, hidden: int = 64, vocab: int = 256, seed: int = 0):
    """(verifier, drafter): a Qwen3.5-shaped hybrid (3 Gated DeltaNet layers per full-attention layer) or a Qwen3
    of the same width and depth; the drafter is the verifier with every weight moved by 3 % of its spread."""
    import copy

    import torch
    import transformers

    common = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
                  pad_token_id=0, bos_token_id=None, eos_token_id=None, tie_word_embeddings=False, initializer_range=0.2)
    torch.manual_seed(seed)
    if architecture == "hybrid":
        types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)]
        config = transformers.Qwen3_5TextConfig(**common, layer_types=types, linear_num_value_heads=4,
                                                linear_num_key_heads=2, linear_key_head_dim=16,
                                                linear_value_head_dim=16, linear_conv_kernel_dim=4)
        verifier = transformers.Qwen3_5ForCausalLM(config).eval()
    else:
        verifier = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**common)).eval()
    drafter = copy.deepcopy(verifier)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for parameter in drafter.parameters():
            if parameter.numel() > 1:
                parameter.add_(0.03 * torch.randn(parameter.shape, generator=generator) * parameter.std())
    return verifier, drafter


def measure(verifier, drafter, prompts, block: int, new_tokens: int, repeats: int) -> dict:
    import specdiff as sd
    from specdiff.engine.baselines import autoregressive_generate
    from specdiff.eval.timing import interleaved_median_ms

    runs = {}

    def speculative():
        gen = sd.SpeculativeGenerator(sd.AutoregressiveDrafter(drafter, temperature=0.0),
                                      sd.Verifier(verifier, temperature=0.0), block_size=block, eos_token_id=[],
                                      batch_size=len(prompts))
        runs["spec"] = gen.generate(prompts, max_new_tokens=new_tokens)

    def autoregressive():
        runs["ar"] = autoregressive_generate(verifier, prompts, new_tokens, set(), temperature=0.0)

    times = interleaved_median_ms({"spec": speculative, "ar": autoregressive}, repeats)
    summary = runs["spec"].summary
    rounds = max(1, summary.rounds // max(1, summary.sequences))  # rounds of the batch
    rollback = (summary.state_rollback or {}).get("verifier")
    row = {"spec_ms": times["spec"], "ar_ms": times["ar"], "speedup_vs_ar": times["ar"] / times["spec"],
           "tokens_per_round": summary.tokens_per_round, "rounds": rounds,
           "round_ms": times["spec"] / rounds, "equal_to_ar": runs["spec"].token_ids == runs["ar"][0]}
    if rollback:
        per_round = 1e3 * rollback["rewind_s"] / max(1, rollback["rewinds"])
        row.update(rollback_ms_per_round=per_round, rollback_share=per_round / row["round_ms"],
                   replays=rollback["replays"], replay_skipped=rollback["replay_skipped"])
    return row


def hf_assisted(verifier, drafter, prompt) -> dict:
    import torch

    ids = torch.tensor([prompt])
    try:
        verifier.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=drafter, max_new_tokens=8,
                          do_sample=False, pad_token_id=0)
    except Exception as error:  # transformers refuses assisted generation with stateful models
        return {"refused": True, "error": f"{type(error).__name__}: {error}"}
    return {"refused": False}
