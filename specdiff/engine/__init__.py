"""The generation engine: the first paper's Algorithm 1, batched, on a KV-cached verifier.

- `verifier.Verifier`: any causal LM, prefilled once, one forward per round over the new tokens.
- `generate.SpeculativeGenerator`: drafter + verifier + rule -> texts, token ids and statistics.
- `stats`: per-sequence statistics and the summary.
- `baselines`: plain autoregressive decoding with the same Verifier, and Hugging Face's generate.
"""
