"""DiffusionProposer: specdiff's masked and block diffusion drafters as a vLLM `custom_class` proposer.

    LLM(model=TARGET, speculative_config={"method": "custom_class", "num_speculative_tokens": 8,
                                          "model": "specdiff.integrations.vllm.DiffusionProposer"},
        additional_config={"specdiff": {"drafter": "/path/to/masked-or-block-drafter", "steps": 4}})

vLLM's V1 model runner builds it once per worker with the engine's VllmConfig and, after each step,
calls `propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)`: row i of `token_ids_cpu`
holds request i's committed tokens (prompt and output, the newest sampled ones included) in its first
`num_tokens_no_spec[i]` columns. The proposer left-pads them into one batch and runs the drafter's
stateless `draft` (the first paper's Section 3: B mask tokens appended and unmasked in K steps or
with confidence threshold tau), returning B = num_speculative_tokens drafted tokens per request.

Its drafts carry no probabilities, so vLLM verifies them against a point mass on each drafted token
(`draft_probs=None`): accept y with probability p~(y), and on a rejection draw from p~ without y.
That is always exact (docs/architecture.md, Exactness), whatever the unmasking order or effort; under a lenient
rule of the plugin it is the relaxed chain with point-mass q.

additional_config["specdiff"] keys read here (settings.PROPOSER_KEYS): `drafter` (a local checkpoint
or a zoo name: masked, block, or a drafter specdiff distilled, e.g. "smollm2-135m-instruct-masked"),
`steps` (K) or `threshold` (tau), `order`, `temperature`, `top_p`, `top_k`, `device` (default: the
worker's if it is CPU or CUDA), `seed` (the drafter's sampling), `verifier` (distilled drafters only).

A distilled drafter (`specdiff.zoo.distilled`) stores only its trained weights: its tables are completed
from a verifier's embeddings when it loads, and it refuses a verifier it was not trained for. The
proposer completes it from `verifier` if given, else from the served model when that is a local folder
(the converted checkpoint vLLM serves; so a drafter for another verifier fails at engine start), else
from the verifier it was trained for. Its draft vocabulary (`draft_to_target` [V_d], the verifier id of
each row of its head) is applied inside the drafter, so the drafted tokens are verifier ids; the
proposer checks at start that the drafter's ids fit the served vocabulary.
The drafter runs with transformers in the worker, outside vLLM's KV cache, re-encoding each request's
committed tokens every step (no prefix cache): it is a functional path, not a fast one.
"""
from __future__ import annotations

import torch

from specdiff.integrations.vllm.settings import KEY, SpecdiffConfigError, engine_settings

DRAFTER_OPTIONS = ("steps", "threshold", "order", "temperature", "top_p", "top_k")


class DiffusionProposer:
    """A vLLM custom_class proposer running a specdiff masked or block diffusion drafter."""

    def __init__(self, vllm_config):
        from specdiff import models

        settings = engine_settings(vllm_config.additional_config)
        if "drafter" not in settings:
            raise SpecdiffConfigError(f"DiffusionProposer needs additional_config[{KEY!r}]['drafter']: a masked or "
                                      "block diffusion drafter checkpoint")
        spec = vllm_config.speculative_config
        self.num_speculative_tokens = int(spec.num_speculative_tokens)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        options = {key: settings[key] for key in DRAFTER_OPTIONS if key in settings}
        verifier = _verifier_for(settings, vllm_config)
        self.drafter = models.load(settings["drafter"], role="drafter", verifier=verifier, **options)
        del verifier  # a distilled drafter keeps its own tables; the verifier's weights are not needed again
        kind = type(self.drafter).__name__
        if kind not in ("MaskedDiffusionDrafter", "BlockDiffusionDrafter"):
            raise SpecdiffConfigError(f"DiffusionProposer runs masked and block diffusion drafters; "
                                      f"{settings['drafter']!r} is a {kind}")
        served_vocab = int(vllm_config.model_config.get_vocab_size())
        if self.drafter.vocab_size > served_vocab:
            raise SpecdiffConfigError(f"the drafter {settings['drafter']!r} drafts ids of a {self.drafter.vocab_size}-"
                                      f"token vocabulary; the served model has {served_vocab}")
        self.device = torch.device(settings.get("device") or _worker_device(vllm_config))
        self.drafter.model.to(self.device)
        self.pad_id = int(getattr(self.drafter, "pad_token_id", None) or 0)
        seed = settings.get("seed")
        self.generator = None if seed is None else torch.Generator(self.device).manual_seed(int(seed))

    def load_model(self, *args, **kwargs) -> None:
        """vLLM hands the target model here; the drafter was loaded in __init__."""

    def dummy_run(self, *args, **kwargs) -> None:
        """Nothing to warm up."""

    @torch.inference_mode()
    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None, **kwargs):
        """sampled_token_ids: [b] lists (empty: the request is not decoding this step); num_tokens_no_spec
        [b]; token_ids_cpu [>= b, max_model_len]. Returns [b] lists of B drafted token ids ([] to skip)."""
        block = self.num_speculative_tokens
        drafts: list[list[int]] = [[] for _ in sampled_token_ids]
        rows = [i for i, sampled in enumerate(sampled_token_ids)
                if len(sampled) and int(num_tokens_no_spec[i]) + block < self.max_model_len]
        if not rows:
            return drafts
        lengths = [int(num_tokens_no_spec[i]) for i in rows]
        width = max(lengths)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)  # [b, P] left-padded
        mask = torch.zeros((len(rows), width), dtype=torch.bool)  # [b, P]
        for r, (i, n) in enumerate(zip(rows, lengths)):
            ids[r, width - n:] = torch.as_tensor(token_ids_cpu[i, :n], dtype=torch.long)
            mask[r, width - n:] = True
        draft = self.drafter.draft(ids.to(self.device), mask.to(self.device), block, self.generator)
        for r, tokens in zip(rows, draft.tokens.tolist()):  # [b, B]
            drafts[r] = [int(t) for t in tokens]
        return drafts


def _verifier_for(settings: dict, vllm_config):
    """The `sd.Verifier` a distilled drafter is completed from (module docstring), or None for other drafters."""
    from pathlib import Path

    from specdiff import models
    from specdiff.zoo import distilled

    if distilled.folder(settings["drafter"]) is None:
        return None
    if settings.get("verifier"):
        return models.load(settings["verifier"])
    served = Path(str(vllm_config.model_config.model))
    return models.load(str(served)) if (served / "config.json").is_file() else None


def _worker_device(vllm_config) -> str:
    device = str(getattr(vllm_config.device_config, "device", "cpu"))
    return device if device.startswith(("cpu", "cuda")) else "cpu"
