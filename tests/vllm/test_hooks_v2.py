"""The V2 model runner's hook on V2's tensor layout (hooks._relax_v2), with made-up tensors: vLLM's CPU
backend runs the V1 runner (V2 needs Triton), so this is the only check of V2's layout here."""
from __future__ import annotations

import pytest

pytest.importorskip("vllm.entrypoints.llm", reason="vLLM is not importable here: run tests/vllm in the environment "
                    "that scripts/vllm_env.sh builds")

import torch  # noqa: E402

import specdiff as sd  # noqa: E402
from specdiff.integrations.vllm.hooks import _relax_v2  # noqa: E402


def _inputs(draft_logits=None):
    # two requests, 2 and 1 drafted tokens: logits rows 0..2 and 3..4; draft_sampled[row + 1] is the draft
    torch.manual_seed(0)
    target_logits = torch.randn(5, 6)
    draft_sampled = torch.tensor([9, 4, 5, 9, 1])  # row 0 and 3 hold the last committed token
    cu_num_logits = torch.tensor([0, 3, 5])
    sampled = torch.tensor([[2, -1, -1], [3, -1, -1]])  # vLLM rejected both first drafts
    num_sampled = torch.tensor([1, 1], dtype=torch.int32)
    idx_mapping = torch.tensor([1, 0])
    temperature = torch.tensor([1.0, 1.0])
    return sampled, num_sampled, target_logits, draft_logits, draft_sampled, cu_num_logits, idx_mapping, temperature


def test_linear_one_accepts_the_lenient_request_and_keeps_the_other():
    out, num = _relax_v2(*_inputs(), rules=[sd.Linear(1.0), None], method="token")
    assert out[0, :2].tolist() == [4, 5] and int(num[0]) == 3 and 0 <= int(out[0, 2]) < 6
    assert out[1].tolist() == [3, -1, -1] and int(num[1]) == 1


def test_draft_logits_are_read_by_request_state():
    draft_logits = torch.full((2, 2, 6), -30.0)
    draft_logits[1, 0, 4] = draft_logits[1, 1, 5] = 30.0  # request 0 lives in state 1
    draft_logits[0, 0, 1] = 30.0
    out, num = _relax_v2(*_inputs(draft_logits), rules=[sd.Linear(1.0), sd.Linear(1.0)], method="token")
    assert out[0, :2].tolist() == [4, 5] and out[1, 0].item() == 1 and num.tolist() == [3, 2]
