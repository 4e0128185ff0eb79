"""llama.cpp's plain decoding of the verifier's GGUF, measured beside specdiff's rows in one `bench speedup` run
(issue 53, item 4), through `llama-cpp-python` (`pip install "specdiff[llama]"`; it builds llama.cpp).

Terms:
- the GGUF: the file `specdiff models fetch NAME` keeps beside its conversion (`checkpoints.SOURCE_GGUF`, in the
  fetched folder; a verifier given as a folder: that folder's); smollm2-135m-instruct's is SmolLM2-135M-Instruct
  in Q4_1: llama.cpp runs it 4-bit, specdiff dequantised, so the two runtimes decode different arithmetic;
- a quant: a llama.cpp quantisation type by its lower-case name (`QUANTS`: "q4_1", "q8_0", "q4_0", ...);
- the `llama_cpp` setting: a list of "gguf" (the GGUF as shipped, whatever its type) and quants; a quant other
  than the shipped file's is made offline from it with `llama_cpp.llama_model_quantize` (requantising allowed)
  and cached next to it as `source.<quant>.gguf` (written to a temporary file, then renamed; rebuilt when the
  file is missing, is not that quant, or does not decode);
- a probe: loading a GGUF and decoding two tokens after the first measured prompt, in a child process; a quant
  is made in a child process too. A file is used only once its probe passed: a broken build, a damaged file or
  an odd prompt can crash llama.cpp (llama-cpp-python 0.3.36 here: a segmentation fault decoding the ids
  1, 2, 3, 4, 5 of SmolLM2's GGUF), which must not end a bench run after its tuning; a failed probe of the
  shipped GGUF skips every llama.cpp row, saying why;
- a row `llama_cpp_<quant>` (`bench.rows.llama_cpp`): greedy (top-k 1, temperature 0, no penalties), batch 1,
  `settings.threads` threads, on the bench's own prompt ids (the verifier's chat template exactly as the bench
  applied it: no text is tokenised again), stopping after the verifier's end token (kept, as plain decoding
  keeps it) or max_new_tokens. It is a `methods.Method`, so the bench's timer times it with every other row
  (warm-up, interleaved timed calls, medians) and `figures` computes its tokens/s as every row's. It is not
  `exact`: quantised arithmetic is not the verifier's law;
- skipped: {what: why} of requested rows not measured ("llama_cpp": all of them, e.g. llama-cpp-python is not
  installed; "llama_cpp_<quant>": one quant that could not be made), in the report's `skipped`.

`compare` adds to each llama.cpp row `speedup_vs_ar` (over the faster of `ar` and `hf`, as the report's), its
`quant` and `file_bytes`, and to each lossless specdiff row (plain decoding and the exact speculative rows) its
tokens/s over the shipped GGUF's row's, as `vs_llama_cpp_<quant>` (`vs_llama_cpp_q4_1` for SmolLM2).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from specdiff.bench import rows as named
from specdiff.bench.methods import Method

INSTALL = 'pip install "specdiff[llama]"'
SHIPPED = "gguf"  # the `llama_cpp` entry for the GGUF as shipped
QUANTS = ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "f16")  # the quants a `llama_cpp` entry may name
CHILD_S = 600  # the most seconds a child may take (a probe takes about one, a quant a few)
# a child process: `probe PATH THREADS IDS` loads the GGUF, decodes two tokens greedily after the ids (comma-
# separated) and prints its file type; `quantize SOURCE OUT QUANT THREADS` makes OUT from SOURCE (requantising)
CHILD = """
import json, sys
import llama_cpp
mode, path = sys.argv[1], sys.argv[2]
if mode == "probe":
    threads, ids = int(sys.argv[3]), [int(token) for token in sys.argv[4].split(",")]
    engine = llama_cpp.Llama(model_path=path, n_ctx=len(ids) + 8, n_threads=threads, n_threads_batch=threads,
                             verbose=False)
    tokens = []
    for token in engine.generate(ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0):
        tokens.append(int(token))
        if len(tokens) == 2:
            break
    print(json.dumps({"file_type": int(engine.metadata.get("general.file_type", -1)), "tokens": tokens}))
    engine.close()
