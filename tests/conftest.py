import os

import torch

# Tests run on a 2-core CI machine; keep torch from oversubscribing it.
torch.set_num_threads(int(os.environ.get("SPECDIFF_TEST_THREADS", "2")))
