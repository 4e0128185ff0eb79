import os

import pytest
import torch

# One intra-op thread: the tests run many small ops, for which a second OpenMP thread only adds
# barrier waits (seconds per test when the machine is shared). SPECDIFF_TEST_THREADS overrides.
TEST_THREADS = int(os.environ.get("SPECDIFF_TEST_THREADS", "1"))
torch.set_num_threads(TEST_THREADS)


@pytest.fixture(autouse=True)
def _reset_torch_threads():
    """Commands under test set their own thread count; restore ours before every test."""
    torch.set_num_threads(TEST_THREADS)
    yield
