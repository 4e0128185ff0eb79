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


@pytest.fixture(scope="session")
def full_zoo(tmp_path_factory):
    """A zoo folder with every recipe's weights: the shipped ones plus one-step trainings of the drafters
    not shipped yet (tests/zoo_copies.py). Use it with `zoo_copies.zoo_folder`."""
    from zoo_copies import with_new_drafters

    return with_new_drafters(tmp_path_factory.mktemp("full-zoo"))


@pytest.fixture
def new_drafters(full_zoo):
    """`zoo.load` reads `full_zoo` during the test: every drafter kind has weights."""
    from zoo_copies import zoo_folder

    with zoo_folder(full_zoo):
        yield full_zoo
