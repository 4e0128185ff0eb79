"""An lm-evaluation-harness backend: speculative diffusion inside the harness, `--model specdiff`.

    python -m specdiff.integrations.lm_eval --model specdiff \\
        --model_args drafter=masked-drafter,verifier=verifier,steps=4,rule=linear,lam=0.2 \\
        --tasks gsm8k --batch_size 8

`python -m specdiff.integrations.lm_eval` is lm-eval's own command line (the same arguments as
`lm_eval`) with this backend registered. lm-eval 0.4.13 finds models only in its own registry (no
plugin entry points), so the plain `lm_eval` command knows `specdiff` only in a process that has
imported this module; from Python, `import specdiff.integrations.lm_eval` and then
`lm_eval.simple_evaluate(model="specdiff", ...)`.

`SpecDiffLM` implements `generate_until` through the engine (`specdiff.runs.run_config`,
hence `SpeculativeGenerator` with `batch_size`), exactly as `specdiff eval` generates:

- requests are generated in the harness's order, `batch_size` at a time, with one
  `torch.Generator` seeded with `seed` per group of requests that share their sampling settings
  and `max_gen_toks`;
- `until`: each continuation is cut before the first stop string. The engine has no stop strings:
  a row runs to EOS or `max_gen_toks`, then is cut (the same text, and the same random draws for
  the other rows, as `specdiff eval`);
- sampling follows the request's `gen_kwargs` as transformers' `generate` would: `do_sample=False`
  or `temperature=0` is greedy (the verifier at temperature 0), otherwise `temperature`, `top_p`,
  `top_k` where given and the verifier's own settings where not. The harness's default for tasks
  without `generation_kwargs` is greedy.

`loglikelihood` and `loglikelihood_rolling` refuse (`LogLikelihoodUnsupported`): speculative
decoding changes how text is generated, not the verifier's likelihoods; score such tasks with
`--model hf --model_args pretrained=<the verifier's directory>`.

model_args: `drafter`, `verifier` (zoo names or local checkpoints), `steps` (K) or `threshold`
(tau), `order`, `prefix_cache` (off, round, persistent), `block_size` (B), `rule` (lossless,
linear, tv, cactus) with its leniency as `lam` (linear), `eps` (tv), `delta` (cactus) or
`leniency`, `method` (token, block), `proposal` (marginal, point_mass), `seed` (default 0),
`threads`, `max_gen_toks` (default 256, where a request does not set it), `device`. The batch size
is the harness's `--batch_size` (an integer; not "auto").
"""
from __future__ import annotations

import argparse
import logging
import re
from dataclasses import replace

import lm_eval.models  # noqa: F401  the harness's own models first: get_model loads them only into an empty registry
from lm_eval.api.model import LM
from lm_eval.api.registry import model_registry

log = logging.getLogger("lm_eval.models.specdiff")

NAME = "specdiff"
LENIENCY_RULES = {"lam": "linear", "eps": "tv", "delta": "cactus"}  # model_args key -> the rule it belongs to
CHOICES = {"rule": ("lossless", "linear", "tv", "cactus"), "method": ("token", "block"),
           "proposal": ("marginal", "point_mass"), "prefix_cache": ("off", "round", "persistent")}
SAMPLING_KWARGS = ("do_sample", "temperature", "top_p", "top_k")
DEFAULT_MAX_GEN_TOKS = 256


class LogLikelihoodUnsupported(NotImplementedError):
    """The specdiff backend generates text; it does not score log-likelihoods."""