else:
    import ctypes
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_" + sys.argv[4].upper())
    params.allow_requantize = True  # the source is quantised already
    params.nthread = int(sys.argv[5])
    sys.exit(llama_cpp.llama_model_quantize(path.encode(), sys.argv[3].encode(), ctypes.byref(params)))
"""


def missing_package() -> str | None:
    """Why llama.cpp rows cannot be measured here (llama-cpp-python is not importable), or None."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError as error:
        return f"llama-cpp-python is not installed ({error}): {INSTALL}"
    return None


def gguf_path(verifier: str) -> Path:
    """The verifier's GGUF (module docstring); an error naming the command that fetches it."""
    from specdiff.checkpoints import SOURCE_GGUF, require

    folder = Path(verifier) if Path(verifier).is_dir() else require(verifier)
    path = folder / SOURCE_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the verifier {verifier!r} has no GGUF "
                                f"(`specdiff models fetch NAME` keeps one for the models it fetches)")
    return path


def probe(path: Path, ids: list[int], threads: int = 1) -> tuple[int | None, str | None]:
    """(the GGUF's llama.cpp file type, None) when it loads and decodes two tokens after `ids` (the first measured
    prompt's) in a child process, else (None, why)."""
    done, why = _child(["probe", str(path), str(threads), ",".join(map(str, ids))], f"decoding two tokens of {path.name}")
    if why is not None:
        return None, why
    return json.loads(done.stdout.strip().splitlines()[-1])["file_type"], None


def _child(arguments: list[str], what: str):
    """(the finished child process, None), or (None, why) when it failed or took over CHILD_S seconds."""
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, *arguments], capture_output=True, text=True,
                              timeout=CHILD_S)
    except subprocess.TimeoutExpired:
        return None, f"llama.cpp took over {CHILD_S} s {what}"
    if done.returncode != 0:
        how = f"signal {-done.returncode}" if done.returncode < 0 else f"exit status {done.returncode}"
        last = (done.stderr.strip().splitlines() or [""])[-1]
        return None, f"llama.cpp failed {what} ({how}){': ' + last if last else ''}"
    return done, None


