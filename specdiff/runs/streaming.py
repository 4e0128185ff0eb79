"""Generation streamed as rounds are accepted (`generate_streamed`; `specdiff generate --stream`): one
prompt at a time, each round's newly accepted text handed to a callback as soon as it is verified."""
from __future__ import annotations


def generate_streamed(generator, prompts, max_new_tokens: int, seed, on_prompt, on_text):
    """One prompt at a time: on_prompt(prompt) before it, on_text(text) for each round's new text (the
    token ids joined by spaces without a tokenizer) and on_text("\n") after it; returns one
    GenerationOutput for all the prompts."""
    from specdiff.engine.generate import GenerationOutput
    from specdiff.engine.stats import summarize

    tokenizer = generator.tokenizer
    outputs = []
    for prompt in prompts:
        on_prompt(prompt)
        emitted, shown = [], [""]

        def on_tokens(row, new, emitted=emitted, shown=shown):
            emitted.extend(new)
            if tokenizer is None:
                on_text(" ".join(map(str, new)) + " ")
            else:  # decode the whole text so far: a token can complete a character begun by the one before
                text = tokenizer.decode(emitted, skip_special_tokens=True)
                on_text(text[len(shown[0]):])
                shown[0] = text

        outputs.append(generator.generate([prompt], max_new_tokens=max_new_tokens, generator=seed,
                                          on_tokens=on_tokens))
        on_text("\n")
    stats = [o.stats[0] for o in outputs]
    totals = {key: sum(getattr(o.summary, key) for o in outputs) for key in ("wall_s", "draft_s", "verify_s",
                                                                             "forward_s")}
    texts = None if tokenizer is None else [o.texts[0] for o in outputs]
    return GenerationOutput(texts=texts, token_ids=[o.token_ids[0] for o in outputs], stats=stats,
                            summary=summarize(stats, **totals))