class SpecDiffLM(LM):
    """`--model specdiff`: generate_until through specdiff's speculative generation engine."""

    def __init__(self, drafter: str = "masked-drafter", verifier: str = "verifier", steps: int = 1,
                 threshold: float | None = None, order: str | None = None, prefix_cache="off", block_size: int = 8,
                 rule: str = "lossless", leniency: float | None = None, lam: float | None = None,
                 eps: float | None = None, delta: float | None = None, method: str = "token",
                 proposal: str = "marginal", batch_size=1, seed: int = 0, threads: int | None = None,
                 max_gen_toks: int = DEFAULT_MAX_GEN_TOKS, device: str | None = None, max_batch_size=None,
                 **unknown):
        super().__init__()
        if unknown:
            raise ValueError(f"specdiff: unknown model_args {', '.join(sorted(unknown))}; it takes drafter, verifier, "
                             "steps, threshold, order, prefix_cache, block_size, rule, lam / eps / delta / leniency, "
                             "method, proposal, seed, threads, max_gen_toks, device")
        self.config = config_from_args(drafter=drafter, verifier=verifier, steps=steps, threshold=threshold,
                                       order=order, prefix_cache=prefix_cache, block_size=block_size, rule=rule,
                                       leniency=_leniency(rule, leniency=leniency, lam=lam, eps=eps, delta=delta),
                                       method=method, proposal=proposal, batch_size=_batch_size(batch_size),
                                       threads=threads, max_gen_toks=max_gen_toks)
        self.seed, self.threads, self.max_gen_toks = int(seed), threads, int(max_gen_toks)
        self.summaries: list[dict] = []  # one per generated group: run_config's figures without the texts
        import torch

        from specdiff.models import ModelCache, quiet_transformers

        quiet_transformers()
        if threads is not None:
            torch.set_num_threads(int(threads))
        self._device = _device(device)
        self.cache = ModelCache(device=None if self._device == "cpu" else self._device)
        self.tokenizer = self.cache.tokenizer(self.config.verifier)  # unknown names fail here, before any weights
        self.cache.tokenizer(self.config.drafter, "drafter")

    # ---- the harness's interface ----------------------------------------------------------------

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        from specdiff.runs import run_config
        from specdiff.eval.tasks.base import truncate

        if not requests:
            return []
        parsed = [request_options(request.args[1], self.max_gen_toks) for request in requests]
        groups: dict[tuple, list[int]] = {}  # (sampling, max_gen_toks) -> request indices, in the harness's order
        for i, (sampling, max_gen_toks, _) in enumerate(parsed):
            groups.setdefault((tuple(sorted(sampling.items())), max_gen_toks), []).append(i)
        texts: list[str | None] = [None] * len(requests)
        for (sampling, max_gen_toks), indices in groups.items():
            config = replace(self.config, sampling=dict(sampling))
            prompts = [requests[i].args[0] for i in indices]
            result = run_config(config, prompts, None, self.cache, max_gen_toks, seed=self.seed,
                                progress=not disable_tqdm)
            for i, record in zip(indices, result.pop("records")):
                texts[i] = truncate(record["text"], parsed[i][2])
                self.cache_hook.add_partial("generate_until", requests[i].args, texts[i])
            result.update(requests=len(indices), sampling=dict(sampling), max_gen_toks=max_gen_toks)
            self.summaries.append(result)
            log.info(format_summary(result))
        return texts

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise LogLikelihoodUnsupported(_REFUSAL.format(kind="loglikelihood (multiple-choice and other "
                                                            "log-likelihood tasks)"))

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise LogLikelihoodUnsupported(_REFUSAL.format(kind="loglikelihood_rolling (perplexity tasks)"))

    @property
    def tokenizer_name(self) -> str:
        return self.config.verifier.replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return getattr(self.tokenizer, "chat_template", None) or ""

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(f"specdiff: the verifier {self.config.verifier!r} has no chat template; run without "
                             "--apply_chat_template")
        return self.tokenizer.apply_chat_template(chat_history, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt,
                                                  continue_final_message=not add_generation_prompt)

    def get_model_info(self) -> dict:
        return {"specdiff_config": self.config.as_dict(), "specdiff_seed": self.seed}


_REFUSAL = ("specdiff's lm-eval backend implements generate_until only; this task needs {kind}. Speculative "
            "decoding changes how text is generated, not the verifier's likelihoods: score this task with "
            "`--model hf --model_args pretrained=<the verifier's checkpoint directory>`.")


def request_options(gen_kwargs: dict | None, default_max_gen_toks: int) -> tuple[dict, int, tuple[str, ...]]:
    """A request's (verifier sampling, max_gen_toks, stop strings), as transformers' generate reads
    gen_kwargs: do_sample=False or temperature=0 is greedy; unset values are the verifier's own."""
    kwargs = dict(gen_kwargs or {})
    until = kwargs.pop("until", None)
    until = [] if until is None else [until] if isinstance(until, str) else list(until)
    if not all(isinstance(s, str) for s in until):
        raise ValueError(f"specdiff: `until` must be a string or a list of strings, got {until!r}")
    max_gen_toks = kwargs.pop("max_gen_toks", default_max_gen_toks)
    if isinstance(max_gen_toks, bool) or int(max_gen_toks) != max_gen_toks or max_gen_toks < 1:
        raise ValueError(f"specdiff: max_gen_toks must be an integer >= 1, got {max_gen_toks!r}")
    do_sample = kwargs.pop("do_sample", None)
    sampling = {key: kwargs.pop(key) for key in ("temperature", "top_p", "top_k") if kwargs.get(key) is not None}
    for key in [key for key in SAMPLING_KWARGS if key in kwargs]:  # given as None
        kwargs.pop(key)
    if kwargs:
        log.warning("specdiff: ignoring gen_kwargs the engine does not take: %s", ", ".join(sorted(kwargs)))
    if do_sample is False or sampling.get("temperature") == 0:
        sampling = {"temperature": 0.0}
    for key, value in sampling.items():
        sampling[key] = int(value) if key == "top_k" else float(value)
    from specdiff.lm.sampling import check_sampling

    check_sampling(sampling.get("temperature", 1.0), sampling.get("top_p", 1.0), sampling.get("top_k", 0),
                   "specdiff gen_kwargs")
    return sampling, int(max_gen_toks), tuple(until)