def quant_of(file_type: int) -> str:
    """A llama.cpp file type (`general.file_type`) as a quant's name ("q4_1"); "ftype<N>" for one not in QUANTS."""
    import llama_cpp

    names = {getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{quant.upper()}"): quant for quant in QUANTS}
    return names.get(file_type, f"ftype{file_type}")


def quantized(source: Path, quant: str, ids: list[int], threads: int, say=None) -> tuple[Path | None, str | None]:
    """(the cached `quant` file made from `source`, None), made again when it is missing or fails its probe (on
    `ids`); else (None, why)."""
    say = say or (lambda *a: None)
    path = source.with_name(f"{source.stem}.{quant}.gguf")
    if path.is_file():
        file_type, error = probe(path, ids, threads)
        if error is None and quant_of(file_type) == quant:
            return path, None
        say(f"llama.cpp: {path} is not a decodable {quant} file ({error or quant_of(file_type)}): making it again")
    partial = path.with_name(path.name + ".partial")  # renamed once complete: a killed run leaves no half file
    say(f"llama.cpp: making {path.name} from {source.name} (llama_model_quantize, {quant})")
    _, error = _child(["quantize", str(source), str(partial), quant, str(threads)], f"making {quant} from {source}")
    if error is not None:
        partial.unlink(missing_ok=True)
        return None, error
    partial.replace(path)
    file_type, error = probe(path, ids, threads)
    if error is not None or quant_of(file_type) != quant:
        return None, f"{path} was made but is not a decodable {quant} file ({error or quant_of(file_type)})"
    return path, None


def plan(settings, ids: list[int], say=None) -> tuple[list, dict, str | None]:
    """([(Row, GGUF file)] of the llama.cpp rows the settings ask for, {what: why} of those skipped, the shipped
    GGUF's row name where it is measured), before anything is tuned: the package, the GGUF and each file's probe
    (on `ids`, the first measured prompt's) are checked, the quants made."""
    if not settings.llama_cpp:
        return [], {}, None
    reason = missing_package()
    if reason is not None:
        return [], {"llama_cpp": reason}, None
    try:
        source = gguf_path(settings.verifier)
    except FileNotFoundError as error:
        return [], {"llama_cpp": str(error)}, None
    file_type, error = probe(source, ids, settings.threads)
    if error is not None:
        return [], {"llama_cpp": error}, None
    shipped = quant_of(file_type)
    planned, skipped = {}, {}
    for entry in settings.llama_cpp:
        quant = shipped if entry == SHIPPED else entry
        row = named.llama_cpp(quant)
        if row in planned:
            continue
        path, reason = (source, None) if quant == shipped else quantized(source, quant, ids, settings.threads, say)
        if reason is not None:
            skipped[row.name] = reason
            continue
        planned[row] = path
    return list(planned.items()), skipped, named.llama_cpp(shipped).name if source in planned.values() else None


def methods(planned: list, eos: set[int], prompts: list, settings) -> dict[str, Method]:
    """{row name: Method} of `plan`'s rows: one llama.cpp engine per file, its context long enough for the longest
    prompt and max_new_tokens; `eos`: the verifier's end tokens (`engine.generate.eos_token_ids`)."""
    import llama_cpp

    context = max(512, max(len(prompt.ids) for prompt in prompts) + settings.max_new_tokens + 8)
    return {row.name: _method(llama_cpp, row, path, eos, context, settings.threads) for row, path in planned}


def _method(llama_cpp, row, path: Path, eos: set[int], context: int, threads: int) -> Method:
    import atexit

    engine = llama_cpp.Llama(model_path=str(path), n_ctx=context, n_threads=threads, n_threads_batch=threads,
                             verbose=False, seed=0)
    atexit.register(engine.close)  # freed before the interpreter's teardown (its __del__ then fails, noisily)
    stops = set(eos) | {engine.token_eos()}

    def call(prompts, max_new_tokens: int, seed: int) -> list[dict]:
        out = []
        for prompt in prompts:
            engine.reset()  # no prefix of an earlier call is reused: every call decodes its prompt afresh
            ids = []
            for token in engine.generate(prompt.ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0):
                ids.append(int(token))
                if token in stops or len(ids) >= max_new_tokens:
                    break
            out.append({"ids": ids, "rounds": len(ids), "accepted": 0})
        return out

    config = {"name": row.name, "runtime": "llama.cpp", "llama_cpp_python": llama_cpp.__version__,
              "quant": row.quant, "gguf": str(path), "file_bytes": path.stat().st_size, "batch_size": 1,
              "threads": threads}
    return Method(row.name, False, call, 1, config)


def compare(rows: dict, planned: list, shipped: str | None) -> dict:
    """Adds `speedup_vs_ar`, `quant` and `file_bytes` to each llama.cpp row of `rows` (name -> the row's JSON) and
    `vs_<shipped>` to each lossless specdiff row (`shipped`: the shipped GGUF's row, `plan`'s third value);
    returns the report's top-level `vs_<shipped>` ({row: its tokens/s over the shipped row's}), or {} when that
    row was not measured."""
    from specdiff.bench.rows import HF, PLAIN, is_plain, is_speculative

    base = max(rows[PLAIN]["tokens_per_s"], rows[HF]["tokens_per_s"])  # the report's ar_baseline
    for row, path in planned:
        rows[row.name].update(speedup_vs_ar=rows[row.name]["tokens_per_s"] / base, quant=row.quant,
                              file_bytes=path.stat().st_size)
    if shipped is None or not rows[shipped]["tokens_per_s"]:
        return {}
    key = f"vs_{shipped}"
    ratios = {}
    for name, row in rows.items():
        if row["exact"] and (is_plain(row) or is_speculative(row)):
            ratios[name] = row[key] = row["tokens_per_s"] / rows[shipped]["tokens_per_s"]
    return {key: ratios}
