"""Old import path of the real-prompt files (kept for callers outside the package: `specdiff bench vllm`,
scripts). The bench itself is `specdiff.bench`; the prompt files are `specdiff.runs.prompts`."""
from specdiff.runs.prompts import (TEST_FILE, VALIDATION_FILE, Prompt, check_prompts_file,  # noqa: F401
                                   read_prompts, validation_prompts)
