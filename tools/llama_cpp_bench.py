"""llama.cpp on the verifier's own GGUF, plain and with its prompt-lookup decoding (issue 41, item 6:
informational, the absolute tokens/s a CPU user could have), through `llama-cpp-python`.

Greedy, batch 1, the bench's held-out test prompts (`real_test.jsonl`) or any prompts file, formatted with the
verifier's chat template (as the bench does), interleaved per prompt (plain, then lookup, the order swapped on
every other prompt) after one warm-up call each. The GGUF is the file `specdiff models fetch` keeps
(SmolLM2-135M-Instruct in Q4_1: llama.cpp runs it 4-bit; specdiff runs it dequantised), so the two runtimes
decode different arithmetic: compare ratios within a runtime, and absolute tokens/s across them. The GGUF is found
by `specdiff.bench.llama_cpp.gguf_path`; `bench speedup --set llama_cpp=["gguf","q8_0","q4_0"]` measures llama.cpp's
plain decoding as rows of the bench itself (`specdiff.bench.llama_cpp`).

    pip install "specdiff[llama]"   # llama-cpp-python: no binary wheel: builds llama.cpp (cmake, a C++ compiler)
    python tools/llama_cpp_bench.py --problems 20 --out docs/results/real_test/llama_cpp_greedy_seed0.json
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verifier", default="smollm2-135m-instruct")
    parser.add_argument("--prompts-file", type=Path, default=ROOT / "specdiff/eval/tasks/data/real_test.jsonl")
    parser.add_argument("--problems", type=int, default=20)
    parser.add_argument("--first-problem", type=int, default=0)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lookup-tokens", type=int, default=10, help="LlamaPromptLookupDecoding's num_pred_tokens")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    from specdiff.bench import llama_cpp as bench_llama

    missing = bench_llama.missing_package()
    if missing is not None:
        raise SystemExit(missing)
    import llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
    from transformers import AutoTokenizer

    try:
        gguf = bench_llama.gguf_path(args.verifier)  # the verifier's GGUF, found as `bench speedup` finds it
    except FileNotFoundError as error:
        raise SystemExit(str(error))
    folder = gguf.parents[1]
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    lines = [json.loads(line) for line in args.prompts_file.read_text().splitlines() if line.strip()]
    chosen = lines[args.first_problem:args.first_problem + args.problems]
    texts = [tokenizer.apply_chat_template(p["messages"], tokenize=False, add_generation_prompt=True)
             if "messages" in p else p["prompt"] for p in chosen]
    common = dict(model_path=str(gguf), n_ctx=2048, n_threads=args.threads, n_threads_batch=args.threads,
                  verbose=False, seed=0)
    engines = {"llama_cpp": llama_cpp.Llama(**common),
               "llama_cpp_lookup": llama_cpp.Llama(**common, draft_model=LlamaPromptLookupDecoding(
                   num_pred_tokens=args.lookup_tokens))}

    def run(name: str, text: str) -> tuple[int, float, str]:
        engine = engines[name]
        engine.reset()
        begin = time.perf_counter()
        out = engine.create_completion(text, max_tokens=args.max_new_tokens, temperature=0.0, top_k=1)
        return out["usage"]["completion_tokens"], time.perf_counter() - begin, out["choices"][0]["text"]

    for name in engines:  # warm-up
        run(name, texts[0])
    records = {name: [] for name in engines}
    for i, text in enumerate(texts):
        order = list(engines) if i % 2 == 0 else list(reversed(engines))
        for name in order:
            tokens, seconds, output = run(name, text)
            records[name].append({"index": args.first_problem + i, "kind": chosen[i].get("kind"), "tokens": tokens,
                                  "seconds": seconds, "text": output})
        print(f"prompt {i + 1}/{len(texts)}: " + ", ".join(
            f"{name} {rows[-1]['tokens'] / rows[-1]['seconds']:.1f}" for name, rows in records.items()) + " tokens/s",
            flush=True)
    rows = {name: {"tokens_per_s": sum(r["tokens"] for r in recs) / sum(r["seconds"] for r in recs),
                   "new_tokens": sum(r["tokens"] for r in recs), "wall_s": sum(r["seconds"] for r in recs)}
            for name, recs in records.items()}
    same = sum(a["text"] == b["text"] for a, b in zip(records["llama_cpp"], records["llama_cpp_lookup"]))
    result = {"rows": rows, "lookup_vs_plain": rows["llama_cpp_lookup"]["tokens_per_s"] / rows["llama_cpp"]["tokens_per_s"],
              "lookup_output_equals_plain": same / len(texts), "gguf": str(gguf.relative_to(folder)),
              "llama_cpp_python": llama_cpp.__version__, "threads": args.threads, "prompts_file": args.prompts_file.name,
              "first_problem": args.first_problem, "prompts": len(texts), "max_new_tokens": args.max_new_tokens,
              "lookup_tokens": args.lookup_tokens, "cpu": platform.processor() or platform.machine(),
              "records": records}
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "records"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
