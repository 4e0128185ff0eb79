"""The bench: specdiff's drafters against plain and speculative decoding, measured side by side (issue 39).

One method interface (`methods.Method`), one timer (`timer.measure`: interleaved, medians, on
`eval.timing.interleaved_runs`), one tuner (`tuner`: validation prompts only, a 2% tie rule), one
plain-decoding row (`ar`) and one HF row (`hf`), suites for the testbed's problems and for prompt files
(`suites`), settings from a preset file and the flags (`settings`, `presets/*.toml`), and the report
(`report`). `speedup.speedup` runs `specdiff bench speedup`, `speedup.tune` runs `specdiff bench tune`;
`leniency`, `stateful` and `verify` are the other benches' library code.
"""
