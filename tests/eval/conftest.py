"""Fixtures of the evaluation tests: whether the sandbox works here, and a real tokenizer with a chat template."""
import os
from pathlib import Path

import pytest

from specdiff.eval import sandbox

CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture(scope="session")
def works():
    """Skips a test where the machine cannot build the sandbox (test_runs_or_refuses then checks the
    refusal), or fails it if SPECDIFF_REQUIRE_SANDBOX=1."""
    reason = sandbox.unavailable_reason()
    if reason is not None:
        if os.environ.get("SPECDIFF_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"SPECDIFF_REQUIRE_SANDBOX=1 but the sandbox is unavailable: {reason}")
        pytest.skip(f"the sandbox is unavailable here (test_runs_or_refuses checks the refusal): {reason}")


@pytest.fixture(scope="session")
def chat_tokenizer():
    """The testbed's tokenizer (a real transformers tokenizer) with a small chat template added."""
    from transformers import PreTrainedTokenizerFast

    root = Path(__file__).resolve().parents[2]
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(root / "specdiff" / "zoo" / "tokenizer.json"))
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
