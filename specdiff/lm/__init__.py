"""transformers plumbing shared by the drafters and the engine, one copy each:

- `masks`: left padding, position ids, and the 4D attention masks (causal, bidirectional,
  block-causal) handed to transformers models already prepared;
- `cache`: the keyword that passes a KV cache to a model, and the per-row rollback and compaction
  of a batched cache after verification;
- `sampling`: temperature, top-k and top-p, exactly as the model's own sampling would apply them.
"""
