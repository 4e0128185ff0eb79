"""The plugin in vLLM's model runner V1 (CPU, and GPUs without Triton or with VLLM_USE_V2_MODEL_RUNNER=0).

`GPUModelRunner._sample` (the CPU backend's `CPUModelRunner` subclasses it) hands the flattened logits and
the cached draft probabilities (`_get_spec_decode_draft_probs`: probabilistic draft sampling only, else
None) to `RejectionSampler.forward` (`vllm/v1/sample/rejection_sampler.py`). That samples the bonus tokens
from the unrelaxed target with the ordinary sampler, applies penalties, temperature, top-k and top-p to
the drafted rows, then calls the module function `rejection_sample`, which accepts in two places: greedy
requests in `rejection_greedy_sample_kernel` (the drafted token must equal the target's argmax: no
uniform is drawn, so relaxing the logits can change an argmax but never accept with probability lam),
random requests in `rejection_random_sample_kernel` (u <= p(y)/q(y)), with the recovered token drawn
beforehand from max(p - q, 0) (or from p without y, point mass) by `sample_recovered_tokens_kernel`. The
kernels are Triton on GPU; the CPU platform swaps in its own implementations (`vllm/platforms/cpu.py`),
so the CPU and GPU V1 paths share `rejection_sample`.

The plugin wraps two functions: `_sample` reads each row's rule from the runner's request states
(`SamplingParams.extra_args` over `additional_config`) into `state.BATCH`; the wrapped `rejection_sample`
lets vLLM verify, then verifies the lenient rows again with `specdiff.verify` from the same p, q and
drafts (`sampling.relaxed_rejection_sample`), which overwrites their output. Lossless rows keep vLLM's
result. `_sample` of a specdiff engine requires that the wrapped `rejection_sample` ran while the rules
were set (`BATCH.reached`): a vLLM that verifies another way raises SpecdiffInstallError. Calls outside
`_sample` (vLLM's warm-up with dummy data) and every engine that does not ask for specdiff get vLLM's
result untouched.
"""
from __future__ import annotations

import torch

from specdiff.integrations.vllm import state
from specdiff.integrations.vllm.compat import bypassed, expect, patch
from specdiff.integrations.vllm.sampling import relaxed_rejection_sample
from specdiff.integrations.vllm.state import BATCH


def install_v1(applied: list) -> None:
    from vllm.v1.sample import rejection_sampler as v1
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    sample = GPUModelRunner._sample
    sample_signature = expect(sample, ("logits", "spec_decode_metadata"), "GPUModelRunner._sample")

    def _sample(self, *args, **kwargs):
        spec_decode_metadata = sample_signature.bind(self, *args, **kwargs).arguments.get("spec_decode_metadata")
        if spec_decode_metadata is None or not state.is_specdiff(self.vllm_config):
            return sample(self, *args, **kwargs)
        rows = []
        for req_id in self.input_batch.req_ids:
            request = self.requests.get(req_id)
            params = getattr(request, "sampling_params", None)
            rows.append(getattr(params, "extra_args", None))
        BATCH.rules, BATCH.method = state.rules_of(self.vllm_config, rows)
        BATCH.repair, BATCH.reached = True, False
        try:
            output = sample(self, *args, **kwargs)
            if not BATCH.reached:
                raise bypassed("GPUModelRunner._sample")
            return output
        finally:
            BATCH.rules = None
            BATCH.repair = BATCH.reached = False

    patch(GPUModelRunner, "_sample", _sample, applied)

    original = v1.rejection_sample
    signature = expect(original, ("draft_token_ids", "num_draft_tokens", "draft_probs", "target_logits",
                                  "bonus_token_ids", "sampling_metadata", "synthetic_mode"),
                       "vllm.v1.sample.rejection_sampler.rejection_sample")

    def rejection_sample(*args, **kwargs):
        output = _verify(*args, **kwargs)
        if state.OBSERVERS:
            arguments = signature.bind(*args, **kwargs).arguments
            state.observe(arguments["draft_token_ids"], arguments["num_draft_tokens"], output)
        return output

    def _verify(*args, **kwargs):
        output = original(*args, **kwargs)
        rules = getattr(BATCH, "rules", None)
        if rules is None:
            return output  # not a specdiff engine's step (or vLLM's warm-up): vLLM's own result
        BATCH.reached = True
        arguments = signature.bind(*args, **kwargs).arguments
        if all(rule is None for rule in rules) or arguments.get("synthetic_mode"):
            return output  # Lossless everywhere: vLLM's own result, untouched
        num_draft_tokens = list(arguments["num_draft_tokens"])
        sampling_metadata = arguments["sampling_metadata"]
        if sampling_metadata.all_greedy:
            greedy = torch.ones(len(num_draft_tokens), dtype=torch.bool)
        elif sampling_metadata.all_random:
            greedy = None
        else:
            greedy = (sampling_metadata.temperature == 0).cpu()
        return relaxed_rejection_sample(output, arguments["draft_token_ids"], num_draft_tokens,
                                        arguments.get("draft_probs"), arguments["target_logits"],
                                        arguments["bonus_token_ids"], rules[: len(num_draft_tokens)], greedy=greedy,
                                        method=BATCH.method, generators=sampling_metadata.generators,
                                        default_generator=state.lenient_generator(arguments["target_logits"].device))

    rejection_sample.__wrapped__ = original
    patch(v1, "rejection_sample", rejection_sample, applied)