def config_from_args(**values):
    """A RunConfig from model_args values, checked as `specdiff generate` checks its flags (errors name the
    model_args key)."""
    from specdiff.runs.config import check_generation_args, run_config_from_args

    values["prefix_cache"] = {False: "off", None: "off", True: "persistent"}.get(values["prefix_cache"],
                                                                                  values["prefix_cache"])
    for key, allowed in CHOICES.items():
        if values[key] not in allowed:
            raise ValueError(f"specdiff: {key}={values[key]!r} is not one of {', '.join(allowed)}")
    for key in ("steps", "block_size", "max_gen_toks"):
        if isinstance(values[key], bool) or not isinstance(values[key], int):
            raise ValueError(f"specdiff: {key} must be an integer, got {values[key]!r}")
    if values["drafter"] is None or str(values["drafter"]).lower() == "none":
        raise ValueError("specdiff: a drafter is required (the backend generates through the speculative engine)")
    args = argparse.Namespace(**values, max_new_tokens=values["max_gen_toks"])
    try:
        check_generation_args(args)
    except ValueError as error:
        raise ValueError("specdiff: " + re.sub(r"--([a-z-]+)", lambda m: m.group(1).replace("-", "_"),
                                               str(error))) from None
    return run_config_from_args(args, name=NAME)


def format_summary(result: dict) -> str:
    accepted = f"{result['mean_accepted']:.2f}" if "mean_accepted" in result else "-"
    return (f"specdiff: {result['requests']} requests, {result['tokens_per_s']:.1f} tokens/s, latency "
            f"{1000 * result['latency_s']:.0f} ms, accepted/round {accepted}, exact {result['exact']}, "
            f"sampling {result['sampling'] or 'the verifier defaults'}")


def _leniency(rule: str, **given) -> float:
    given = {key: value for key, value in given.items() if value is not None}
    if len(given) > 1:
        raise ValueError(f"specdiff: give one leniency, not {', '.join(sorted(given))}")
    if not given:
        return 0.0
    (key, value), = given.items()
    if rule == "lossless":
        raise ValueError(f"specdiff: {key}={value} needs a lenient rule (rule=linear with lam, tv with eps, "
                         "cactus with delta)")
    if key in LENIENCY_RULES and LENIENCY_RULES[key] != rule:
        raise ValueError(f"specdiff: {key} is the leniency of rule={LENIENCY_RULES[key]}, not rule={rule}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"specdiff: {key} must be a number, got {value!r}")
    return float(value)


def _device(device: str | None) -> str:
    """The device to run on: the harness passes cuda:0 by default, even on a machine without CUDA."""
    import torch

    if device is None or device == "cpu":
        return "cpu"
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        log.warning("specdiff: device %s requested but CUDA is not available; running on the CPU", device)
        return "cpu"
    return str(device)


def _batch_size(value) -> int:
    try:
        size = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"specdiff: --batch_size must be an integer (the rows generated together), got {value!r}; "
                         "'auto' is not supported") from None
    if size < 1 or size != float(value):
        raise ValueError(f"specdiff: --batch_size must be an integer >= 1, got {value!r}")
    return size


# A lazy entry: the harness imports this module (once) when `--model specdiff` is first looked up.
# Registering the path rather than the class keeps `python -m specdiff.integrations.lm_eval` (which runs
# this file as __main__) and the imported module from registering two different classes.
model_registry.register(NAME, target="specdiff.integrations.lm_eval:SpecDiffLM")


def main() -> None:
    """lm-eval's command line, with `--model specdiff` registered."""
    from lm_eval.__main__ import cli_evaluate

    cli_evaluate()


if __name__ == "__main__":
    main()
